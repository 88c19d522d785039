//! The fault matrix: each test is one cell — a fault injected into real
//! processes (real `mcptask` gateways and demo servers, real SQLite files, a
//! real PostgreSQL, real HTTP) and the outcome that must hold. The matrix with
//! every cell's expected outcome and test name is in docs/RELIABILITY.md.
//!
//! One module per fault family; run one family with e.g.
//! `cargo test -p mcptask --test faults upstream::`.

/// Each `async fn name(db) { … }` becomes `name::sqlite` and
/// `name::postgres`: the same cell with the gateway's store on each backend
/// (`db` is a fresh `mcptask_testkit::TestDatabase`). Without a PostgreSQL the second
/// one says SKIPPED (and under `CI=true` the harness fails instead).
macro_rules! on_both_stores {
    ($($(#[$meta:meta])* async fn $name:ident($db:ident) $body:block)*) => {$(
        $(#[$meta])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                let $db = mcptask_testkit::TestDatabase::sqlite();
                $body
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                let Some($db) = mcptask_testkit::TestDatabase::postgres().await else {
                    eprintln!("{}::postgres: SKIPPED (no PostgreSQL)", stringify!($name));
                    return;
                };
                $body
            }
        }
    )*};
}

// After the macro: `macro_rules!` is in scope only below its definition.
mod admin_servers;
mod bad_input;
mod config_changes;
mod exchange;
mod failover;
mod front_a;
mod front_b;
mod live_config;
mod notifications;
mod protocol;
mod restart;
mod retention;
mod rolling;
mod store;
mod upstream;
