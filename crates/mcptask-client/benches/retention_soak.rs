//! Retention soak: tracked tasks go through their whole life in the store
//! (recorded, polled to `completed`, every event delivered, purged after the
//! retention), window after window, on a SQLite file. After each window the
//! benchmark prints the database size (file + WAL) and this process's RSS:
//! once the first retention window has passed, both stay flat however many
//! tasks went through. It checks (and fails otherwise, in its smoke run
//! too) that every task past the retention is purged and that the pages the
//! database uses stay flat from the retention's steady state to the end.
//!
//! Every step is a store flow the tracker's workers run (`insert_remote`,
//! `claim_remote` + `apply_remote`, `claim_notifications` +
//! `finish_notifications`, `purge_remote`), on an injected clock, so a
//! 7-day retention is simulated in seconds.
//!
//! ```text
//! cargo bench -p mcptask-client --bench retention_soak            # 200,000 tasks
//! SOAK_TASKS=20000 cargo bench -p mcptask-client --bench retention_soak
//! MCPTASK_BENCH_QUICK=1 cargo bench -p mcptask-client --bench retention_soak   # smoke: 2,000
//! ```
//!
//! Tasks go through in 20 windows of `SOAK_TASKS / 20`; the retention is
//! two windows.

use std::sync::Arc;
use std::time::Instant;

use mcptask_core::TaskStatus;
use mcptask_core::client::{
    Applied, NewRemoteTask, NotifyResult, Observation, Phase, RemoteSnapshot, TrackerPolicy,
};
use mcptask_core::store::RemoteTaskStore;

const WINDOWS: i64 = 20;
const RETENTION_WINDOWS: i64 = 2;
const BATCH: i64 = 500;

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn db_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// Pages of the SQLite file at `db` in use (its pages less the free ones):
/// what the data takes, whatever the file kept of its largest size.
async fn pages_in_use(db: &std::path::Path) -> i64 {
    use sqlx::Connection as _;
    let url = format!("sqlite:{}", db.display());
    let mut conn = sqlx::SqliteConnection::connect(&url)
        .await
        .expect("open the soak database");
    let pages: i64 = sqlx::query_scalar("PRAGMA page_count")
        .fetch_one(&mut conn)
        .await
        .expect("page_count");
    let free: i64 = sqlx::query_scalar("PRAGMA freelist_count")
        .fetch_one(&mut conn)
        .await
        .expect("freelist_count");
    conn.close().await.expect("close");
    pages - free
}

fn snapshot(status: TaskStatus) -> RemoteSnapshot {
    RemoteSnapshot {
        status: Some(status),
        poll_interval_ms: Some(1_000),
        result: (status == TaskStatus::Completed)
            .then(|| serde_json::json!({"content": [{"type": "text", "text": "x".repeat(200)}]})),
        ..Default::default()
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    // The test command runs every bench target once as a smoke test
    // (MCPTASK_BENCH_QUICK=1): a few thousand tasks are enough to run
    // every flow through purge.
    let quick = std::env::var("MCPTASK_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
    let total: i64 = std::env::var("SOAK_TASKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if quick { 2_000 } else { 200_000 });
    let per_window = (total / WINDOWS).max(1);
    let window_ms: i64 = 3_600_000;
    let (store, dir) = mcptask_testkit::db::fresh_sqlite().await;
    let store: Arc<dyn RemoteTaskStore> = Arc::new(store);
    let mut policy = TrackerPolicy::default();
    policy.poll.jitter_permille = 0;
    policy.retention_ms = RETENTION_WINDOWS * window_ms;
    println!(
        "retention soak: {total} tasks in {WINDOWS} windows of {per_window}, retention {RETENTION_WINDOWS} windows (SQLite)"
    );
    println!("window  tracked  purged  db_MiB  rss_MiB  secs");
    let started = Instant::now();
    // The window after which the store holds its steady state: tasks of
    // the retention, the purge at work for a window already.
    let steady_window = RETENTION_WINDOWS + 2;
    let mut steady_pages = None;
    let mut now: i64 = 1_800_000_000_000;
    let mut next_id = 0i64;
    let mut purged_total = 0u64;
    for window in 1..=WINDOWS {
        for _ in 0..per_window {
            next_id += 1;
            let task = NewRemoteTask {
                face: None,
                id: format!("rt_{next_id:09}"),
                server: "soak".into(),
                server_hash: "h".into(),
                remote_task_id: format!("r-{next_id}"),
                driver: Default::default(),
                principal: None,
                conversation: None,
                call_id: None,
                correlation: None,
                tool: "slow".into(),
                arguments: Some(serde_json::json!({"n": next_id})),
                trace: None,
                snapshot: snapshot(TaskStatus::Working),
                created_at: now,
            };
            store.insert_remote(&task, &policy).await.expect("insert");
        }
        now += 1_000;
        loop {
            let claimed = store
                .claim_remote(Phase::Poll, "soak", now, 60_000, BATCH)
                .await
                .expect("claim");
            if claimed.is_empty() {
                break;
            }
            let results: Vec<Applied> = claimed
                .iter()
                .map(|c| Applied {
                    fence: c.fence.clone(),
                    phase: Phase::Poll,
                    observation: Observation::Snapshot(snapshot(TaskStatus::Completed)),
                    jitter: 0.5,
                })
                .collect();
            store
                .apply_remote(&results, &policy, now)
                .await
                .expect("apply");
        }
        loop {
            let claims = store
                .claim_notifications("soak", now, 60_000, BATCH, 32)
                .await
                .expect("claim notifications");
            if claims.is_empty() {
                break;
            }
            let results: Vec<NotifyResult> = claims
                .iter()
                .map(|c| NotifyResult {
                    fence: c.fence.clone(),
                    delivered_through: c.events.last().map_or(0, |e| e.version),
                    dead_lettered: Vec::new(),
                    failure: None,
                    released: false,
                    lagged: Vec::new(),
                    dead: Vec::new(),
                })
                .collect();
            store
                .finish_notifications(&results, now)
                .await
                .expect("finish notifications");
        }
        now += window_ms - 1_000;
        loop {
            let n = store
                .purge_remote(now - policy.retention_ms, 1_000)
                .await
                .expect("purge");
            purged_total += n;
            if n < 1_000 {
                break;
            }
        }
        println!(
            "{window:>6}  {next_id:>7}  {purged_total:>6}  {:>6.1}  {:>7.1}  {:>4.0}",
            db_bytes(dir.path()) as f64 / 1_048_576.0,
            rss_kib() as f64 / 1024.0,
            started.elapsed().as_secs_f64()
        );
        // Tasks settle a second into their window; those of the windows
        // before the last `RETENTION_WINDOWS` are past the retention now.
        let expired = (window - RETENTION_WINDOWS).max(0) * per_window;
        assert_eq!(
            purged_total as i64, expired,
            "window {window}: {purged_total} tasks purged, {expired} are past the retention"
        );
        if window == steady_window {
            steady_pages = Some(pages_in_use(&dir.path().join("test.db")).await);
        }
    }
    assert_eq!(store.notification_backlog().await.expect("backlog"), 0);
    // Flat: 16 more windows of tasks went through since the steady state;
    // what the database uses did not grow with them (a store that kept
    // purged rows, or their events, would hold five times as much).
    let steady = steady_pages.expect("more windows than the steady state");
    let end = pages_in_use(&dir.path().join("test.db")).await;
    println!("pages in use: {steady} after window {steady_window}, {end} after window {WINDOWS}");
    assert!(
        end <= steady + steady / 2 + 16,
        "the database grew from {steady} pages in use (window {steady_window}) to {end} (window {WINDOWS}): purged tasks leave data behind"
    );
}
