//! Side by side, in one run: rmcp's in-memory `TaskManager` against mcptask's
//! durable runtime on an SQLite file (WAL, `synchronous=FULL`), at several
//! numbers of live tasks. Prints create/s, tasks/get/s and mcptask/rmcp ratios.
//!
//! Both sides go through the same harness: the same tokio runtime, the same
//! number of concurrent callers, the same random id picks, and each side's
//! public API exactly as a request handler would call it.
//!
//! Run: `cargo bench -p mcptask-server --bench server_vs_rmcp`
//! Smoke run: `MCPTASK_BENCH_QUICK=1 cargo bench -p mcptask-server --bench server_vs_rmcp`
//! `MCPTASK_BENCH_DIR=/some/dir` puts the database on another filesystem
//! (the default is the system temp dir; it must not be tmpfs for the numbers
//! to mean "durable").

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use mcptask_server::CreateRequest;
use mcptask_server::{RuntimeConfig, TaskExit, TaskRuntime, TaskTool, ToolRegistry};
use rmcp::model::{TaskStatus, Tool};
use rmcp::task_manager::{TaskManager, TaskOptions};

use mcptask_testkit::bench::{self, ms, percentile};
use mcptask_testkit::machine::{
    cpu_model, filesystem_of, load_average, mem_total, num_cpus, read_trimmed,
};
use mcptask_testkit::rng::Rng;

const TOOL: &str = "wait_for_cancel";
/// One hour: nothing expires during a run, on either side. rmcp's default is
/// five minutes, and a limited TTL is what makes its sweep check every entry's
/// clock, so this is the realistic setting, not a handicap.
const TTL_MS: u64 = 3_600_000;
/// Concurrent callers used to reach N live tasks; not measured against each other.
const PRELOAD_CONCURRENCY: usize = 256;

struct Settings {
    sizes: Vec<usize>,
    /// Creates timed at each level (M).
    creates: usize,
    create_concurrency: usize,
    /// Creates timed with a single caller, which group commit cannot help:
    /// every durable create then pays a whole commit.
    serial_creates: usize,
    get_concurrency: usize,
    /// Gets per level, at most; a side that is slower stops at `get_budget`.
    max_gets: usize,
    get_budget: Duration,
}

impl Settings {
    fn from_env() -> Self {
        let quick = std::env::var("MCPTASK_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
        if quick {
            Settings {
                // A smoke run: every path once, at two levels, in seconds.
                sizes: vec![500, 2_000],
                creates: 200,
                create_concurrency: 64,
                serial_creates: 50,
                get_concurrency: 8,
                max_gets: 1_000,
                get_budget: Duration::from_millis(300),
            }
        } else {
            Settings {
                sizes: vec![1_000, 10_000, 100_000],
                creates: 2_000,
                create_concurrency: 64,
                serial_creates: 500,
                get_concurrency: 8,
                max_gets: 20_000,
                get_budget: Duration::from_secs(3),
            }
        }
    }
}

fn main() {
    let settings = Settings::from_env();
    // The default multi-thread runtime (one worker per core), as a server would use.
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    tokio.block_on(run(settings));
}

/// Timing of one batch of creates.
struct CreateRun {
    ids: Vec<Arc<str>>,
    elapsed: Duration,
    latencies: Vec<Duration>,
}

impl CreateRun {
    fn rate(&self) -> f64 {
        self.ids.len() as f64 / self.elapsed.as_secs_f64()
    }
}

/// Timing of one batch of gets.
struct GetRun {
    ops: usize,
    elapsed: Duration,
}

impl GetRun {
    fn rate(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }
}

/// One level's results.
struct Row {
    live: usize,
    rmcp_create: CreateRun,
    mcptask_create: CreateRun,
    rmcp_serial: CreateRun,
    mcptask_serial: CreateRun,
    rmcp_get: GetRun,
    mcptask_get: GetRun,
}

/// rmcp's side: the manager and the ids of every task it holds.
struct RmcpSide {
    manager: TaskManager,
    ids: Vec<Arc<str>>,
}

impl RmcpSide {
    fn creator(&self) -> impl Fn() -> std::future::Ready<Arc<str>> + Clone + Send + Sync + 'static {
        let manager = self.manager.clone();
        move || {
            // `spawn` is synchronous: it takes the manager's mutex, sweeps every
            // entry and inserts; the operation parks until cancelled, so the
            // task stays live for the whole run.
            let task = manager.spawn(TaskOptions::new().with_ttl_ms(TTL_MS), |ctx| {
                Box::pin(async move {
                    ctx.cancelled().await;
                    Err(rmcp::task_manager::TaskExit::Cancelled)
                })
            });
            std::future::ready(Arc::from(task.task_id))
        }
    }

    fn getter(
        &self,
    ) -> impl Fn(Arc<str>) -> std::future::Ready<()> + Clone + Send + Sync + 'static {
        let manager = self.manager.clone();
        move |id| {
            let task = manager.get_task(&id).expect("rmcp get_task");
            assert_eq!(task.status(), TaskStatus::Working);
            std::future::ready(())
        }
    }
}

/// mcptask's side: the durable runtime and the ids of every task it created.
struct McptaskSide {
    store: mcptask_sql::Store,
    runtime: TaskRuntime,
    ids: Vec<Arc<str>>,
}

impl McptaskSide {
    async fn start(db: &Path) -> Self {
        let store = mcptask_sql::open(&format!("sqlite:{}", db.display()))
            .await
            .expect("open the SQLite store");
        let mut tools = ToolRegistry::new();
        tools.register(
            TaskTool::new(
                Tool::new(TOOL, "Waits until cancelled", Arc::new(Default::default())),
                |call| async move {
                    call.ctx.cancelled().await;
                    Err(TaskExit::Cancelled)
                },
            )
            .ttl_ms(Some(TTL_MS as i64)),
        );
        // No maintenance loops: neither side should spend the run sweeping in the
        // background (rmcp has no background sweeper at all).
        // No admission caps either: the run holds up to 100 000 live tasks in
        // one process, as rmcp's in-memory manager does.
        let config = RuntimeConfig {
            background: false,
            max_live_tasks: None,
            max_live_tasks_per_principal: None,
            ..Default::default()
        };
        let runtime = TaskRuntime::builder(store.server_tasks(), tools)
            .config(config)
            .start()
            .await
            .expect("start the runtime");
        Self {
            store,
            runtime,
            ids: Vec::new(),
        }
    }

    fn creator(&self) -> impl Fn() -> BoxFuture<'static, Arc<str>> + Clone + Send + Sync + 'static {
        let runtime = self.runtime.clone();
        move || {
            let runtime = runtime.clone();
            Box::pin(async move {
                let request = CreateRequest {
                    tool: TOOL.to_string(),
                    ..Default::default()
                };
                let task = runtime
                    .create_task(request)
                    .await
                    .expect("mcptask create_task");
                Arc::from(task.task_id)
            })
        }
    }

    fn getter(
        &self,
    ) -> impl Fn(Arc<str>) -> BoxFuture<'static, ()> + Clone + Send + Sync + 'static {
        let runtime = self.runtime.clone();
        move |id| {
            let runtime = runtime.clone();
            Box::pin(async move {
                let task = runtime.get_task(&id, None).await.expect("mcptask get_task");
                assert_eq!(task.status(), TaskStatus::Working);
            })
        }
    }

    fn pool(&self) -> &sqlx::SqlitePool {
        match &self.store {
            mcptask_sql::Store::Sqlite(s) => s.writer_pool(),
            mcptask_sql::Store::Postgres(_) => unreachable!("the benchmark opens an SQLite file"),
        }
    }

    /// Live rows as the store sees them: proves every create was committed.
    async fn live_rows(&self) -> i64 {
        sqlx::query_scalar(
            "SELECT count(*) FROM server_tasks WHERE status IN ('working', 'input_required')",
        )
        .fetch_one(self.pool())
        .await
        .expect("count live rows")
    }

    async fn pragmas(&self) -> (String, i64) {
        let journal: String = sqlx::query_scalar("PRAGMA journal_mode")
            .fetch_one(self.pool())
            .await
            .expect("journal_mode");
        let synchronous: i64 = sqlx::query_scalar("PRAGMA synchronous")
            .fetch_one(self.pool())
            .await
            .expect("synchronous");
        (journal, synchronous)
    }
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

    let mut rmcp = RmcpSide {
        manager: TaskManager::new(),
        ids: Vec::new(),
    };
    let mut mcptask = McptaskSide::start(&db).await;
    let (journal, synchronous) = mcptask.pragmas().await;

    print_header(&settings, &db, &journal, synchronous);
    println!("fsync   : {}", fsync_probe(dir.path()));
    println!();

    let mut rows = Vec::new();
    for &live in &settings.sizes {
        // Reach N live tasks on each side through its ordinary create path.
        let t = Instant::now();
        let missing = live.saturating_sub(rmcp.ids.len());
        let preload = run_creates(missing, PRELOAD_CONCURRENCY, rmcp.creator()).await;
        rmcp.ids.extend(preload.ids);
        let rmcp_preload = t.elapsed();

        let t = Instant::now();
        let missing = live.saturating_sub(mcptask.ids.len());
        let preload = run_creates(missing, PRELOAD_CONCURRENCY, mcptask.creator()).await;
        mcptask.ids.extend(preload.ids);
        let mcptask_preload = t.elapsed();
        println!(
            "[{live:>7} live] reached in {:.1}s (rmcp) / {:.1}s (mcptask); rmcp reports {} running, the store {} live rows",
            rmcp_preload.as_secs_f64(),
            mcptask_preload.as_secs_f64(),
            rmcp.manager.running_task_count(),
            mcptask.live_rows().await,
        );

        // Gets first, so they run at exactly N live tasks; a short warm-up
        // opens the reader connections and touches the caches on both sides.
        let warmup = settings.get_concurrency * 16;
        let budget = Duration::from_millis(500);
        let rmcp_ids = Arc::new(rmcp.ids.clone());
        let mcptask_ids = Arc::new(mcptask.ids.clone());
        run_gets(
            &rmcp_ids,
            settings.get_concurrency,
            warmup,
            budget,
            rmcp.getter(),
        )
        .await;
        run_gets(
            &mcptask_ids,
            settings.get_concurrency,
            warmup,
            budget,
            mcptask.getter(),
        )
        .await;
        let rmcp_get = run_gets(
            &rmcp_ids,
            settings.get_concurrency,
            settings.max_gets,
            settings.get_budget,
            rmcp.getter(),
        )
        .await;
        let mcptask_get = run_gets(
            &mcptask_ids,
            settings.get_concurrency,
            settings.max_gets,
            settings.get_budget,
            mcptask.getter(),
        )
        .await;

        // Then M concurrent creates from N live tasks (growing to N + M), and a
        // few from a single caller, the case group commit cannot help.
        let rmcp_create = run_creates(
            settings.creates,
            settings.create_concurrency,
            rmcp.creator(),
        )
        .await;
        rmcp.ids.extend(rmcp_create.ids.iter().cloned());
        let mcptask_create = run_creates(
            settings.creates,
            settings.create_concurrency,
            mcptask.creator(),
        )
        .await;
        mcptask.ids.extend(mcptask_create.ids.iter().cloned());
        let rmcp_serial = run_creates(settings.serial_creates, 1, rmcp.creator()).await;
        rmcp.ids.extend(rmcp_serial.ids.iter().cloned());
        let mcptask_serial = run_creates(settings.serial_creates, 1, mcptask.creator()).await;
        mcptask.ids.extend(mcptask_serial.ids.iter().cloned());
        assert_eq!(
            mcptask.live_rows().await,
            mcptask.ids.len() as i64,
            "every create must be committed"
        );

        let row = Row {
            live,
            rmcp_create,
            mcptask_create,
            rmcp_serial,
            mcptask_serial,
            rmcp_get,
            mcptask_get,
        };
        print_row_detail(&row);
        rows.push(row);
    }

    print_summary(&settings, &rows);
    println!("load at end: {}", load_average());

    // Stop both sides' parked work before the temp dir goes away.
    rmcp.manager.shutdown();
    mcptask.runtime.shutdown(Duration::ZERO).await;
    mcptask.store.close().await;
}

/// `total` creates spread over `concurrency` callers; each caller creates its
/// share one after another, like a client that waits for each `CreateTaskResult`.
async fn run_creates<F, Fut>(total: usize, concurrency: usize, create: F) -> CreateRun
where
    F: Fn() -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Arc<str>> + Send + 'static,
{
    let (ids, run) = bench::run_count(total, concurrency, move |_| create()).await;
    CreateRun {
        ids,
        elapsed: run.elapsed,
        latencies: run.latencies,
    }
}

/// Up to `max_ops` gets of random existing ids from `concurrency` callers,
/// stopping early once `budget` has passed (rmcp's gets get slow with many tasks).
async fn run_gets<F, Fut>(
    ids: &Arc<Vec<Arc<str>>>,
    concurrency: usize,
    max_ops: usize,
    budget: Duration,
    get: F,
) -> GetRun
where
    F: Fn(Arc<str>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let start = Instant::now();
    let callers: Vec<_> = (0..concurrency)
        .map(|caller| {
            let get = get.clone();
            let ids = ids.clone();
            let share = max_ops / concurrency + usize::from(caller < max_ops % concurrency);
            tokio::spawn(async move {
                // Same seed per caller on both sides: the same ids in the same order.
                let mut rng = Rng(caller as u64 + 1);
                let mut done = 0;
                while done < share && start.elapsed() < budget {
                    get(ids[rng.below(ids.len())].clone()).await;
                    done += 1;
                }
                done
            })
        })
        .collect();
    let mut ops = 0;
    for caller in callers {
        ops += caller.await.expect("get caller panicked");
    }
    GetRun {
        ops,
        elapsed: start.elapsed(),
    }
}

fn latency_text(run: &CreateRun) -> String {
    let mut l = run.latencies.clone();
    l.sort_unstable();
    format!(
        "p50 {:.2} ms, p99 {:.2} ms",
        ms(percentile(&l, 0.50)),
        ms(percentile(&l, 0.99))
    )
}

fn print_header(settings: &Settings, db: &Path, journal: &str, synchronous: i64) {
    let synchronous = match synchronous {
        0 => "OFF".to_string(),
        1 => "NORMAL".to_string(),
        2 => "FULL".to_string(),
        3 => "EXTRA".to_string(),
        other => other.to_string(),
    };
    println!("mcptask vs rmcp TaskManager (rmcp 3.11, in-memory)");
    println!("machine : {} x {}", num_cpus(), cpu_model());
    println!("memory  : {}", mem_total());
    println!(
        "kernel  : {}",
        read_trimmed("/proc/sys/kernel/osrelease").unwrap_or_else(|| "?".into())
    );
    println!(
        "load    : {} (other work on the machine skews both sides)",
        load_average()
    );
    println!("database: {} on {}", db.display(), filesystem_of(db));
    println!("sqlite  : journal_mode={journal}, synchronous={synchronous} (durable commits)");
    println!(
        "settings: creates M={} with {} concurrent callers, then {} with 1 caller; gets: up to {} random ids with {} concurrent callers, at most {:.1}s per side; TTL {} ms; tokio multi-thread, {} workers",
        settings.creates,
        settings.create_concurrency,
        settings.serial_creates,
        settings.max_gets,
        settings.get_concurrency,
        settings.get_budget.as_secs_f64(),
        TTL_MS,
        num_cpus(),
    );
}

/// What one durable commit costs on the database's filesystem at the least:
/// the floor under any group commit. A WAL in steady state is rewritten in
/// place after each checkpoint (overwrite: data only), while a growing file
/// also needs a journal commit for its new size (append), which costs more.
fn fsync_probe(dir: &Path) -> String {
    use std::io::{Seek, SeekFrom, Write};
    const BLOCK: [u8; 4096] = [0; 4096];
    const ROUNDS: usize = 200;
    let path = dir.join("fsync-probe");
    let probe = || -> std::io::Result<(Vec<Duration>, Vec<Duration>)> {
        let mut file = std::fs::File::create(&path)?;
        let mut append = Vec::with_capacity(ROUNDS);
        for _ in 0..ROUNDS {
            let t = Instant::now();
            file.write_all(&BLOCK)?;
            file.sync_data()?;
            append.push(t.elapsed());
        }
        let mut overwrite = Vec::with_capacity(ROUNDS);
        file.seek(SeekFrom::Start(0))?;
        for _ in 0..ROUNDS {
            let t = Instant::now();
            file.write_all(&BLOCK)?;
            file.sync_data()?;
            overwrite.push(t.elapsed());
        }
        Ok((overwrite, append))
    };
    let result = probe();
    let _ = std::fs::remove_file(&path);
    let Ok((mut overwrite, mut append)) = result else {
        return "probe failed".into();
    };
    overwrite.sort_unstable();
    append.sort_unstable();
    format!(
        "4 KiB write + fdatasync: overwrite p50 {:.3} ms / p99 {:.3} ms; append p50 {:.3} ms / p99 {:.3} ms",
        ms(percentile(&overwrite, 0.50)),
        ms(percentile(&overwrite, 0.99)),
        ms(percentile(&append, 0.50)),
        ms(percentile(&append, 0.99)),
    )
}

fn print_row_detail(row: &Row) {
    println!(
        "[{:>7} live] create: rmcp {:>9.0}/s ({}) | mcptask {:>9.0}/s ({})",
        row.live,
        row.rmcp_create.rate(),
        latency_text(&row.rmcp_create),
        row.mcptask_create.rate(),
        latency_text(&row.mcptask_create),
    );
    println!(
        "[{:>7} live] 1 caller: rmcp {:>7.0}/s ({}) | mcptask {:>9.0}/s ({})",
        row.live,
        row.rmcp_serial.rate(),
        latency_text(&row.rmcp_serial),
        row.mcptask_serial.rate(),
        latency_text(&row.mcptask_serial),
    );
    println!(
        "[{:>7} live] get:    rmcp {:>9.0}/s ({} ops in {:.2}s) | mcptask {:>9.0}/s ({} ops in {:.2}s)",
        row.live,
        row.rmcp_get.rate(),
        row.rmcp_get.ops,
        row.rmcp_get.elapsed.as_secs_f64(),
        row.mcptask_get.rate(),
        row.mcptask_get.ops,
        row.mcptask_get.elapsed.as_secs_f64(),
    );
}

fn print_summary(settings: &Settings, rows: &[Row]) {
    println!();
    println!(
        "| live tasks | rmcp create/s | mcptask create/s | create ratio | rmcp get/s | mcptask get/s | get ratio |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for row in rows {
        println!(
            "| {} | {:.0} | {:.0} | {:.2}x | {:.0} | {:.0} | {:.1}x |",
            row.live,
            row.rmcp_create.rate(),
            row.mcptask_create.rate(),
            row.mcptask_create.rate() / row.rmcp_create.rate(),
            row.rmcp_get.rate(),
            row.mcptask_get.rate(),
            row.mcptask_get.rate() / row.rmcp_get.rate(),
        );
    }
    println!();
    println!(
        "(ratio = mcptask / rmcp; creates: M={} from N live with {} callers; gets: {} callers)",
        settings.creates, settings.create_concurrency, settings.get_concurrency
    );
    println!();
    println!("| live tasks | rmcp create/s, 1 caller | mcptask create/s, 1 caller | ratio |");
    println!("|---:|---:|---:|---:|");
    for row in rows {
        println!(
            "| {} | {:.0} | {:.0} | {:.2}x |",
            row.live,
            row.rmcp_serial.rate(),
            row.mcptask_serial.rate(),
            row.mcptask_serial.rate() / row.rmcp_serial.rate(),
        );
    }
    println!();
    println!(
        "(one caller creating {} tasks one after another: no group commit, every create pays a whole commit)",
        settings.serial_creates
    );
    let verdict = |met: bool| if met { "MET" } else { "MISSED" };
    if let Some(row) = rows.iter().find(|r| r.live == 100_000) {
        let ratio = row.mcptask_get.rate() / row.rmcp_get.rate();
        println!(
            "target tasks/get >= 100x rmcp at 100k live: {ratio:.1}x -> {}",
            verdict(ratio >= 100.0)
        );
    }
    if let Some(row) = rows.iter().find(|r| r.live == 10_000) {
        let ratio = row.mcptask_create.rate() / row.rmcp_create.rate();
        println!(
            "target durable create >= rmcp spawn at 10k live: {ratio:.2}x -> {}",
            verdict(ratio >= 1.0)
        );
    }
}
