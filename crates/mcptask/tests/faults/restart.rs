//! A gateway SIGKILLed mid-call and restarted at once on the same store
//! resumes its calls at once: its process slot (`mcptask_sql::slot`) proves
//! the previous holder dead, so the restarted process adopts the leases and
//! claims it left instead of waiting for them to lapse (`[proxy]
//! owner_lease_ms`, `[tracker] lease_ms`; both at their defaults here, 30 s
//! and 60 s).
//!
//! Real processes: `mcptask serve` with `[proxy] enabled = true`, a
//! `mcptask demo-server` (SEP-2663) over HTTP for the tracked driver, and a
//! synchronous upstream in the test process ([`SyncUpstream`], which counts
//! the calls it hears) for the sync driver. The caller is a 2026-07-28
//! client that declares tasks. Each cell prints what it measured.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use mcptask_testkit::mcp::TestClient;
use mcptask_testkit::*;
use serde_json::{Value, json};

/// The acceptance bound: a call resumed after a restart completes within
/// this long of its upstream finishing.
const RESUMED_WITHIN: Duration = Duration::from_secs(2);

/// `mcptask.toml` of a proxy on `db` with the leases at their defaults and
/// a brisk tracker, before `servers`.
fn proxy_toml(db: &str, servers: &str) -> String {
    let q = |s: &str| serde_json::to_string(s).expect("a TOML string");
    format!(
        "[database]\nurl = {}\n\n[api]\nlisten = \"127.0.0.1:0\"\nauth = \"none\"\n\n\
         [proxy]\nenabled = true\n\n\
         [tracker]\npoll_default_ms = 200\npoll_min_ms = 100\npoll_max_ms = 500\n\
         backoff_base_ms = 100\nbackoff_max_ms = 1000\n{servers}",
        q(db)
    )
}

/// A `[[servers]]` entry for the synchronous upstream, a crash handled per
/// `interrupt`.
fn sync_server(upstream: &SyncUpstream, interrupt: &str) -> String {
    format!(
        "\n[[servers]]\nname = \"up\"\nurl = {:?}\ninterrupt = {interrupt:?}\n",
        upstream.url
    )
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as i64
}

/// Poll `id` every 50 ms until it is terminal; the task and the wall-clock
/// time (epoch ms) it was first seen so.
async fn settled(client: &TestClient, id: &str) -> (Value, i64) {
    let w = poll_task(client, id, WAIT, |_| {}, is_terminal).await;
    (w, now_ms())
}

/// How many process slots of the store at `db` live processes hold now:
/// the lock files beside an SQLite database that cannot be locked, or the
/// slot advisory locks granted on the PostgreSQL database.
async fn held_slots(db: &TestDatabase) -> usize {
    if let Some(path) = db.url.strip_prefix("sqlite:") {
        let path = path.split('?').next().unwrap_or(path);
        return (0..mcptask_sql::slot::MAX_SLOTS)
            .filter(|n| {
                let lock = format!("{path}-slot{n}.lock");
                std::fs::File::open(&lock)
                    .is_ok_and(|f| matches!(f.try_lock(), Err(std::fs::TryLockError::WouldBlock)))
            })
            .count();
    }
    let pool = sqlx::PgPool::connect(&db.url).await.expect("connect");
    let (held,): (i64,) = sqlx::query_as(
        "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
         WHERE l.locktype = 'advisory' AND l.granted AND l.classid = 1835233395
           AND d.datname = current_database()",
    )
    .fetch_one(&pool)
    .await
    .expect("read pg_locks");
    pool.close().await;
    held as usize
}

/// When the demo server on SQLite `url` settled its only task (epoch ms).
async fn upstream_settled_at(url: &str) -> i64 {
    let pool = sqlx::SqlitePool::connect(url)
        .await
        .expect("open the upstream's database");
    let (status, at): (String, i64) = sqlx::query_as("SELECT status, updated_at FROM server_tasks")
        .fetch_one(&pool)
        .await
        .expect("the upstream's task");
    pool.close().await;
    assert_eq!(status, "completed");
    at
}

on_both_stores! {
    /// Tracked (SEP-2663): the gateway is SIGKILLed while the upstream
    /// task runs and restarted at once; the front task completes within
    /// 2 s of the upstream task's end.
    async fn restart_tracked_front_task_completes_at_once(db) {
        with_deadline(Duration::from_secs(180), async {
            let upstream_db = TestDatabase::sqlite();
            let demo = DemoServer::start(&upstream_db.url, &[]).await;
            let servers = format!("\n[[servers]]\nname = \"demo\"\nurl = {:?}\n", demo.url);
            let toml = proxy_toml(&db.url, &servers);
            let mut first = GatewayProcess::start_toml("proxy", &toml, &[]).await;
            let client = first.front_client().await;
            let id = client
                .start_task("demo__slow_compute", json!({"seconds": 5, "label": "resumed"}))
                .await;
            poll_task(&client, &id, WAIT, |_| {}, |w| w["statusMessage"].is_string()).await;
            first.kill().await;
            let killed = now_ms();

            let again = GatewayProcess::start_toml("proxy (restarted)", &toml, &[]).await;
            let ready = now_ms();
            let client = again.front_client().await;
            let (done, seen) = settled(&client, &id).await;
            assert_eq!(result_text(&done), "resumed: computed in 5s", "{done:#}");
            let finished = upstream_settled_at(&upstream_db.url).await;
            let lag = Duration::from_millis((seen - finished).max(0) as u64);
            eprintln!(
                "restart (tracked): ready {} ms after the kill; completed {} ms after the upstream finished",
                ready - killed,
                seen - finished,
            );
            assert!(lag <= RESUMED_WITHIN, "completed {lag:?} after the upstream finished");
        })
        .await;
    }

    /// Sync, `interrupt = "fail"`: the upstream call dies with the
    /// gateway; the restarted gateway fails the call "interrupted" at once
    /// and never makes it again (one upstream call).
    async fn restart_sync_fail_call_fails_at_once_and_is_not_run_again(db) {
        with_deadline(Duration::from_secs(180), async {
            let upstream = SyncUpstream::start().await;
            let toml = proxy_toml(&db.url, &sync_server(&upstream, "fail"));
            let mut first = GatewayProcess::start_toml("proxy", &toml, &[]).await;
            let client = first.front_client().await;
            let id = client.start_task("up__held", json!({})).await;
            upstream.wait_heard("held", 1).await;
            first.kill().await;

            let again = GatewayProcess::start_toml("proxy (restarted)", &toml, &[]).await;
            let ready = now_ms();
            let client = again.front_client().await;
            let (done, seen) = settled(&client, &id).await;
            assert_eq!(status(&done), "failed", "{done:#}");
            assert!(done.to_string().contains("interrupted"), "{done:#}");
            eprintln!(
                "restart (sync, fail): failed {} ms after the restarted gateway was ready",
                seen - ready
            );
            assert!(
                Duration::from_millis((seen - ready).max(0) as u64) <= RESUMED_WITHIN,
                "failed {} ms after the restart",
                seen - ready
            );
            // Let anything that would run it again have its chance.
            tokio::time::sleep(Duration::from_secs(2)).await;
            upstream.release(2);
            assert_eq!(upstream.heard("held"), 1, "the call was made once");
        })
        .await;
    }

    /// Sync, `interrupt = "rerun"`: the restarted gateway makes the call
    /// again at once (once), and it completes within 2 s of the upstream
    /// answering.
    async fn restart_sync_rerun_call_runs_again_once_at_once(db) {
        with_deadline(Duration::from_secs(180), async {
            let upstream = SyncUpstream::start().await;
            let toml = proxy_toml(&db.url, &sync_server(&upstream, "rerun"));
            let mut first = GatewayProcess::start_toml("proxy", &toml, &[]).await;
            let client = first.front_client().await;
            let id = client.start_task("up__held", json!({})).await;
            upstream.wait_heard("held", 1).await;
            first.kill().await;

            let again = GatewayProcess::start_toml("proxy (restarted)", &toml, &[]).await;
            let ready = now_ms();
            // `wait_heard` gives up after 10 s: a rerun waiting for the
            // 30 s owner lease fails here.
            upstream.wait_heard("held", 2).await;
            let rerun = now_ms();
            let client = again.front_client().await;
            // Both the dead gateway's call (if the upstream still holds
            // it) and the rerun may answer.
            upstream.release(2);
            let released = now_ms();
            let (done, seen) = settled(&client, &id).await;
            assert_eq!(status(&done), "completed", "{done:#}");
            assert_eq!(result_text(&done), "released", "{done:#}");
            eprintln!(
                "restart (sync, rerun): rerun {} ms after the restarted gateway was ready; completed {} ms after the upstream answered",
                rerun - ready,
                seen - released
            );
            assert!(
                Duration::from_millis((seen - released).max(0) as u64) <= RESUMED_WITHIN,
                "completed {} ms after the upstream answered",
                seen - released
            );
            assert_eq!(upstream.heard("held"), 2, "one rerun");
            // The rerun is in the call's timeline, once, saying which
            // attempt it is and which process runs it (before, the
            // timeline had only "created" and "completed": the rerun was
            // in the log alone).
            let shown = Api::new(&again.base, None)
                .get(&format!("/api/v1/tasks/{id}"))
                .await
                .json;
            let reruns: Vec<&Value> = shown["timeline"]
                .as_array()
                .expect("a timeline")
                .iter()
                .filter(|e| e["kind"] == "rerun")
                .collect();
            assert_eq!(reruns.len(), 1, "one rerun in the timeline: {shown:#}");
            let said = reruns[0]["statusMessage"].as_str().unwrap_or_default();
            assert!(
                said.contains("attempt 2") && said.contains("attempt 1 stopped"),
                "the rerun says which attempt and why progress starts again: {said:?} in {shown:#}"
            );
        })
        .await;
    }

    /// Two gateways started at once on the store of a SIGKILLed one take
    /// different slots; the call (`interrupt = "rerun"`) is run again by
    /// one of them only, at once, and completes.
    async fn restart_two_at_once_never_both_run_the_call(db) {
        with_deadline(Duration::from_secs(180), async {
            let upstream = SyncUpstream::start().await;
            let toml = proxy_toml(&db.url, &sync_server(&upstream, "rerun"));
            let mut first = GatewayProcess::start_toml("proxy", &toml, &[]).await;
            let client = first.front_client().await;
            let id = client.start_task("up__held", json!({})).await;
            upstream.wait_heard("held", 1).await;
            first.kill().await;

            let (_b, c) = tokio::join!(
                GatewayProcess::start_toml("proxy B", &toml, &[]),
                GatewayProcess::start_toml("proxy C", &toml, &[]),
            );
            // Each holds a slot of its own (the dead one's was free again).
            // (The dead one's PostgreSQL session may linger a moment.)
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            while held_slots(&db).await != 2 {
                assert!(tokio::time::Instant::now() < deadline, "two live processes, two slots");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            upstream.wait_heard("held", 2).await;
            // Give a second runner every chance to show up.
            tokio::time::sleep(Duration::from_secs(3)).await;
            assert_eq!(upstream.heard("held"), 2, "run again by one process only");
            upstream.release(3);
            let released = now_ms();
            let (done, seen) = settled(&c.front_client().await, &id).await;
            assert_eq!(result_text(&done), "released", "{done:#}");
            eprintln!(
                "restart (two at once): completed {} ms after the upstream answered",
                seen - released
            );
            assert!(Duration::from_millis((seen - released).max(0) as u64) <= RESUMED_WITHIN);
            assert_eq!(upstream.heard("held"), 2, "run again by one process only");
        })
        .await;
    }
}
