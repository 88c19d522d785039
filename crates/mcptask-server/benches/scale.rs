//! What a store of 1,000,000 tasks costs per request, against the same
//! requests at 10,000, in one run, on an SQLite file and on PostgreSQL.
//!
//! The store is filled with bulk SQL to each level with a realistic mix
//! (60% completed with a result, 10% failed, 5% cancelled, 20% working, 5%
//! waiting for an answer; every task has arguments, results are about half a
//! KiB), and so is the tracker's table of remote tasks (a quarter of them live
//! and due for a poll). At each level one caller times, through the public
//! APIs: `tasks/get` (`TaskRuntime::get_task` of random tasks),
//! `tasks/update` (`update_task` answering a waiting task), `tasks/cancel`
//! (`cancel_task` of a working task), create (`create_task`, one caller: each
//! pays its own commit) and the tracker's claim (`RemoteTaskStore::claim_remote`
//! of 64 due tasks for polling). p50 and p99 per operation and level, and the
//! ratio of the largest level's p99 to the smallest's.
//!
//! Then, on a fresh runtime: process RSS per 100,000 live tasks parked in the
//! process (created through `create_task`, each waiting for its cancel), and
//! the database's size per stored task.
//!
//! Run: `cargo bench -p mcptask-server --bench scale` (10k and 1M).
//! Quick (`MCPTASK_BENCH_QUICK=1`, the test command): 1k and 5k rows, a few
//! dozen samples; it checks every answer, not the timings.
//! Knobs: `MCPTASK_BENCH_BACKENDS`, `MCPTASK_BENCH_LEVELS` (comma-separated
//! row counts), `MCPTASK_BENCH_SAMPLES`, `MCPTASK_BENCH_PARKED`,
//! `MCPTASK_BENCH_DIR`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mcptask_core::client::{Applied, Observation, Phase, RemoteSnapshot, TrackerPolicy};
use mcptask_core::policy::PollPolicy;
use mcptask_server::{CreateRequest, RuntimeConfig, TaskExit, TaskRuntime, TaskTool, ToolRegistry};
use rmcp::model::{TaskStatus, Tool};

use mcptask_testkit::bench::{self, Run, env_number, ms, quick, rss_kib};
use mcptask_testkit::machine;
use mcptask_testkit::rng::Rng;

const TOOL: &str = "search";
const TTL_MS: i64 = 86_400_000;
const ARGUMENTS: &str = r#"{"query":"quarterly revenue by region","limit":50,"format":"table"}"#;
/// Rows written per seeding statement.
const SEED_CHUNK: i64 = 50_000;
const CLAIM_BATCH: i64 = 64;
/// The tracker's default lease: claimed rows stay out of later claims until applied.
const CLAIM_LEASE_MS: i64 = 30_000;

struct Settings {
    levels: Vec<i64>,
    samples: usize,
    parked: usize,
    sqlite: bool,
    postgres: bool,
}

impl Settings {
    fn from_env() -> Self {
        let quick = quick();
        let levels = std::env::var("MCPTASK_BENCH_LEVELS")
            .ok()
            .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
            .unwrap_or_else(|| {
                if quick {
                    vec![1_000, 5_000]
                } else {
                    vec![10_000, 1_000_000]
                }
            });
        let backends =
            std::env::var("MCPTASK_BENCH_BACKENDS").unwrap_or_else(|_| "sqlite,postgres".into());
        Settings {
            levels,
            samples: env_number("MCPTASK_BENCH_SAMPLES")
                .map_or(if quick { 40 } else { 2_000 }, |n| n as usize),
            parked: env_number("MCPTASK_BENCH_PARKED")
                .map_or(if quick { 2_000 } else { 100_000 }, |n| n as usize),
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
    println!("mcptask at scale: request latency by number of stored tasks");
    println!(
        "machine : {} x {}, {}; load {} (shared machine)",
        machine::num_cpus(),
        machine::cpu_model(),
        machine::mem_total(),
        machine::load_average()
    );
    println!(
        "levels  : {:?} tasks (and as many tracked remote tasks); {} samples per operation and level, one caller",
        settings.levels, settings.samples
    );
    let mut dir = None;
    if settings.sqlite {
        let base = std::env::var_os("MCPTASK_BENCH_DIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        let d = tempfile::Builder::new()
            .prefix("mcptask-scale-")
            .tempdir_in(&base)
            .expect("temp dir");
        let file = d.path().join("scale.db");
        println!(
            "\n== SQLite: {} on {}",
            file.display(),
            machine::filesystem_of(&file)
        );
        bench_backend(
            &settings,
            &format!("sqlite:{}", file.display()),
            Db::Sqlite(file.clone()),
        )
        .await;
        dir = Some(d);
    }
    if settings.postgres {
        match mcptask_testkit::pg::fresh_database().await {
            Some(url) => {
                println!("\n== PostgreSQL");
                bench_backend(&settings, &url, Db::Postgres).await;
            }
            None => eprintln!("SKIPPED (scale on PostgreSQL): no PostgreSQL, see above"),
        }
    }
    drop(dir);
    println!("load at end: {}", machine::load_average());
}

enum Db {
    Sqlite(std::path::PathBuf),
    Postgres,
}

/// Per level: each operation's run.
struct Level {
    rows: i64,
    ops: Vec<(&'static str, Run)>,
}

async fn bench_backend(settings: &Settings, url: &str, db: Db) {
    let store = mcptask_sql::open(url).await.expect("open the store");
    if let mcptask_sql::Store::Postgres(pg) = &store {
        let setting = |name: &'static str| async move {
            sqlx::query_scalar::<_, String>(sqlx::AssertSqlSafe(format!("SHOW {name}")))
                .fetch_one(pg.pool())
                .await
                .unwrap_or_else(|_| "?".into())
        };
        println!(
            "server {}, fsync={}, synchronous_commit={}",
            setting("server_version").await,
            setting("fsync").await,
            setting("synchronous_commit").await
        );
    }
    let runtime = start_runtime(&store).await;
    let remote = store.remote_tasks();
    let mut seeded = 0;
    let mut levels = Vec::new();
    let mut used = std::collections::HashSet::new();
    for &rows in &settings.levels {
        let t = Instant::now();
        seed(&store, seeded, rows).await;
        seeded = rows;
        println!(
            "[{rows:>9} tasks] seeded in {:.1}s; load {}",
            t.elapsed().as_secs_f64(),
            machine::load_average()
        );
        let mut ops = Vec::new();
        let mut rng = Rng(rows as u64);
        let samples = settings.samples;
        // Distinct seeded tasks of one kind (n mod 20 in `kinds`), never reused
        // across operations or levels: a cancel or an answer changes its task.
        let mut pick = |rng: &mut Rng, kinds: std::ops::RangeInclusive<i64>| loop {
            let n = rng.below(rows as usize) as i64;
            if kinds.contains(&(n % 20)) && used.insert(n) {
                return n;
            }
        };

        let get = timed(samples, |_| {
            let n = rng.below(rows as usize) as i64;
            let runtime = runtime.clone();
            async move {
                let task = runtime
                    .get_task(&seed_id(n), Some(&principal(n)))
                    .await
                    .expect("get_task");
                // A waiting task answered at an earlier level works again.
                let status = task.status();
                let expected = expected_status(n);
                assert!(
                    status == expected
                        || (expected == TaskStatus::InputRequired && status == TaskStatus::Working),
                    "task {n}: {status:?}, expected {expected:?}"
                );
            }
        })
        .await;
        ops.push(("tasks/get", get));

        // One task in 20 waits for an answer (and 4 in 20 work): take at most
        // half of the smallest level's, so the random picks of distinct tasks
        // stay quick, and the same number at every level, so each p99 is the
        // same rank of its run.
        let changes = change_samples(settings);
        let targets: Vec<i64> = (0..changes).map(|_| pick(&mut rng, 19..=19)).collect();
        let update = timed(changes, |i| {
            let n = targets[i];
            let runtime = runtime.clone();
            async move {
                let answer = [(
                    "confirm".to_string(),
                    serde_json::json!({"action": "accept", "content": {"ok": true}}),
                )];
                runtime
                    .update_task(
                        &seed_id(n),
                        Some(&principal(n)),
                        answer.into_iter().collect(),
                    )
                    .await
                    .expect("update_task");
            }
        })
        .await;
        ops.push(("tasks/update", update));

        let targets: Vec<i64> = (0..changes).map(|_| pick(&mut rng, 15..=18)).collect();
        let cancel = timed(changes, |i| {
            let n = targets[i];
            let runtime = runtime.clone();
            async move {
                runtime
                    .cancel_task(&seed_id(n), Some(&principal(n)))
                    .await
                    .expect("cancel_task");
            }
        })
        .await;
        ops.push(("tasks/cancel", cancel));

        let create = timed(samples, |_| {
            let runtime = runtime.clone();
            async move {
                let request = CreateRequest {
                    tool: TOOL.to_string(),
                    arguments: serde_json::from_str(ARGUMENTS).expect("arguments"),
                    ..Default::default()
                };
                runtime.create_task(request).await.expect("create_task");
            }
        })
        .await;
        ops.push(("create", create));

        // A claim as the tracker makes it: a lease, then (untimed) the apply of
        // a `working` snapshot that reschedules each row at once, so the next
        // claim takes the next due rows and every row churns the way a busy
        // tracker's do (a new index entry per poll, the old one dead).
        let claim = {
            let mut latencies = Vec::with_capacity(samples);
            let started = Instant::now();
            let owner = "scale-bench";
            let snapshot = Observation::Snapshot(RemoteSnapshot {
                status: Some(mcptask_core::TaskStatus::Working),
                ..Default::default()
            });
            let policy = claim_policy();
            for _ in 0..samples {
                let t = Instant::now();
                let claimed = remote
                    .claim_remote(Phase::Poll, owner, now_ms(), CLAIM_LEASE_MS, CLAIM_BATCH)
                    .await
                    .expect("claim_remote");
                latencies.push(t.elapsed());
                assert_eq!(
                    claimed.len() as i64,
                    CLAIM_BATCH,
                    "every claim finds due tasks"
                );
                let applied: Vec<Applied> = claimed
                    .iter()
                    .map(|c| Applied {
                        fence: c.fence.clone(),
                        phase: Phase::Poll,
                        observation: snapshot.clone(),
                        jitter: 0.0,
                    })
                    .collect();
                let ok = remote
                    .apply_remote(&applied, &policy, now_ms())
                    .await
                    .expect("apply_remote");
                assert!(ok.iter().all(|ok| *ok), "every claim held");
            }
            Run {
                ops: samples,
                elapsed: started.elapsed(),
                latencies,
            }
        };
        ops.push(("tracker claim (64)", claim));

        for (name, run) in &ops {
            println!(
                "[{rows:>9} tasks] {name:<20} {} ({} samples)",
                run.latency_text(),
                run.ops
            );
        }
        levels.push(Level { rows, ops });
    }
    print_levels(&levels);

    // The answers and cancels really changed the store.
    let rounds: i64 = settings
        .levels
        .iter()
        .map(|_| change_samples(settings) as i64)
        .sum();
    assert_eq!(
        count(
            &store,
            "SELECT count(*) FROM server_task_inputs WHERE response IS NOT NULL"
        )
        .await,
        rounds,
        "every tasks/update stored its answer"
    );
    assert_eq!(
        count(
            &store,
            "SELECT count(*) FROM server_tasks WHERE cancel_requested"
        )
        .await,
        rounds,
        "every tasks/cancel stored its request"
    );
    let size = database_size(&store, &db).await;
    let stored = count(&store, "SELECT count(*) FROM server_tasks").await;
    println!(
        "database: {:.1} MiB for {stored} tasks and {} tracked remote tasks: {:.0} bytes per task (both tables, indexes included)",
        size as f64 / 1048576.0,
        seeded,
        size as f64 / (stored + seeded) as f64
    );
    runtime.shutdown(Duration::ZERO).await;

    parked_memory(settings, &store).await;
    store.close().await;
}

/// How many `tasks/update` and `tasks/cancel` samples each level takes.
fn change_samples(settings: &Settings) -> usize {
    let smallest = settings.levels.iter().copied().min().unwrap_or(0);
    settings.samples.min(smallest as usize / 40).max(1)
}

/// The tracker's policy for the claim samples: every poll is due again at
/// once, so the rows keep cycling through the due index.
fn claim_policy() -> TrackerPolicy {
    TrackerPolicy {
        poll: PollPolicy {
            default_ms: 1,
            min_ms: 1,
            max_ms: 1,
            input_required_min_ms: 1,
            jitter_permille: 0,
        },
        ..TrackerPolicy::default()
    }
}

/// One caller, `samples` operations one after another: latency of each.
async fn timed<F, Fut>(samples: usize, mut op: F) -> Run
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut latencies = Vec::with_capacity(samples);
    let start = Instant::now();
    for i in 0..samples {
        let t = Instant::now();
        op(i).await;
        latencies.push(t.elapsed());
    }
    Run {
        ops: samples,
        elapsed: start.elapsed(),
        latencies,
    }
}

fn print_levels(levels: &[Level]) {
    let (Some(first), Some(last)) = (levels.first(), levels.last()) else {
        return;
    };
    println!();
    println!(
        "| operation | p50 at {} | p99 at {} | p50 at {} | p99 at {} | p99 ratio |",
        first.rows, first.rows, last.rows, last.rows
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for ((name, small), (_, large)) in first.ops.iter().zip(&last.ops) {
        let ratio = ms(large.p(0.99)) / ms(small.p(0.99));
        println!(
            "| {name} | {:.3} ms | {:.3} ms | {:.3} ms | {:.3} ms | {ratio:.2}x{} |",
            ms(small.p(0.5)),
            ms(small.p(0.99)),
            ms(large.p(0.5)),
            ms(large.p(0.99)),
            if ratio <= 1.5 { "" } else { " (over 1.5x)" }
        );
    }
    println!();
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
    let config = RuntimeConfig {
        background: false,
        max_live_tasks: None,
        max_live_tasks_per_principal: None,
        ..Default::default()
    };
    TaskRuntime::builder(store.server_tasks(), tools)
        .config(config)
        .start()
        .await
        .expect("start the runtime")
}

fn seed_id(n: i64) -> String {
    format!("seed-{n:09}")
}

fn principal(n: i64) -> String {
    format!("principal-{}", n % 100)
}

/// The mix, by n mod 20: 0–11 completed, 12–13 failed, 14 cancelled,
/// 15–18 working, 19 input_required.
fn expected_status(n: i64) -> TaskStatus {
    match n % 20 {
        0..=11 => TaskStatus::Completed,
        12 | 13 => TaskStatus::Failed,
        14 => TaskStatus::Cancelled,
        15..=18 => TaskStatus::Working,
        _ => TaskStatus::InputRequired,
    }
}

/// Seeding statements, over the numbers `$1..=$2`; `$3` now, `$4` the result
/// payload, `$5` the arguments. The same SQL on both backends except for the
/// row source.
fn seed_statements(db_is_sqlite: bool) -> [String; 3] {
    let numbers = if db_is_sqlite {
        "WITH RECURSIVE seq(n) AS (SELECT $1 UNION ALL SELECT n + 1 FROM seq WHERE n < $2) "
    } else {
        "WITH seq(n) AS (SELECT generate_series($1::bigint, $2::bigint)) "
    };
    let status = "CASE WHEN n % 20 < 12 THEN 'completed' WHEN n % 20 < 14 THEN 'failed'
        WHEN n % 20 = 14 THEN 'cancelled' WHEN n % 20 < 19 THEN 'working' ELSE 'input_required' END";
    // Zero-padded, as `seed_id` spells it.
    let (id, local_id) = if db_is_sqlite {
        (
            "'seed-' || printf('%09d', n)",
            "'local-' || printf('%09d', n)",
        )
    } else {
        (
            "'seed-' || lpad(CAST(n AS TEXT), 9, '0')",
            "'local-' || lpad(CAST(n AS TEXT), 9, '0')",
        )
    };
    let tasks = format!(
        "{numbers} INSERT INTO server_tasks (id, principal, tool, arguments, status, status_message,
            result, error, created_at, updated_at, ttl_ms, expires_at, poll_interval_ms, owner,
            claim_token, purge_at)
         SELECT {id}, 'principal-' || CAST(n % 100 AS TEXT), '{TOOL}', $5, {status},
            CASE WHEN n % 20 = 19 THEN 'waiting for confirmation' END,
            CASE WHEN n % 20 < 12 THEN $4 END,
            CASE WHEN n % 20 IN (12, 13) THEN '{{\"code\":-32603,\"message\":\"upstream timed out\"}}' END,
            $3 - n, $3 - n, {TTL_MS}, $3 - n + {TTL_MS}, 5000, 'seed-owner',
            'token-' || CAST(n AS TEXT),
            CASE WHEN n % 20 < 15 THEN $3 + {TTL_MS} END
         FROM seq"
    );
    let inputs = format!(
        "{numbers} INSERT INTO server_task_inputs (task_id, key, request, requested_at)
         SELECT {id}, 'confirm', '{{\"method\":\"elicitation/create\",\"params\":{{\"message\":\"Proceed?\",\"requestedSchema\":{{\"type\":\"object\",\"properties\":{{\"ok\":{{\"type\":\"boolean\"}}}}}}}}}}', $3
         FROM seq WHERE n % 20 = 19"
    );
    // A quarter live and due for a poll; the rest settled long ago.
    let remote = format!(
        "{numbers} INSERT INTO remote_tasks (id, server, server_hash, remote_task_id, principal,
            tool, arguments, status, result, created_at, updated_at, completed_at, next_poll_at,
            poll_interval_ms, event_version, delivered_version)
         SELECT {local_id}, 'upstream', 'hash', {id}, '', '{TOOL}', $5,
            CASE WHEN n % 4 = 0 THEN 'working' ELSE 'completed' END,
            CASE WHEN n % 4 = 0 THEN NULL ELSE $4 END,
            $3 - n, $3 - n, CASE WHEN n % 4 = 0 THEN NULL ELSE $3 - n END,
            CASE WHEN n % 4 = 0 THEN $3 - n END, 5000, 1, 1
         FROM seq"
    );
    [tasks, inputs, remote]
}

/// Fill both tables with rows `from..to` (0-based numbers).
async fn seed(store: &mcptask_sql::Store, from: i64, to: i64) {
    let result = serde_json::json!({
        "content": [{"type": "text", "text": "Revenue by region for Q3: ".to_string() + &"EMEA 1.2M, APAC 0.9M, AMER 2.4M; ".repeat(12)}],
        "isError": false
    })
    .to_string();
    let now = now_ms();
    let mut start = from;
    while start < to {
        let end = (start + SEED_CHUNK).min(to) - 1;
        match store {
            mcptask_sql::Store::Sqlite(s) => {
                let mut tx = s.writer_pool().begin().await.expect("begin");
                for sql in seed_statements(true) {
                    sqlx::query(sqlx::AssertSqlSafe(sql))
                        .bind(start)
                        .bind(end)
                        .bind(now)
                        .bind(&result)
                        .bind(ARGUMENTS)
                        .execute(&mut *tx)
                        .await
                        .expect("seed");
                }
                tx.commit().await.expect("commit");
            }
            mcptask_sql::Store::Postgres(s) => {
                let mut tx = s.pool().begin().await.expect("begin");
                for sql in seed_statements(false) {
                    sqlx::query(sqlx::AssertSqlSafe(sql))
                        .bind(start)
                        .bind(end)
                        .bind(now)
                        .bind(&result)
                        .bind(ARGUMENTS)
                        .execute(&mut *tx)
                        .await
                        .expect("seed");
                }
                tx.commit().await.expect("commit");
            }
        }
        start = end + 1;
    }
    // A store that has been running has statistics; one just filled has not.
    match store {
        mcptask_sql::Store::Sqlite(s) => {
            sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
                .execute(s.writer_pool())
                .await
                .expect("checkpoint");
        }
        mcptask_sql::Store::Postgres(s) => {
            sqlx::query("VACUUM ANALYZE")
                .execute(s.pool())
                .await
                .expect("vacuum analyze");
        }
    }
}

async fn count(store: &mcptask_sql::Store, sql: &'static str) -> i64 {
    match store {
        mcptask_sql::Store::Sqlite(s) => sqlx::query_scalar(sql).fetch_one(s.writer_pool()).await,
        mcptask_sql::Store::Postgres(s) => sqlx::query_scalar(sql).fetch_one(s.pool()).await,
    }
    .expect("count")
}

/// Bytes the store takes on disk: the SQLite file and its WAL after a
/// checkpoint; PostgreSQL's task tables with their indexes and TOAST.
async fn database_size(store: &mcptask_sql::Store, db: &Db) -> u64 {
    match (store, db) {
        (mcptask_sql::Store::Sqlite(s), Db::Sqlite(file)) => {
            sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
                .execute(s.writer_pool())
                .await
                .expect("checkpoint");
            let len = |p: std::path::PathBuf| std::fs::metadata(p).map_or(0, |m| m.len());
            len(file.clone()) + len(file.with_extension("db-wal"))
        }
        (mcptask_sql::Store::Postgres(s), _) => sqlx::query_scalar::<_, i64>(
            "SELECT sum(pg_total_relation_size(c))::bigint FROM unnest(
                    ARRAY['server_tasks', 'server_task_inputs', 'remote_tasks']::regclass[]) c",
        )
        .fetch_one(s.pool())
        .await
        .expect("relation sizes") as u64,
        _ => unreachable!("the store and its description agree"),
    }
}

/// RSS per 100k live tasks parked in the process: the growth of this
/// process's resident memory while a fresh runtime creates `parked` tasks
/// whose work waits for a cancel.
async fn parked_memory(settings: &Settings, store: &mcptask_sql::Store) {
    let runtime = start_runtime(store).await;
    // Warm the paths (pools, allocator arenas) before the baseline.
    let (_, _) = bench::run_count(256, 64, creator(&runtime)).await;
    let before = rss_kib().unwrap_or(0);
    let (_, run) = bench::run_count(settings.parked, 256, creator(&runtime)).await;
    let after = rss_kib().unwrap_or(0);
    assert_eq!(runtime.running_count(), settings.parked + 256);
    let per_100k = (after.saturating_sub(before)) as f64 * 100_000.0 / settings.parked as f64;
    println!(
        "memory  : RSS {:.1} MiB -> {:.1} MiB after parking {} more live tasks ({:.0}/s): {:.1} MiB per 100k live tasks ({:.0} bytes per task)",
        before as f64 / 1024.0,
        after as f64 / 1024.0,
        settings.parked,
        run.rate(),
        per_100k / 1024.0,
        per_100k * 1024.0 / 100_000.0
    );
    runtime.shutdown(Duration::ZERO).await;
}

fn creator(
    runtime: &TaskRuntime,
) -> impl Fn(usize) -> futures::future::BoxFuture<'static, ()> + Clone + Send + Sync + 'static {
    let runtime = runtime.clone();
    move |_| {
        let runtime = runtime.clone();
        Box::pin(async move {
            let request = CreateRequest {
                tool: TOOL.to_string(),
                arguments: serde_json::from_str(ARGUMENTS).expect("arguments"),
                ..Default::default()
            };
            runtime.create_task(request).await.expect("create_task");
        })
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
