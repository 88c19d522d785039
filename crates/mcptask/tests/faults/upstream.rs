//! Upstream faults, client side: a tracker polling real `mcptask
//! demo-server` processes, each behind a [`FaultFront`] switched at run time
//! (or, for stdio, a child frozen with SIGSTOP). Expected everywhere: one
//! server's fault costs only its own tasks (the other servers' tasks keep
//! their poll cadence), transient stays transient for as long as the time
//! budget and the task's TTL allow, a task given up locally gets a
//! best-effort `tasks/cancel`, a wedged stdio child is recycled, and nothing
//! is retried forever or left stuck.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use mcptask_client::{
    CallOptions, CallOutcome, RemoteTaskRecord, ServerDef, Tracker, TrackerConfig,
};
use mcptask_core::TaskStatus;
use mcptask_core::client::TrackerPolicy;
use mcptask_core::policy::{Backoff, PollPolicy};
use mcptask_testkit::tracker::fast_config;
use serde_json::{Value, json};

use mcptask_testkit::*;

/// The poll interval of every task (fixed: no jitter, server hints clamped).
const POLL: Duration = Duration::from_millis(200);
/// Bound on each remote call: what a hung server costs one of its tasks.
const CALL_TIMEOUT: Duration = Duration::from_millis(1_500);

/// Fixed 200 ms polls, 1.5 s call timeout, short backoff, and a time budget
/// far beyond any cell (cells that exhaust it set their own).
fn config() -> TrackerConfig {
    let base = fast_config();
    TrackerConfig {
        policy: TrackerPolicy {
            poll: PollPolicy {
                default_ms: POLL.as_millis() as i64,
                min_ms: POLL.as_millis() as i64,
                max_ms: POLL.as_millis() as i64,
                input_required_min_ms: POLL.as_millis() as i64,
                jitter_permille: 0,
            },
            backoff: Backoff {
                base_ms: 100,
                max_ms: 200,
            },
            error_budget_ms: 120_000,
            ..base.policy.clone()
        },
        lease_ms: 20_000,
        call_timeout: CALL_TIMEOUT,
        connect_timeout: Duration::from_secs(5),
        ..base
    }
}

/// A demo server on its own SQLite file, reached through a fault front.
struct Upstream {
    name: String,
    server: DemoServer,
    front: FaultFront,
    _dir: tempfile::TempDir,
}

impl Upstream {
    async fn start(name: &str) -> Upstream {
        let dir = tempfile::tempdir().expect("temp dir");
        let db_url = format!("sqlite:{}", dir.path().join("server.db").display());
        let server = DemoServer::start_named(name, &db_url, &[]).await;
        let front = FaultFront::start(&server.base()).await;
        Upstream {
            name: name.to_string(),
            server,
            front,
            _dir: dir,
        }
    }

    fn def(&self) -> ServerDef {
        ServerDef::http(&self.name, self.front.url())
    }
}

async fn tracker(db: &TestDatabase, config: TrackerConfig, servers: &[ServerDef]) -> Tracker {
    let mut builder = Tracker::builder(db.remote_tasks().await).config(config);
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

async fn settled(tracker: &Tracker, id: &str) -> RemoteTaskRecord {
    tracker
        .wait(id, WAIT)
        .await
        .unwrap_or_else(|e| panic!("task {id} did not settle: {e}"))
}

/// Poll the tracker's record until `pred` holds.
async fn until(
    tracker: &Tracker,
    id: &str,
    what: &str,
    pred: impl Fn(&RemoteTaskRecord) -> bool,
) -> RemoteTaskRecord {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let r = tracker.get(id).await.expect("read a tracked task");
        if pred(&r) {
            return r;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("task {id} never became {what} within {WAIT:?}; last: {r:#?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn text_of(r: &RemoteTaskRecord) -> String {
    r.result
        .as_ref()
        .and_then(|v| v["content"][0]["text"].as_str())
        .unwrap_or_else(|| panic!("no text result: {r:#?}"))
        .to_string()
}

/// What a front saw of the polls of some tasks over a window.
struct Cadence {
    /// `tasks/get` per task per second.
    rate: f64,
    /// The longest wait between two polls of one task (including the
    /// window's edges).
    max_gap: Duration,
}

impl std::fmt::Display for Cadence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.2} polls/s per task, longest gap {} ms",
            self.rate,
            self.max_gap.as_millis()
        )
    }
}

/// Watch `tasks/get` of `tasks` through `fronts` for `window`.
async fn cadence(fronts: &[&FaultFront], tasks: &[RemoteTaskRecord], window: Duration) -> Cadence {
    let from = Instant::now();
    tokio::time::sleep(window).await;
    let to = Instant::now();
    let mut per_task: BTreeMap<String, Vec<Instant>> = tasks
        .iter()
        .map(|t| (t.remote_task_id.clone(), Vec::new()))
        .collect();
    for front in fronts {
        for seen in front.seen() {
            if seen.method == "tasks/get"
                && seen.at >= from
                && seen.at <= to
                && let Some(times) = seen.task_id.as_ref().and_then(|id| per_task.get_mut(id))
            {
                times.push(seen.at);
            }
        }
    }
    let polls: usize = per_task.values().map(Vec::len).sum();
    let mut max_gap = Duration::ZERO;
    for times in per_task.values_mut() {
        times.sort();
        let mut last = from;
        for t in times.iter().chain(std::iter::once(&to)) {
            max_gap = max_gap.max(t.saturating_duration_since(last));
            last = *t;
        }
    }
    Cadence {
        rate: polls as f64 / tasks.len() as f64 / (to - from).as_secs_f64(),
        max_gap,
    }
}

/// The cell of a hung server (`Fault::Hang`: each request read and never
/// answered): two healthy servers' tasks are polled as often with the fault as
/// without it; the hung server's tasks are neither failed (their time budget is
/// not spent) nor stuck (they complete with the server's outcome once it
/// answers again).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hung_server_others_keep_their_cadence() {
    with_deadline(Duration::from_secs(240), async {
        let calm1 = Upstream::start("calm1").await;
        let calm2 = Upstream::start("calm2").await;
        let stuck = Upstream::start("stuck").await;
        let db = TestDatabase::sqlite();
        let tracker = tracker(&db, config(), &[calm1.def(), calm2.def(), stuck.def()]).await;
        let mut healthy = Vec::new();
        for up in [&calm1, &calm2] {
            for _ in 0..3 {
                healthy
                    .push(start(&tracker, &up.name, "slow_compute", json!({"seconds": 60})).await);
            }
        }
        // Long enough to outlive the baseline and the hang however slowly
        // this machine creates them (8 s was not, at opt-level 0); they
        // finish once the server answers again.
        let mut hung = Vec::new();
        for _ in 0..8 {
            hung.push(start(&tracker, "stuck", "slow_compute", json!({"seconds": 15})).await);
        }
        let fronts = [&calm1.front, &calm2.front];
        let window = CALL_TIMEOUT * 3;
        let before = cadence(&fronts, &healthy, window).await;
        stuck.front.set(Fault::Hang);
        let during = cadence(&fronts, &healthy, window).await;
        eprintln!("[upstream::hung_server] healthy servers, no fault:  {before}");
        eprintln!("[upstream::hung_server] healthy servers, one hung:  {during}");
        assert!(
            during.rate >= before.rate / 3.0,
            "a hung server slowed the others' polling: {before} -> {during}"
        );
        for t in &hung {
            let r = tracker.get(&t.id).await.unwrap();
            assert!(!r.is_terminal(), "failed before its time budget: {r:#?}");
            assert!(r.consecutive_errors > 0, "the hang was never seen: {r:#?}");
        }
        stuck.front.set(Fault::Forward);
        for t in &hung {
            let r = settled(&tracker, &t.id).await;
            assert_eq!(r.status, TaskStatus::Completed, "{r:#?}");
            assert!(text_of(&r).contains("computed in 15s"), "{r:#?}");
        }
        for t in &healthy {
            assert!(!tracker.get(&t.id).await.unwrap().is_terminal());
        }
        tracker.shutdown(Duration::from_secs(5)).await;
        drop((calm1.server, calm2.server, stuck.server));
    })
    .await;
}

/// The cell of a blackholed host (`Fault::Blackhole`: TCP accepted, nothing
/// ever read or answered) that a tracker must connect to: its tasks' calls
/// share one connect attempt per wave instead of queueing one connect timeout
/// each behind the server's lock, and the healthy server's tasks keep their
/// cadence.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn blackholed_host_connects_fail_together_others_keep_their_cadence() {
    with_deadline(Duration::from_secs(240), async {
        let calm = Upstream::start("calm").await;
        let dark = Upstream::start("dark").await;
        let db = TestDatabase::sqlite();
        let mut config = config();
        config.connect_timeout = Duration::from_secs(2);
        let servers = [calm.def(), dark.def()];
        let first = tracker(&db, config.clone(), &servers).await;
        let mut healthy = Vec::new();
        for _ in 0..3 {
            healthy.push(start(&first, "calm", "slow_compute", json!({"seconds": 60})).await);
        }
        let mut dark_tasks = Vec::new();
        for _ in 0..8 {
            // Not done before the restart, however slowly they are created.
            dark_tasks.push(start(&first, "dark", "slow_compute", json!({"seconds": 15})).await);
        }
        first.shutdown(Duration::from_secs(5)).await;
        drop(first);
        // A fresh tracker (a restarted gateway) must connect to both servers.
        dark.front.set(Fault::Blackhole);
        let started = Instant::now();
        let tracker = tracker(&db, config.clone(), &servers).await;
        let errored = async {
            let mut all_seen = Duration::ZERO;
            for t in &dark_tasks {
                let r = until(&tracker, &t.id, "errored", |r| r.consecutive_errors > 0).await;
                assert!(!r.is_terminal(), "{r:#?}");
                all_seen = all_seen.max(started.elapsed());
            }
            all_seen
        };
        let calm_front = [&calm.front];
        let (during, all_seen) = tokio::join!(
            cadence(&calm_front, &healthy, Duration::from_secs(4)),
            errored
        );
        eprintln!("[upstream::blackholed_host] healthy server, one blackholed: {during}");
        eprintln!(
            "[upstream::blackholed_host] every one of {} tasks saw its connect fail after {} ms (connect timeout {} ms)",
            dark_tasks.len(),
            all_seen.as_millis(),
            config.connect_timeout.as_millis()
        );
        assert!(
            all_seen < config.connect_timeout * 4,
            "connects to the blackholed host were serialised: {all_seen:?}"
        );
        assert!(
            during.rate >= 1.0,
            "the blackholed host starved the healthy server's polls: {during}"
        );
        dark.front.set(Fault::Forward);
        for t in &dark_tasks {
            let r = settled(&tracker, &t.id).await;
            assert_eq!(r.status, TaskStatus::Completed, "{r:#?}");
        }
        tracker.shutdown(Duration::from_secs(5)).await;
    })
    .await;
}

/// The cell of a proxy answering 408, 429, 502, 503, 504 and HTML error pages
/// (also with 200) for a while: transient, never a protocol violation; the
/// tasks complete with the server's outcome once it answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn proxy_errors_and_html_pages_transient_then_complete() {
    with_deadline(Duration::from_secs(240), async {
        let up = Upstream::start("proxied").await;
        let db = TestDatabase::sqlite();
        let tracker = tracker(&db, config(), &[up.def()]).await;
        let mut tasks = Vec::new();
        for _ in 0..3 {
            tasks.push(start(&tracker, "proxied", "slow_compute", json!({"seconds": 2})).await);
        }
        let faults = [
            Fault::Status(408),
            Fault::Status(429),
            Fault::Status(502),
            Fault::Status(503),
            Fault::Status(504),
            Fault::Html(502),
            Fault::Html(503),
            Fault::Html(200),
        ];
        for fault in &faults {
            let since = Instant::now();
            up.front.set(fault.clone());
            // At least a few polls of every task meet the fault.
            let deadline = tokio::time::Instant::now() + WAIT;
            loop {
                for t in &tasks {
                    let r = tracker.get(&t.id).await.unwrap();
                    assert!(
                        !r.is_terminal(),
                        "{fault:?} settled the task instead of being retried: {r:#?}"
                    );
                }
                if up.front.times("tasks/get", since).len() >= 2 * tasks.len() {
                    break;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "no polls during {fault:?}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        let errors: Vec<String> = {
            let mut v = Vec::new();
            for t in &tasks {
                if let Some(e) = tracker.get(&t.id).await.unwrap().last_error {
                    v.push(e);
                }
            }
            v
        };
        eprintln!("[upstream::proxy_errors] last errors seen: {errors:?}");
        up.front.set(Fault::Forward);
        for t in &tasks {
            let r = settled(&tracker, &t.id).await;
            assert_eq!(r.status, TaskStatus::Completed, "{r:#?}");
            assert!(text_of(&r).contains("computed in 2s"), "{r:#?}");
        }
        tracker.shutdown(Duration::from_secs(5)).await;
    })
    .await;
}

/// The cell of a server down (connections refused) for longer than the old
/// count-based error budget (30 consecutive errors with the defaults) but well
/// within the time budget and the task's TTL: the task survives and completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn outage_beyond_the_old_error_count_within_ttl_completes() {
    with_deadline(Duration::from_secs(240), async {
        let up = Upstream::start("flaky").await;
        let db = TestDatabase::sqlite();
        let mut config = config();
        // The production budget, and retries every 50 ms: an outage of a few
        // seconds is many more errors than the old budget of 30 allowed.
        config.policy.error_budget_ms = TrackerPolicy::default().error_budget_ms;
        config.policy.backoff = Backoff {
            base_ms: 25,
            max_ms: 50,
        };
        let tracker = tracker(&db, config, &[up.def()]).await;
        let task = start(&tracker, "flaky", "slow_compute", json!({"seconds": 2})).await;
        up.front.set(Fault::Refuse);
        let down = until(&tracker, &task.id, "past 40 errors", |r| {
            r.consecutive_errors > 40 || r.is_terminal()
        })
        .await;
        eprintln!(
            "[upstream::outage] {} consecutive errors so far, last: {:?}",
            down.consecutive_errors, down.last_error
        );
        assert!(!down.is_terminal(), "failed within its budget: {down:#?}");
        up.front.set(Fault::Forward);
        let r = settled(&tracker, &task.id).await;
        assert_eq!(r.status, TaskStatus::Completed, "{r:#?}");
        assert!(text_of(&r).contains("computed in 2s"), "{r:#?}");
        tracker.shutdown(Duration::from_secs(5)).await;
    })
    .await;
}

/// The cell of a task whose server keeps failing (503 to every `tasks/get`)
/// past a short time budget: the task is failed locally (reason
/// `error_budget`), not before the budget is spent, and the tracker sends the
/// server a best-effort `tasks/cancel`, which settles the remote work.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn error_budget_spent_fails_locally_and_cancels_remotely() {
    with_deadline(Duration::from_secs(240), async {
        let up = Upstream::start("failing").await;
        let db = TestDatabase::sqlite();
        let mut config = config();
        config.policy.error_budget_ms = 1_500;
        let tracker = tracker(&db, config, &[up.def()]).await;
        let task = start(&tracker, "failing", "slow_compute", json!({"seconds": 120})).await;
        let good = until(&tracker, &task.id, "polled", |r| r.last_polled_at.is_some()).await;
        up.front.set_for(Fault::Status(503), &["tasks/get"]);
        let r = settled(&tracker, &task.id).await;
        assert_eq!(r.status, TaskStatus::Failed, "{r:#?}");
        let error = r.error.clone().unwrap();
        assert_eq!(error["data"]["source"], "mcptask", "{r:#?}");
        assert_eq!(error["data"]["reason"], "error_budget", "{r:#?}");
        let last_good = r.last_polled_at.unwrap().max(good.last_polled_at.unwrap());
        let failing_for = r.completed_at.unwrap() - last_good;
        eprintln!(
            "[upstream::error_budget] failed locally after {failing_for} ms of errors (budget 1500 ms), {} errors",
            r.consecutive_errors
        );
        assert!(failing_for > 1_500, "failed before its budget: {r:#?}");
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let cancels: Vec<FrontSeen> = up
                .front
                .seen()
                .into_iter()
                .filter(|s| s.method == "tasks/cancel")
                .collect();
            if let Some(c) = cancels.first() {
                assert_eq!(c.task_id.as_deref(), Some(task.remote_task_id.as_str()));
                assert_eq!(c.answered, "forward");
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no tasks/cancel reached the server after the task was given up"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // The remote work was cancelled: the server says so.
        let client = up.server.client().await;
        let w = wait_terminal(&client, &task.remote_task_id, WAIT).await;
        assert_eq!(status(&w), "cancelled", "{w:#}");
        tracker.shutdown(Duration::from_secs(5)).await;
    })
    .await;
}

/// The cell of a stdio server that wedges without exiting (SIGSTOP: it neither
/// reads nor answers): the call timeout detects it, the child is killed and a
/// fresh one spawned, the task in flight settles with what the server decides
/// and new calls work.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn wedged_stdio_child_is_recycled_tasks_continue() {
    with_deadline(Duration::from_secs(240), async {
        let dir = tempfile::tempdir().expect("temp dir");
        let marker = dir.path().join("wedged.db");
        let db_url = format!("sqlite:{}", marker.display());
        let mut args: Vec<String> = ["demo-server", "--stdio", "--database-url", &db_url]
            .iter()
            .map(|s| s.to_string())
            .collect();
        args.extend(FAST_RECOVERY.iter().map(|s| s.to_string()));
        let def = ServerDef::stdio("local", bin(), args).with_env("MCPTASK_LOG", "error");
        let db = TestDatabase::sqlite();
        let mut config = config();
        config.connect_timeout = Duration::from_secs(15);
        let tracker = tracker(&db, config, &[def]).await;
        let task = start(&tracker, "local", "slow_compute", json!({"seconds": 4})).await;
        let marker = marker.display().to_string();
        let children = children_with(&marker);
        assert_eq!(children.len(), 1, "one stdio child: {children:?}");
        let wedged = children[0];
        freeze(wedged);
        let started = Instant::now();
        let deadline = tokio::time::Instant::now() + WAIT;
        let mut respawned = None;
        let fresh = loop {
            let now = children_with(&marker);
            if respawned.is_none() && now.iter().any(|p| *p != wedged) {
                respawned = Some(started.elapsed());
            }
            if !now.contains(&wedged)
                && let Some(fresh) = now.first()
            {
                break *fresh;
            }
            if tokio::time::Instant::now() >= deadline {
                thaw(wedged);
                panic!("the wedged child {wedged} was not replaced: children {now:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        eprintln!(
            "[upstream::wedged_stdio] wedged child {wedged}: fresh child {fresh} spawned after {} ms, \
             wedged one gone after {} ms (call timeout {} ms)",
            respawned.unwrap_or_default().as_millis(),
            started.elapsed().as_millis(),
            CALL_TIMEOUT.as_millis()
        );
        let r = settled(&tracker, &task.id).await;
        eprintln!(
            "[upstream::wedged_stdio] the task in flight settled {:?}: {:?}",
            r.status, r.error
        );
        assert!(
            r.error
                .as_ref()
                .is_none_or(|e| e["data"]["source"] != "mcptask"),
            "the tracker gave up instead of the server deciding: {r:#?}"
        );
        let next = start(&tracker, "local", "slow_compute", json!({"seconds": 0.5})).await;
        let r = settled(&tracker, &next.id).await;
        assert_eq!(r.status, TaskStatus::Completed, "{r:#?}");
        tracker.shutdown(Duration::from_secs(5)).await;
    })
    .await;
}

/// A server that closes connections idle for 5 s (Node's and uvicorn's
/// keep-alive default), at its worst: the close meets the next request sent
/// on that connection. The upstream client keeps idle connections shorter
/// than that, so a call made after a quiet spell opens a new connection and
/// is answered; kept for 30 s, the call was sent on the dying connection and
/// failed (a `tools/call` is not retried: the server may have run it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_after_a_quiet_spell_is_not_sent_on_a_connection_the_server_closed() {
    with_deadline(Duration::from_secs(120), async {
        let up = Upstream::start("keepalive").await;
        up.front.close_idle_after(Duration::from_secs(5));
        let db = TestDatabase::sqlite();
        let tracker = tracker(&db, config(), &[up.def()]).await;
        let greet = |name: &'static str| {
            let tracker = tracker.clone();
            async move {
                match tracker
                    .call_tool(
                        "keepalive",
                        "greet",
                        json!({ "name": name }),
                        CallOptions::default(),
                    )
                    .await
                {
                    Ok(CallOutcome::Completed(result)) => result,
                    other => panic!("greet {name}: {other:?}"),
                }
            }
        };
        greet("before").await;
        // Past the server's keep-alive: whatever the client kept is closed
        // the moment it is used. (Longer is fine; only "more than 5 s" counts.)
        tokio::time::sleep(Duration::from_millis(5_500)).await;
        let after = greet("after").await;
        assert_eq!(
            serde_json::to_value(&after).unwrap()["content"][0]["text"],
            "Hello, after!"
        );
    })
    .await;
}
