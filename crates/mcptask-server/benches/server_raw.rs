//! mcptask's server against the raw limit of its own database, in one run, on
//! an SQLite file and on PostgreSQL: how close `TaskRuntime::get_task` and
//! `create_task` come to what the same database does for a bare lookup by id
//! and a bare one-row `INSERT` per commit, with the same number of
//! connections, on the same machine and the same table.
//!
//! - **Reads**: `get_task` of random live tasks from as many callers as the
//!   store has read connections (SQLite 8, PostgreSQL 16), against raw sqlx
//!   `SELECT * FROM server_tasks WHERE id = $1` on a pool of the same size
//!   (no ping before each acquire: the leanest sqlx can do), and on
//!   PostgreSQL against `pgbench -S` (select-only, prepared, same clients).
//! - **Creates**: `create_task` from 64 callers (group commit) against one-row
//!   `INSERT` statements in autocommit (one commit each) from 64 callers on a
//!   pool the size of the store's writer (SQLite 1, PostgreSQL 16), and on
//!   PostgreSQL against `pgbench` running a one-row `INSERT` script.
//! - **A single caller** creating one task after another (no group commit
//!   possible), against the same raw insert from one caller and rmcp's
//!   in-memory `TaskManager::spawn` with as many live tasks.
//!
//! Rounds interleave the sides, so drift in the machine's load hits both.
//! Quick mode (`MCPTASK_BENCH_QUICK=1`, the test command) runs a few hundred
//! operations per side and checks answers and row counts, not speed.
//!
//! Run: `cargo bench -p mcptask-server --bench server_raw`
//! Knobs: `MCPTASK_BENCH_BACKENDS` (`sqlite`, `postgres`, both by default),
//! `MCPTASK_BENCH_LIVE`, `MCPTASK_BENCH_ROUNDS`, `MCPTASK_BENCH_SECS` (per
//! side and round for reads), `MCPTASK_BENCH_CREATES` (per side and round),
//! `MCPTASK_BENCH_PHASES` (mark each side's start on stderr, for a profiler), `MCPTASK_BENCH_DIR` (the SQLite file's
//! directory), `MCPTASK_BENCH_CREATE_WRITERS` (the runtime's group-commit
//! writers; its default otherwise). PostgreSQL: `MCPTASK_TEST_DATABASE_URL` (an admin URL) or the
//! tests' throwaway cluster (`fsync=off`; the settings are printed).

use std::path::Path;
use std::process::Command;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use mcptask_server::{CreateRequest, RuntimeConfig, TaskExit, TaskRuntime, TaskTool, ToolRegistry};
use rmcp::model::{TaskStatus, Tool};
use rmcp::task_manager::{TaskManager, TaskOptions};
use sqlx::{PgPool, SqlitePool};

use mcptask_testkit::bench::{self, Run, env_number, ms, quick, run_count, run_for};
use mcptask_testkit::machine;
use mcptask_testkit::rng::Rng;

const TOOL: &str = "wait_for_cancel";
const RAW_TOOL: &str = "raw_insert";
const TTL_MS: i64 = 3_600_000;
const CREATE_CALLERS: usize = 64;
const PRELOAD_CALLERS: usize = 256;
/// The arguments every created task carries, on both sides: a small but
/// realistic payload rather than `{}`.
const ARGUMENTS: &str = r#"{"query":"quarterly revenue by region","limit":50,"format":"table"}"#;

struct Settings {
    live: usize,
    rounds: usize,
    read_secs: f64,
    creates: usize,
    serial: usize,
    pgbench_secs: u64,
    sqlite: bool,
    postgres: bool,
}

impl Settings {
    fn from_env() -> Self {
        let quick = quick();
        let backends =
            std::env::var("MCPTASK_BENCH_BACKENDS").unwrap_or_else(|_| "sqlite,postgres".into());
        let n = |name, quick_value, full_value| {
            env_number(name).map_or(if quick { quick_value } else { full_value }, |v| v)
        };
        Settings {
            live: n("MCPTASK_BENCH_LIVE", 1_000, 10_000) as usize,
            rounds: n("MCPTASK_BENCH_ROUNDS", 1, 3) as usize,
            read_secs: n("MCPTASK_BENCH_SECS", 0, 3).max(1) as f64 * if quick { 0.3 } else { 1.0 },
            creates: n("MCPTASK_BENCH_CREATES", 256, 4_000) as usize,
            serial: if quick { 64 } else { 500 },
            pgbench_secs: if quick { 1 } else { 5 },
            sqlite: backends.contains("sqlite"),
            postgres: backends.contains("postgres"),
        }
    }
}

fn main() {
    let settings = Settings::from_env();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(run(settings));
}

async fn run(settings: Settings) {
    println!("mcptask server vs the raw limit of its database");
    println!(
        "machine : {} x {}, {}; kernel {}",
        machine::num_cpus(),
        machine::cpu_model(),
        machine::mem_total(),
        machine::read_trimmed("/proc/sys/kernel/osrelease").unwrap_or_else(|| "?".into())
    );
    println!(
        "load    : {} (other work on the machine skews every side)",
        machine::load_average()
    );
    let mut summary = Vec::new();

    let rmcp = rmcp_serial(&settings).await;
    println!(
        "rmcp TaskManager::spawn, 1 caller, at {} live: {:.0}/s ({})",
        settings.live,
        rmcp.rate(),
        rmcp.latency_text()
    );

    if settings.sqlite {
        let base = std::env::var_os("MCPTASK_BENCH_DIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        let dir = tempfile::Builder::new()
            .prefix("mcptask-bench-")
            .tempdir_in(&base)
            .expect("temp dir for the database");
        let file = dir.path().join("bench.db");
        println!(
            "\n== SQLite: {} on {}",
            file.display(),
            machine::filesystem_of(&file)
        );
        let raw = Raw::sqlite(&file).await;
        summary.push(
            bench_backend(
                &settings,
                "SQLite",
                &format!("sqlite:{}", file.display()),
                raw,
                None,
            )
            .await,
        );
    }
    if settings.postgres {
        match mcptask_testkit::pg::fresh_database().await {
            Some(url) => {
                let raw = Raw::postgres(&url).await;
                println!("\n== PostgreSQL: {}", raw.describe().await);
                let pgbench = bench::pg_tool("pgbench", "server_raw: the pgbench columns");
                summary.push(
                    bench_backend(
                        &settings,
                        "PostgreSQL",
                        &url,
                        raw,
                        pgbench.map(|bin| PgBench {
                            bin,
                            url: url.clone(),
                        }),
                    )
                    .await,
                );
            }
            None => eprintln!("SKIPPED (server_raw on PostgreSQL): no PostgreSQL, see above"),
        }
    }

    print_summary(&settings, &summary, &rmcp);
    println!("load at end: {}", machine::load_average());
}

/// One backend's measurements, every round.
struct Measured {
    backend: &'static str,
    get: Vec<Run>,
    raw_get: Vec<Run>,
    pgbench_select: Vec<f64>,
    create: Vec<Run>,
    raw_insert: Vec<Run>,
    pgbench_insert: Vec<f64>,
    serial: Vec<Run>,
    raw_serial: Vec<Run>,
}

async fn bench_backend(
    settings: &Settings,
    backend: &'static str,
    url: &str,
    raw: Raw,
    pgbench: Option<PgBench>,
) -> Measured {
    let store = mcptask_sql::open(url).await.expect("open the store");
    let runtime = start_runtime(&store).await;
    let (read_conns, write_conns) = raw.connections();
    println!(
        "connections: {read_conns} for reads, {write_conns} for writes, on both sides; load {}",
        machine::load_average()
    );

    // N live tasks, each created through the runtime and parked in the process.
    let (ids, preload) = run_count(settings.live, PRELOAD_CALLERS, creator(&runtime)).await;
    println!(
        "reached {} live tasks in {:.1}s",
        ids.len(),
        preload.elapsed.as_secs_f64()
    );
    let ids = Arc::new(ids);
    if let Some(pgbench) = &pgbench {
        pgbench.init();
    }

    let budget = Duration::from_secs_f64(settings.read_secs);
    let warmup = Duration::from_millis(if quick() { 50 } else { 500 });
    run_for(&ids, read_conns, warmup, getter(&runtime)).await;
    run_for(&ids, read_conns, warmup, raw.getter()).await;

    let mut m = Measured {
        backend,
        get: Vec::new(),
        raw_get: Vec::new(),
        pgbench_select: Vec::new(),
        create: Vec::new(),
        raw_insert: Vec::new(),
        pgbench_insert: Vec::new(),
        serial: Vec::new(),
        raw_serial: Vec::new(),
    };
    let mut created = ids.len();
    for round in 1..=settings.rounds {
        // Reads, then creates: a round's reads always see the same table.
        phase("server get");
        let get = run_for(&ids, read_conns, budget, getter(&runtime)).await;
        phase("raw get");
        let raw_get = run_for(&ids, read_conns, budget, raw.getter()).await;
        phase("gets done");
        let select = pgbench
            .as_ref()
            .map(|p| p.select(read_conns, settings.pgbench_secs));
        println!(
            "[round {round}] get: server {:>8.0}/s ({}) | raw sqlx {:>8.0}/s ({}){}",
            get.rate(),
            get.latency_text(),
            raw_get.rate(),
            raw_get.latency_text(),
            select.map_or(String::new(), |tps| format!(" | pgbench -S {tps:.0}/s")),
        );

        phase("server create");
        let (new, create) = run_count(settings.creates, CREATE_CALLERS, creator(&runtime)).await;
        created += new.len();
        phase("raw create");
        let (_, raw_insert) = run_count(settings.creates, CREATE_CALLERS, raw.inserter()).await;
        phase("creates done");
        let insert = pgbench
            .as_ref()
            .map(|p| p.insert(write_conns, settings.pgbench_secs));
        let (new, serial) = run_count(settings.serial, 1, creator(&runtime)).await;
        created += new.len();
        let (_, raw_serial) = run_count(settings.serial, 1, raw.inserter()).await;
        println!(
            "[round {round}] create, {CREATE_CALLERS} callers: server {:>7.0}/s ({}) | raw 1 row per commit {:>7.0}/s ({}){}",
            create.rate(),
            create.latency_text(),
            raw_insert.rate(),
            raw_insert.latency_text(),
            insert.map_or(String::new(), |tps| format!(" | pgbench insert {tps:.0}/s")),
        );
        println!(
            "[round {round}] create, 1 caller: server {:>7.0}/s ({}) | raw {:>7.0}/s ({})",
            serial.rate(),
            serial.latency_text(),
            raw_serial.rate(),
            raw_serial.latency_text(),
        );
        m.get.push(get);
        m.raw_get.push(raw_get);
        m.pgbench_select.extend(select);
        m.create.push(create);
        m.raw_insert.push(raw_insert);
        m.pgbench_insert.extend(insert);
        m.serial.push(serial);
        m.raw_serial.push(raw_serial);
    }

    // Every create the runtime acknowledged is a committed live row.
    assert_eq!(
        raw.count_live(TOOL).await,
        created as i64,
        "every acknowledged create must be committed"
    );
    assert_eq!(
        raw.count_live(RAW_TOOL).await,
        (settings.rounds * (settings.creates + settings.serial)) as i64,
        "every raw insert must be committed"
    );
    runtime.shutdown(Duration::ZERO).await;
    store.close().await;
    raw.close().await;
    m
}

async fn start_runtime(store: &mcptask_sql::Store) -> TaskRuntime {
    let mut tools = ToolRegistry::new();
    tools.register(
        TaskTool::new(
            Tool::new(TOOL, "Waits until cancelled", Arc::new(Default::default())),
            |call| async move {
                call.ctx.cancelled().await;
                Err(TaskExit::Cancelled)
            },
        )
        .ttl_ms(Some(TTL_MS)),
    );
    // No background loops (nothing to sweep during the run) and no caps: the
    // measured work is the request path alone.
    let defaults = RuntimeConfig::default();
    let config = RuntimeConfig {
        background: false,
        max_live_tasks: None,
        max_live_tasks_per_principal: None,
        create_writers: env_number("MCPTASK_BENCH_CREATE_WRITERS")
            .map_or(defaults.create_writers, |n| Some(n as usize)),
        ..defaults
    };
    println!(
        "create writers: {}",
        config
            .create_writers
            .unwrap_or_else(|| store.server_tasks().create_writers())
    );
    TaskRuntime::builder(store.server_tasks(), tools)
        .config(config)
        .start()
        .await
        .expect("start the runtime")
}

fn creator(
    runtime: &TaskRuntime,
) -> impl Fn(usize) -> futures::future::BoxFuture<'static, Arc<str>> + Clone + Send + Sync + 'static
{
    let runtime = runtime.clone();
    move |_| {
        let runtime = runtime.clone();
        Box::pin(async move {
            let arguments = serde_json::from_str(ARGUMENTS).expect("arguments");
            let request = CreateRequest {
                tool: TOOL.to_string(),
                arguments,
                ..Default::default()
            };
            let task = runtime.create_task(request).await.expect("create_task");
            Arc::from(task.task_id)
        })
    }
}

fn getter(
    runtime: &TaskRuntime,
) -> impl Fn(Arc<str>) -> futures::future::BoxFuture<'static, ()> + Clone + Send + Sync + 'static {
    let runtime = runtime.clone();
    move |id| {
        let runtime = runtime.clone();
        Box::pin(async move {
            let task = runtime.get_task(&id, None).await.expect("get_task");
            assert_eq!(task.status(), TaskStatus::Working);
        })
    }
}

/// rmcp's in-memory spawn from one caller with `live` tasks already held.
async fn rmcp_serial(settings: &Settings) -> Run {
    let manager = TaskManager::new();
    let spawn = {
        let manager = manager.clone();
        move |_| {
            let task = manager.spawn(TaskOptions::new().with_ttl_ms(TTL_MS as u64), |ctx| {
                Box::pin(async move {
                    ctx.cancelled().await;
                    Err(rmcp::task_manager::TaskExit::Cancelled)
                })
            });
            std::future::ready(task.task_id)
        }
    };
    run_count(settings.live, PRELOAD_CALLERS, spawn.clone()).await;
    let (_, run) = run_count(settings.serial * settings.rounds, 1, spawn).await;
    assert_eq!(
        manager.running_task_count(),
        settings.live + settings.serial * settings.rounds
    );
    manager.shutdown();
    run
}

/// The database driven directly with sqlx, on pools the size of the store's.
#[derive(Clone)]
enum Raw {
    Sqlite { read: SqlitePool, write: SqlitePool },
    Postgres(PgPool),
}

const RAW_GET: &str = "SELECT * FROM server_tasks WHERE id = $1";
const RAW_INSERT: &str = "INSERT INTO server_tasks (id, tool, arguments, status, created_at,
        updated_at, ttl_ms, expires_at, poll_interval_ms, owner, claim_token)
     VALUES ($1, $2, $3, 'working', $4, $4, $5, $6, 5000, 'raw-bench', $7)";

impl Raw {
    async fn sqlite(file: &Path) -> Self {
        use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
        // The store's own settings: WAL, durable commits, its page cache.
        let options = SqliteConnectOptions::from_str(&format!("sqlite:{}", file.display()))
            .expect("sqlite url")
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .pragma("cache_size", mcptask_sql::sqlite::SQLITE_CACHE_SIZE)
            .busy_timeout(Duration::from_secs(60));
        // Every connection open from the start: the bundled SQLite shares one
        // page-cache budget between all connections of the process (the sum
        // of their sizes), so a pool that opened only when its turn came
        // would leave the other side a smaller cache than its own.
        let pool = |n| {
            sqlx::pool::PoolOptions::<sqlx::Sqlite>::new()
                .max_connections(n)
                .min_connections(n)
                .test_before_acquire(false)
                .connect_lazy_with(options.clone())
        };
        Raw::Sqlite {
            read: pool(8),
            write: pool(1),
        }
    }

    async fn postgres(url: &str) -> Self {
        let options = sqlx::postgres::PgConnectOptions::from_str(url).expect("postgres url");
        Raw::Postgres(
            sqlx::pool::PoolOptions::<sqlx::Postgres>::new()
                .max_connections(16)
                .test_before_acquire(false)
                .connect_lazy_with(options),
        )
    }

    /// (read connections, write connections) of the store this stands beside.
    fn connections(&self) -> (usize, usize) {
        match self {
            Raw::Sqlite { .. } => (8, 1),
            Raw::Postgres(_) => (16, 16),
        }
    }

    async fn describe(&self) -> String {
        let Raw::Postgres(pool) = self else {
            return "SQLite".into();
        };
        let setting = |name: &'static str| {
            let pool = pool.clone();
            async move {
                sqlx::query_scalar::<_, String>(sqlx::AssertSqlSafe(format!("SHOW {name}")))
                    .fetch_one(&pool)
                    .await
                    .unwrap_or_else(|_| "?".into())
            }
        };
        format!(
            "server {}, fsync={}, synchronous_commit={}, 127.0.0.1 TCP",
            setting("server_version").await,
            setting("fsync").await,
            setting("synchronous_commit").await
        )
    }

    fn getter(
        &self,
    ) -> impl Fn(Arc<str>) -> futures::future::BoxFuture<'static, ()> + Clone + Send + Sync + 'static
    {
        let raw = self.clone();
        move |id| {
            let raw = raw.clone();
            Box::pin(async move {
                // The whole row, as the store reads it, decoded by name.
                let status: String = match &raw {
                    Raw::Sqlite { read, .. } => sqlx::query(RAW_GET)
                        .bind(&*id)
                        .fetch_one(read)
                        .await
                        .and_then(|row| sqlx::Row::try_get(&row, "status")),
                    Raw::Postgres(pool) => sqlx::query(RAW_GET)
                        .bind(&*id)
                        .fetch_one(pool)
                        .await
                        .and_then(|row| sqlx::Row::try_get(&row, "status")),
                }
                .expect("raw lookup");
                assert_eq!(status, "working");
            })
        }
    }

    fn inserter(
        &self,
    ) -> impl Fn(usize) -> futures::future::BoxFuture<'static, ()> + Clone + Send + Sync + 'static
    {
        let raw = self.clone();
        move |_| {
            let raw = raw.clone();
            Box::pin(async move {
                let id = format!("raw-{:016x}", rand_id());
                let now = now_ms();
                let done = match &raw {
                    Raw::Sqlite { write, .. } => sqlx::query(RAW_INSERT)
                        .bind(&id)
                        .bind(RAW_TOOL)
                        .bind(ARGUMENTS)
                        .bind(now)
                        .bind(TTL_MS)
                        .bind(now + TTL_MS)
                        .bind(&id)
                        .execute(write)
                        .await
                        .map(|r| r.rows_affected()),
                    Raw::Postgres(pool) => sqlx::query(RAW_INSERT)
                        .bind(&id)
                        .bind(RAW_TOOL)
                        .bind(ARGUMENTS)
                        .bind(now)
                        .bind(TTL_MS)
                        .bind(now + TTL_MS)
                        .bind(&id)
                        .execute(pool)
                        .await
                        .map(|r| r.rows_affected()),
                };
                assert_eq!(done.expect("raw insert"), 1);
            })
        }
    }

    async fn count_live(&self, tool: &str) -> i64 {
        const COUNT: &str = "SELECT count(*) FROM server_tasks
             WHERE tool = $1 AND status IN ('working', 'input_required')";
        match self {
            Raw::Sqlite { read, .. } => sqlx::query_scalar(COUNT).bind(tool).fetch_one(read).await,
            Raw::Postgres(pool) => sqlx::query_scalar(COUNT).bind(tool).fetch_one(pool).await,
        }
        .expect("count live rows")
    }

    async fn close(&self) {
        match self {
            Raw::Sqlite { read, write } => {
                read.close().await;
                write.close().await;
            }
            Raw::Postgres(pool) => pool.close().await,
        }
    }
}

/// With `MCPTASK_BENCH_PHASES` set, mark where each measured side starts on
/// stderr (a file a profiler's timer can watch).
fn phase(name: &str) {
    if std::env::var_os("MCPTASK_BENCH_PHASES").is_some() {
        eprintln!("phase: {name}");
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A unique-enough id for raw rows: a process-wide counter mixed with the clock.
fn rand_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    Rng(n ^ (now_ms() as u64) << 20).next_u64()
}

/// `pgbench` against the benchmark's database.
struct PgBench {
    bin: std::path::PathBuf,
    url: String,
}

impl PgBench {
    /// The select-only tables (scale 1: 100,000 accounts), in the same database.
    fn init(&self) {
        let out = Command::new(&self.bin)
            .args(["-i", "-s", "1", "-q", &self.url])
            .output()
            .expect("run pgbench -i");
        assert!(
            out.status.success(),
            "pgbench -i failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `pgbench -S`: transactions per second.
    fn select(&self, clients: usize, secs: u64) -> f64 {
        self.run(&["-S"], clients, secs)
    }

    /// A one-row `INSERT` per transaction into `server_tasks`, as the raw
    /// sqlx insert does: transactions per second.
    fn insert(&self, clients: usize, secs: u64) -> f64 {
        let script =
            std::env::temp_dir().join(format!("mcptask-pgbench-{}.sql", std::process::id()));
        std::fs::write(
            &script,
            format!(
                "INSERT INTO server_tasks (id, tool, arguments, status, created_at, updated_at, \
                 ttl_ms, expires_at, poll_interval_ms, owner, claim_token) VALUES \
                 (gen_random_uuid()::text, 'pgbench_insert', '{ARGUMENTS}', 'working', 0, 0, \
                 {TTL_MS}, {TTL_MS}, 5000, 'raw-bench', md5(random()::text));\n"
            ),
        )
        .expect("write the pgbench script");
        let tps = self.run(&["-f", script.to_str().expect("utf-8 path")], clients, secs);
        let _ = std::fs::remove_file(&script);
        tps
    }

    fn run(&self, mode: &[&str], clients: usize, secs: u64) -> f64 {
        let clients = clients.to_string();
        let secs = secs.to_string();
        let threads = machine::num_cpus().to_string();
        let out = Command::new(&self.bin)
            .args([
                "-n", "-M", "prepared", "-c", &clients, "-j", &threads, "-T", &secs,
            ])
            .args(mode)
            .arg(&self.url)
            .output()
            .expect("run pgbench");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "pgbench failed: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // "number of failed transactions" is printed from PostgreSQL 15 on.
        if let Some(failed) = text
            .lines()
            .find_map(|l| l.strip_prefix("number of failed transactions: "))
        {
            assert!(
                failed.starts_with("0 "),
                "pgbench transactions failed: {failed}"
            );
        }
        text.lines()
            .find_map(|l| l.strip_prefix("tps = "))
            .and_then(|l| l.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("no tps in pgbench output: {text}"))
    }
}

/// "min–max" of a series.
fn range(values: impl IntoIterator<Item = f64>, unit: &str) -> String {
    let (lo, hi) = values
        .into_iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if lo > hi {
        return "n/a".into();
    }
    if (hi - lo).abs() < f64::EPSILON * hi.abs().max(1.0) {
        format!("{lo:.2}{unit}")
    } else {
        format!("{lo:.2}–{hi:.2}{unit}")
    }
}

fn rates(runs: &[Run]) -> String {
    let (lo, hi) = runs
        .iter()
        .map(Run::rate)
        .fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if runs.len() == 1 {
        format!("{lo:.0}")
    } else {
        format!("{lo:.0}–{hi:.0}")
    }
}

fn ratios(a: &[Run], b: &[Run]) -> String {
    range(a.iter().zip(b).map(|(a, b)| a.rate() / b.rate()), "x")
}

fn ratios_tps(a: &[Run], tps: &[f64]) -> String {
    if tps.is_empty() {
        return "n/a".into();
    }
    range(a.iter().zip(tps).map(|(a, t)| a.rate() / t), "x")
}

fn print_summary(settings: &Settings, rows: &[Measured], rmcp: &Run) {
    println!();
    println!(
        "{} live tasks, {} round(s); ranges are over rounds",
        settings.live, settings.rounds
    );
    println!();
    println!(
        "| backend | server get/s | raw sqlx get/s | server / raw | pgbench -S tps | server / pgbench |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for m in rows {
        println!(
            "| {} | {} | {} | {} | {} | {} |",
            m.backend,
            rates(&m.get),
            rates(&m.raw_get),
            ratios(&m.get, &m.raw_get),
            tps_text(&m.pgbench_select),
            ratios_tps(&m.get, &m.pgbench_select),
        );
    }
    println!();
    // The raw one-row-per-commit limit is the better of 64 callers and one:
    // 64 callers queueing for SQLite's single connection mostly measure sqlx's
    // pool hand-offs, which would flatter the server.
    println!(
        "| backend | server create/s ({CREATE_CALLERS} callers) | raw 1-row INSERT/s, {CREATE_CALLERS} callers | raw, 1 caller | server / best raw | pgbench INSERT tps | server / pgbench |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for m in rows {
        println!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            m.backend,
            rates(&m.create),
            rates(&m.raw_insert),
            rates(&m.raw_serial),
            range(create_vs_raw(m), "x"),
            tps_text(&m.pgbench_insert),
            ratios_tps(&m.create, &m.pgbench_insert),
        );
    }
    println!();
    println!(
        "| backend | server create/s, 1 caller | raw INSERT/s, 1 caller | rmcp spawn/s, 1 caller | server / rmcp |"
    );
    println!("|---|---:|---:|---:|---:|");
    for m in rows {
        println!(
            "| {} | {} | {} | {:.0} | {} |",
            m.backend,
            rates(&m.serial),
            rates(&m.raw_serial),
            rmcp.rate(),
            range(m.serial.iter().map(|s| s.rate() / rmcp.rate()), "x"),
        );
    }
    println!();
    let verdict = |met: bool| if met { "MET" } else { "MISSED" };
    for m in rows {
        let worst = |v: Vec<f64>| v.into_iter().fold(f64::MAX, f64::min);
        let get = worst(
            m.get
                .iter()
                .zip(&m.raw_get)
                .map(|(a, b)| a.rate() / b.rate())
                .collect(),
        );
        let create = worst(create_vs_raw(m));
        println!(
            "target {}: get >= 0.8x raw: worst round {get:.2}x -> {}; create (64 callers) >= 2x the best raw one-row-per-commit: worst round {create:.2}x -> {}",
            m.backend,
            verdict(get >= 0.8),
            verdict(create >= 2.0)
        );
        if m.backend == "SQLite" {
            let serial = worst(m.serial.iter().map(|s| s.rate() / rmcp.rate()).collect());
            println!(
                "target SQLite: single-caller create >= rmcp spawn at {} live: worst round {serial:.2}x -> {}",
                settings.live,
                verdict(serial >= 1.0)
            );
        }
    }
    println!(
        "(latency p50 of the last round's creates: {})",
        rows.iter()
            .filter_map(|m| m.create.last().map(|r| format!(
                "{} {:.2} ms",
                m.backend,
                ms(r.p(0.5))
            )))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

/// Per round: server creates (64 callers) over the best raw one-row-per-commit rate.
fn create_vs_raw(m: &Measured) -> Vec<f64> {
    m.create
        .iter()
        .zip(m.raw_insert.iter().zip(&m.raw_serial))
        .map(|(server, (many, one))| server.rate() / many.rate().max(one.rate()))
        .collect()
}

fn tps_text(tps: &[f64]) -> String {
    if tps.is_empty() {
        return "n/a".into();
    }
    range(tps.iter().copied(), "").replace(".00", "")
}
