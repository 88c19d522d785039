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

/// A database for one test (SQLite file or fresh PostgreSQL database).
pub use mcptask_sql::testkit::TestDatabase as Database;

// ---------------------------------------------------------------------------
// Server processes

/// A running `mcptask demo-server --http` process. Killed (SIGKILL) on drop;
/// on a failing test its log is printed.
pub struct DemoServer {
    process: LoggedChild,
    /// `http://127.0.0.1:PORT/mcp`
    pub url: String,
}

/// `mcptask demo-server --http ADDR --database-url URL EXTRA…`.
fn demo_server_command(addr: &str, database_url: &str, extra: &[&str]) -> Command {
    let mut command = Command::new(BIN);
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

// ---------------------------------------------------------------------------
// Tracker-side helpers (tracker_e2e, tracker_chaos): processes whose stderr is
// kept, demo servers on a fixed port, `mcptask serve` gateways, a webhook
// receiver that checks signatures, and SIGKILL by pid.

/// A child process whose stderr is drained (and kept) for its whole life.
pub struct LoggedChild {
    pub child: Child,
    pub pid: u32,
    pub name: String,
    log: Arc<Mutex<Vec<String>>>,
}

/// Spawn `command` with stderr piped and drained into a shared log, and wait
/// until it prints a line starting with `ready`. Returns the child, its pid,
/// the log and the rest of the ready line, or the log when the process exits
/// (or stays silent) first.
async fn spawn_logged(
    name: &str,
    mut command: Command,
    ready: &str,
    within: Duration,
) -> Result<(Child, u32, Arc<Mutex<Vec<String>>>, String), String> {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = command
        .spawn()
        .map_err(|e| format!("{name}: cannot spawn: {e}"))?;
    let pid = child.id().expect("pid of a fresh child");
    let stderr = child.stderr.take().expect("piped stderr");
    let log = Arc::new(Mutex::new(Vec::new()));
    let (found_tx, found_rx) = tokio::sync::oneshot::channel::<String>();
    let ready = ready.to_string();
    tokio::spawn({
        let log = log.clone();
        async move {
            let mut found = Some(found_tx);
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(rest) = line.strip_prefix(ready.as_str())
                    && let Some(tx) = found.take()
                {
                    let _ = tx.send(rest.trim().to_string());
                }
                log.lock().unwrap().push(line);
            }
        }
    });
    let joined = |log: &Arc<Mutex<Vec<String>>>| log.lock().unwrap().join("\n");
    match tokio::time::timeout(within, found_rx).await {
        Ok(Ok(rest)) => Ok((child, pid, log, rest)),
        Ok(Err(_)) => {
            let status = child.wait().await;
            Err(format!(
                "{name}: exited before it was ready ({status:?}); log:\n{}",
                joined(&log)
            ))
        }
        Err(_) => Err(format!(
            "{name}: not ready within {within:?}; log:\n{}",
            joined(&log)
        )),
    }
}

impl LoggedChild {
    /// Spawn `command` and wait for its `ready` line (see [`spawn_logged`]);
    /// returns the process and the rest of that line.
    pub async fn spawn(
        name: &str,
        command: Command,
        ready: &str,
        within: Duration,
    ) -> Result<(LoggedChild, String), String> {
        let (child, pid, log, rest) = spawn_logged(name, command, ready, within).await?;
        Ok((
            LoggedChild {
                child,
                pid,
                name: name.to_string(),
                log,
            },
            rest,
        ))
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// Lines of the log containing `needle`.
    pub fn count_lines(&self, needle: &str) -> usize {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(needle))
            .count()
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGKILL (no shutdown, no claim release) and reap; asserts death by signal 9.
    pub async fn kill(&mut self) {
        self.child.start_kill().expect("send SIGKILL");
        let status = tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("{} did not die after SIGKILL", self.name))
            .expect("wait for the killed process");
        #[cfg(unix)]
        {
            use std::os::unix::process::ExitStatusExt as _;
            assert_eq!(
                status.signal(),
                Some(9),
                "{}: expected death by SIGKILL, got {status:?}; log:\n{}",
                self.name,
                self.log()
            );
        }
    }
}

impl Drop for LoggedChild {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        if std::thread::panicking() {
            let log = self.log();
            // The tail is what matters; a chaos run's full log is long.
            let tail: Vec<&str> = log.lines().rev().take(200).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            eprintln!(
                "----- log of {} (pid {}, last {} lines) -----\n{}\n-----",
                self.name,
                self.pid,
                tail.len(),
                tail.join("\n")
            );
        }
    }
}

/// A port on 127.0.0.1 that was free a moment ago (for servers that must
/// come back on the same address).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind an ephemeral port")
        .port()
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

/// SIGKILL a process by pid (one this test started, directly or through a
/// tracker's stdio transport).
pub fn sigkill(pid: u32) {
    // SAFETY: kill(2) with a pid we own and a valid signal number.
    let rc = unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    assert_eq!(rc, 0, "kill -9 {pid}: {}", std::io::Error::last_os_error());
}

/// Pids of live (not zombie) child processes of this test process whose
/// command line contains `marker`.
pub fn children_with(marker: &str) -> Vec<u32> {
    let me = std::process::id();
    let mut found = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // "pid (comm) state ppid …": comm may contain spaces, so split after ')'.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next().unwrap_or("Z");
        let ppid: u32 = fields.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        if ppid != me || state == "Z" {
            continue;
        }
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(marker) {
            found.push(pid);
        }
    }
    found
}

/// The line `mcptask serve` prints once its API listens.
pub const GATEWAY_LISTENING: &str = "mcptask gateway listening on ";

/// Start `mcptask serve --config PATH` (tracker workers of a gateway) and
/// wait until it listens. Killed (SIGKILL) on drop.
pub async fn start_gateway(name: &str, config: &std::path::Path) -> LoggedChild {
    let (gateway, _api) = LoggedChild::spawn(
        name,
        serve_command(config),
        GATEWAY_LISTENING,
        Duration::from_secs(60),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    gateway
}

/// `mcptask serve --config PATH`, isolated from the caller's MCPTASK_* environment.
pub fn serve_command(config: &std::path::Path) -> Command {
    let mut command = Command::new(BIN);
    command
        .arg("serve")
        .arg("--config")
        .arg(config)
        .env("MCPTASK_LOG", "info,sqlx=warn,rmcp=warn")
        .env_remove("MCPTASK_CONFIG")
        .env_remove("MCPTASK_DATABASE_URL")
        .env_remove("MCPTASK_LISTEN")
        .env_remove("MCPTASK_AUTH")
        .env_remove("MCPTASK_API_TOKEN");
    command
}

/// `mcptask.toml` for a gateway: no API auth, an ephemeral API port, the
/// given servers (name, Streamable HTTP URL), one signed webhook and raw
/// `[tracker]` lines.
pub fn gateway_config(
    database_url: &str,
    servers: &[(&str, &str)],
    webhook_url: &str,
    secret: &str,
    tracker: &str,
) -> String {
    let q = |s: &str| serde_json::to_string(s).expect("a TOML basic string");
    let mut text = format!(
        "[database]\nurl = {}\n\n[api]\nlisten = \"127.0.0.1:0\"\nauth = \"none\"\n\n[tracker]\n{}\n",
        q(database_url),
        tracker.trim()
    );
    for (name, url) in servers {
        text.push_str(&format!(
            "\n[[servers]]\nname = {}\nurl = {}\n",
            q(name),
            q(url)
        ));
    }
    text.push_str(&format!(
        "\n[[webhooks]]\nurl = {}\nsecret = {}\ntimeout_ms = 5000\n",
        q(webhook_url),
        q(secret)
    ));
    text
}

/// What a webhook received for one idempotency key.
#[derive(Debug, Clone, Default)]
pub struct HookEvent {
    /// How many POSTs carried this key (more than one is a duplicate delivery).
    pub count: u32,
    pub kind: String,
    pub status: String,
}

#[derive(Default)]
struct HookState {
    posts: u64,
    events: std::collections::HashMap<String, HookEvent>,
    /// Requests that failed verification (bad signature, inconsistent keys).
    bad: Vec<String>,
}

/// An HTTP endpoint in the test process receiving mcptask webhooks: verifies
/// each `X-Mcptask-Signature` (HMAC-SHA256 of the body under `secret`) and
/// that the idempotency key is `taskId:version` in body and header, then
/// records every delivery. Answers 200.
pub struct WebhookReceiver {
    /// `http://127.0.0.1:PORT/hook`
    pub url: String,
    state: Arc<Mutex<HookState>>,
    server: tokio::task::JoinHandle<()>,
}

impl WebhookReceiver {
    pub async fn start(secret: &str) -> Self {
        Self::start_with_delay(secret, Duration::ZERO, 0).await
    }

    /// Like [`WebhookReceiver::start`], but each request is answered after a
    /// random delay in `0..max_delay` (a slow endpoint: notify claims stay
    /// held while deliveries are in flight).
    pub async fn start_with_delay(secret: &str, max_delay: Duration, seed: u64) -> Self {
        use axum::http::{HeaderMap, StatusCode};
        let state = Arc::new(Mutex::new(HookState::default()));
        let secret = secret.as_bytes().to_vec();
        let rng = Arc::new(Mutex::new(Rng(seed)));
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post({
                let state = state.clone();
                move |headers: HeaderMap, body: axum::body::Bytes| {
                    let state = state.clone();
                    let secret = secret.clone();
                    let delay = max_delay.mul_f64(rng.lock().unwrap().unit());
                    async move {
                        if !delay.is_zero() {
                            tokio::time::sleep(delay).await;
                        }
                        let header = |name: &str| {
                            headers
                                .get(name)
                                .and_then(|v| v.to_str().ok())
                                .unwrap_or_default()
                                .to_string()
                        };
                        let signature = header(mcptask_client::notify::SIGNATURE_HEADER);
                        let idem = header(mcptask_client::notify::IDEMPOTENCY_HEADER);
                        let json: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                        let key = json["idempotencyKey"].as_str().unwrap_or_default();
                        let expected_key = format!(
                            "{}:{}",
                            json["taskId"].as_str().unwrap_or("?"),
                            json["version"].as_i64().unwrap_or(-1)
                        );
                        let mut s = state.lock().unwrap();
                        s.posts += 1;
                        if signature != mcptask_client::notify::sign(&secret, &body) {
                            s.bad.push(format!("bad signature {signature:?} on {key}"));
                        } else if key != expected_key || idem != key {
                            s.bad.push(format!(
                                "inconsistent keys: body {key:?}, header {idem:?}, expected {expected_key:?}"
                            ));
                        } else {
                            let e = s.events.entry(key.to_string()).or_default();
                            e.count += 1;
                            e.kind = json["kind"].as_str().unwrap_or_default().to_string();
                            e.status = json["status"].as_str().unwrap_or_default().to_string();
                        }
                        StatusCode::OK
                    }
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the webhook receiver");
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        WebhookReceiver { url, state, server }
    }

    /// Every POST received (duplicates included).
    pub fn posts(&self) -> u64 {
        self.state.lock().unwrap().posts
    }

    /// Distinct idempotency keys received.
    pub fn unique(&self) -> usize {
        self.state.lock().unwrap().events.len()
    }

    /// Deliveries beyond the first per key (allowed: at least once).
    pub fn duplicates(&self) -> u64 {
        let s = self.state.lock().unwrap();
        s.events.values().map(|e| u64::from(e.count - 1)).sum()
    }

    pub fn get(&self, key: &str) -> Option<HookEvent> {
        self.state.lock().unwrap().events.get(key).cloned()
    }

    /// The keys of `keys` not received yet.
    pub fn missing<'a>(&self, keys: impl IntoIterator<Item = &'a String>) -> Vec<String> {
        let s = self.state.lock().unwrap();
        keys.into_iter()
            .filter(|k| !s.events.contains_key(*k))
            .cloned()
            .collect()
    }

    /// Requests that failed verification.
    pub fn bad(&self) -> Vec<String> {
        self.state.lock().unwrap().bad.clone()
    }
}

impl Drop for WebhookReceiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// Wait (until `deadline`) for a tracked task to be terminal with every event
/// delivered, then check its timeline and the webhook: versions exactly
/// `1..=event_version` (no gap, no duplicate), exactly one event with a
/// terminal status (a `status` event, the last one: a terminal task was
/// settled once), every event received by the webhook at least once with the
/// same kind and status, and nothing dead-lettered. Returns the final record
/// and its timeline.
pub async fn verify_delivered(
    tracker: &mcptask_client::Tracker,
    hook: &WebhookReceiver,
    id: &str,
    deadline: tokio::time::Instant,
) -> (
    mcptask_client::RemoteTaskRecord,
    Vec<mcptask_client::TaskEvent>,
) {
    use mcptask_core::client::EventKind;
    let record = loop {
        let r = tracker.get(id).await.expect("read a tracked task");
        let keys: Vec<String> = (1..=r.event_version).map(|v| format!("{id}:{v}")).collect();
        let missing = hook.missing(&keys);
        if r.is_terminal() && r.delivered_version == r.event_version && missing.is_empty() {
            break r;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!(
                "task {id} not terminal and fully delivered in time: status {}, events {} (delivered_version {}), \
                 webhook misses {missing:?}, last notify error {:?}",
                r.status, r.event_version, r.delivered_version, r.last_notify_error
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        record.dead_letters, 0,
        "task {id}: events were dead-lettered: {record:#?}"
    );
    let timeline = tracker
        .events(id, 0, 1000)
        .await
        .expect("read the timeline");
    let brief: Vec<String> = timeline
        .iter()
        .map(|e| format!("{}:{}:{}", e.version, e.kind.as_str(), e.status))
        .collect();
    let versions: Vec<i64> = timeline.iter().map(|e| e.version).collect();
    assert_eq!(
        versions,
        (1..=record.event_version).collect::<Vec<_>>(),
        "task {id}: the timeline must number its events 1..=event_version: {brief:?}"
    );
    let terminal: Vec<_> = timeline.iter().filter(|e| e.status.is_terminal()).collect();
    assert_eq!(
        terminal.len(),
        1,
        "task {id}: exactly one terminal event (a settlement applied once): {brief:?}"
    );
    let settled = terminal[0];
    assert_eq!(settled.kind, EventKind::Status, "task {id}: {brief:?}");
    assert_eq!(
        settled.version, record.event_version,
        "task {id}: nothing happens after settling: {brief:?}"
    );
    assert_eq!(settled.status, record.status, "task {id}: {brief:?}");
    for e in &timeline {
        let got = hook
            .get(&e.idempotency_key())
            .unwrap_or_else(|| panic!("webhook never got {}", e.idempotency_key()));
        assert_eq!(
            (got.kind.as_str(), got.status.as_str()),
            (e.kind.as_str(), e.status.as_str()),
            "webhook body of {} differs from the timeline",
            e.idempotency_key()
        );
    }
    (record, timeline)
}

/// SIGSTOP a process: it holds its claims and connections but does nothing,
/// like a process stalled by the scheduler or a long GC pause.
pub fn freeze(pid: u32) {
    // SAFETY: kill(2) with a pid we own and a valid signal number.
    let rc = unsafe { libc::kill(pid as libc::pid_t, libc::SIGSTOP) };
    assert_eq!(
        rc,
        0,
        "kill -STOP {pid}: {}",
        std::io::Error::last_os_error()
    );
}

/// SIGCONT a process stopped by [`freeze`].
pub fn thaw(pid: u32) {
    // SAFETY: kill(2) with a pid we own and a valid signal number.
    let rc = unsafe { libc::kill(pid as libc::pid_t, libc::SIGCONT) };
    assert_eq!(
        rc,
        0,
        "kill -CONT {pid}: {}",
        std::io::Error::last_os_error()
    );
}

/// SplitMix64: a small seeded generator, so that a failing random run can be
/// replayed from its printed seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        ((self.unit() * n as f64) as usize).min(n - 1)
    }
}

/// A reverse proxy in the test process in front of an HTTP server, delaying
/// every request by a random `0..max_delay` (a slow network or a busy
/// server): remote calls take a while, so tracker claims stay held long
/// enough for a frozen tracker process to lose them mid-call.
pub struct SlowProxy {
    /// `http://127.0.0.1:PORT` (append the target's path, e.g. `/mcp`).
    pub base: String,
    server: tokio::task::JoinHandle<()>,
}

impl SlowProxy {
    /// Proxy to `target` (`http://HOST:PORT`).
    pub async fn start(target: &str, max_delay: Duration, seed: u64) -> Self {
        use axum::body::Body;
        use axum::http::{StatusCode, header};
        use axum::response::IntoResponse;
        let client = reqwest::Client::new();
        let target = target.trim_end_matches('/').to_string();
        let rng = Arc::new(Mutex::new(Rng(seed)));
        let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
            let (client, target, rng) = (client.clone(), target.clone(), rng.clone());
            async move {
                let delay = max_delay.mul_f64(rng.lock().unwrap().unit());
                tokio::time::sleep(delay).await;
                let (parts, body) = request.into_parts();
                let Ok(body) = axum::body::to_bytes(body, 64 * 1024 * 1024).await else {
                    return (StatusCode::BAD_REQUEST, "unreadable body").into_response();
                };
                let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
                let mut forward = client
                    .request(parts.method.clone(), format!("{target}{path}"))
                    .body(body);
                for (name, value) in &parts.headers {
                    if name != header::HOST && name != header::CONTENT_LENGTH {
                        forward = forward.header(name, value);
                    }
                }
                match forward.send().await {
                    Ok(upstream) => {
                        let mut response =
                            axum::response::Response::builder().status(upstream.status());
                        for (name, value) in upstream.headers() {
                            if name != header::TRANSFER_ENCODING && name != header::CONNECTION {
                                response = response.header(name, value);
                            }
                        }
                        response
                            .body(Body::from_stream(upstream.bytes_stream()))
                            .unwrap_or_else(|e| {
                                (StatusCode::BAD_GATEWAY, e.to_string()).into_response()
                            })
                    }
                    Err(e) => (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
                }
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let base = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        SlowProxy { base, server }
    }
}

impl Drop for SlowProxy {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// How many live tasks the tracker process `pid` (owner ids are
/// `tracker-PID-RANDOM`) holds unexpired work claims on, polling the store
/// until it holds some or `within` passes.
pub async fn wait_for_claims(
    tracker: &mcptask_client::Tracker,
    pid: u32,
    within: Duration,
) -> usize {
    let tag = format!("tracker-{pid}-");
    let filter = mcptask_core::client::ListFilter {
        active_only: true,
        ..Default::default()
    };
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let mut held = 0;
        let mut cursor = None;
        loop {
            let (page, next) = tracker
                .list(&filter, cursor.as_ref(), 500)
                .await
                .expect("list live tasks");
            held += page
                .iter()
                .filter(|r| {
                    r.claim_owner
                        .as_deref()
                        .is_some_and(|o| o.starts_with(&tag))
                        && r.claim_expires_at.is_some_and(|e| e > now_ms)
                })
                .count();
            match next {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
        if held > 0 || tokio::time::Instant::now() >= deadline {
            return held;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
