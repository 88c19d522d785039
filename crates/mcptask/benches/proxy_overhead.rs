//! The overhead of the MCP proxy's front (`mcptask serve` with `[proxy]
//! enabled = true`, MCP at `/mcp`) against calling the upstream directly, in
//! one run, on the same upstream process:
//!
//! - (a) a pass-through synchronous `tools/call` of the demo's `greet`
//!   (the caller does not declare tasks);
//! - (b) a task's create (`tools/call` of `slow_compute {seconds: 0}` with
//!   tasks declared, answered with a task) and its first `tasks/get`;
//! - (c) a synchronous upstream's 20 ms `echo` called by a caller that
//!   declares tasks, to its result: directly at the upstream, through the
//!   front answered within its `answer_within_ms` (the default), and through
//!   the front with `answer_within_ms = 0` (a task the caller follows,
//!   polling at the `pollIntervalMs` the task suggests).
//!
//! One caller, sequential calls. Direct and front batches alternate round by
//! round (and which goes first alternates too), so drift in machine load hits
//! both alike. Prints p50, p99, calls/s and the front/direct ratios.
//! Nothing is asserted about speed; the run checks only that calls succeed.
//!
//! Run: `cargo bench -p mcptask --bench proxy_overhead`
//! Smoke run: `MCPTASK_BENCH_QUICK=1 cargo bench -p mcptask --bench proxy_overhead`
//! Knobs: `MCPTASK_BENCH_ROUNDS`, `MCPTASK_BENCH_CALLS` (sync calls per side
//! and round), `MCPTASK_BENCH_TASKS` (tasks per side and round),
//! `MCPTASK_BENCH_QUICK_CALLS` ((c) calls per side and round).

use std::time::{Duration, Instant};

use mcptask_testkit::machine;
use mcptask_testkit::mcp::{Lifecycle, TestClient};
use mcptask_testkit::{DemoServer, GatewayProcess, GatewaySpec, SyncUpstream, TestDatabase};
use rmcp::model::CallToolResponse;
use serde_json::json;

struct Settings {
    rounds: usize,
    warmup: usize,
    calls: usize,
    tasks: usize,
    quick_calls: usize,
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

impl Settings {
    fn from_env() -> (Self, bool) {
        let quick = std::env::var("MCPTASK_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
        let (rounds, warmup, calls, tasks, quick_calls) = if quick {
            (2, 2, 5, 3, 1)
        } else {
            (6, 50, 300, 100, 10)
        };
        (
            Settings {
                rounds: env_usize("MCPTASK_BENCH_ROUNDS", rounds),
                warmup,
                calls: env_usize("MCPTASK_BENCH_CALLS", calls),
                tasks: env_usize("MCPTASK_BENCH_TASKS", tasks),
                quick_calls: env_usize("MCPTASK_BENCH_QUICK_CALLS", quick_calls),
            },
            quick,
        )
    }
}

/// One side's clients: a non-declaring one for (a), a declaring one for (b).
struct Side {
    name: &'static str,
    plain: TestClient,
    tasks: TestClient,
}

impl Side {
    async fn connect(name: &'static str, url: &str) -> Side {
        let plain = TestClient::http(url, None, Lifecycle::Modern { tasks: false })
            .await
            .unwrap_or_else(|e| panic!("{name}: connect (no tasks) to {url}: {e}"));
        let tasks = TestClient::http(url, None, Lifecycle::Modern { tasks: true })
            .await
            .unwrap_or_else(|e| panic!("{name}: connect (tasks) to {url}: {e}"));
        Side { name, plain, tasks }
    }

    /// (a): one synchronous call of `greet`; its latency.
    async fn sync_call(&self) -> Duration {
        let start = Instant::now();
        let response = self
            .plain
            .call("greet", json!({"name": "bench"}))
            .await
            .unwrap_or_else(|e| panic!("{}: greet: {e}", self.name));
        let elapsed = start.elapsed();
        match response {
            CallToolResponse::Complete(r) => {
                let text = serde_json::to_string(&r).expect("serialize");
                assert!(
                    text.contains("Hello, bench!"),
                    "{}: greet answered {text}",
                    self.name
                );
            }
            other => panic!("{}: greet answered {other:?}", self.name),
        }
        elapsed
    }

    /// (b): a task's create and its first `tasks/get`; both latencies.
    async fn task_create_get(&self) -> (Duration, Duration) {
        let start = Instant::now();
        let response = self
            .tasks
            .call("slow_compute", json!({"seconds": 0, "label": "bench"}))
            .await
            .unwrap_or_else(|e| panic!("{}: slow_compute: {e}", self.name));
        let created = start.elapsed();
        let id = match response {
            CallToolResponse::Task(t) => t.task.task_id,
            other => panic!("{}: slow_compute answered {other:?}, not a task", self.name),
        };
        let start = Instant::now();
        let got = self
            .tasks
            .get(&id)
            .await
            .unwrap_or_else(|e| panic!("{}: tasks/get {id}: {e}", self.name));
        let get = start.elapsed();
        assert_eq!(
            got.task.task.task_id, id,
            "{}: tasks/get of another task",
            self.name
        );
        (created, get)
    }
}

/// (c): a 20 ms `echo` of `tool` by `client` (tasks declared), to its
/// result: answered directly, or followed as a task at the interval it
/// suggests.
async fn quick_result(client: &TestClient, tool: &str) -> Duration {
    let start = Instant::now();
    let response = client
        .call(tool, json!({"text": "bench", "ms": 20}))
        .await
        .unwrap_or_else(|e| panic!("{tool}: {e}"));
    match response {
        CallToolResponse::Complete(r) => {
            assert_ne!(r.is_error, Some(true), "{tool}: {r:?}");
        }
        CallToolResponse::Task(created) => {
            let every = Duration::from_millis(created.task.poll_interval_ms.unwrap_or(1_000));
            loop {
                tokio::time::sleep(every).await;
                let got = client
                    .get(&created.task.task_id)
                    .await
                    .unwrap_or_else(|e| panic!("{tool}: tasks/get: {e}"));
                let wire = mcptask_testkit::mcp::wire(&got);
                match wire["status"].as_str() {
                    Some("completed") => break,
                    Some("working") => {}
                    other => panic!("{tool}: the task ended {other:?}: {wire}"),
                }
            }
        }
        other => panic!("{tool}: answered {other:?}"),
    }
    start.elapsed()
}

/// Latencies of one measurement, over all rounds, and their summed wall time.
#[derive(Default)]
struct Samples {
    latencies: Vec<Duration>,
    busy: Duration,
}

impl Samples {
    fn push(&mut self, d: Duration) {
        self.latencies.push(d);
        self.busy += d;
    }

    fn percentile(&self, p: f64) -> Duration {
        let mut v = self.latencies.clone();
        v.sort();
        if v.is_empty() {
            return Duration::ZERO;
        }
        let i = ((v.len() - 1) as f64 * p).round() as usize;
        v[i]
    }

    /// Operations per second of a single sequential caller.
    fn rate(&self) -> f64 {
        self.latencies.len() as f64 / self.busy.as_secs_f64()
    }
}

/// (c)'s results per side.
#[derive(Default)]
struct QuickResults {
    direct: Samples,
    within: Samples,
    tasked: Samples,
}

#[derive(Default)]
struct Measures {
    sync: Samples,
    create: Samples,
    get: Samples,
    create_get: Samples,
}

async fn sync_batch(side: &Side, n: usize, into: &mut Samples) {
    for _ in 0..n {
        into.push(side.sync_call().await);
    }
}

async fn task_batch(side: &Side, n: usize, into: &mut Measures) {
    for _ in 0..n {
        let (c, g) = side.task_create_get().await;
        into.create.push(c);
        into.get.push(g);
        into.create_get.push(c + g);
    }
}

fn main() {
    let (settings, quick) = Settings::from_env();
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    tokio.block_on(mcptask_testkit::with_deadline(
        Duration::from_secs(if quick { 180 } else { 1800 }),
        run(settings, quick),
    ));
}

async fn run(settings: Settings, quick: bool) {
    let (upstream_db, front_db) = (TestDatabase::sqlite(), TestDatabase::sqlite());
    let demo = DemoServer::start_named("demo-server", &upstream_db.url, &[]).await;
    let echo = SyncUpstream::start().await;
    // prefix "" keeps the upstream's tool names, so both sides call the same names.
    let toml = GatewaySpec::open(&front_db.url, &[("demo", &demo.url)])
        .toml()
        .replace("name = \"demo\"\n", "name = \"demo\"\nprefix = \"\"\n")
        + &format!(
            "\n[[servers]]\nname = \"within\"\nurl = {:?}\n\n\
             [[servers]]\nname = \"tasked\"\nurl = {:?}\nanswer_within_ms = 0\n",
            echo.url, echo.url
        )
        + "\n[proxy]\nenabled = true\n";
    let gateway = GatewayProcess::start_toml("proxy", &toml, &[]).await;
    let front_url = format!("{}/mcp", gateway.base);

    let direct = Side::connect("direct", &demo.url).await;
    let front = Side::connect("front", &front_url).await;
    let echo_direct = TestClient::http(&echo.url, None, Lifecycle::Modern { tasks: true })
        .await
        .unwrap_or_else(|e| panic!("connect to the synchronous upstream: {e}"));
    front.tasks.tools_once_listed("within__echo").await;
    front.tasks.tools_once_listed("tasked__echo").await;

    println!("mcptask proxy: overhead of the front (one caller, sequential)");
    println!(
        "machine : {} x {}",
        machine::num_cpus(),
        machine::cpu_model()
    );
    println!("memory  : {}", machine::mem_total());
    println!("load    : {} (start)", machine::load_average());
    println!("direct  : {}", demo.url);
    println!("front   : {front_url} (front database {})", front_db.url);
    println!(
        "rounds  : {} x ({} sync calls + {} task create/get) per side, {} warm-up each{}",
        settings.rounds,
        settings.calls,
        settings.tasks,
        settings.warmup,
        if quick { " [quick]" } else { "" }
    );
    println!();

    // Warm-up: connections, caches, the front's catalog, the SQLite files.
    for side in [&direct, &front] {
        let mut scratch = Measures::default();
        sync_batch(side, settings.warmup, &mut scratch.sync).await;
        task_batch(side, settings.warmup, &mut scratch).await;
    }

    let (mut d, mut f) = (Measures::default(), Measures::default());
    let mut quick = QuickResults::default();
    for round in 0..settings.rounds {
        let order: [(&Side, bool); 2] = if round % 2 == 0 {
            [(&direct, true), (&front, false)]
        } else {
            [(&front, false), (&direct, true)]
        };
        for (side, is_direct) in order {
            let m = if is_direct { &mut d } else { &mut f };
            sync_batch(side, settings.calls, &mut m.sync).await;
        }
        for (side, is_direct) in order {
            let m = if is_direct { &mut d } else { &mut f };
            task_batch(side, settings.tasks, m).await;
        }
        for _ in 0..settings.quick_calls {
            quick.direct.push(quick_result(&echo_direct, "echo").await);
            quick
                .within
                .push(quick_result(&front.tasks, "within__echo").await);
            quick
                .tasked
                .push(quick_result(&front.tasks, "tasked__echo").await);
        }
    }

    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "{:<28} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8} {:>8} {:>8}",
        "measure",
        "p50 dir",
        "p50 front",
        "p99 dir",
        "p99 front",
        "/s dir",
        "/s front",
        "p50 x",
        "p99 x",
        "/s x"
    );
    for (name, a, b) in [
        ("(a) sync call (greet)", &d.sync, &f.sync),
        ("(b) task create", &d.create, &f.create),
        ("(b) first tasks/get", &d.get, &f.get),
        ("(b) create + first get", &d.create_get, &f.create_get),
    ] {
        let (a50, b50, a99, b99) = (
            a.percentile(0.5),
            b.percentile(0.5),
            a.percentile(0.99),
            b.percentile(0.99),
        );
        println!(
            "{:<28} {:>8.3}ms {:>8.3}ms {:>8.3}ms {:>8.3}ms {:>10.0} {:>10.0} {:>8.2} {:>8.2} {:>8.2}",
            name,
            ms(a50),
            ms(b50),
            ms(a99),
            ms(b99),
            a.rate(),
            b.rate(),
            ms(b50) / ms(a50),
            ms(b99) / ms(a99),
            b.rate() / a.rate(),
        );
    }
    println!();
    println!("(c) a 20 ms synchronous echo, tasks declared, to its result:");
    for (name, samples) in [
        ("direct at the upstream", &quick.direct),
        ("front, answer_within_ms 1000", &quick.within),
        ("front, answer_within_ms 0", &quick.tasked),
    ] {
        println!(
            "    {:<30} p50 {:>9.3}ms  p99 {:>9.3}ms  ({} calls)",
            name,
            ms(samples.percentile(0.5)),
            ms(samples.percentile(0.99)),
            samples.latencies.len()
        );
    }
    println!();
    println!(
        "samples : {} sync calls and {} tasks per side",
        d.sync.latencies.len(),
        d.create.latencies.len()
    );
    println!("load    : {} (end)", machine::load_average());

    echo_direct.close().await;
    direct.plain.close().await;
    direct.tasks.close().await;
    front.plain.close().await;
    front.tasks.close().await;
    drop(gateway);
    drop(demo);
}
