//! How soon the application hears of it: from the upstream settling a task
//! (or asking for input) to the gateway's webhook delivering the event, with
//! the tracker polling at several intervals, side by side in one run.
//!
//! Processes: the built `mcptask` binary as the tests start it: one `mcptask
//! demo-server` (SQLite) is the upstream; for each mode a `mcptask serve`
//! (SQLite) tracks it with `poll_min_ms = poll_max_ms = input_required_poll_ms
//! = X` and `push = false`, then once with `push = true` and X = 10 s (the
//! demo server serves `notifications/tasks`, so the tracker polls a task as
//! soon as it is told it changed), each with one webhook: a receiver in this
//! process that stamps each delivery on arrival (wall clock, ms).
//!
//! - **completion**: `slow_compute {seconds: s}` with `s` spread over
//!   0.2-1.2 s, so completions fall at every phase of the poll cycle. The
//!   upstream's completion time is the demo server's own `lastUpdatedAt` of
//!   the completed task (its store's clock, the same machine's); latency =
//!   arrival of the `completed` event − that.
//! - **input**: `confirm_delete`, which asks at once; latency = arrival of the
//!   `input_required` event − the upstream's `lastUpdatedAt` while it waits.
//!
//! Both clocks are the machine's wall clock at millisecond resolution; each
//! sample is therefore ±1 ms. Nothing about speed is asserted; the smoke run
//! (`MCPTASK_BENCH_QUICK=1`) checks that every event arrives.
//!
//! Run: `cargo bench -p mcptask --bench notify_latency`. Knobs:
//! `MCPTASK_BENCH_TASKS` (tasks per mode and kind), `MCPTASK_BENCH_POLLS`
//! (comma-separated intervals in ms).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use mcptask_testkit::machine;
use mcptask_testkit::mcp::{Lifecycle, TestClient};
use mcptask_testkit::{DemoServer, GatewayProcess, GatewaySpec, OPERATOR, TestDatabase};
use serde_json::{Value, json};

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// `(gateway task id, kind)` → arrival time (epoch ms) of the first delivery.
type Arrivals = Arc<Mutex<HashMap<(String, String), i64>>>;

/// A webhook endpoint that only stamps arrivals.
async fn receiver() -> (String, Arrivals) {
    let arrivals: Arrivals = Arc::default();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post({
            let arrivals = arrivals.clone();
            move |body: axum::body::Bytes| {
                let at = now_ms();
                let arrivals = arrivals.clone();
                async move {
                    let event: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    let id = event["taskId"].as_str().unwrap_or_default().to_string();
                    let kind = match (event["kind"].as_str(), event["status"].as_str()) {
                        (Some("input_required"), _) => "input_required".to_string(),
                        (_, Some(status)) => status.to_string(),
                        _ => String::new(),
                    };
                    arrivals.lock().unwrap().entry((id, kind)).or_insert(at);
                    axum::http::StatusCode::OK
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the receiver");
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, arrivals)
}

struct Settings {
    quick: bool,
    tasks: usize,
    polls: Vec<u64>,
}

impl Settings {
    fn from_env() -> Self {
        let quick = std::env::var("MCPTASK_BENCH_QUICK").is_ok_and(|v| v == "1");
        let tasks = std::env::var("MCPTASK_BENCH_TASKS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(if quick { 3 } else { 60 });
        let polls = std::env::var("MCPTASK_BENCH_POLLS")
            .ok()
            .map(|v| v.split(',').filter_map(|p| p.trim().parse().ok()).collect())
            .unwrap_or_else(|| {
                if quick {
                    vec![100]
                } else {
                    vec![100, 250, 1000]
                }
            });
        Settings {
            quick,
            tasks,
            polls,
        }
    }
}

/// How the tracker learns of a change.
#[derive(Clone, Copy)]
enum Mode {
    /// Polling every `ms`, push off.
    Polling(u64),
    /// Push on (the demo server serves task notifications), with polls every
    /// 10 s as the backstop only.
    Push,
}

impl Mode {
    fn name(self) -> String {
        match self {
            Mode::Polling(ms) => format!("polling {ms} ms"),
            Mode::Push => "push (polls every 10 s)".into(),
        }
    }
}

fn gateway_toml(db: &str, upstream: &str, hook: &str, mode: Mode) -> String {
    let (poll_ms, push) = match mode {
        Mode::Polling(ms) => (ms, false),
        Mode::Push => (10_000, true),
    };
    let base = GatewaySpec::with_tokens(db, &[("demo", upstream)]).toml();
    // Replace the test defaults' [tracker] section with this mode's.
    let (head, rest) = base.split_once("\n[tracker]").expect("a tracker section");
    let servers = rest.split_once("\n[[servers]]").map_or("", |(_, s)| s);
    format!(
        "{head}\n[tracker]\npush = {push}\npoll_default_ms = {poll_ms}\npoll_min_ms = {poll_ms}\npoll_max_ms = {poll_ms}\n\
         input_required_poll_ms = {poll_ms}\n\n[[servers]]{servers}\n[[webhooks]]\nurl = {hook:?}\nsecret = \"bench\"\n"
    )
}

/// Milliseconds since the epoch of an RFC 3339 time.
fn epoch_ms(rfc3339: &str) -> i64 {
    mcptask_core::time::parse_rfc3339(rfc3339)
        .unwrap_or_else(|| panic!("{rfc3339:?} is not an RFC 3339 time"))
}

fn percentile(v: &[i64], p: f64) -> i64 {
    let mut v = v.to_vec();
    v.sort();
    if v.is_empty() {
        return 0;
    }
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// Wait until `(id, kind)` has arrived; its arrival time.
async fn arrival(arrivals: &Arrivals, id: &str, kind: &str) -> i64 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(at) = arrivals
            .lock()
            .unwrap()
            .get(&(id.to_string(), kind.to_string()))
        {
            return *at;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no {kind} event for {id} within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The upstream's own `lastUpdatedAt` of the remote task behind `local`.
async fn upstream_updated_at(
    api: &mcptask_testkit::Api,
    upstream: &TestClient,
    local: &str,
) -> i64 {
    let tracked = api.task(local).await;
    let remote = tracked["remoteTaskId"].as_str().expect("remoteTaskId");
    let got = upstream.get(remote).await.expect("tasks/get upstream");
    let snapshot = serde_json::to_value(&got).expect("task as JSON");
    let at = snapshot["lastUpdatedAt"]
        .as_str()
        .or_else(|| snapshot["task"]["lastUpdatedAt"].as_str())
        .unwrap_or_else(|| panic!("no lastUpdatedAt in {snapshot:#}"));
    epoch_ms(at)
}

struct Row {
    mode: String,
    kind: &'static str,
    samples: Vec<i64>,
}

async fn measure_mode(
    s: &Settings,
    demo: &DemoServer,
    upstream: &TestClient,
    mode: Mode,
) -> Vec<Row> {
    let (hook, arrivals) = receiver().await;
    let db = TestDatabase::sqlite();
    let toml = gateway_toml(&db.url, &demo.url, &hook, mode);
    let mode = mode.name();
    let gateway = GatewayProcess::start_toml(&format!("gateway, {mode}"), &toml, &[]).await;
    let api = gateway.client(Some(OPERATOR));

    // Completions, spread over the poll cycle.
    let mut started = Vec::new();
    for i in 0..s.tasks {
        let seconds = 0.2 + (i as f64 * 0.618_034).fract();
        let task = api
            .start_task(
                "slow_compute",
                json!({"seconds": seconds, "label": "latency"}),
            )
            .await;
        started.push(task["id"].as_str().expect("id").to_string());
    }
    let mut completion = Vec::new();
    for id in &started {
        let at = arrival(&arrivals, id, "completed").await;
        completion.push(at - upstream_updated_at(&api, upstream, id).await);
    }

    // Input requests.
    let mut input = Vec::new();
    for i in 0..s.tasks {
        let task = api
            .start_task("confirm_delete", json!({"filename": format!("f{i}.txt")}))
            .await;
        let id = task["id"].as_str().expect("id").to_string();
        let at = arrival(&arrivals, &id, "input_required").await;
        input.push(at - upstream_updated_at(&api, upstream, &id).await);
        api.post(&format!("/api/v1/tasks/{id}/cancel"), &json!({}))
            .await
            .assert_status(202);
    }
    vec![
        Row {
            mode: mode.clone(),
            kind: "completion → webhook",
            samples: completion,
        },
        Row {
            mode,
            kind: "input request → webhook",
            samples: input,
        },
    ]
}

async fn run(s: Settings) {
    let upstream_db = TestDatabase::sqlite();
    let demo = DemoServer::start(&upstream_db.url, &[]).await;
    let upstream = TestClient::http(&demo.url, None, Lifecycle::Modern { tasks: true })
        .await
        .expect("connect to the demo server");
    println!(
        "notify_latency: {} tasks per mode and kind; {} cpus ({}), load {}",
        s.tasks,
        machine::num_cpus(),
        machine::cpu_model(),
        machine::load_average()
    );
    let mut rows = Vec::new();
    let modes = s
        .polls
        .iter()
        .map(|ms| Mode::Polling(*ms))
        .chain(std::iter::once(Mode::Push));
    for mode in modes {
        rows.extend(measure_mode(&s, &demo, &upstream, mode).await);
    }
    println!("| mode | measure | n | p50 ms | p99 ms | max ms |");
    println!("|---|---|---:|---:|---:|---:|");
    for r in &rows {
        println!(
            "| {} | {} | {} | {} | {} | {} |",
            r.mode,
            r.kind,
            r.samples.len(),
            percentile(&r.samples, 0.5),
            percentile(&r.samples, 0.99),
            r.samples.iter().max().copied().unwrap_or(0)
        );
        assert_eq!(r.samples.len(), s.tasks, "every event arrived");
    }
    if s.quick {
        println!("notify_latency: smoke run passed (every event arrived)");
    }
}

fn main() {
    let s = Settings::from_env();
    let quick = s.quick;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(mcptask_testkit::with_deadline(
            Duration::from_secs(if quick { 180 } else { 1800 }),
            run(s),
        ));
}
