//! The remote-task store contract, run on SQLite and on a real PostgreSQL,
//!
//! Every backend must pass every case: each case takes a fresh, migrated,
//! empty store and runs on SQLite and on a real PostgreSQL (see
//! `mcptask_testkit::on_both_backends!`). Times are explicit, so every schedule is
//! exact. Cases are grouped by topic, one module each.

mod claims;
mod delivery;
mod hints;
mod inputs;
mod notify;
mod reasks;
mod records;
mod retention;
pub(crate) mod support;

use std::sync::Arc;

use mcptask_core::StoreError;
use mcptask_core::client::{ListFilter, NotifyResult, Phase};
use mcptask_core::store::RemoteTaskStore;
use mcptask_testkit::db::{fresh_postgres, fresh_sqlite};

/// Two due tasks, then `corrupt` breaks the first one's stored data: reads of
/// it fail with `Corrupt` (no panic), claims hand out the healthy one only.
async fn corrupt_rows_are_errors_not_panics(
    store: Arc<dyn RemoteTaskStore>,
    corrupt: impl AsyncFnOnce(&str),
) {
    let policy = support::policy();
    for id in ["bad", "good"] {
        let task = mcptask_core::client::NewRemoteTask {
            face: None,
            id: id.into(),
            server: "srv".into(),
            server_hash: "h".into(),
            remote_task_id: format!("r-{id}"),
            driver: Default::default(),
            principal: None,
            conversation: None,
            call_id: None,
            correlation: None,
            tool: "t".into(),
            arguments: None,
            trace: None,
            snapshot: Default::default(),
            created_at: 1_000,
        };
        store.insert_remote(&task, &policy).await.unwrap();
    }
    corrupt("bad").await;
    assert!(matches!(
        store.get_remote("bad").await,
        Err(StoreError::Corrupt(_))
    ));
    assert!(matches!(
        store.list_remote(&ListFilter::default(), None, 10).await,
        Err(StoreError::Corrupt(_))
    ));
    assert!(matches!(
        store.remote_events("bad", 0, 10).await,
        Err(StoreError::Corrupt(_))
    ));
    let claimed = store
        .claim_remote(Phase::Poll, "w", 1_000_000, 1_000, 10)
        .await
        .unwrap();
    let ids: Vec<_> = claimed.iter().map(|c| c.record.id.as_str()).collect();
    assert_eq!(ids, ["good"]);
    assert!(store.get_remote("good").await.unwrap().is_some());
}

const CORRUPT_TASK: &str =
    "UPDATE remote_tasks SET input_requests = '{\"not\": \"a list\"}' WHERE id = $1";
const CORRUPT_EVENT: &str = "UPDATE remote_task_events SET kind = 'bogus' WHERE task_id = $1";

#[tokio::test]
async fn sqlite_corrupt_rows_are_errors_not_panics() {
    let (store, _dir) = fresh_sqlite().await;
    let pool = store.writer_pool().clone();
    corrupt_rows_are_errors_not_panics(Arc::new(store), async |id: &str| {
        for sql in [CORRUPT_TASK, CORRUPT_EVENT] {
            sqlx::query(sqlx::AssertSqlSafe(sql.replace("$1", "?1")))
                .bind(id)
                .execute(&pool)
                .await
                .unwrap();
        }
    })
    .await;
}

#[tokio::test]
async fn postgres_corrupt_rows_are_errors_not_panics() {
    let Some((store, _url)) = fresh_postgres().await else {
        return;
    };
    let pool = store.pool().clone();
    corrupt_rows_are_errors_not_panics(Arc::new(store), async |id: &str| {
        for sql in [CORRUPT_TASK, CORRUPT_EVENT] {
            sqlx::query(sql).bind(id).execute(&pool).await.unwrap();
        }
    })
    .await;
}

/// What the event rows of `t1` record: `(version, delivered_at, dead_lettered)`.
const EVENT_ROWS: &str = "SELECT version, delivered_at, dead_lettered FROM remote_task_events
     WHERE task_id = 't1' ORDER BY version";

/// Finishing a notify claim marks exactly the delivered event rows, and flags
/// the dead-lettered ones (the trait does not expose these columns).
async fn finishing_marks_event_rows(
    store: Arc<dyn RemoteTaskStore>,
    event_rows: impl AsyncFn() -> Vec<(i64, Option<i64>, bool)>,
) {
    let policy = support::policy();
    let task = mcptask_core::client::NewRemoteTask {
        face: None,
        id: "t1".into(),
        server: "srv".into(),
        server_hash: "h".into(),
        remote_task_id: "r-1".into(),
        driver: Default::default(),
        principal: None,
        conversation: None,
        call_id: None,
        correlation: None,
        tool: "t".into(),
        arguments: None,
        trace: None,
        snapshot: Default::default(),
        created_at: 1_000,
    };
    store.insert_remote(&task, &policy).await.unwrap();
    store.request_cancel("t1", 1_100).await.unwrap();
    let claims = store
        .claim_notifications("n", 2_000, 1_000, 10, 10)
        .await
        .unwrap();
    store.request_cancel("t1", 2_050).await.unwrap(); // idempotent: no event
    let result = NotifyResult {
        fence: claims[0].fence.clone(),
        delivered_through: 1,
        dead_lettered: vec![1],
        failure: Some(("down".into(), 9_000)),
        released: false,
        lagged: Vec::new(),
        dead: Vec::new(),
    };
    let done = store.finish_notifications(&[result], 2_100).await.unwrap();
    assert_eq!(done, [true]);
    assert_eq!(
        event_rows().await,
        [(1, Some(2_100), true), (2, None, false)]
    );
    let claims = store
        .claim_notifications("n", 9_000, 1_000, 10, 10)
        .await
        .unwrap();
    let result = NotifyResult {
        fence: claims[0].fence.clone(),
        delivered_through: 2,
        dead_lettered: vec![],
        failure: None,
        released: false,
        lagged: Vec::new(),
        dead: Vec::new(),
    };
    assert_eq!(
        store.finish_notifications(&[result], 9_100).await.unwrap(),
        [true]
    );
    assert_eq!(
        event_rows().await,
        [(1, Some(2_100), true), (2, Some(9_100), false)],
        "delivered rows keep their first delivery time"
    );
}

#[tokio::test]
async fn sqlite_finishing_marks_event_rows() {
    let (store, _dir) = fresh_sqlite().await;
    let pool = store.writer_pool().clone();
    finishing_marks_event_rows(Arc::new(store), async || {
        sqlx::query_as(EVENT_ROWS).fetch_all(&pool).await.unwrap()
    })
    .await;
}

#[tokio::test]
async fn postgres_finishing_marks_event_rows() {
    let Some((store, _url)) = fresh_postgres().await else {
        return;
    };
    let pool = store.pool().clone();
    finishing_marks_event_rows(Arc::new(store), async || {
        sqlx::query_as(EVENT_ROWS).fetch_all(&pool).await.unwrap()
    })
    .await;
}
