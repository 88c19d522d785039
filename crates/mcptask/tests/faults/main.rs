//! The fault matrix: each test is one cell — a fault injected into real
//! processes (real `mcptask` gateways and demo servers, real SQLite files, a
//! real PostgreSQL, real HTTP) and the outcome that must hold. The matrix with
//! every cell's expected outcome and test name is in docs/RELIABILITY.md.
//!
//! One module per fault family; run one family with e.g.
//! `cargo test -p mcptask --test faults upstream::`.

mod notifications;
mod retention;
#[path = "../support/mod.rs"]
mod support;

mod bad_input;
mod config_changes;
mod protocol;
mod store;
mod upstream;
