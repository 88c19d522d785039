//! The stores' tests, one binary: the server-task and remote-task store
//! contracts, the admin configuration store and the OAuth token store (every case on SQLite and on a real PostgreSQL) and SQLite's
//! background WAL checkpoint and its file mode. Run one part with e.g.
//! `cargo test -p mcptask-sql --test store remote::`.

mod admin_config;
mod audit;
mod failover;
mod oauth_tokens;
mod remote;
mod server;
mod slots;
mod sqlite_checkpoint;
mod sqlite_file;
