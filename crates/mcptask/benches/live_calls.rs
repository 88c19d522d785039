//! What an idle live call costs the gateway while it waits (issue 39).
//!
//! Setup, per series (store × face): an SEP-2663 upstream in this process
//! (mcptask-server's durable runtime on its own SQLite file, its one tool
//! `idle` staying `working` for hours and suggesting `pollIntervalMs` 30,000,
//! a counter of the JSON-RPC methods it is sent) and one `mcptask serve`
//! (the built binary, `[proxy] enabled = true`, `auth = "none"`, the tracker's
//! defaults, push on) in front of it, on SQLite or on a private PostgreSQL
//! cluster started for the run (`initdb`/`pg_ctl`, with `pg_stat_statements`).
//!
//! The calls are made through one face:
//! - `front`: `tools/call` at `/mcp` (stateless 2026-07-28 requests, the
//!   tasks extension declared), so each call is a front task;
//! - `rest`: `POST /api/v1/calls` with `background: true`.
//!
//! For N = 0 then each level (default 1,000 and 10,000), the live calls are
//! topped up to N (16 creators at once), left to settle, then measured over
//! a window (default 30 s), twice: the gateway's CPU (utime + stime of its
//! process, `/proc/<pid>/stat`) per second, its RSS, the upstream `tasks/get`
//! it received per second, and on PostgreSQL the cluster's CPU per second
//! (postmaster, its children, and children it reaped) and the statements
//! (`pg_stat_statements`, the gateway's database) and transactions
//! (`pg_stat_database`) per second. From those: µs of gateway CPU per second
//! per live call and KiB of RSS per live call, both against the series' N = 0.
//! SQLite has no cheap read counter from outside the process and the gateway
//! exports none: its store reads are not reported.
//!
//! After the windows of a series: create latency through the face against a
//! direct create at the upstream (one caller, alternating, p50 and ratio),
//! and, on the front, how long a completion takes to show: the upstream's
//! tool returns at a known instant; a caller polls the call's row through
//! REST (`GET /api/v1/tasks/{id}`: the tracker's row, i.e. when the tracker
//! applied it) and the front's `tasks/get` (what a waiting MCP caller sees)
//! every 2 ms; the difference of the two is what the change takes to reach
//! the front caller once the tracker applied it.
//!
//! Run: `scripts/bench/live-calls` (release build, cleans up on ^C), or
//! `cargo bench -p mcptask --bench live_calls`.
//! Smoke run (`MCPTASK_BENCH_QUICK=1`): SQLite, both faces, N = 0 and 20,
//! 1 s windows; checks that every call is created and stays live.
//! Knobs: `MCPTASK_BENCH_LIVE` (levels, comma-separated, default
//! `1000,10000`), `MCPTASK_BENCH_WINDOW_S` (30), `MCPTASK_BENCH_REPEATS` (2),
//! `MCPTASK_BENCH_SETTLE_S` (10), `MCPTASK_BENCH_STORES` (`sqlite,postgres`),
//! `MCPTASK_BENCH_FACES` (`front,rest`), `MCPTASK_BENCH_SAMPLES` (create
//! latency samples per side, 200), `MCPTASK_BENCH_STATE` (a file where the
//! gateway pids and the PostgreSQL data directory are written, for
//! `scripts/bench/live-calls` to clean up after a kill).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use futures::StreamExt;
use mcptask_server::{DurableTaskServer, RuntimeConfig, TaskExit, TaskRuntime, TaskTool, ToolCall};
use mcptask_testkit::machine;
use mcptask_testkit::pg::PrivateCluster;
use mcptask_testkit::{GatewayProcess, TestDatabase};
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};
use sqlx::Connection as _;
use tokio_util::sync::CancellationToken;

const POLL_INTERVAL_MS: i64 = 30_000;
/// An idle call's hold: longer than any run.
const HOLD_MS: u64 = 6 * 3_600_000;
const CREATORS: usize = 16;

fn env_str(name: &str, default: &str) -> String {
    std::env::var(name)
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| default.to_string())
}

fn env_num<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Settings {
    quick: bool,
    levels: Vec<usize>,
    window: Duration,
    repeats: usize,
    settle: Duration,
    stores: Vec<String>,
    faces: Vec<String>,
    samples: usize,
    state: Option<String>,
}

impl Settings {
    fn from_env() -> Self {
        let quick = std::env::var("MCPTASK_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
        let list = |s: String| -> Vec<String> {
            s.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect()
        };
        Settings {
            quick,
            levels: list(env_str(
                "MCPTASK_BENCH_LIVE",
                if quick { "20" } else { "1000,10000" },
            ))
            .iter()
            .map(|n| n.parse().expect("MCPTASK_BENCH_LIVE: numbers"))
            .collect(),
            window: Duration::from_secs_f64(env_num(
                "MCPTASK_BENCH_WINDOW_S",
                if quick { 1.0 } else { 30.0 },
            )),
            repeats: env_num("MCPTASK_BENCH_REPEATS", if quick { 1 } else { 2 }),
            settle: Duration::from_secs_f64(env_num(
                "MCPTASK_BENCH_SETTLE_S",
                if quick { 0.5 } else { 10.0 },
            )),
            stores: list(env_str(
                "MCPTASK_BENCH_STORES",
                if quick { "sqlite" } else { "sqlite,postgres" },
            )),
            faces: list(env_str("MCPTASK_BENCH_FACES", "front,rest")),
            samples: env_num("MCPTASK_BENCH_SAMPLES", if quick { 3 } else { 200 }),
            state: std::env::var("MCPTASK_BENCH_STATE")
                .ok()
                .filter(|s| !s.is_empty()),
        }
    }

    /// Note a pid or directory for the wrapper script's cleanup.
    fn note(&self, line: &str) {
        if let Some(path) = &self.state {
            use std::io::Write as _;
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .expect("MCPTASK_BENCH_STATE file");
            writeln!(f, "{line}").expect("write MCPTASK_BENCH_STATE");
        }
    }
}

// ---------------------------------------------------------------------------
// /proc

fn ticks_per_second() -> f64 {
    // SAFETY: sysconf only reads a constant of the system.
    (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }) as f64
}

/// Fields of `/proc/<pid>/stat` after the command name (field 3 is index 0).
fn stat_fields(pid: u32) -> Option<Vec<u64>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 2..];
    Some(
        rest.split_whitespace()
            .map(|f| f.parse().unwrap_or(0))
            .collect(),
    )
}

/// utime + stime of one process, in ticks.
fn cpu_ticks(pid: u32) -> u64 {
    stat_fields(pid).map_or(0, |f| f[11] + f[12])
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn parent_of(pid: u32) -> Option<u32> {
    stat_fields(pid).map(|f| f[1] as u32)
}

/// A PostgreSQL cluster's CPU: the postmaster's own and its reaped
/// children's, plus every live child's, in ticks.
fn cluster_ticks(postmaster: u32) -> u64 {
    let mut total = stat_fields(postmaster).map_or(0, |f| f[11] + f[12] + f[13] + f[14]);
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for entry in dir.flatten() {
            if let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok())
                && let Some(f) = stat_fields(pid)
                && f[1] as u32 == postmaster
            {
                total += f[11] + f[12];
            }
        }
    }
    total
}

// ---------------------------------------------------------------------------
// The upstream

/// JSON-RPC method → requests received.
type Methods = Arc<Mutex<HashMap<String, u64>>>;
/// Label → when the tool returned.
type Finished = Arc<Mutex<HashMap<String, Instant>>>;

struct Upstream {
    url: String,
    methods: Methods,
    finished: Finished,
    runtime: TaskRuntime,
    stop: CancellationToken,
    _dir: tempfile::TempDir,
}

async fn count_methods(State(methods): State<Methods>, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, 16 << 20)
        .await
        .unwrap_or_default();
    if let Some(at) = memchr_find(&bytes, br#""method":""#) {
        let rest = &bytes[at + 10..];
        let end = rest.iter().position(|b| *b == b'"').unwrap_or(0);
        let method = String::from_utf8_lossy(&rest[..end]).into_owned();
        *methods.lock().unwrap().entry(method).or_default() += 1;
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

fn memchr_find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

impl Upstream {
    async fn start() -> Upstream {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite:{}", dir.path().join("upstream.db").display());
        let store = mcptask_sql::open(&url).await.expect("upstream store");
        let finished: Finished = Arc::default();
        let mut registry = mcptask_server::ToolRegistry::new();
        let schema = json!({"type": "object", "properties": {
            "hold_ms": {"type": "integer"}, "label": {"type": "string"}}});
        let Value::Object(schema) = schema else {
            unreachable!()
        };
        let done = finished.clone();
        registry.register(
            TaskTool::new(
                Tool::new(
                    "idle",
                    "Stay working for hold_ms (default 6 h), then complete.",
                    Arc::new(schema as JsonObject),
                ),
                move |call: ToolCall| {
                    let done = done.clone();
                    async move {
                        let hold = call
                            .arguments
                            .get("hold_ms")
                            .and_then(Value::as_u64)
                            .unwrap_or(HOLD_MS);
                        tokio::select! {
                            _ = call.ctx.cancelled() => return Err(TaskExit::Cancelled),
                            _ = tokio::time::sleep(Duration::from_millis(hold)) => {}
                        }
                        if let Some(label) = call.arguments.get("label").and_then(Value::as_str) {
                            done.lock()
                                .unwrap()
                                .insert(label.to_string(), Instant::now());
                        }
                        Ok(CallToolResult::success(vec![ContentBlock::text(
                            "idle: done",
                        )]))
                    }
                },
            )
            .poll_interval_ms(POLL_INTERVAL_MS),
        );
        let config = RuntimeConfig {
            default_poll_interval_ms: POLL_INTERVAL_MS,
            default_ttl_ms: Some(12 * 3_600_000),
            max_live_tasks: None,
            max_live_tasks_per_principal: None,
            max_create_queue: 65_536,
            ..RuntimeConfig::default()
        };
        let runtime = TaskRuntime::builder(store.server_tasks(), registry)
            .config(config)
            .start()
            .await
            .expect("upstream runtime");
        let stop = CancellationToken::new();
        let handler = DurableTaskServer::new(runtime.clone());
        let service = StreamableHttpService::new(
            move || Ok(handler.clone()),
            Arc::new(LocalSessionManager::default()),
            StreamableHttpServerConfig::default()
                .with_json_response(true)
                .with_cancellation_token(stop.clone()),
        );
        let service = mcptask_server::TaskListenLayer::new().wrap(service);
        let methods: Methods = Arc::default();
        let app = axum::Router::new().nest_service("/mcp", service).layer(
            axum::middleware::from_fn_with_state(methods.clone(), count_methods),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind upstream");
        let addr = listener.local_addr().expect("upstream address");
        tokio::spawn({
            let stop = stop.clone();
            async move {
                axum::serve(listener, app)
                    .with_graceful_shutdown(async move { stop.cancelled().await })
                    .await
                    .expect("upstream HTTP");
            }
        });
        Upstream {
            url: format!("http://{addr}/mcp"),
            methods,
            finished,
            runtime,
            stop,
            _dir: dir,
        }
    }

    fn count(&self, method: &str) -> u64 {
        self.methods
            .lock()
            .unwrap()
            .get(method)
            .copied()
            .unwrap_or(0)
    }

    async fn shutdown(self) {
        self.stop.cancel();
        self.runtime.shutdown(Duration::from_secs(5)).await;
    }
}

// ---------------------------------------------------------------------------
// Raw MCP (stateless 2026-07-28) and REST requests

const META: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"live-calls","version":"0"},"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}"#;

fn create_body(arguments: &Value) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"idle","arguments":{arguments},{META}}}}}"#
    )
}

async fn mcp_post(
    http: &reqwest::Client,
    url: &str,
    method: &str,
    name: Option<&str>,
    body: String,
) -> Value {
    let mut request = http
        .post(url)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", method);
    if let Some(name) = name {
        request = request.header("Mcp-Name", name);
    }
    let response = request
        .body(body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("{method} at {url}: {e}"));
    let text = response.text().await.expect("MCP answer");
    // A JSON answer, or one SSE event carrying it.
    let json = text
        .lines()
        .find_map(|l| l.strip_prefix("data:"))
        .unwrap_or(&text);
    serde_json::from_str(json.trim()).unwrap_or_else(|e| panic!("{method}: {e}: {text}"))
}

/// One create through a face (or at the upstream, "direct"); the call's id.
async fn create(http: &reqwest::Client, face: &str, base: &str, arguments: &Value) -> String {
    match face {
        "rest" => {
            let r = http
                .post(format!("{base}/api/v1/calls"))
                .json(&json!({"server": "up", "tool": "idle", "arguments": arguments, "background": true}))
                .send()
                .await
                .expect("POST /api/v1/calls");
            let status = r.status();
            let v: Value = r.json().await.expect("REST answer");
            assert_eq!(status, 202, "REST call not kept as a task: {v}");
            v["task"]["id"]
                .as_str()
                .or(v["task"]["taskId"].as_str())
                .unwrap_or_else(|| panic!("REST call without a task id: {v}"))
                .to_string()
        }
        _ => {
            let url = if face == "direct" {
                base.to_string()
            } else {
                format!("{base}/mcp")
            };
            let v = mcp_post(
                http,
                &url,
                "tools/call",
                Some("idle"),
                create_body(arguments),
            )
            .await;
            v["result"]["taskId"]
                .as_str()
                .unwrap_or_else(|| panic!("{face}: create answered {v}"))
                .to_string()
        }
    }
}

// ---------------------------------------------------------------------------
// One series: a store, a face, a gateway

struct Pg {
    cluster: PrivateCluster,
    postmaster: u32,
}

struct Point {
    n: usize,
    cpu_per_s: f64,
    rss_kib: u64,
    gets_per_s: f64,
    pg_cpu_per_s: Option<f64>,
    pg_stmts_per_s: Option<f64>,
    pg_reads_per_s: Option<f64>,
    pg_xacts_per_s: Option<f64>,
}

struct Latency {
    face_p50_ms: f64,
    direct_p50_ms: f64,
    applied_p50_ms: Option<f64>,
    front_seen_p50_ms: Option<f64>,
    lag_p50_ms: Option<f64>,
    lag_max_ms: Option<f64>,
}

fn p50(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// `(statements, reads, transactions)` of the current database so far: the
/// statements `pg_stat_statements` saw (less its own queries), those of them
/// that read (`SELECT`/`WITH`), and commits plus rollbacks.
async fn pg_counters(url: &str) -> (f64, f64, f64) {
    let mut c = sqlx::PgConnection::connect(url)
        .await
        .expect("connect for counters");
    let (stmts, reads): (Option<i64>, Option<i64>) = sqlx::query_as(
        "SELECT sum(calls)::bigint, \
         (sum(calls) FILTER (WHERE ltrim(query) ILIKE 'select%' OR ltrim(query) ILIKE 'with%'))::bigint \
         FROM pg_stat_statements \
         WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) \
         AND query NOT LIKE '%pg_stat%'",
    )
    .fetch_one(&mut c)
    .await
    .expect("pg_stat_statements");
    let xacts: i64 = sqlx::query_scalar(
        "SELECT (xact_commit + xact_rollback)::bigint FROM pg_stat_database WHERE datname = current_database()",
    )
    .fetch_one(&mut c)
    .await
    .expect("pg_stat_database");
    let _ = c.close().await;
    (
        stmts.unwrap_or(0) as f64,
        reads.unwrap_or(0) as f64,
        xacts as f64,
    )
}

async fn measure(
    gateway: u32,
    upstream: &Upstream,
    pg: Option<(&Pg, &str)>,
    window: Duration,
    n: usize,
) -> Point {
    let tps = ticks_per_second();
    // The counters' connection is made and closed outside the CPU window.
    let pg_before = match pg {
        Some((pg, url)) => {
            let counters = pg_counters(url).await;
            Some((cluster_ticks(pg.postmaster), counters))
        }
        None => None,
    };
    let (cpu0, gets0, t0) = (
        cpu_ticks(gateway),
        upstream.count("tasks/get"),
        Instant::now(),
    );
    tokio::time::sleep(window).await;
    let (cpu1, gets1, secs) = (
        cpu_ticks(gateway),
        upstream.count("tasks/get"),
        t0.elapsed().as_secs_f64(),
    );
    let (mut pg_cpu, mut stmts, mut reads, mut xacts) = (None, None, None, None);
    if let (Some((pg, url)), Some((ticks0, (s0, r0, x0)))) = (pg, pg_before) {
        let ticks1 = cluster_ticks(pg.postmaster);
        let (s1, r1, x1) = pg_counters(url).await;
        pg_cpu = Some((ticks1.saturating_sub(ticks0)) as f64 / tps / secs);
        stmts = Some((s1 - s0).max(0.0) / secs);
        reads = Some((r1 - r0).max(0.0) / secs);
        // Less the first counters' two transactions (flushed when that
        // connection closed, inside the window).
        xacts = Some((x1 - x0 - 2.0).max(0.0) / secs);
    }
    Point {
        n,
        cpu_per_s: (cpu1 - cpu0) as f64 / tps / secs,
        rss_kib: rss_kib(gateway),
        gets_per_s: (gets1 - gets0) as f64 / secs,
        pg_cpu_per_s: pg_cpu,
        pg_stmts_per_s: stmts,
        pg_reads_per_s: reads,
        pg_xacts_per_s: xacts,
    }
}

/// Make `count` calls through `face`, `CREATORS` at once.
async fn make_calls(http: &reqwest::Client, face: &str, base: &str, count: usize, args: Value) {
    let made = AtomicUsize::new(0);
    futures::stream::iter(0..count)
        .for_each_concurrent(CREATORS, |_| {
            let args = args.clone();
            let made = &made;
            async move {
                create(http, face, base, &args).await;
                made.fetch_add(1, Ordering::Relaxed);
            }
        })
        .await;
    assert_eq!(made.load(Ordering::Relaxed), count);
}

async fn status_of_rest(http: &reqwest::Client, base: &str, id: &str) -> String {
    let v: Value = http
        .get(format!("{base}/api/v1/tasks/{id}"))
        .send()
        .await
        .expect("GET task")
        .json()
        .await
        .expect("task JSON");
    v["status"].as_str().unwrap_or("?").to_string()
}

async fn status_of_front(http: &reqwest::Client, base: &str, id: &str) -> String {
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{{"taskId":"{id}",{META}}}}}"#
    );
    let v = mcp_post(http, &format!("{base}/mcp"), "tasks/get", Some(id), body).await;
    v["result"]["status"].as_str().unwrap_or("?").to_string()
}

async fn latencies(
    http: &reqwest::Client,
    face: &str,
    base: &str,
    upstream: &Upstream,
    samples: usize,
    quick: bool,
) -> Latency {
    let args = json!({});
    let (mut through, mut direct) = (Vec::new(), Vec::new());
    let warm = if quick { 2 } else { 10 };
    for i in 0..(samples + warm) {
        for side in if i % 2 == 0 {
            [face, "direct"]
        } else {
            ["direct", face]
        } {
            let target = if side == "direct" {
                &upstream.url
            } else {
                base
            };
            let start = Instant::now();
            create(http, side, target, &args).await;
            let ms = start.elapsed().as_secs_f64() * 1e3;
            if i >= warm {
                if side == "direct" {
                    direct.push(ms);
                } else {
                    through.push(ms);
                }
            }
        }
    }
    let mut latency = Latency {
        face_p50_ms: p50(&mut through),
        direct_p50_ms: p50(&mut direct),
        applied_p50_ms: None,
        front_seen_p50_ms: None,
        lag_p50_ms: None,
        lag_max_ms: None,
    };
    if face != "front" {
        return latency;
    }
    // Completion → the tracker's row (REST) and the front's tasks/get.
    let (mut applied, mut seen, mut lag) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..(if quick { 1 } else { 20 }) {
        let label = format!("visible-{i}-{}", uuid::Uuid::new_v4());
        let id = create(
            http,
            "front",
            base,
            &json!({"hold_ms": 300 + 37 * (i % 10), "label": label}),
        )
        .await;
        let (mut rest_at, mut front_at) = (None, None);
        let deadline = Instant::now() + Duration::from_secs(120);
        while (rest_at.is_none() || front_at.is_none()) && Instant::now() < deadline {
            if rest_at.is_none() && status_of_rest(http, base, &id).await == "completed" {
                rest_at = Some(Instant::now());
            }
            if front_at.is_none() && status_of_front(http, base, &id).await == "completed" {
                front_at = Some(Instant::now());
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let done = upstream.finished.lock().unwrap().get(&label).copied();
        let (Some(done), Some(r), Some(f)) = (done, rest_at, front_at) else {
            panic!(
                "call {id} ({label}) never showed completed (REST {rest_at:?}, front {front_at:?})"
            );
        };
        let ms = |a: Instant, b: Instant| a.saturating_duration_since(b).as_secs_f64() * 1e3;
        applied.push(ms(r, done));
        seen.push(ms(f, done));
        lag.push(ms(f, done) - ms(r, done));
    }
    latency.lag_max_ms = lag.iter().copied().reduce(f64::max);
    latency.applied_p50_ms = Some(p50(&mut applied));
    latency.front_seen_p50_ms = Some(p50(&mut seen));
    latency.lag_p50_ms = Some(p50(&mut lag));
    latency
}

async fn series(
    settings: &Settings,
    store: &str,
    face: &str,
    pg: Option<&Pg>,
) -> (Vec<Point>, Latency) {
    let upstream = Upstream::start().await;
    let (db_url, _sqlite) = match pg {
        Some(pg) => (pg.cluster.fresh_database().await, None),
        None => {
            let db = TestDatabase::sqlite();
            (db.url.clone(), Some(db))
        }
    };
    let toml = format!(
        "[database]\nurl = {db}\n\n[api]\nlisten = \"127.0.0.1:0\"\nauth = \"none\"\n\n\
         [proxy]\nenabled = true\nmax_live_tasks = 1000000\n\n\
         [limits]\nlive_calls_per_principal = 0\n\n\
         [[servers]]\nname = \"up\"\nurl = {up}\nprefix = \"\"\n",
        db = serde_json::to_string(&db_url).unwrap(),
        up = serde_json::to_string(&upstream.url).unwrap(),
    );
    let gateway =
        GatewayProcess::start_toml(&format!("{store}-{face}"), &toml, &[("RUST_LOG", "warn")])
            .await;
    let pid = gateway.pid();
    settings.note(&format!("gateway {pid}"));
    mcptask_client::tls::install_crypto_provider();
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .build()
        .expect("HTTP client");
    let base = gateway.base.clone();
    if pg.is_some() {
        let mut c = sqlx::PgConnection::connect(&db_url).await.expect("connect");
        sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            .execute(&mut c)
            .await
            .expect("pg_stat_statements");
        let _ = c.close().await;
    }
    // Warm-up: calls that settle at once.
    let warm = if settings.quick { 5 } else { 50 };
    make_calls(&http, face, &base, warm, json!({"hold_ms": 0})).await;
    tokio::time::sleep(settings.settle).await;

    let mut points = Vec::new();
    let mut live = 0;
    for n in std::iter::once(0).chain(settings.levels.iter().copied()) {
        if n > live {
            let start = Instant::now();
            make_calls(&http, face, &base, n - live, json!({})).await;
            eprintln!(
                "  {store}/{face}: {} calls made in {:.1} s (load {})",
                n - live,
                start.elapsed().as_secs_f64(),
                machine::load_average()
            );
            live = n;
            tokio::time::sleep(settings.settle).await;
        }
        for _ in 0..settings.repeats {
            let point = measure(
                pid,
                &upstream,
                pg.map(|p| (p, db_url.as_str())),
                settings.window,
                n,
            )
            .await;
            print_point(store, face, &point, points.first());
            points.push(point);
        }
    }
    let latency = latencies(
        &http,
        face,
        &base,
        &upstream,
        settings.samples,
        settings.quick,
    )
    .await;
    drop(gateway);
    upstream.shutdown().await;
    (points, latency)
}

fn print_point(store: &str, face: &str, p: &Point, base: Option<&Point>) {
    let opt = |v: Option<f64>, scale: f64| v.map_or("-".into(), |v| format!("{:.1}", v * scale));
    let (per_call_us, per_call_kib) = match base {
        Some(b) if p.n > 0 => (
            format!("{:.1}", (p.cpu_per_s - b.cpu_per_s) * 1e6 / p.n as f64),
            format!("{:.1}", (p.rss_kib as f64 - b.rss_kib as f64) / p.n as f64),
        ),
        _ => ("-".into(), "-".into()),
    };
    println!(
        "{store:<8} {face:<5} {:>7} {:>9.2} {:>10} {:>9} {:>9} {:>9.1} {:>9} {:>9} {:>9} {:>9}",
        p.n,
        p.cpu_per_s * 100.0,
        per_call_us,
        p.rss_kib / 1024,
        per_call_kib,
        p.gets_per_s,
        opt(p.pg_cpu_per_s, 100.0),
        opt(p.pg_stmts_per_s, 1.0),
        opt(p.pg_reads_per_s, 1.0),
        opt(p.pg_xacts_per_s, 1.0),
    );
}

async fn start_pg(settings: &Settings) -> Option<Pg> {
    let cluster = PrivateCluster::start().await?;
    settings.note(&format!("pgport {}", cluster.port()));
    let admin = format!("postgres://postgres@127.0.0.1:{}/postgres", cluster.port());
    let mut c = sqlx::PgConnection::connect(&admin).await.expect("admin");
    sqlx::query("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
        .execute(&mut c)
        .await
        .expect("preload pg_stat_statements");
    let _ = c.close().await;
    cluster.restart_immediate().await;
    let mut c = sqlx::PgConnection::connect(&admin).await.expect("admin");
    let backend: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut c)
        .await
        .expect("backend pid");
    let postmaster = parent_of(backend as u32).expect("the postmaster of a backend");
    let _ = c.close().await;
    settings.note(&format!("postmaster {postmaster}"));
    Some(Pg {
        cluster,
        postmaster,
    })
}

async fn run(settings: Settings) {
    println!("mcptask live calls: what an idle call costs (issue 39)");
    println!(
        "machine : {} x {}, {}",
        machine::num_cpus(),
        machine::cpu_model(),
        machine::mem_total()
    );
    println!("load    : {} (start)", machine::load_average());
    println!(
        "levels  : 0,{:?}; window {:?} x {}; settle {:?}; upstream pollIntervalMs {POLL_INTERVAL_MS}{}",
        settings.levels,
        settings.window,
        settings.repeats,
        settings.settle,
        if settings.quick { " [quick]" } else { "" }
    );
    println!();
    println!(
        "{:<8} {:<5} {:>7} {:>9} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "store",
        "face",
        "live",
        "gw CPU%",
        "us/s/call",
        "RSS MiB",
        "KiB/call",
        "gets/s",
        "pg CPU%",
        "stmts/s",
        "reads/s",
        "xacts/s"
    );
    let mut latencies = Vec::new();
    for store in &settings.stores {
        let pg = if store == "postgres" {
            match start_pg(&settings).await {
                Some(pg) => Some(pg),
                None => {
                    println!("postgres: SKIPPED (no initdb/pg_ctl)");
                    continue;
                }
            }
        } else {
            None
        };
        for face in &settings.faces {
            let (_, latency) = series(&settings, store, face, pg.as_ref()).await;
            latencies.push((store.clone(), face.clone(), latency));
        }
        drop(pg);
    }
    println!();
    println!(
        "{:<8} {:<5} {:>14} {:>14} {:>6} {:>13} {:>13} {:>13} {:>13}",
        "store",
        "face",
        "create p50 ms",
        "direct p50 ms",
        "ratio",
        "applied ms",
        "front ms",
        "lag p50 ms",
        "lag max ms"
    );
    let opt = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.1}"));
    for (store, face, l) in latencies {
        println!(
            "{store:<8} {face:<5} {:>14.2} {:>14.2} {:>6.2} {:>13} {:>13} {:>13} {:>13}",
            l.face_p50_ms,
            l.direct_p50_ms,
            l.face_p50_ms / l.direct_p50_ms,
            opt(l.applied_p50_ms),
            opt(l.front_seen_p50_ms),
            opt(l.lag_p50_ms),
            opt(l.lag_max_ms),
        );
    }
    println!();
    println!("load    : {} (end)", machine::load_average());
}

fn main() {
    let settings = Settings::from_env();
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let limit = Duration::from_secs(if settings.quick { 180 } else { 7200 });
    tokio.block_on(async move {
        // ^C or SIGTERM: return, so the gateways and the cluster are dropped
        // (killed, stopped) on the way out.
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = mcptask_testkit::with_deadline(limit, run(settings)) => {}
            _ = tokio::signal::ctrl_c() => eprintln!("live_calls: interrupted"),
            _ = term.recv() => eprintln!("live_calls: terminated"),
        }
    });
}
