//! Test support of the end-to-end tests, shared by every test binary in
//! `tests/`: real `mcptask demo-server` and `mcptask serve` processes, real
//! SQLite files and a real PostgreSQL, and clients for what those processes
//! speak (MCP, the gateway's HTTP API, Server-Sent Events, Prometheus text,
//! signed webhooks).
//!
//! One submodule per topic; everything is re-exported here, so a test writes
//! `mod support;` and `use support::{…}`. Every test binary compiles all of
//! it and uses a different part, hence the allowances.
#![allow(dead_code, unused_imports)]

pub mod api;
pub mod chaos;
pub mod cli_run;
pub mod demo_server;
pub mod fault_front;
pub mod flaky_webhook;
pub mod gateway;
pub mod installed;
pub mod process;
pub mod prometheus;
pub mod rng;
pub mod scripted_server;
pub mod sse;
pub mod tasks;
pub mod webhook;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use api::*;
pub use chaos::*;
pub use cli_run::*;
pub use demo_server::*;
pub use fault_front::*;
pub use flaky_webhook::*;
pub use gateway::*;
pub use installed::*;
pub use process::*;
pub use prometheus::*;
pub use rng::*;
pub use scripted_server::*;
pub use sse::*;
pub use tasks::*;
pub use webhook::*;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_mcptask");

/// Generous bound on anything a test waits for (a busy 2-core machine).
pub const WAIT: Duration = Duration::from_secs(90);

/// Fail (rather than hang) a test whose body takes longer than `limit`.
pub async fn with_deadline<T>(limit: Duration, body: impl Future<Output = T>) -> T {
    match tokio::time::timeout(limit, body).await {
        Ok(v) => v,
        Err(_) => panic!("test did not finish within {limit:?} (hung?)"),
    }
}

/// A database for one test (SQLite file or fresh PostgreSQL database).
pub use mcptask_sql::testkit::TestDatabase as Database;

pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
}

/// `<repo>`: two levels above this crate.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/mcptask is two levels below the repository root")
        .to_path_buf()
}
