//! What SQLite does differently: its statement fragments and the dialect seam.

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use mcptask_core::StoreError;
use sqlx::{Pool, Sqlite};

use crate::error::db_err;
use crate::flows::backend::{DbQuery, Dialect, Feed};
use crate::flows::sql::{Statements, statements};

/// SQLite's statements. There are no row locks: every write transaction holds
/// the database write lock from `BEGIN IMMEDIATE` to commit, so `FOR UPDATE`
/// and `SKIP LOCKED` have nothing to add. Lists travel as JSON arrays.
static SQL: Statements = statements! {
    locks: ("", "", ""),
    // `+status` keeps SQLite's planner (which has no statistics) off the
    // status index: a claim must walk the partial due-time index in due order.
    claim_status: "+status",
    // One process per file in practice: signals stay in-process, and the
    // owners' periodic re-check covers other processes.
    signal: None,
    in_list: ("IN (SELECT value FROM json_each(", "))"),
    greatest_least: ("max", "min"),
    // Without statistics SQLite prefers the status index for the live filter
    // and sorts every live task; the partial index is ordered already.
    live_index_hint: " INDEXED BY remote_tasks_active",
    // `json_extract` reads JSON `true` as 1 (and NULL when absent).
    tool_error: "COALESCE(json_extract(result, '$.isError') = 1, 0)",
    // In-process: a statement per row costs no round trip, and the rows were
    // found through the primary key already.
    fenced_set_update: None,
};

impl Dialect for Sqlite {
    const SQL: &'static Statements = &SQL;
    // One write connection: more writers would only queue for it.
    const CREATE_WRITERS: usize = 1;

    fn take_slot(
        store: &crate::flows::SqlStore<Self>,
    ) -> BoxFuture<'_, Result<Option<crate::slot::Slot>, StoreError>> {
        Box::pin(std::future::ready(store.take_slot()))
    }

    fn begin_write(
        pool: &Pool<Self>,
    ) -> BoxFuture<'_, Result<sqlx::Transaction<'static, Self>, StoreError>> {
        // IMMEDIATE takes the write lock up front, so a transaction never has
        // to upgrade a read lock (the cause of SQLITE_BUSY deadlocks between
        // processes).
        Box::pin(async move { pool.begin_with("BEGIN IMMEDIATE").await.map_err(db_err) })
    }

    fn migrate(pool: &Pool<Self>) -> BoxFuture<'_, Result<(), sqlx::migrate::MigrateError>> {
        Box::pin(Self::migrator().run(pool))
    }

    fn migrator() -> &'static sqlx::migrate::Migrator {
        crate::migrations::sqlite()
    }

    fn bind_texts(query: DbQuery<Self>, list: Vec<&str>) -> DbQuery<Self> {
        // Serializing strings cannot fail.
        query.bind(serde_json::to_string(&list).unwrap_or_default())
    }

    fn bind_ints(query: DbQuery<Self>, list: Vec<i64>) -> DbQuery<Self> {
        query.bind(serde_json::to_string(&list).unwrap_or_default())
    }

    fn rows_affected(result: &sqlx::sqlite::SqliteQueryResult) -> u64 {
        result.rows_affected()
    }

    fn listen_signals(
        _pool: &Pool<Self>,
    ) -> BoxFuture<'_, Result<Option<BoxStream<'static, String>>, StoreError>> {
        Box::pin(async { Ok(None) })
    }

    fn publish_changes(
        pool: &Pool<Self>,
        feed: Feed,
        task_ids: Vec<String>,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        super::changes::publish(pool, feed, task_ids);
        Box::pin(async { Ok(()) })
    }

    fn listen_changes(
        pool: &Pool<Self>,
        feed: Feed,
    ) -> BoxFuture<'_, Result<Option<BoxStream<'static, Vec<String>>>, StoreError>> {
        let stream = super::changes::listen(pool, feed);
        Box::pin(async move { Ok(Some(stream)) })
    }
}
