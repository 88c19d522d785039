//! A store on a libpq-style host list follows a PostgreSQL primary switch:
//! the primary of a synchronous pair is killed (`SIGKILL`) and the standby
//! promoted; writes in the meantime fail transiently, and once the standby
//! accepts writes they succeed there with their fences intact, and the
//! process slot's lock is taken again on the new primary.

use std::future::Future;
use std::time::{Duration, Instant};

use mcptask_core::StoreError;
use mcptask_testkit::pg::ReplicatedPair;

use crate::server::support::*;

/// Run `op` until it succeeds, retrying transient errors only (as the
/// store's callers do) for at most 30 s; returns the value and how long it
/// took.
async fn retried<T, F, Fut>(op: F) -> (T, Duration)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<T, StoreError>>,
{
    let began = Instant::now();
    loop {
        match op().await {
            Ok(v) => return (v, began.elapsed()),
            Err(e) if e.is_transient() && began.elapsed() < Duration::from_secs(30) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("after {:?}: {e}", began.elapsed()),
        }
    }
}

/// Slot advisory locks held on `url`'s database.
async fn slot_locks(url: &str) -> Option<i64> {
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(url)
        .await
        .ok()?;
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
         WHERE l.locktype = 'advisory' AND l.granted AND l.classid = 1835233395
           AND d.datname = current_database()",
    )
    .fetch_one(&mut conn)
    .await
    .ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_on_a_host_list_follows_the_promoted_standby() {
    let Some(pair) =
        ReplicatedPair::start("a_store_on_a_host_list_follows_the_promoted_standby").await
    else {
        return;
    };
    let db = pair.fresh_database().await;
    let store = mcptask_sql::open(&pair.host_list_url(&db))
        .await
        .expect("open the store on the host list");
    let slot = store
        .take_slot()
        .await
        .expect("a slot")
        .expect("a free slot");
    assert_eq!(slot_locks(&pair.primary_url(&db)).await, Some(1));
    let tasks = store.server_tasks();

    // The standby written first: the store still opens on the primary (a
    // standby is never taken for it).
    let reversed = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/{db}?target_session_attrs=read-write",
        pair.standby_port(),
        pair.primary_port()
    );
    let other = mcptask_sql::open(&reversed)
        .await
        .expect("open the store on the reversed list");
    let early = new_task("t0", "A", None);
    create(&*other.server_tasks(), &early).await;
    other.close().await;

    // t1 is A's; t2 was A's and B took it over, so A's fence of t2 is stale.
    let (t1, t2) = (new_task("t1", "A", None), new_task("t2", "A", None));
    create(&*tasks, &t1).await;
    create(&*tasks, &t2).await;
    tasks.heartbeat("B", T0, LEASE).await.unwrap();
    let taken = tasks.claim_orphans("B", T0 + LEASE + 1, 10).await.unwrap();
    assert_eq!(taken.len(), 3, "t0, t1 and t2");
    let fresh_t1 = Fence {
        task_id: "t1".into(),
        owner: "B".into(),
        token: taken
            .iter()
            .find(|t| t.id == "t1")
            .and_then(|t| t.claim_token.clone())
            .expect("t1 claimed"),
    };
    let stale_t2 = fence_of(&t2);

    pair.kill_primary();
    let killed = Instant::now();
    // A write right after the kill fails transiently, or, when a backend
    // of the killed primary outlives its postmaster for a moment (it can:
    // this cell once saw the write succeed, in a cold CI run), succeeds
    // only once the synchronous standby has it: then it must be there
    // after the promotion. Never acknowledged and lost.
    let acknowledged = match tasks
        .set_status_message(&fresh_t1, Some("x"), T0 + LEASE + 2)
        .await
    {
        Err(e) => {
            assert!(e.is_transient(), "{e}");
            false
        }
        Ok(applied) => {
            assert!(applied, "the current claim's write");
            true
        }
    };
    let promotion = pair.promote_standby().await;
    if acknowledged {
        assert_eq!(
            t1_message_on(&pair.standby_url(&db)).await.as_deref(),
            Some("x"),
            "a write acknowledged as the primary died is on the promoted standby"
        );
    }

    let (applied, _) =
        retried(|| tasks.set_status_message(&fresh_t1, Some("on the new primary"), T0 + LEASE + 3))
            .await;
    let recovered = killed.elapsed();
    assert!(applied, "the current claim writes on the new primary");
    let done = Outcome::Completed {
        result: json!({"content": []}),
    };
    let (applied, _) = retried(|| tasks.finish(&stale_t2, &done, T0 + LEASE + 4, None)).await;
    assert!(!applied, "a stale fence stays stale on the new primary");
    assert_eq!(status(&*tasks, "t2").await, TaskStatus::Working);

    // The writes are on the promoted standby.
    let message = t1_message_on(&pair.standby_url(&db)).await;
    assert_eq!(message.as_deref(), Some("on the new primary"));

    // The slot's lock follows (its session died with the old primary). It
    // takes about a second; the bound is the same 30 s as the writes' (a
    // cold CI run has ten tests beside this one).
    let deadline = Instant::now() + Duration::from_secs(30);
    while slot_locks(&pair.standby_url(&db)).await != Some(1) {
        assert!(
            Instant::now() < deadline,
            "the slot lock was not taken again on the new primary within 30 s; the servers' logs:\n{}",
            pair.log_tails(20)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "store failover: promotion {} ms; first write on the new primary {} ms after the kill; slot lock there {} ms after the kill",
        promotion.as_millis(),
        recovered.as_millis(),
        killed.elapsed().as_millis()
    );
    drop(slot);
}

/// With `target_session_attrs=any` the pool stays on the first host that
/// answers and moves only when it stops answering: to the standby, whose
/// writes fail (read-only, transient) until it is promoted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_any_list_moves_when_its_host_stops_answering() {
    let Some(pair) = ReplicatedPair::start("an_any_list_moves_when_its_host_stops_answering").await
    else {
        return;
    };
    let db = pair.fresh_database().await;
    let url = pair.host_list_url(&db).replace(
        "target_session_attrs=read-write",
        "target_session_attrs=any",
    );
    let store = mcptask_sql::open(&url).await.expect("open the store");
    let tasks = store.server_tasks();
    let t1 = new_task("t1", "A", None);
    create(&*tasks, &t1).await;

    pair.kill_primary();
    let killed = Instant::now();
    pair.promote_standby().await;
    let fence = fence_of(&t1);
    let (applied, _) = retried(|| tasks.set_status_message(&fence, Some("moved"), T0 + 1)).await;
    assert!(applied);
    let message = t1_message_on(&pair.standby_url(&db)).await;
    assert_eq!(message.as_deref(), Some("moved"));
    eprintln!(
        "store failover (any): first write on the new primary {} ms after the kill",
        killed.elapsed().as_millis()
    );
}

/// `t1`'s status message as the server at `url` (the promoted standby) has it.
async fn t1_message_on(url: &str) -> Option<String> {
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(url)
        .await
        .expect("connect to the promoted standby");
    sqlx::query_scalar("SELECT status_message FROM server_tasks WHERE id = 't1'")
        .fetch_one(&mut conn)
        .await
        .expect("t1 on the new primary")
}
