//! Shared helpers of the end-to-end tests: real `mcptask demo-server`
//! processes, real SQLite files and a real PostgreSQL, polling with deadlines.
//!
//! Every test binary compiles this module and uses a different part of it.
#![allow(dead_code)]

use std::future::Future;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcptask_server::testkit::{Lifecycle, TestClient, wire};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_mcptask");

/// The line `demo-server --http` prints once it accepts connections.
const LISTENING: &str = "mcptask demo-server listening on ";

/// Lease settings of the durability tests: short enough that recovery happens
/// within seconds, long enough that a busy 2-core machine renews in time.
pub const FAST_RECOVERY: &[&str] = &["--lease-ms", "1500", "--recovery-every-ms", "200"];

/// Fail (rather than hang) a test whose body takes longer than `limit`.
pub async fn with_deadline<T>(limit: Duration, body: impl Future<Output = T>) -> T {
    match tokio::time::timeout(limit, body).await {
        Ok(v) => v,
        Err(_) => panic!("test did not finish within {limit:?} (hung?)"),
    }
}

// ---------------------------------------------------------------------------
// Databases

/// A database for one test: a SQLite file in a temporary directory, or a fresh
/// PostgreSQL database.
pub struct Database {
    pub backend: &'static str,
    pub url: String,
    _dir: Option<tempfile::TempDir>,
}

impl Database {
    pub fn sqlite() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite:{}", dir.path().join("mcptask.db").display());
        Database {
            backend: "sqlite",
            url,
            _dir: Some(dir),
        }
    }

    /// A fresh PostgreSQL database, or `None` (after a loud SKIPPED line) when
    /// PostgreSQL is unavailable outside CI. Under `CI=true` this panics instead.
    pub async fn postgres() -> Option<Self> {
        let url = mcptask_sql::testkit::pg::fresh_database().await?;
        Some(Database {
            backend: "postgres",
            url,
            _dir: None,
        })
    }
}

// ---------------------------------------------------------------------------
// Server processes

/// A running `mcptask demo-server --http` process. Killed (SIGKILL) on drop;
/// on a failing test its log is printed.
pub struct DemoServer {
    child: Child,
    /// `http://127.0.0.1:PORT/mcp`
    pub url: String,
    pub pid: u32,
    log: Arc<Mutex<Vec<String>>>,
    name: String,
}

impl DemoServer {
    /// Start `demo-server --http 127.0.0.1:0 --database-url URL EXTRA…` and
    /// wait until it listens.
    pub async fn start(database_url: &str, extra: &[&str]) -> Self {
        Self::start_named("server", database_url, extra).await
    }

    pub async fn start_named(name: &str, database_url: &str, extra: &[&str]) -> Self {
        let mut command = Command::new(BIN);
        command
            .args([
                "demo-server",
                "--http",
                "127.0.0.1:0",
                "--database-url",
                database_url,
            ])
            .args(extra)
            .env("MCPTASK_LOG", "info,sqlx=warn,rmcp=warn")
            .env_remove("MCPTASK_DATABASE_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().expect("spawn mcptask demo-server");
        let pid = child.id().expect("pid of the demo server");
        let stderr = child.stderr.take().expect("piped stderr");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (found_tx, found_rx) = tokio::sync::oneshot::channel::<String>();
        // Keep draining stderr for the process's whole life (a full pipe would
        // block its logging), remembering the lines for diagnostics.
        tokio::spawn({
            let log = log.clone();
            async move {
                let mut found = Some(found_tx);
                let mut lines = BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    if let Some(rest) = line.strip_prefix(LISTENING)
                        && let Some(tx) = found.take()
                    {
                        let _ = tx.send(rest.trim().to_string());
                    }
                    log.lock().unwrap().push(line);
                }
            }
        });
        let mut server = DemoServer {
            child,
            url: String::new(),
            pid,
            log,
            name: name.to_string(),
        };
        match tokio::time::timeout(Duration::from_secs(60), found_rx).await {
            Ok(Ok(url)) => server.url = url,
            Ok(Err(_)) => {
                let status = server.child.wait().await;
                panic!(
                    "{name}: demo-server exited before listening ({status:?}); log:\n{}",
                    server.log()
                );
            }
            Err(_) => panic!(
                "{name}: demo-server did not listen within 60s; log:\n{}",
                server.log()
            ),
        }
        server
    }

    /// `http://127.0.0.1:PORT`
    pub fn base(&self) -> String {
        self.url.trim_end_matches("/mcp").to_string()
    }

    /// The process's stderr so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// A 2026-07-28 client declaring the tasks extension on every request.
    pub async fn client(&self) -> TestClient {
        self.client_with(None, Lifecycle::Modern { tasks: true })
            .await
    }

    pub async fn client_with(&self, bearer: Option<&str>, lifecycle: Lifecycle) -> TestClient {
        TestClient::http(&self.url, bearer, lifecycle)
            .await
            .unwrap_or_else(|e| panic!("{}: connect to {}: {e}", self.name, self.url))
    }

    /// SIGKILL the server process (no shutdown, no lease release) and reap it.
    pub async fn kill(&mut self) {
        self.child
            .start_kill()
            .expect("send SIGKILL to demo-server");
        let status = tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("demo-server did not die after SIGKILL")
            .expect("wait for demo-server");
        #[cfg(unix)]
        {
            use std::os::unix::process::ExitStatusExt as _;
            assert_eq!(
                status.signal(),
                Some(9),
                "{}: expected death by SIGKILL, got {status:?}",
                self.name
            );
        }
    }
}

impl Drop for DemoServer {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        if std::thread::panicking() {
            eprintln!(
                "----- log of {} (pid {}) -----\n{}\n-----",
                self.name,
                self.pid,
                self.log()
            );
        }
    }
}

// ---------------------------------------------------------------------------
// Task helpers (on the wire form of `tasks/get`)

/// Poll `tasks/get` until `done(wire)` holds; panics with the last state after
/// `timeout`. `seen` is called on every snapshot (to assert invariants while
/// polling).
pub async fn poll_task(
    client: &TestClient,
    task_id: &str,
    timeout: Duration,
    mut seen: impl FnMut(&Value),
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let got = client
            .get(task_id)
            .await
            .unwrap_or_else(|e| panic!("tasks/get {task_id} while polling: {e}"));
        let w = wire(&got);
        seen(&w);
        if done(&w) {
            return w;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!(
                "task {task_id} did not reach the expected state within {timeout:?}; last: {w:#}"
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn status(w: &Value) -> &str {
    w["status"].as_str().unwrap_or("<no status>")
}

pub fn is_terminal(w: &Value) -> bool {
    matches!(status(w), "completed" | "failed" | "cancelled")
}

/// Poll until the task is terminal.
pub async fn wait_terminal(client: &TestClient, task_id: &str, timeout: Duration) -> Value {
    poll_task(client, task_id, timeout, |_| {}, is_terminal).await
}

/// Poll until the task has `status`.
pub async fn wait_status(
    client: &TestClient,
    task_id: &str,
    wanted: &str,
    timeout: Duration,
) -> Value {
    poll_task(client, task_id, timeout, |_| {}, |w| status(w) == wanted).await
}

/// The text of the first content block of a completed task's result.
pub fn result_text(w: &Value) -> String {
    w["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text result in {w:#}"))
        .to_string()
}

/// The keys of the task's outstanding `inputRequests`.
pub fn input_keys(w: &Value) -> Vec<String> {
    w["inputRequests"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}
