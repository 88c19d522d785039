//! The server runtime against real stores, one binary: the runtime with time
//! moved by hand ([`runtime`]) and task status notifications over real
//! Streamable HTTP ([`push`]), every case on SQLite and on a real PostgreSQL.

mod push;
mod runtime;
