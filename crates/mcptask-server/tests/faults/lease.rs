//! The owner lease under load: the heartbeat runs in its own loop, so a long
//! maintenance step (a purge backlog) never lets it lapse, and no other
//! replica takes the running tasks over as "interrupted".

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use mcptask_core::{Clock, SystemClock};
use rmcp::model::TaskStatus;
use serde_json::json;

use crate::support::*;
use mcptask_testkit::fixtures::server::{Gate, registry};

const BACKLOG: i64 = 100_000;
/// Well above what one heartbeat waits for the writer on a loaded two-core
/// machine (859 ms seen at 600 ms), far below the purge (tens of seconds).
const LEASE_MS: i64 = 2_000;

/// 100 000 settled rows past retention, inserted in one statement.
fn backlog_sql(backend: &str, at: i64) -> String {
    let columns = "id, tool, arguments, status, created_at, updated_at, purge_at";
    match backend {
        "sqlite" => format!(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {BACKLOG})
             INSERT INTO server_tasks ({columns})
             SELECT 'old-' || i, 'echo', '{{}}', 'completed', {at}, {at}, {at} FROM n"
        ),
        _ => format!(
            "INSERT INTO server_tasks ({columns})
             SELECT 'old-' || i, 'echo', '{{}}', 'completed', {at}, {at}, {at}
             FROM generate_series(1, {BACKLOG}) AS i"
        ),
    }
}

mcptask_testkit::on_both_backends! {
    async fn purge_backlog_lease_never_lapses(db: TestDatabase) {
        let gate = Gate::new();
        // B only recovers: it would take A's task the moment A's lease lapsed.
        let mut b_config = fast_config(LEASE_MS);
        b_config.sweep_every_ms = 3_600_000;
        let b = start_real(&db, registry(&gate), b_config, "B").await;
        // B's first sweep (on start) is over before the backlog exists.
        tokio::time::sleep(Duration::from_millis(200)).await;
        // The backlog exists before A starts, so only A's purge can delay A.
        let started = std::time::Instant::now();
        exec(&db, &backlog_sql(db.backend, SystemClock.now_ms() - 1_000)).await;
        let inserted = started.elapsed();
        let purge_started = std::time::Instant::now();
        let a = start_real(&db, registry(&gate), fast_config(LEASE_MS), "A").await;
        let client = client(&a).await;
        let id = client.start_task("hold", json!({})).await;
        assert!(a.is_running_here(&id));

        let probe = Probe::open(&db).await;
        // A's heartbeats, sampled from the store while the backlog is purged.
        let sampling = Arc::new(AtomicBool::new(true));
        let worst_gap = Arc::new(AtomicI64::new(0));
        let sampler = tokio::spawn({
            let (sampling, worst_gap) = (sampling.clone(), worst_gap.clone());
            let probe = Probe::open(&db).await;
            async move {
                let mut last = probe
                    .int("SELECT heartbeat_at FROM server_owners WHERE owner_id = 'A'")
                    .await;
                while sampling.load(Ordering::SeqCst) {
                    let now = SystemClock.now_ms();
                    worst_gap.fetch_max(now - last, Ordering::SeqCst);
                    let seen = probe
                        .int("SELECT heartbeat_at FROM server_owners WHERE owner_id = 'A'")
                        .await;
                    last = last.max(seen);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        });
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        while probe.int("SELECT count(*) FROM server_tasks WHERE id LIKE 'old-%'").await > 0 {
            assert!(tokio::time::Instant::now() < deadline, "the backlog was never purged");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let purged = purge_started.elapsed();
        sampling.store(false, Ordering::SeqCst);
        sampler.await.unwrap();
        let gap = worst_gap.load(Ordering::SeqCst);
        println!(
            "[{}] backlog {BACKLOG} rows: inserted in {inserted:?}, purged in {purged:?}; \
             longest heartbeat gap seen {gap} ms (lease {LEASE_MS} ms)",
            db.backend
        );

        // A still holds its task: nobody recovered it, nothing was interrupted.
        assert!(a.is_running_here(&id), "A lost its task during the purge");
        assert!(!b.is_running_here(&id));
        let t = client.get(&id).await.unwrap();
        assert_eq!(t.task.status(), TaskStatus::Working, "{t:?}");
        gate.release(1);
        let done = client.wait_status(&id, TaskStatus::Completed, WAIT).await;
        assert_eq!(
            mcptask_testkit::fixtures::server::wire_text(&done),
            "held attempt 1",
            "the first attempt finished it, on A"
        );
        client.close().await;
        b.shutdown(Duration::from_secs(1)).await;
        a.shutdown(Duration::from_secs(1)).await;
    }
}
