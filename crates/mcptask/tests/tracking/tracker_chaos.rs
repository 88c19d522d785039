//! Acceptance "Four tracker processes on one PostgreSQL": 2,000 tasks, tracker
//! processes killed at random, every task terminal, no claim applied twice
//! (counted), no event lost.
//!
//! Two `mcptask demo-server` processes (Streamable HTTP, each behind a proxy
//! adding 0–80 ms per request) run the tasks. The test process is the
//! application: a tracker with `background: false` that only records handles,
//! requests cancels and answers questions in the shared PostgreSQL store.
//! Four `mcptask serve` processes on that store do all the tracking and
//! deliver every event to a signed webhook in the test process (0–40 ms per
//! delivery). Creation is spread over 30 s; meanwhile, every 1–2 s, a random
//! gateway is SIGKILLed and started again at once, and every fourth step one
//! is instead frozen (SIGSTOP) while it holds claims, for longer than the
//! lease, then thawed: the others take its claims over, and its late results
//! must be dropped by fencing.
//!
//! Halfway through creation, PostgreSQL itself is restarted once (`pg_ctl
//! restart -m immediate`: every connection of every process is cut, the
//! server goes through crash recovery); the gateways, the demo servers'
//! clients and the application carry on once it is back. The run uses a
//! PostgreSQL cluster of its own for that (never the shared test cluster).
//!
//! Then:
//! - every task is terminal, with the outcome its plan predicts and the one
//!   the server itself reports (`tasks/get` on the server, result included);
//! - "no claim applied twice (counted)": every timeline is numbered exactly
//!   `1..=event_version`, starts with its one `created` event, never repeats a
//!   status change, and holds exactly one terminal event, so the terminal
//!   events across all tasks number exactly the tasks; the stale results the
//!   gateways dropped ("claim lost" in their logs) are counted and reported;
//! - "no event lost": the webhook received every `(task, version)` at least
//!   once with a valid HMAC signature (duplicates are allowed and reported),
//!   nothing was dead-lettered and the notification backlog is empty.
//!
//! `MCPTASK_CHAOS_TASKS` overrides the number of tasks (default 2,000),
//! `MCPTASK_CHAOS_SEED` replays a run (the seed is printed), and
//! `MCPTASK_CHAOS_LOGS=DIR` keeps every gateway's log. Skips loudly without
//! PostgreSQL outside CI (fails under `CI=true`).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use mcptask_client::{
    CallOptions, CallOutcome, RemoteTaskRecord, ServerDef, Tracker, TrackerConfig, TrackerError,
};
use mcptask_core::TaskStatus;
use mcptask_core::client::{EventKind, ListFilter};
use mcptask_testkit::mcp::{Lifecycle, TestClient, wire};
use mcptask_testkit::*;
use serde_json::{Value, json};

const SECRET: &str = "tracker-chaos-webhook-secret";
/// Tasks of a run unless `MCPTASK_CHAOS_TASKS` says otherwise.
const DEFAULT_TASKS: usize = 2_000;
const GATEWAYS: usize = 4;
const SERVERS: [&str; 2] = ["demo-a", "demo-b"];
/// After creation, a task must settle at least this often until none is
/// live: a stuck task fails the run, a slow machine does not (how long the
/// whole run takes depends on the CPU it gets, which the test does not judge).
const SETTLES_AT_LEAST_EVERY: Duration = Duration::from_secs(60);
/// And everything is terminal this long after the first task was created
/// (under nextest's own 600 s limit, to fail with the stuck tasks listed).
const ALL_TERMINAL_WITHIN: Duration = Duration::from_secs(540);
/// Creation is spread over this long, so that the chaos hits live tasks.
const CREATE_OVER: Duration = Duration::from_secs(30);
/// Longer than the gateways' lease (4 s): their claims are taken over.
const FREEZE_FOR: Duration = Duration::from_millis(5_500);
/// Added to every request to a demo server (through [`SlowProxy`]).
const NETWORK_DELAY: Duration = Duration::from_millis(80);
/// Taken by the webhook endpoint per delivery.
const WEBHOOK_DELAY: Duration = Duration::from_millis(40);

/// `[tracker]` of the four gateways: a short lease so a killed process's
/// claims lapse within seconds, calls bounded well inside it, and polls that
/// honour the demo server's 1 s `pollIntervalMs` (no faster than 200 ms).
///
/// Cancels are retried over about a minute: with the default 1–60 s backoff
/// the default 10 attempts span minutes, but at this test's 0.1–1 s backoff
/// they spanned about 25 s, and an overloaded demo server answering no
/// `tasks/cancel` within the 2 s call timeout for that long let a 30 s task
/// complete (a run on a loaded machine, the tracker rightly following it to
/// its end).
const CHAOS_TRACKER: &str = "
max_cancel_attempts = 60
lease_ms = 4000
call_timeout_ms = 2000
connect_timeout_ms = 3000
batch_size = 64
poll_default_ms = 500
poll_min_ms = 200
poll_max_ms = 1000
input_required_poll_ms = 300
backoff_base_ms = 100
backoff_max_ms = 1000
error_budget_ms = 3600000
";

/// What the test does with a task, and so how it must end.
#[derive(Debug, Clone)]
enum Plan {
    /// `slow_compute` for 0–1.5 s: completed.
    Compute { label: String, seconds: f64 },
    /// `failing_job`: completed with `isError`.
    ToolError,
    /// `protocol_error_job`: failed with -32603.
    RpcError,
    /// `slow_compute` for 30 s, cancelled at once: cancelled. (Not longer:
    /// each of these 200 tasks writes a status message every second until
    /// its cancel lands, and at 300 s that load kept a cold CI run's tasks
    /// from settling.)
    CancelLong,
    /// `slow_compute` for 0–1.5 s, cancelled after 0–1.5 s: either.
    CancelRace {
        label: String,
        seconds: f64,
        after: Duration,
    },
    /// `confirm_delete`, answered by the test once the trackers saw the question.
    Confirm { filename: String, yes: bool },
}

impl Plan {
    fn for_index(i: usize, rng: &mut Rng) -> Plan {
        let mut seconds = || (rng.unit() * 15.0).round() / 10.0;
        match i % 20 {
            0..=12 => Plan::Compute {
                label: format!("t{i}"),
                seconds: seconds(),
            },
            13 => Plan::ToolError,
            14 => Plan::RpcError,
            15 | 16 => Plan::CancelLong,
            17 => Plan::CancelRace {
                label: format!("t{i}"),
                seconds: seconds(),
                after: Duration::from_secs_f64(seconds()),
            },
            _ => Plan::Confirm {
                filename: format!("f{i}.txt"),
                yes: !i.is_multiple_of(3),
            },
        }
    }

    fn call(&self) -> (&'static str, Value) {
        match self {
            Plan::Compute { label, seconds } | Plan::CancelRace { label, seconds, .. } => {
                ("slow_compute", json!({"seconds": seconds, "label": label}))
            }
            Plan::ToolError => ("failing_job", json!({})),
            Plan::RpcError => ("protocol_error_job", json!({})),
            Plan::CancelLong => ("slow_compute", json!({"seconds": 30})),
            Plan::Confirm { filename, .. } => ("confirm_delete", json!({"filename": filename})),
        }
    }

    /// Panics unless `r` (terminal) is an outcome this plan allows; the
    /// panic shows the task's timeline (`kind:status`, and the last error a
    /// `degraded` event carried).
    fn check(&self, r: &RemoteTaskRecord, timeline: &[String]) {
        let text = || {
            r.result
                .as_ref()
                .and_then(|v| v["content"][0]["text"].as_str())
                .unwrap_or_default()
                .to_string()
        };
        let is_error = r.result.as_ref().is_some_and(|v| v["isError"] == true);
        let ok = match self {
            Plan::Compute { label, seconds } => {
                r.status == TaskStatus::Completed
                    && !is_error
                    && text() == format!("{label}: computed in {seconds}s")
            }
            Plan::ToolError => r.status == TaskStatus::Completed && is_error,
            Plan::RpcError => {
                r.status == TaskStatus::Failed
                    && r.error.as_ref().is_some_and(|e| e["code"] == -32603)
            }
            // `cancel_sent_at` may be unset: a gateway killed between sending
            // tasks/cancel and recording the ack; the server settled it anyway.
            Plan::CancelLong => r.status == TaskStatus::Cancelled,
            Plan::CancelRace { label, seconds, .. } => {
                r.status == TaskStatus::Cancelled
                    || (r.status == TaskStatus::Completed
                        && text() == format!("{label}: computed in {seconds}s"))
            }
            Plan::Confirm { filename, yes } => {
                let verb = if *yes { "Deleted" } else { "Kept" };
                r.status == TaskStatus::Completed && text() == format!("{verb} {filename}")
            }
        };
        assert!(
            ok,
            "task {} planned as {self:?} ended as {r:#?}; timeline {timeline:#?}",
            r.id
        );
    }
}

/// Four gateway processes, one of which is killed (and restarted) or frozen
/// (and thawed) now and then.
struct Fleet {
    config: PathBuf,
    gateways: Vec<LoggedChild>,
    started: usize,
    kills: usize,
    freezes: usize,
    /// The slot frozen now, and when to thaw it.
    frozen: Option<(usize, Instant)>,
    /// Freezes that caught the gateway holding claims on tasks.
    freezes_holding: usize,
    steps: usize,
    /// What the chaos did, in order (printed at the end).
    events: Vec<String>,
    /// "claim lost" lines of processes already replaced: results dropped by fencing.
    stale_results: usize,
    rng: Rng,
    /// The application's view of the store (to see who holds claims).
    tracker: Tracker,
}

impl Fleet {
    async fn start(config: PathBuf, rng: Rng, tracker: Tracker) -> Fleet {
        let mut fleet = Fleet {
            rng,
            tracker,
            freezes_holding: 0,
            steps: 0,
            events: Vec::new(),
            config,
            gateways: Vec::new(),
            started: 0,
            kills: 0,
            freezes: 0,
            frozen: None,
            stale_results: 0,
        };
        for _ in 0..GATEWAYS {
            let g = fleet.spawn().await;
            fleet.gateways.push(g);
        }
        fleet
    }

    async fn spawn(&mut self) -> LoggedChild {
        self.started += 1;
        start_gateway(&format!("gateway #{}", self.started), &self.config).await
    }

    /// One chaos step: thaw the frozen gateway once its time is up; then
    /// every fourth step (none being frozen) freeze a random gateway the
    /// moment it holds claims, for longer than the lease, so that the others
    /// take its claims over and, once thawed, it tries to apply stale results;
    /// otherwise SIGKILL a random gateway that is not frozen and start a
    /// replacement at once.
    async fn step(&mut self) {
        self.steps += 1;
        if let Some((k, until)) = self.frozen
            && Instant::now() >= until
        {
            thaw(self.gateways[k].pid);
            self.events.push(format!("thaw {}", self.gateways[k].name));
            self.frozen = None;
        }
        if self.frozen.is_none() && self.steps % 4 == 2 {
            let k = self.rng.below(GATEWAYS);
            let pid = self.gateways[k].pid;
            let holding = self.claims_held_by(pid, Duration::from_secs(2)).await;
            freeze(pid);
            self.events.push(format!(
                "freeze {} ({holding} claims)",
                self.gateways[k].name
            ));
            self.freezes += 1;
            self.freezes_holding += usize::from(holding > 0);
            self.frozen = Some((k, Instant::now() + FREEZE_FOR));
            return;
        }
        let candidates: Vec<usize> = (0..GATEWAYS)
            .filter(|k| self.frozen.is_none_or(|(f, _)| f != *k))
            .collect();
        let k = candidates[self.rng.below(candidates.len())];
        let g = &mut self.gateways[k];
        assert!(
            g.is_running(),
            "{} died on its own; log:\n{}",
            g.name,
            g.log()
        );
        g.kill().await;
        self.events.push(format!("kill {}", g.name));
        self.kills += 1;
        self.stale_results += g.count_lines("claim lost");
        self.keep_log(k);
        let fresh = self.spawn().await;
        self.gateways[k] = fresh;
    }

    /// Thaw whatever is frozen (end of the chaos).
    fn calm(&mut self) {
        if let Some((k, _)) = self.frozen.take() {
            thaw(self.gateways[k].pid);
            self.events.push(format!("thaw {}", self.gateways[k].name));
        }
    }

    /// Keep every log (see [`Fleet::keep_log`]).
    fn keep_logs(&self) {
        for k in 0..self.gateways.len() {
            self.keep_log(k);
        }
    }

    /// How many live tasks gateway `pid` holds claims on; polls the store
    /// until it holds some or `within` passes.
    async fn claims_held_by(&self, pid: u32, within: Duration) -> usize {
        wait_for_claims(&self.tracker, pid, within).await
    }

    /// With `MCPTASK_CHAOS_LOGS=DIR`, keep gateway `k`'s log there.
    fn keep_log(&self, k: usize) {
        if let Ok(dir) = std::env::var("MCPTASK_CHAOS_LOGS") {
            let g = &self.gateways[k];
            let path =
                std::path::Path::new(&dir).join(format!("{}.log", g.name.replace([' ', '#'], "")));
            let _ = std::fs::create_dir_all(&dir);
            let _ = std::fs::write(path, g.log());
        }
    }

    fn stale_results(&self) -> usize {
        self.stale_results
            + self
                .gateways
                .iter()
                .map(|g| g.count_lines("claim lost"))
                .sum::<usize>()
    }
}

/// Record one task (retrying a tools/call that could not reach the server).
async fn create(
    tracker: &Tracker,
    i: usize,
    plan: &Plan,
    retries: &AtomicUsize,
) -> RemoteTaskRecord {
    let server = SERVERS[(i / 20) % SERVERS.len()];
    let (tool, args) = plan.call();
    for attempt in 0.. {
        match tracker
            .call_tool(server, tool, args.clone(), CallOptions::default())
            .await
        {
            Ok(CallOutcome::Task(t)) => return *t,
            Ok(CallOutcome::Completed(r)) => panic!("{tool} completed synchronously: {r:?}"),
            Err(
                e @ (TrackerError::Unavailable(_)
                | TrackerError::NoAnswer { .. }
                | TrackerError::Store(_)),
            ) if attempt < 50 => {
                retries.fetch_add(1, Ordering::Relaxed);
                eprintln!("creating task {i}: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("creating task {i} ({tool} on {server}): {e}"),
        }
    }
    unreachable!()
}

/// Answer `confirm_delete` questions as the trackers report them.
async fn answer_questions(
    tracker: Tracker,
    pending: Arc<Mutex<HashMap<String, bool>>>,
    stop: Arc<AtomicBool>,
) -> usize {
    let mut answered = 0;
    let filter = ListFilter {
        status: Some(TaskStatus::InputRequired),
        ..Default::default()
    };
    while !stop.load(Ordering::Relaxed) {
        let mut cursor = None;
        loop {
            // The store may be restarting: try again on the next round.
            let Ok((page, next)) = tracker.list(&filter, cursor.as_ref(), 500).await else {
                break;
            };
            for r in &page {
                let yes = pending.lock().unwrap().get(&r.id).copied();
                let Some(yes) = yes else { continue };
                if !r.input_requests.iter().any(|(k, _)| k == "confirm_delete") {
                    continue;
                }
                let answer = BTreeMap::from([(
                    "confirm_delete".to_string(),
                    json!({"action": "accept", "content": {"confirm": yes}}),
                )]);
                let Ok(result) = tracker.answer(&r.id, answer).await else {
                    continue;
                };
                if !result.applied.is_empty() {
                    answered += 1;
                    pending.lock().unwrap().remove(&r.id);
                }
            }
            match next {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    answered
}

/// Tasks not yet terminal (one indexed count per status).
async fn live_tasks(tracker: &Tracker) -> i64 {
    let counts = loop {
        match tracker.counts().await {
            Ok(c) => break c,
            // The store is restarting.
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    };
    counts
        .into_iter()
        .filter(|(s, _)| !s.is_terminal())
        .map(|(_, n)| n)
        .sum()
}

/// Tasks settled so far (0 while the store does not answer).
async fn settled(tracker: &Tracker) -> i64 {
    tracker.counts().await.map_or(0, |counts| {
        counts
            .into_iter()
            .filter(|(s, _)| s.is_terminal())
            .map(|(_, n)| n)
            .sum()
    })
}

/// Request a cancel, retrying while the store is restarting.
async fn cancel(tracker: &Tracker, id: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while let Err(e) = tracker.cancel(id).await {
        assert!(Instant::now() < deadline, "request a cancel of {id}: {e}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The PostgreSQL restart in the middle of the run, and how long everything
/// took to come back.
#[derive(Debug, Default)]
struct Restart {
    /// `pg_ctl restart -m immediate` until the server answered again.
    took: Duration,
    /// From then until the application's store answered again.
    app_back: Duration,
    /// From then until a task settled once the store answered again (the
    /// gateways track again).
    tracking_back: Duration,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_trackers_on_postgres_survive_random_kills() {
    let Some(pg) = mcptask_testkit::pg::PrivateCluster::start().await else {
        eprintln!(
            "four_trackers_on_postgres_survive_random_kills: SKIPPED (no PostgreSQL, see above)"
        );
        return;
    };
    let total: usize = std::env::var("MCPTASK_CHAOS_TASKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_TASKS);
    with_deadline(Duration::from_secs(600), chaos(Arc::new(pg), total)).await;
}

async fn chaos(pg: Arc<mcptask_testkit::pg::PrivateCluster>, total: usize) {
    let url = pg.fresh_database().await;
    let began = Instant::now();
    let seed = std::env::var("MCPTASK_CHAOS_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    eprintln!("tracker chaos: seed {seed} (replay with MCPTASK_CHAOS_SEED={seed})");
    let mut rng = Rng(seed);
    let plans: Vec<Plan> = (0..total).map(|i| Plan::for_index(i, &mut rng)).collect();

    // Two demo servers, each behind a proxy adding 0–80 ms per request (the
    // trackers only know the proxies), and a webhook taking 0–40 ms: remote
    // calls and deliveries take a while, so a frozen gateway is likely to
    // hold claims when it is frozen.
    let server_dbs = [TestDatabase::sqlite(), TestDatabase::sqlite()];
    let mut servers = Vec::new();
    let mut proxies = Vec::new();
    for (name, sdb) in SERVERS.iter().zip(&server_dbs) {
        let server = DemoServer::start_named(name, &sdb.url, &[]).await;
        proxies.push(SlowProxy::start(&server.base(), NETWORK_DELAY, rng.next_u64()).await);
        servers.push(server);
    }
    let urls: Vec<String> = proxies.iter().map(|p| format!("{}/mcp", p.base)).collect();
    let hook = WebhookReceiver::start_with_delay(SECRET, WEBHOOK_DELAY, rng.next_u64()).await;

    // The application's tracker: migrates the store first, then only records.
    let store = mcptask_sql::open(&url)
        .await
        .expect("open the store")
        .remote_tasks();
    let mut builder = Tracker::builder(store).config(TrackerConfig {
        background: false,
        call_timeout: Duration::from_secs(10),
        connect_timeout: Duration::from_secs(10),
        ..Default::default()
    });
    for (name, url) in SERVERS.iter().zip(&urls) {
        builder = builder.server(ServerDef::http(*name, url));
    }
    let tracker = builder.start().await.unwrap();

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("mcptask.toml");
    let server_list: Vec<(&str, &str)> = SERVERS
        .iter()
        .zip(&urls)
        .map(|(n, u)| (*n, u.as_str()))
        .collect();
    std::fs::write(
        &config,
        gateway_config(&url, &server_list, &hook.url, SECRET, CHAOS_TRACKER),
    )
    .unwrap();
    let mut fleet = Fleet::start(config, Rng(rng.next_u64()), tracker.clone()).await;
    let setup = began.elapsed();

    // Chaos: while tasks are live, SIGKILL a random gateway every 1–2 s.
    let stop = Arc::new(AtomicBool::new(false));
    let chaos = tokio::spawn({
        let stop = stop.clone();
        async move {
            while !stop.load(Ordering::Relaxed) {
                let pause = Duration::from_millis(1_000 + (fleet.rng.unit() * 1_000.0) as u64);
                tokio::time::sleep(pause).await;
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                fleet.step().await;
            }
            fleet.calm();
            fleet
        }
    });
    // One PostgreSQL restart, halfway through creation.
    let restart = tokio::spawn({
        let (pg, tracker) = (pg.clone(), tracker.clone());
        async move {
            tokio::time::sleep(CREATE_OVER / 2).await;
            let took = pg.restart_immediate().await;
            let back = Instant::now();
            while tracker.counts().await.is_err() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let app_back = back.elapsed();
            let settled_before = settled(&tracker).await;
            while settled(&tracker).await <= settled_before {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Restart {
                took,
                app_back,
                tracking_back: back.elapsed(),
            }
        }
    });
    let pending = Arc::new(Mutex::new(HashMap::new()));
    let answerer = tokio::spawn(answer_questions(
        tracker.clone(),
        pending.clone(),
        stop.clone(),
    ));

    // Create every task (paced over CREATE_OVER, up to 16 calls in flight),
    // cancelling as planned.
    let created_at = Instant::now();
    let pace = CREATE_OVER / total.max(1) as u32;
    let retries = AtomicUsize::new(0);
    let mut late_cancels = Vec::new();
    let records: Vec<(usize, RemoteTaskRecord)> = futures::stream::iter(plans.iter().enumerate())
        .map(|(i, plan)| {
            let tracker = &tracker;
            let retries = &retries;
            let pending = pending.clone();
            async move {
                tokio::time::sleep_until((created_at + pace * i as u32).into()).await;
                let r = create(tracker, i, plan, retries).await;
                match plan {
                    Plan::CancelLong => cancel(tracker, &r.id).await,
                    Plan::Confirm { yes, .. } => {
                        pending.lock().unwrap().insert(r.id.clone(), *yes);
                    }
                    _ => {}
                }
                (i, r)
            }
        })
        .buffer_unordered(16)
        .inspect(|(i, r)| {
            if let Plan::CancelRace { after, .. } = &plans[*i] {
                let tracker = tracker.clone();
                let (id, after) = (r.id.clone(), *after);
                late_cancels.push(tokio::spawn(async move {
                    tokio::time::sleep(after).await;
                    cancel(&tracker, &id).await;
                }));
            }
        })
        .collect()
        .await;
    let creation = created_at.elapsed();
    assert_eq!(records.len(), total);
    for c in late_cancels {
        c.await.expect("late cancel");
    }

    // Every task terminal, and tasks settling all along until then.
    let deadline = created_at + ALL_TERMINAL_WITHIN;
    let mut fewest_live = (i64::MAX, Instant::now());
    loop {
        let live = live_tasks(&tracker).await;
        if live == 0 {
            break;
        }
        if live < fewest_live.0 {
            fewest_live = (live, Instant::now());
        }
        let stalled = fewest_live.1.elapsed() >= SETTLES_AT_LEAST_EVERY;
        if stalled || Instant::now() >= deadline {
            stop.store(true, Ordering::Relaxed);
            let stuck = tracker
                .list(
                    &ListFilter {
                        active_only: true,
                        ..Default::default()
                    },
                    None,
                    5,
                )
                .await
                .map(|(p, _)| p)
                .unwrap_or_default();
            let why = if stalled {
                format!("none settled in the last {SETTLES_AT_LEAST_EVERY:?}")
            } else {
                format!("{ALL_TERMINAL_WITHIN:?} after creation began")
            };
            panic!("{live} of {total} tasks still live, {why}; e.g. {stuck:#?}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let all_terminal = created_at.elapsed();
    let restart = restart.await.expect("the PostgreSQL restart");
    stop.store(true, Ordering::Relaxed);
    let mut fleet = chaos.await.expect("chaos loop");
    let answered = answerer.await.expect("answerer");
    for (k, g) in fleet.gateways.iter_mut().enumerate() {
        assert!(
            g.is_running(),
            "gateway slot {k} died on its own; log:\n{}",
            g.log()
        );
    }

    // No event lost, no settlement applied twice.
    let verify_from = Instant::now();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let verified: Vec<(usize, RemoteTaskRecord, Vec<String>, usize)> =
        futures::stream::iter(&records)
            .map(|(i, r)| {
                let (tracker, hook) = (&tracker, &hook);
                async move {
                    let (record, timeline) = verify_delivered(tracker, hook, &r.id, deadline).await;
                    let terminal = timeline.iter().filter(|e| e.status.is_terminal()).count();
                    // A stale result applied after newer ones would repeat a status
                    // change; none of these tools ever returns to a status it left.
                    // `kind:status`, with the reason a `degraded` event carried.
                    let brief: Vec<String> = timeline
                        .iter()
                        .map(|e| match (e.kind, e.data["lastError"].as_str()) {
                            (EventKind::Degraded, Some(why)) => {
                                format!("{}:{} ({why})", e.kind.as_str(), e.status)
                            }
                            _ => format!("{}:{}", e.kind.as_str(), e.status),
                        })
                        .collect();
                    let created = timeline.iter().filter(|e| e.kind == EventKind::Created);
                    assert_eq!(created.count(), 1, "task {}: {brief:?}", r.id);
                    assert_eq!(
                        timeline[0].kind,
                        EventKind::Created,
                        "task {}: {brief:?}",
                        r.id
                    );
                    let mut changes: Vec<TaskStatus> = timeline
                        .iter()
                        .filter(|e| e.kind == EventKind::Status)
                        .map(|e| e.status)
                        .collect();
                    let n = changes.len();
                    changes.sort_by_key(|s| s.as_str());
                    changes.dedup();
                    assert_eq!(
                        changes.len(),
                        n,
                        "task {}: a status change repeated: {brief:?}",
                        r.id
                    );
                    (*i, record, brief, terminal)
                }
            })
            .buffer_unordered(8)
            .collect()
            .await;
    let events: usize = verified.iter().map(|v| v.2.len()).sum();
    let terminal_events: usize = verified.iter().map(|v| v.3).sum();
    assert_eq!(
        terminal_events, total,
        "exactly one terminal event per task across all {total} tasks"
    );
    assert_eq!(
        hook.unique(),
        events,
        "the webhook got exactly the recorded events (plus duplicates)"
    );
    assert!(
        hook.bad().is_empty(),
        "bad webhook requests: {:?}",
        &hook.bad()[..hook.bad().len().min(5)]
    );
    assert_eq!(tracker.notification_backlog().await.unwrap(), 0);

    // Outcomes: as planned, and as the server itself reports them.
    let mut by_status: BTreeMap<String, usize> = BTreeMap::new();
    for (i, record, timeline, _) in &verified {
        plans[*i].check(record, timeline);
        *by_status.entry(record.status.to_string()).or_default() += 1;
    }
    let mut clients = HashMap::new();
    for (name, server) in SERVERS.iter().zip(&servers) {
        let client = TestClient::http(&server.url, None, Lifecycle::Modern { tasks: true })
            .await
            .expect("connect to a demo server");
        clients.insert(name.to_string(), client);
    }
    let clients = &clients;
    futures::stream::iter(&verified)
        .for_each_concurrent(16, |(_, record, _, _)| async move {
            let client = &clients[&record.server];
            let got = client
                .get(&record.remote_task_id)
                .await
                .unwrap_or_else(|e| {
                    panic!(
                        "tasks/get {} on {}: {e}",
                        record.remote_task_id, record.server
                    )
                });
            let w = wire(&got);
            assert_eq!(
                w["status"].as_str(),
                Some(record.status.as_str()),
                "the tracker's outcome differs from the server's: {w:#} vs {record:#?}"
            );
            if record.status == TaskStatus::Completed {
                assert_eq!(
                    Some(&w["result"]),
                    record.result.as_ref(),
                    "result of {}",
                    record.id
                );
            }
        })
        .await;
    let verification = verify_from.elapsed();

    let cancels = plans
        .iter()
        .filter(|p| matches!(p, Plan::CancelLong | Plan::CancelRace { .. }))
        .count();
    let acks_lost = verified
        .iter()
        .filter(|(_, r, _, _)| r.status == TaskStatus::Cancelled && r.cancel_sent_at.is_none())
        .count();
    eprintln!(
        "tracker chaos: {total} tasks on {GATEWAYS} gateways (PostgreSQL); {} SIGKILLs ({} gateway \
         processes started), {} freezes past the lease ({} caught holding claims); {cancels} \
         cancels requested ({acks_lost} settled cancelled without a recorded ack: the sender \
         died first), {answered} questions answered, {} create retries; outcomes {by_status:?}; \
         {events} events, {terminal_events} terminal; {} webhook posts, {} duplicate deliveries, \
         0 lost, 0 dead-lettered; {} stale results dropped by fencing; 1 PostgreSQL restart \
         (pg_ctl restart -m immediate, {:.1?}; the application's store back {:.1?} later, the \
         first task settled by the gateways {:.1?} later); seed {seed}; setup \
         {setup:.1?}, creation {creation:.1?}, all terminal after {all_terminal:.1?}, \
         verification {verification:.1?}",
        fleet.kills,
        fleet.started,
        fleet.freezes,
        fleet.freezes_holding,
        retries.load(Ordering::Relaxed),
        hook.posts(),
        hook.duplicates(),
        fleet.stale_results(),
        restart.took,
        restart.app_back,
        restart.tracking_back,
    );
    eprintln!("tracker chaos steps: {}", fleet.events.join(", "));
    fleet.keep_logs();
    assert!(fleet.kills > 0, "the chaos must have killed something");
    tracker.shutdown(Duration::from_secs(2)).await;
    drop(fleet);
    drop(proxies);
    drop(servers);
}
