//! Side by side, in one run: rmcp's in-memory `TaskManager` against its
//! durable replacement, `mcptask_server::task_manager::TaskManager`, on an
//! SQLite file (WAL, `synchronous=FULL`), at 10k and 100k live tasks. Times
//! the four calls an rmcp server's handlers make (`spawn`, `get_task`,
//! `update_task`, `cancel_task`) and prints rates and mcptask/rmcp ratios.
//!
//! `server_vs_rmcp` compares rmcp with the runtime underneath
//! (`TaskRuntime`); this one compares the two types an rmcp author chooses
//! between, with the same task body on both sides (see [`parked_body`]), so
//! what it measures is the price of the swap docs/MIGRATING-FROM-RMCP-TASKS.md
//! describes.
//!
//! Run: `cargo bench --workspace --bench task_manager_vs_rmcp`
//! Smoke run: `MCPTASK_BENCH_QUICK=1 cargo bench --workspace --bench task_manager_vs_rmcp`
//! Knobs: `MCPTASK_BENCH_LEVELS` (comma-separated live-task counts),
//! `MCPTASK_BENCH_WRITES` (creates, updates and cancels per side and level),
//! `MCPTASK_BENCH_DIR` (the database's directory; not tmpfs, for the numbers
//! to mean "durable").

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use mcptask_server::RuntimeConfig;
use rmcp::model::{CallToolResult, InputRequest, TaskStatus};
use rmcp::task_manager::{TaskExit, TaskOptions};
use serde_json::{Value, json};

use mcptask_testkit::bench::{self, Run};
use mcptask_testkit::machine::{cpu_model, filesystem_of, load_average, mem_total, num_cpus};
use mcptask_testkit::rng::Rng;

/// One hour: nothing expires during a run. A limited TTL is what makes rmcp's
/// sweep read every entry's clock on every call, as it does in a real server
/// (rmcp's default TTL is five minutes).
const TTL_MS: u64 = 3_600_000;
/// Concurrent callers used to reach N live tasks; not compared.
const PRELOAD_CONCURRENCY: usize = 256;
/// The input key every task asks under, and `tasks/update` answers.
const KEY: &str = "answer";
/// Tasks whose state is read back after the updates, per side.
const SPOT_CHECKS: usize = 16;

struct Settings {
    levels: Vec<usize>,
    /// Creates, updates and cancels per side and level.
    writes: usize,
    write_concurrency: usize,
    get_concurrency: usize,
    get_budget: Duration,
}

impl Settings {
    fn from_env() -> Self {
        let quick = bench::quick();
        let levels = std::env::var("MCPTASK_BENCH_LEVELS")
            .ok()
            .map(|v| {
                v.split(',')
                    .map(|n| n.trim().parse().expect("MCPTASK_BENCH_LEVELS: numbers"))
                    .collect()
            })
            .unwrap_or_else(|| {
                if quick {
                    vec![500, 2_000]
                } else {
                    vec![10_000, 100_000]
                }
            });
        let writes = bench::env_number("MCPTASK_BENCH_WRITES")
            .map(|n| n as usize)
            .unwrap_or(if quick { 200 } else { 2_000 });
        Settings {
            levels,
            writes,
            write_concurrency: 64,
            get_concurrency: 8,
            get_budget: if quick {
                Duration::from_millis(300)
            } else {
                Duration::from_secs(3)
            },
        }
    }
}

/// The task body both sides run, written once: ask the client for input
/// (the task reads `input_required`), then, answered, wait for
/// `tasks/cancel` (it reads `working`). `$asked` counts bodies that reached
/// their input request. The two managers' contexts are different types with
/// the same method names, which is what the replacement promises.
macro_rules! parked_body {
    ($ctx:ident, $asked:ident) => {
        Box::pin(async move {
            $asked.fetch_add(1, Ordering::Relaxed);
            $ctx.request_input(KEY, form()).await?;
            $ctx.cancelled().await;
            Err::<CallToolResult, _>(TaskExit::Cancelled)
        })
    };
}

fn form() -> InputRequest {
    mcptask_server::input::elicit_form(
        "Go on?",
        json!({"type": "object", "properties": {"go": {"type": "boolean"}}}),
    )
    .expect("a valid form")
}

fn answer() -> Value {
    json!({"action": "accept", "content": {"go": true}})
}

fn options() -> TaskOptions {
    TaskOptions::new().with_ttl_ms(TTL_MS)
}

/// The four calls of one manager, as the harness drives them.
trait Side: Clone + Send + Sync + 'static {
    fn create(&self) -> impl Future<Output = Arc<str>> + Send;
    fn get(&self, id: Arc<str>) -> impl Future<Output = TaskStatus> + Send;
    fn update(&self, id: Arc<str>) -> impl Future<Output = ()> + Send;
    fn cancel(&self, id: Arc<str>) -> impl Future<Output = ()> + Send;
    /// Tasks not yet settled, as the manager knows them.
    fn live(&self) -> impl Future<Output = usize> + Send;
    /// Whether the body of each of the `live` unsettled tasks waits on its
    /// input request (so every get reads `input_required`).
    fn ready(&self, live: usize) -> impl Future<Output = bool> + Send;
}

#[derive(Clone)]
struct Rmcp {
    manager: rmcp::task_manager::TaskManager,
    asked: Arc<AtomicUsize>,
    created: Arc<AtomicUsize>,
}

impl Side for Rmcp {
    async fn create(&self) -> Arc<str> {
        let asked = self.asked.clone();
        let task = self
            .manager
            .spawn(options(), move |ctx| parked_body!(ctx, asked));
        self.created.fetch_add(1, Ordering::Relaxed);
        Arc::from(task.task_id)
    }

    async fn get(&self, id: Arc<str>) -> TaskStatus {
        self.manager.get_task(&id).expect("rmcp get_task").status()
    }

    async fn update(&self, id: Arc<str>) {
        self.manager
            .update_task(&id, [(KEY.to_string(), answer())])
            .expect("rmcp update_task");
    }

    async fn cancel(&self, id: Arc<str>) {
        self.manager.cancel_task(&id).expect("rmcp cancel_task");
    }

    async fn live(&self) -> usize {
        self.manager.running_task_count()
    }

    /// In memory the request is registered in the same poll that counted
    /// it, so every body created has asked once the counts meet.
    async fn ready(&self, _live: usize) -> bool {
        self.asked.load(Ordering::Relaxed) == self.created.load(Ordering::Relaxed)
    }
}

#[derive(Clone)]
struct Mcptask {
    manager: mcptask_server::task_manager::TaskManager,
    pool: sqlx::SqlitePool,
    asked: Arc<AtomicUsize>,
}

impl Mcptask {
    async fn start(store: &mcptask_sql::Store) -> Self {
        // No maintenance loops (rmcp has none) and no admission caps: the run
        // holds 100k live tasks in one process, as rmcp's manager does.
        let config = RuntimeConfig {
            background: false,
            max_live_tasks: None,
            max_live_tasks_per_principal: None,
            ..Default::default()
        };
        let manager =
            mcptask_server::task_manager::TaskManager::open_with(store.server_tasks(), config)
                .await
                .expect("open the manager");
        let pool = match store {
            mcptask_sql::Store::Sqlite(s) => s.writer_pool().clone(),
            mcptask_sql::Store::Postgres(_) => unreachable!("the benchmark opens an SQLite file"),
        };
        Self {
            manager,
            pool,
            asked: Arc::default(),
        }
    }

    async fn count(&self, query: &'static str) -> usize {
        let n: i64 = sqlx::query_scalar(query)
            .fetch_one(&self.pool)
            .await
            .expect("count rows");
        n as usize
    }
}

impl Side for Mcptask {
    async fn create(&self) -> Arc<str> {
        let asked = self.asked.clone();
        let task = self
            .manager
            .spawn(options(), move |ctx| parked_body!(ctx, asked))
            .await
            .expect("mcptask spawn");
        Arc::from(task.task_id)
    }

    async fn get(&self, id: Arc<str>) -> TaskStatus {
        self.manager
            .get_task(&id)
            .await
            .expect("mcptask get_task")
            .status()
    }

    async fn update(&self, id: Arc<str>) {
        self.manager
            .update_task(&id, [(KEY.to_string(), answer())])
            .await
            .expect("mcptask update_task");
    }

    async fn cancel(&self, id: Arc<str>) {
        self.manager
            .cancel_task(&id)
            .await
            .expect("mcptask cancel_task");
    }

    /// Counted in the store: proves every create was committed.
    async fn live(&self) -> usize {
        self.count(
            "SELECT count(*) FROM server_tasks WHERE status IN ('working', 'input_required')",
        )
        .await
    }

    /// Counted in the store: the request is written after the body counted
    /// it.
    async fn ready(&self, live: usize) -> bool {
        self.count("SELECT count(*) FROM server_tasks WHERE status = 'input_required'")
            .await
            == live
    }
}

fn main() {
    let settings = Settings::from_env();
    // The default multi-thread runtime (one worker per core), as a server uses.
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    tokio.block_on(run(settings));
}

/// One operation's timing on both sides.
struct Pair {
    rmcp: Run,
    mcptask: Run,
}

impl Pair {
    fn ratio(&self) -> f64 {
        self.mcptask.rate() / self.rmcp.rate()
    }
}

/// One level's results.
struct Row {
    live: usize,
    create: Pair,
    get: Pair,
    update: Pair,
    cancel: Pair,
}

async fn run(settings: Settings) {
    let base = std::env::var_os("MCPTASK_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::Builder::new()
        .prefix("mcptask-bench-")
        .tempdir_in(&base)
        .expect("temp dir for the database");
    let db = dir.path().join("bench.db");
    let store = mcptask_sql::open(&format!("sqlite:{}", db.display()))
        .await
        .expect("open the SQLite store");

    let rmcp = Rmcp {
        manager: rmcp::task_manager::TaskManager::new(),
        asked: Arc::default(),
        created: Arc::default(),
    };
    let mcptask = Mcptask::start(&store).await;
    print_header(&settings, &db);

    // Every id each side holds, live ones first; settled ids are dropped.
    let mut rmcp_ids: Vec<Arc<str>> = Vec::new();
    let mut mcptask_ids: Vec<Arc<str>> = Vec::new();
    let mut rows = Vec::new();
    for &level in &settings.levels {
        let t = Instant::now();
        top_up(&rmcp, &mut rmcp_ids, level).await;
        let rmcp_reach = t.elapsed();
        let t = Instant::now();
        top_up(&mcptask, &mut mcptask_ids, level).await;
        let mcptask_reach = t.elapsed();
        println!(
            "[{level:>7} live] reached in {:.1}s (rmcp) / {:.1}s (mcptask); live: rmcp {}, store {}",
            rmcp_reach.as_secs_f64(),
            mcptask_reach.as_secs_f64(),
            rmcp.live().await,
            mcptask.live().await,
        );

        // Gets at exactly N live tasks, every one waiting on its input; a
        // short warm-up first opens connections and touches caches.
        let warmup = Duration::from_millis(500);
        let rmcp_all = Arc::new(rmcp_ids.clone());
        let mcptask_all = Arc::new(mcptask_ids.clone());
        gets(&rmcp, &rmcp_all, &settings, warmup).await;
        gets(&mcptask, &mcptask_all, &settings, warmup).await;
        let get = Pair {
            rmcp: gets(&rmcp, &rmcp_all, &settings, settings.get_budget).await,
            mcptask: gets(&mcptask, &mcptask_all, &settings, settings.get_budget).await,
        };

        // Answer the input of `writes` distinct tasks (the same positions on
        // both sides), then cancel those same tasks.
        assert_eq!(rmcp_ids.len(), mcptask_ids.len());
        let picks = distinct_picks(rmcp_ids.len(), settings.writes, level as u64);
        let rmcp_picked = Arc::new(picks.iter().map(|&i| rmcp_ids[i].clone()).collect());
        let mcptask_picked = Arc::new(picks.iter().map(|&i| mcptask_ids[i].clone()).collect());
        let update = Pair {
            rmcp: each(
                &rmcp,
                &rmcp_picked,
                settings.write_concurrency,
                Write::Update,
            )
            .await,
            mcptask: each(
                &mcptask,
                &mcptask_picked,
                settings.write_concurrency,
                Write::Update,
            )
            .await,
        };
        spot_check(&rmcp, &rmcp_picked, TaskStatus::Working).await;
        spot_check(&mcptask, &mcptask_picked, TaskStatus::Working).await;
        let cancel = Pair {
            rmcp: each(
                &rmcp,
                &rmcp_picked,
                settings.write_concurrency,
                Write::Cancel,
            )
            .await,
            mcptask: each(
                &mcptask,
                &mcptask_picked,
                settings.write_concurrency,
                Write::Cancel,
            )
            .await,
        };
        drop_picked(&mut rmcp_ids, &picks);
        drop_picked(&mut mcptask_ids, &picks);
        settle(&rmcp, rmcp_ids.len()).await;
        settle(&mcptask, mcptask_ids.len()).await;

        // Creates last: their bodies' input requests land after every timed
        // call above. The next level waits for them.
        let create = Pair {
            rmcp: creates(
                &rmcp,
                &mut rmcp_ids,
                settings.writes,
                settings.write_concurrency,
            )
            .await,
            mcptask: creates(
                &mcptask,
                &mut mcptask_ids,
                settings.writes,
                settings.write_concurrency,
            )
            .await,
        };

        let row = Row {
            live: level,
            create,
            get,
            update,
            cancel,
        };
        print_detail(&row);
        rows.push(row);
    }
    print_summary(&settings, &rows);
    println!("load at end: {}", load_average());

    rmcp.manager.shutdown();
    mcptask.manager.shutdown().await;
    store.close().await;
}

/// Create tasks on `side` until it holds `level` live ones, then wait until
/// every body waits on its input request.
async fn top_up<S: Side>(side: &S, ids: &mut Vec<Arc<str>>, level: usize) {
    let missing = level.saturating_sub(ids.len());
    let creator = side.clone();
    let (created, _) = bench::run_count(missing, PRELOAD_CONCURRENCY, move |_| {
        let side = creator.clone();
        async move { side.create().await }
    })
    .await;
    ids.extend(created);
    settle(side, ids.len()).await;
    wait_until("every live task waiting on its input", || async {
        side.ready(ids.len()).await
    })
    .await;
}

/// Wait until `side` has exactly `live` unsettled tasks (cancelled bodies
/// settle after `cancel_task` returns, on both sides).
async fn settle<S: Side>(side: &S, live: usize) {
    wait_until("the live count", || async { side.live().await == live }).await;
}

async fn wait_until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(300);
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn creates<S: Side>(
    side: &S,
    ids: &mut Vec<Arc<str>>,
    total: usize,
    concurrency: usize,
) -> Run {
    let creator = side.clone();
    let (created, run) = bench::run_count(total, concurrency, move |_| {
        let side = creator.clone();
        async move { side.create().await }
    })
    .await;
    ids.extend(created);
    run
}

/// Gets of random live ids (the same picks on both sides) for `budget`,
/// each asserting the task waits on its input.
async fn gets<S: Side>(
    side: &S,
    ids: &Arc<Vec<Arc<str>>>,
    settings: &Settings,
    budget: Duration,
) -> Run {
    let side = side.clone();
    bench::run_for(ids, settings.get_concurrency, budget, move |id| {
        let side = side.clone();
        async move { assert_eq!(side.get(id).await, TaskStatus::InputRequired) }
    })
    .await
}

/// A write timed on distinct tasks.
#[derive(Clone, Copy)]
enum Write {
    Update,
    Cancel,
}

/// `write` once on each of `ids`, from `concurrency` callers.
async fn each<S: Side>(
    side: &S,
    ids: &Arc<Vec<Arc<str>>>,
    concurrency: usize,
    write: Write,
) -> Run {
    let next = Arc::new(AtomicUsize::new(0));
    let ids = ids.clone();
    let side = side.clone();
    let (_, run) = bench::run_count(ids.len(), concurrency, move |_| {
        // A shared cursor, so each id is used exactly once whatever each
        // caller's share.
        let id = ids[next.fetch_add(1, Ordering::Relaxed)].clone();
        let side = side.clone();
        async move {
            match write {
                Write::Update => side.update(id).await,
                Write::Cancel => side.cancel(id).await,
            }
        }
    })
    .await;
    run
}

/// A sample of `ids` reads `want` (soon: mcptask's work moves on after the
/// call returns).
async fn spot_check<S: Side>(side: &S, ids: &Arc<Vec<Arc<str>>>, want: TaskStatus) {
    for id in ids.iter().take(SPOT_CHECKS) {
        wait_until("an answered task to read working", || async {
            side.get(id.clone()).await == want
        })
        .await;
    }
}

/// `count` distinct positions below `len`, from a fixed seed.
fn distinct_picks(len: usize, count: usize, seed: u64) -> Vec<usize> {
    let mut positions: Vec<usize> = (0..len).collect();
    let mut rng = Rng(seed);
    let count = count.min(len);
    for i in 0..count {
        let j = i + rng.below(len - i);
        positions.swap(i, j);
    }
    positions.truncate(count);
    positions
}

fn drop_picked(ids: &mut Vec<Arc<str>>, picks: &[usize]) {
    let mut gone = vec![false; ids.len()];
    for &i in picks {
        gone[i] = true;
    }
    let mut i = 0;
    ids.retain(|_| {
        i += 1;
        !gone[i - 1]
    });
}

fn print_header(settings: &Settings, db: &Path) {
    println!(
        "mcptask_server::task_manager::TaskManager vs rmcp::task_manager::TaskManager (rmcp 3.11, in-memory)"
    );
    println!("machine : {} x {}", num_cpus(), cpu_model());
    println!("memory  : {}", mem_total());
    println!(
        "load    : {} (other work on the machine skews both sides)",
        load_average()
    );
    println!("database: {} on {}", db.display(), filesystem_of(db));
    println!(
        "settings: levels {:?}; {} creates, updates and cancels per side and level from {} callers; gets: {} callers for {:.1}s per side; TTL {} ms; tokio multi-thread, {} workers",
        settings.levels,
        settings.writes,
        settings.write_concurrency,
        settings.get_concurrency,
        settings.get_budget.as_secs_f64(),
        TTL_MS,
        num_cpus(),
    );
    println!();
}

fn print_detail(row: &Row) {
    for (name, pair) in [
        ("create", &row.create),
        ("get", &row.get),
        ("update", &row.update),
        ("cancel", &row.cancel),
    ] {
        println!(
            "[{:>7} live] {name:<6} rmcp {:>8.0}/s ({}) | mcptask {:>8.0}/s ({}) | {:.2}x",
            row.live,
            pair.rmcp.rate(),
            pair.rmcp.latency_text(),
            pair.mcptask.rate(),
            pair.mcptask.latency_text(),
            pair.ratio(),
        );
    }
}

fn print_summary(settings: &Settings, rows: &[Row]) {
    println!();
    println!(
        "| live tasks | call | rmcp/s | mcptask/s | mcptask / rmcp | rmcp p50 / p99 ms | mcptask p50 / p99 ms |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|");
    for row in rows {
        for (name, pair) in [
            ("`spawn`", &row.create),
            ("`get_task`", &row.get),
            ("`update_task`", &row.update),
            ("`cancel_task`", &row.cancel),
        ] {
            let p = |run: &Run| {
                format!(
                    "{:.2} / {:.2}",
                    bench::ms(run.p(0.50)),
                    bench::ms(run.p(0.99))
                )
            };
            println!(
                "| {} | {name} | {:.0} | {:.0} | {:.2}x |  {} | {} |",
                row.live,
                pair.rmcp.rate(),
                pair.mcptask.rate(),
                pair.ratio(),
                p(&pair.rmcp),
                p(&pair.mcptask),
            );
        }
    }
    println!();
    println!(
        "(gets: {} callers; spawn, update and cancel: {} each from {} callers)",
        settings.get_concurrency, settings.writes, settings.write_concurrency
    );
}
