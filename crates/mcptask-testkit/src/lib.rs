//! Test support of the mcptask workspace, for every crate's tests and
//! benchmarks (never a dependency of a library or binary):
//!
//! - stores: a throwaway PostgreSQL ([`pg`]), test databases on both
//!   backends and the store contract macro ([`db`]);
//! - in-process servers and clients: an MCP test client ([`mcp`]), tracker
//!   settings ([`tracker`]), the fixtures of the server and client crates'
//!   tests ([`fixtures`]), a synchronous upstream that counts what it
//!   heard ([`sync_upstream`]), one with resources to subscribe to
//!   ([`watched_upstream`]);
//! - real processes: `mcptask demo-server` and `mcptask serve` ([`bin`],
//!   [`demo_server`], [`gateway`], [`process`], [`cli_run`], [`installed`])
//!   and clients for what they speak: the gateway's HTTP API ([`api`]),
//!   Server-Sent Events ([`sse`]), Prometheus text ([`prometheus`]), signed
//!   webhooks ([`webhook`], [`flaky_webhook`]), MCP tasks ([`tasks`]);
//! - faults: a scripted MCP server ([`scripted_server`]), a switchable
//!   network front ([`fault_front`]), chaos helpers ([`chaos`], [`rng`]);
//! - benchmark support ([`mod@bench`], [`machine`]).
//!
//! The process-level helpers are re-exported here, so an end-to-end test
//! writes `use mcptask_testkit::*;`.

pub mod api;
pub mod bench;
pub mod chaos;
pub mod cli_run;
pub mod db;
pub mod demo_server;
pub mod everything;
pub mod fault_front;
pub mod fixtures;
pub mod flaky_webhook;
pub mod gateway;
pub mod installed;
pub mod interposed;
pub mod machine;
pub mod mcp;
pub mod nginx;
pub mod otlp;
pub mod peers;
pub mod pg;
pub mod process;
pub mod prometheus;
pub mod rng;
pub mod scripted_server;
pub mod sse;
pub mod stateless;
pub mod sync_upstream;
pub mod tasks;
pub mod token_issuer;
pub mod tracker;
pub mod watched_upstream;
pub mod webhook;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

pub use api::*;
pub use chaos::*;
pub use cli_run::*;
pub use db::TestDatabase;
pub use demo_server::*;
pub use everything::Everything;
pub use fault_front::*;
pub use flaky_webhook::*;
pub use gateway::*;
pub use installed::*;
pub use otlp::{OtlpReceiver, ReceivedSpan};
pub use process::*;
pub use prometheus::*;
pub use rng::*;
pub use scripted_server::*;
pub use sse::*;
pub use stateless::post_tools_call;
pub use sync_upstream::SyncUpstream;
pub use tasks::*;
pub use token_issuer::*;
pub use watched_upstream::WatchedUpstream;
pub use webhook::*;

/// Environment variable naming the `mcptask` binary to test, overriding the
/// one found beside the test executable.
pub const BIN_ENV: &str = "MCPTASK_BIN";

/// The `mcptask` binary under test: `$MCPTASK_BIN` if set, else the one cargo
/// built beside the running test or benchmark (`target/<profile>/deps/<test>`
/// runs, `target/<profile>/mcptask` is the binary; cargo builds it for the
/// tests and benchmarks of the `mcptask` package). A string, like the
/// `CARGO_BIN_EXE_mcptask` it replaces, to go into commands and configurations.
pub fn bin() -> &'static str {
    static BIN: OnceLock<String> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Ok(path) = std::env::var(BIN_ENV)
            && !path.is_empty()
        {
            return path;
        }
        let exe = std::env::current_exe().expect("the path of the running test");
        let mut dir = exe.parent().expect("the test's directory");
        if dir.file_name().is_some_and(|name| name == "deps") {
            dir = dir.parent().expect("the profile directory");
        }
        let bin = dir.join(format!("mcptask{}", std::env::consts::EXE_SUFFIX));
        assert!(
            bin.is_file(),
            "no mcptask binary at {} (build it with `cargo build -p mcptask`, or set {BIN_ENV})",
            bin.display()
        );
        bin.into_os_string()
            .into_string()
            .unwrap_or_else(|path| panic!("the mcptask binary's path {path:?} is not UTF-8"))
    })
}

/// Generous bound on anything a test waits for (a busy 2-core machine).
pub const WAIT: Duration = Duration::from_secs(90);

/// Fail (rather than hang) a test whose body takes longer than `limit`.
pub async fn with_deadline<T>(limit: Duration, body: impl Future<Output = T>) -> T {
    match tokio::time::timeout(limit, body).await {
        Ok(v) => v,
        Err(_) => panic!("test did not finish within {limit:?} (hung?)"),
    }
}

/// Whether we run under CI (`CI` is `true` or `1`), where a missing
/// PostgreSQL or tool is an error instead of a loud skip.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
}

/// The repository's root: two levels above this crate.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/mcptask-testkit is two levels below the repository root")
        .to_path_buf()
}

/// The HTTP client of a test proxy forwarding to a server behind it: idle
/// connections are kept no longer than the gateway keeps its own
/// (`remote::UPSTREAM_IDLE`), below the servers' keep-alive, since a
/// request sent on a connection the server is closing is lost.
pub(crate) fn forwarding_client() -> reqwest::Client {
    // reqwest panics without a TLS provider installed first.
    mcptask_client::tls::install_crypto_provider();
    reqwest::Client::builder()
        .pool_idle_timeout(mcptask_client::remote::UPSTREAM_IDLE)
        .build()
        .expect("reqwest client")
}
