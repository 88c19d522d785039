//! Acceptance "Tracker end to end": a tracker against the real
//! `mcptask demo-server` binary, over stdio and over Streamable HTTP.
//!
//! - Every outcome the server can report is recorded as reported: completed,
//!   failed (a JSON-RPC error), completed with `isError`, cancelled (the
//!   tracker's durable cancel intent), input answered through the tracker,
//!   and TTL expiry on the server.
//! - The server process is SIGKILLed mid-task and started again on the same
//!   database (HTTP: same port; stdio: the tracker respawns the child on its
//!   next call). The tracker rides out the transient errors and records what
//!   the restarted server decides: `slow_compute` failed as interrupted,
//!   `countdown` rerun (attempt 2) to completion with the stored answer.
//! - The tracker itself runs as a real `mcptask serve` process, is SIGKILLed
//!   mid-task and restarted: every task still reaches a terminal state and
//!   every event reaches the signed webhook at least once.
//!
//! In every scenario each task's timeline is numbered `1..=event_version`
//! without gaps, holds exactly one terminal event, and every event is received
//! by an HMAC-verified webhook at least once under its idempotency key
//! `taskId:version` (duplicates allowed, nothing dead-lettered).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use mcptask_client::{
    CallOptions, CallOutcome, Notifier, RemoteTaskRecord, ServerDef, Tracker, TrackerConfig,
    WebhookNotifier,
};
use mcptask_core::TaskStatus;
use mcptask_core::client::EventKind;
use mcptask_testkit::tracker::fast_config;
use mcptask_testkit::*;
use serde_json::{Value, json};

const SECRET: &str = "tracker-e2e-webhook-secret";

/// How the tracker reaches the demo server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    Stdio,
    Http,
}

/// The shared fast schedules ([`fast_config`]), with bounds for servers that
/// are separate processes: a debug demo-server starting on a busy 2-core
/// machine can take seconds, so remote calls, connects and claims get room.
fn e2e_config() -> TrackerConfig {
    TrackerConfig {
        lease_ms: 20_000,
        call_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(15),
        ..fast_config()
    }
}

/// A demo server known to the tracker as `def.name`. Over HTTP it is a
/// [`DemoServer`] process; over stdio the tracker spawns (and, after a
/// disconnect, respawns) `mcptask demo-server --stdio` itself.
struct Remote {
    def: ServerDef,
    /// Keeps the HTTP server process alive.
    _http: Option<DemoServer>,
    _dir: tempfile::TempDir,
}

impl Remote {
    async fn start(via: Via, name: &str, extra: &[&str]) -> Remote {
        let dir = tempfile::tempdir().expect("temp dir");
        let db_url = format!("sqlite:{}", dir.path().join("server.db").display());
        match via {
            Via::Http => {
                let server = DemoServer::start_named(name, &db_url, extra).await;
                Remote {
                    def: ServerDef::http(name, &server.url),
                    _http: Some(server),
                    _dir: dir,
                }
            }
            Via::Stdio => Remote {
                def: stdio_def(name, &db_url, extra),
                _http: None,
                _dir: dir,
            },
        }
    }
}

fn stdio_def(name: &str, db_url: &str, extra: &[&str]) -> ServerDef {
    let mut args: Vec<String> = ["demo-server", "--stdio", "--database-url", db_url]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    // The child's stderr is inherited: keep it quiet.
    ServerDef::stdio(name, bin(), args).with_env("MCPTASK_LOG", "error")
}

/// A tracker on `db` knowing `servers`, delivering every event to `hook`.
async fn tracker(db: &TestDatabase, servers: &[ServerDef], hook: &WebhookReceiver) -> Tracker {
    let store = db.remote_tasks().await;
    let webhook = WebhookNotifier::new(hook.url.clone(), SECRET, Duration::from_secs(5))
        .expect("webhook notifier");
    let mut builder = Tracker::builder(store)
        .config(e2e_config())
        .notifier(Arc::new(webhook) as Arc<dyn Notifier>);
    for def in servers {
        builder = builder.server(def.clone());
    }
    builder.start().await.expect("start the tracker")
}

/// Call a tool that must become a task; returns the tracked record.
async fn start(tracker: &Tracker, server: &str, tool: &str, args: Value) -> RemoteTaskRecord {
    match tracker
        .call_tool(server, tool, args, CallOptions::default())
        .await
        .unwrap_or_else(|e| panic!("{server}/{tool}: tools/call failed: {e}"))
    {
        CallOutcome::Task(t) => *t,
        CallOutcome::Completed(r) => panic!("{server}/{tool} completed synchronously: {r:?}"),
    }
}

/// Poll the tracker's record until `pred` holds.
async fn until(
    tracker: &Tracker,
    id: &str,
    what: &str,
    within: Duration,
    pred: impl Fn(&RemoteTaskRecord) -> bool,
) -> RemoteTaskRecord {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let r = tracker.get(id).await.expect("read a tracked task");
        if pred(&r) {
            return r;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("task {id} never became {what} within {within:?}; last: {r:#?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn settled(tracker: &Tracker, id: &str) -> RemoteTaskRecord {
    match tracker.wait(id, Duration::from_secs(90)).await {
        Ok(r) => r,
        Err(e) => panic!("task {id} did not settle: {e}"),
    }
}

fn text_of(r: &RemoteTaskRecord) -> String {
    r.result
        .as_ref()
        .and_then(|v| v["content"][0]["text"].as_str())
        .unwrap_or_else(|| panic!("no text result: {r:#?}"))
        .to_string()
}

fn error_message(r: &RemoteTaskRecord) -> String {
    r.error
        .as_ref()
        .and_then(|e| e["message"].as_str())
        .unwrap_or_else(|| panic!("no error: {r:#?}"))
        .to_string()
}

/// Until every id is terminal with every event delivered to the webhook, then
/// the timeline checks of [`verify_delivered`].
async fn verify_all(tracker: &Tracker, hook: &WebhookReceiver, ids: &[&str]) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    for id in ids {
        verify_delivered(tracker, hook, id, deadline).await;
    }
    assert!(
        hook.bad().is_empty(),
        "bad webhook requests: {:?}",
        hook.bad()
    );
}

// ---------------------------------------------------------------------------
// Outcomes

async fn outcomes_are_recorded_as_reported(via: Via) {
    let hook = WebhookReceiver::start(SECRET).await;
    let db = TestDatabase::sqlite();
    let demo = Remote::start(via, "demo", &[]).await;
    let short_lived = Remote::start(via, "demo-ttl", &["--ttl-ms", "500"]).await;
    let tracker = tracker(&db, &[demo.def.clone(), short_lived.def.clone()], &hook).await;

    let completed = start(
        &tracker,
        "demo",
        "slow_compute",
        json!({"seconds": 0.3, "label": "quick"}),
    )
    .await;
    let failed = start(&tracker, "demo", "protocol_error_job", json!({})).await;
    let tool_error = start(&tracker, "demo", "failing_job", json!({})).await;
    let to_cancel = start(&tracker, "demo", "slow_compute", json!({"seconds": 60})).await;
    let confirm = start(
        &tracker,
        "demo",
        "confirm_delete",
        json!({"filename": "report.pdf"}),
    )
    .await;
    let expiring = start(&tracker, "demo-ttl", "slow_compute", json!({"seconds": 60})).await;
    for t in [
        &completed,
        &failed,
        &tool_error,
        &to_cancel,
        &confirm,
        &expiring,
    ] {
        assert!(!t.is_terminal(), "[{via:?}] {} settled at creation", t.tool);
        assert_eq!(
            t.event_version, 1,
            "[{via:?}] a fresh handle has its created event"
        );
    }

    // Cancel: a durable intent; the worker sends tasks/cancel, the server settles.
    until(
        &tracker,
        &to_cancel.id,
        "polled",
        Duration::from_secs(30),
        |r| r.poll_count > 0,
    )
    .await;
    let requested = tracker.cancel(&to_cancel.id).await.expect("cancel");
    assert!(requested.cancel_requested_at.is_some());

    // Input: the tracker sees the request, the application answers, the
    // worker delivers the answer with tasks/update.
    let asked = until(
        &tracker,
        &confirm.id,
        "input_required",
        Duration::from_secs(30),
        |r| r.status == TaskStatus::InputRequired,
    )
    .await;
    let keys: Vec<&str> = asked
        .input_requests
        .iter()
        .map(|(k, _)| k.as_str())
        .collect();
    assert_eq!(keys, ["confirm_delete"], "[{via:?}] {asked:#?}");
    let answered = tracker
        .answer(
            &confirm.id,
            BTreeMap::from([(
                "confirm_delete".to_string(),
                json!({"action": "accept", "content": {"confirm": true}}),
            )]),
        )
        .await
        .expect("answer");
    assert_eq!(answered.applied, ["confirm_delete"]);

    let r = settled(&tracker, &completed.id).await;
    assert_eq!(r.status, TaskStatus::Completed, "[{via:?}] {r:#?}");
    assert_eq!(text_of(&r), "quick: computed in 0.3s");
    assert_ne!(r.result.as_ref().unwrap()["isError"], true);

    let r = settled(&tracker, &failed.id).await;
    assert_eq!(r.status, TaskStatus::Failed, "[{via:?}] {r:#?}");
    let error = r.error.as_ref().unwrap();
    assert_eq!(
        error["code"], -32603,
        "[{via:?}] the server's JSON-RPC error: {error}"
    );
    assert!(error_message(&r).contains("protocol_error_job"), "{error}");
    assert!(r.result.is_none());

    let r = settled(&tracker, &tool_error.id).await;
    assert_eq!(
        r.status,
        TaskStatus::Completed,
        "[{via:?}] isError is a completed task: {r:#?}"
    );
    assert_eq!(r.result.as_ref().unwrap()["isError"], true);
    assert!(text_of(&r).contains("failing_job"));

    let r = settled(&tracker, &to_cancel.id).await;
    assert_eq!(r.status, TaskStatus::Cancelled, "[{via:?}] {r:#?}");
    assert!(r.cancel_sent_at.is_some(), "tasks/cancel was acknowledged");

    let r = settled(&tracker, &confirm.id).await;
    assert_eq!(r.status, TaskStatus::Completed, "[{via:?}] {r:#?}");
    assert_eq!(text_of(&r), "Deleted report.pdf");
    let inputs = tracker.inputs(&confirm.id).await.unwrap();
    assert_eq!(inputs.len(), 1);
    assert!(
        inputs[0].sent_at.is_some(),
        "the answer was acknowledged once"
    );

    // TTL: the server expires the task (its own error, not the tracker's backstop).
    let r = settled(&tracker, &expiring.id).await;
    assert_eq!(r.status, TaskStatus::Failed, "[{via:?}] {r:#?}");
    assert!(error_message(&r).contains("expired"), "[{via:?}] {r:#?}");
    assert_ne!(r.error.as_ref().unwrap()["data"]["source"], "mcptask");

    verify_all(
        &tracker,
        &hook,
        &[
            &completed.id,
            &failed.id,
            &tool_error.id,
            &to_cancel.id,
            &confirm.id,
            &expiring.id,
        ],
    )
    .await;
    for (id, kind) in [
        (&to_cancel.id, EventKind::CancelRequested),
        (&confirm.id, EventKind::Answered),
    ] {
        let timeline = tracker.events(id, 0, 1000).await.unwrap();
        assert!(
            timeline.iter().any(|e| e.kind == kind),
            "[{via:?}] no {kind:?} event"
        );
    }
    eprintln!(
        "[{via:?}] outcomes: {} webhook posts, {} distinct events, {} duplicates",
        hook.posts(),
        hook.unique(),
        hook.duplicates()
    );
    tracker.shutdown(Duration::from_secs(2)).await;
    drop(demo);
    drop(short_lived);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcomes_over_stdio() {
    with_deadline(
        Duration::from_secs(240),
        outcomes_are_recorded_as_reported(Via::Stdio),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcomes_over_http() {
    with_deadline(
        Duration::from_secs(240),
        outcomes_are_recorded_as_reported(Via::Http),
    )
    .await;
}

// ---------------------------------------------------------------------------
// The server killed and restarted mid-task

async fn server_killed_mid_task(via: Via) {
    let hook = WebhookReceiver::start(SECRET).await;
    let db = TestDatabase::sqlite();
    let server_db = TestDatabase::sqlite();
    let addr = format!("127.0.0.1:{}", free_port());
    let mut http = None;
    let def = match via {
        Via::Http => {
            let server =
                DemoServer::start_at("demo (first)", &addr, &server_db.url, FAST_RECOVERY).await;
            let def = ServerDef::http("demo", &server.url);
            http = Some(server);
            def
        }
        Via::Stdio => stdio_def("demo", &server_db.url, FAST_RECOVERY),
    };
    let tracker = tracker(&db, std::slice::from_ref(&def), &hook).await;

    let slow = start(&tracker, "demo", "slow_compute", json!({"seconds": 60})).await;
    // 4 s: the second half (2 s) is still counting when the server dies,
    // right after the answer is acknowledged.
    let countdown = start(&tracker, "demo", "countdown", json!({"seconds": 4})).await;
    until(
        &tracker,
        &countdown.id,
        "input_required",
        Duration::from_secs(30),
        |r| r.status == TaskStatus::InputRequired,
    )
    .await;
    tracker
        .answer(
            &countdown.id,
            BTreeMap::from([(
                "go_no_go".to_string(),
                json!({"action": "accept", "content": {"go": true}}),
            )]),
        )
        .await
        .expect("answer go_no_go");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while tracker.inputs(&countdown.id).await.unwrap()[0]
        .sent_at
        .is_none()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "[{via:?}] the answer was never sent"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let slow_before = tracker.get(&slow.id).await.unwrap();
    assert_eq!(
        slow_before.status,
        TaskStatus::Working,
        "[{via:?}] {slow_before:#?}"
    );

    match via {
        Via::Http => {
            let mut first = http.take().unwrap();
            first.kill().await;
            // While the server is down the tracker records transient errors
            // (and a degraded event) but settles nothing.
            let r = until(
                &tracker,
                &slow.id,
                "erroring",
                Duration::from_secs(30),
                |r| r.consecutive_errors >= 3,
            )
            .await;
            assert!(
                !r.is_terminal(),
                "[{via:?}] transient errors settle nothing: {r:#?}"
            );
            assert!(r.last_error.is_some());
            http = Some(
                DemoServer::start_at("demo (second)", &addr, &server_db.url, FAST_RECOVERY).await,
            );
        }
        Via::Stdio => {
            let marker = server_db.url.clone();
            let children = children_with(&marker);
            assert_eq!(
                children.len(),
                1,
                "[{via:?}] one stdio child serves the tracker"
            );
            let old = children[0];
            sigkill(old);
            // A killed child is a real disconnect: the tracker's next call
            // spawns a new process on the same database.
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            loop {
                let now = children_with(&marker);
                if now.iter().any(|p| *p != old) {
                    assert!(!now.contains(&old), "the killed child is gone");
                    break;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "[{via:?}] the tracker never respawned the stdio server"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }

    // Interrupt policy Fail: an honest failure mentioning the interruption.
    let r = settled(&tracker, &slow.id).await;
    assert_eq!(r.status, TaskStatus::Failed, "[{via:?}] {r:#?}");
    assert!(
        error_message(&r).to_lowercase().contains("interrupted"),
        "[{via:?}] {r:#?}"
    );
    assert_eq!(r.consecutive_errors, 0, "a snapshot resets the error count");
    // Interrupt policy Rerun: attempt 2 completes with the stored answer.
    let r = settled(&tracker, &countdown.id).await;
    assert_eq!(r.status, TaskStatus::Completed, "[{via:?}] {r:#?}");
    let text = text_of(&r);
    assert!(
        text.starts_with("Launched") && text.contains("(attempt 2)"),
        "[{via:?}] {text:?}"
    );
    let inputs = tracker.inputs(&countdown.id).await.unwrap();
    assert_eq!(
        inputs.len(),
        1,
        "[{via:?}] the rerun never asked again: {inputs:#?}"
    );

    verify_all(&tracker, &hook, &[&slow.id, &countdown.id]).await;
    if via == Via::Http {
        let timeline = tracker.events(&slow.id, 0, 1000).await.unwrap();
        assert!(
            timeline.iter().any(|e| e.kind == EventKind::Degraded),
            "the outage was announced as degraded"
        );
    }
    tracker.shutdown(Duration::from_secs(2)).await;
    drop(http);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_killed_mid_task_over_stdio() {
    with_deadline(Duration::from_secs(240), server_killed_mid_task(Via::Stdio)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_killed_mid_task_over_http() {
    with_deadline(Duration::from_secs(240), server_killed_mid_task(Via::Http)).await;
}

// ---------------------------------------------------------------------------
// The tracker process killed with SIGKILL mid-task

/// `[tracker]` of the gateway processes: fast polls, a 3 s lease (claims of a
/// killed process lapse quickly), calls bounded well inside the lease.
const GATEWAY_TRACKER: &str = "
lease_ms = 3000
call_timeout_ms = 1000
connect_timeout_ms = 2000
poll_default_ms = 100
poll_min_ms = 50
poll_max_ms = 250
input_required_poll_ms = 100
backoff_base_ms = 50
backoff_max_ms = 500
error_budget_ms = 3600000
";

/// What a task of the tracker-kill scenario must end as.
#[derive(Debug, Clone)]
enum Expect {
    Completed(String),
    IsError,
    Failed(i64),
    Cancelled,
}

async fn tracker_process_killed(db: TestDatabase) {
    let backend = db.backend;
    let server_db = TestDatabase::sqlite();
    let server = DemoServer::start_named("demo", &server_db.url, &[]).await;
    // Every call to the server takes 0–300 ms: the gateway holds its claims
    // for a while, and the kill lands while it holds some.
    let proxy = SlowProxy::start(&server.base(), Duration::from_millis(300), 42).await;
    let url = format!("{}/mcp", proxy.base);
    let hook = WebhookReceiver::start(SECRET).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("mcptask.toml");
    std::fs::write(
        &config,
        gateway_config(
            &db.url,
            &[("demo", &url)],
            &hook.url,
            SECRET,
            GATEWAY_TRACKER,
        ),
    )
    .unwrap();
    let mut gateway = start_gateway("gateway (first)", &config).await;

    // The application: records handles only; the gateway process does the work.
    // Same definition as the gateway's, so the same definition hash.
    let store = db.remote_tasks().await;
    let tracker = Tracker::builder(store)
        .server(ServerDef::http("demo", &url))
        .config(TrackerConfig {
            background: false,
            ..e2e_config()
        })
        .start()
        .await
        .unwrap();

    let mut tasks: Vec<(String, Expect)> = Vec::new();
    let mut quick = Vec::new();
    for i in 0..3 {
        let label = format!("quick{i}");
        let t = start(
            &tracker,
            "demo",
            "slow_compute",
            json!({"seconds": 0.2, "label": label}),
        )
        .await;
        quick.push(t.id.clone());
        tasks.push((
            t.id,
            Expect::Completed(format!("{label}: computed in 0.2s")),
        ));
    }
    for i in 0..3 {
        // Still running when the gateway dies, finished when it is back.
        let label = format!("long{i}");
        let t = start(
            &tracker,
            "demo",
            "slow_compute",
            json!({"seconds": 2.5, "label": label}),
        )
        .await;
        tasks.push((
            t.id,
            Expect::Completed(format!("{label}: computed in 2.5s")),
        ));
    }
    for _ in 0..2 {
        let t = start(&tracker, "demo", "failing_job", json!({})).await;
        tasks.push((t.id, Expect::IsError));
        let t = start(&tracker, "demo", "protocol_error_job", json!({})).await;
        tasks.push((t.id, Expect::Failed(-32603)));
    }
    let cancel_early = start(&tracker, "demo", "slow_compute", json!({"seconds": 60})).await;
    let cancel_late = start(&tracker, "demo", "slow_compute", json!({"seconds": 60})).await;
    tasks.push((cancel_early.id.clone(), Expect::Cancelled));
    tasks.push((cancel_late.id.clone(), Expect::Cancelled));
    let confirm_early = start(
        &tracker,
        "demo",
        "confirm_delete",
        json!({"filename": "early.txt"}),
    )
    .await;
    let confirm_late = start(
        &tracker,
        "demo",
        "confirm_delete",
        json!({"filename": "late.txt"}),
    )
    .await;
    tasks.push((
        confirm_early.id.clone(),
        Expect::Completed("Deleted early.txt".into()),
    ));
    tasks.push((
        confirm_late.id.clone(),
        Expect::Completed("Deleted late.txt".into()),
    ));
    tracker.cancel(&cancel_early.id).await.unwrap();

    // The first gateway makes progress: quick tasks settle, questions are seen.
    for id in &quick {
        until(
            &tracker,
            id,
            "settled by the first gateway",
            Duration::from_secs(60),
            |r| r.is_terminal(),
        )
        .await;
    }
    for t in [&confirm_early, &confirm_late] {
        until(
            &tracker,
            &t.id,
            "input_required",
            Duration::from_secs(60),
            |r| r.status == TaskStatus::InputRequired,
        )
        .await;
    }
    let answer = |yes: bool| {
        BTreeMap::from([(
            "confirm_delete".to_string(),
            json!({"action": "accept", "content": {"confirm": yes}}),
        )])
    };
    tracker
        .answer(&confirm_early.id, answer(true))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;

    // SIGKILL mid-task: no shutdown, no claim released.
    let live_at_kill = {
        let mut n = 0;
        for (id, _) in &tasks {
            n += usize::from(!tracker.get(id).await.unwrap().is_terminal());
        }
        n
    };
    assert!(live_at_kill > 0, "[{backend}] the kill must land mid-task");
    // ... while the gateway holds claims (left to lapse after the lease).
    let held_at_kill = wait_for_claims(&tracker, gateway.pid, Duration::from_secs(20)).await;
    gateway.kill().await;
    assert!(
        held_at_kill > 0,
        "[{backend}] the kill must land while claims are held"
    );
    let posts_before_restart = hook.posts();
    // The application keeps working while no gateway runs.
    tracker.cancel(&cancel_late.id).await.unwrap();
    tracker
        .answer(&confirm_late.id, answer(true))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    drop(gateway);

    let mut gateway = start_gateway("gateway (second)", &config).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    for (id, expect) in &tasks {
        let (r, _) = verify_delivered(&tracker, &hook, id, deadline).await;
        match expect {
            Expect::Completed(text) => {
                assert_eq!(r.status, TaskStatus::Completed, "[{backend}] {r:#?}");
                assert_eq!(&text_of(&r), text, "[{backend}]");
                assert_ne!(r.result.as_ref().unwrap()["isError"], true);
            }
            Expect::IsError => {
                assert_eq!(r.status, TaskStatus::Completed, "[{backend}] {r:#?}");
                assert_eq!(
                    r.result.as_ref().unwrap()["isError"],
                    true,
                    "[{backend}] {r:#?}"
                );
            }
            Expect::Failed(code) => {
                assert_eq!(r.status, TaskStatus::Failed, "[{backend}] {r:#?}");
                assert_eq!(
                    r.error.as_ref().unwrap()["code"],
                    *code,
                    "[{backend}] {r:#?}"
                );
            }
            Expect::Cancelled => {
                assert_eq!(r.status, TaskStatus::Cancelled, "[{backend}] {r:#?}");
            }
        }
    }
    assert!(
        hook.bad().is_empty(),
        "bad webhook requests: {:?}",
        hook.bad()
    );
    // Requested while no gateway ran: sent (and acknowledged) by the second.
    let late = tracker.get(&cancel_late.id).await.unwrap();
    assert!(late.cancel_sent_at.is_some(), "[{backend}] {late:#?}");
    let backlog = tracker.notification_backlog().await.unwrap();
    assert_eq!(backlog, 0, "[{backend}] every event delivered");
    assert!(
        gateway.is_running(),
        "[{backend}] the second gateway is healthy"
    );
    eprintln!(
        "[{backend}] tracker SIGKILL: {} tasks ({live_at_kill} live and {held_at_kill} claimed at \
         the kill), {} webhook posts ({posts_before_restart} before the restart), {} distinct \
         events, {} duplicate deliveries",
        tasks.len(),
        hook.posts(),
        hook.unique(),
        hook.duplicates(),
    );
    tracker.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tracker_process_killed_on_sqlite() {
    let db = TestDatabase::sqlite();
    with_deadline(Duration::from_secs(240), tracker_process_killed(db)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tracker_process_killed_on_postgres() {
    let Some(db) = TestDatabase::postgres().await else {
        eprintln!("tracker_process_killed_on_postgres: SKIPPED (no PostgreSQL, see above)");
        return;
    };
    with_deadline(Duration::from_secs(240), tracker_process_killed(db)).await;
}
