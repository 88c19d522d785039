//! `mcptask demo-server --http` processes: started on an ephemeral or a fixed
//! port, reached with the MCP test client, killed with SIGKILL.

use std::time::Duration;

use tokio::process::Command;

use crate::bin;
use crate::mcp::{Lifecycle, TestClient};
use crate::process::LoggedChild;

/// The line `demo-server --http` prints once it accepts connections.
const LISTENING: &str = "mcptask demo-server listening on ";

/// Lease settings of the durability tests: short enough that recovery happens
/// within seconds, long enough that a busy 2-core machine renews in time.
pub const FAST_RECOVERY: &[&str] = &["--owner-lease-ms", "1500", "--recovery-every-ms", "200"];

/// A running `mcptask demo-server --http` process. Killed (SIGKILL) on drop;
/// on a failing test its log is printed.
pub struct DemoServer {
    process: LoggedChild,
    /// `http://127.0.0.1:PORT/mcp`
    pub url: String,
}

/// `mcptask demo-server --http ADDR --database-url URL EXTRA…`.
fn demo_server_command(addr: &str, database_url: &str, extra: &[&str]) -> Command {
    let mut command = Command::new(bin());
    command
        .args([
            "demo-server",
            "--http",
            addr,
            "--database-url",
            database_url,
        ])
        .args(extra)
        .env("MCPTASK_LOG", "info,sqlx=warn,rmcp=warn")
        .env_remove("MCPTASK_DATABASE_URL");
    command
}

impl DemoServer {
    /// Start `demo-server --http 127.0.0.1:0 --database-url URL EXTRA…` and
    /// wait until it listens.
    pub async fn start(database_url: &str, extra: &[&str]) -> Self {
        Self::start_named("server", database_url, extra).await
    }

    pub async fn start_named(name: &str, database_url: &str, extra: &[&str]) -> Self {
        let command = demo_server_command("127.0.0.1:0", database_url, extra);
        let (process, url) = LoggedChild::spawn(name, command, LISTENING, Duration::from_secs(60))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        DemoServer { process, url }
    }

    /// `http://127.0.0.1:PORT`
    pub fn base(&self) -> String {
        self.url.trim_end_matches("/mcp").to_string()
    }

    /// The process's stderr so far.
    pub fn log(&self) -> String {
        self.process.log()
    }

    /// A 2026-07-28 client declaring the tasks extension on every request.
    pub async fn client(&self) -> TestClient {
        self.client_with(None, Lifecycle::Modern { tasks: true })
            .await
    }

    pub async fn client_with(&self, bearer: Option<&str>, lifecycle: Lifecycle) -> TestClient {
        TestClient::http(&self.url, bearer, lifecycle)
            .await
            .unwrap_or_else(|e| panic!("{}: connect to {}: {e}", self.process.name, self.url))
    }

    /// SIGKILL the server process (no shutdown, no lease release) and reap it.
    pub async fn kill(&mut self) {
        self.process.kill().await;
    }
}

impl DemoServer {
    /// Start `demo-server --http ADDR` (a fixed address, so that a restarted
    /// server is reachable at the same URL). Retries while the port is still
    /// held by a process that was just killed.
    pub async fn start_at(name: &str, addr: &str, database_url: &str, extra: &[&str]) -> Self {
        let mut last = String::new();
        for _ in 0..20 {
            let command = demo_server_command(addr, database_url, extra);
            match LoggedChild::spawn(name, command, LISTENING, Duration::from_secs(60)).await {
                Ok((process, url)) => return DemoServer { process, url },
                Err(e) => {
                    last = e;
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            }
        }
        panic!("{name}: could not start on {addr}: {last}");
    }
}
