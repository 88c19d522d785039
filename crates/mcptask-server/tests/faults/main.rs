//! Server runtime fault matrix: each module is a family of faults, each test a
//! cell `<family>::<fault>_<expected outcome>`, run on SQLite and on a real
//! PostgreSQL, with a real rmcp client talking to a `DurableTaskServer` over a
//! real transport wherever the fault is visible to clients.

mod support;

mod admission;
mod create;
mod inputs;
mod lease;
mod panics;
mod shutdown;
mod start;
mod store_errors;
mod ttl;
