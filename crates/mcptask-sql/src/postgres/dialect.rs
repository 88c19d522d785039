//! What PostgreSQL does differently: its statement fragments and the dialect
//! seam.

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use mcptask_core::StoreError;
use sqlx::postgres::PgListener;
use sqlx::{Pool, Postgres};

use crate::error::db_err;
use crate::flows::backend::{DbQuery, Dialect, Feed};
use crate::flows::sql::{Statements, statements};

/// Channel carrying server-task ids whose owner should re-read them.
pub(crate) const SERVER_SIGNAL_CHANNEL: &str = "mcptask_server_signal";

/// Channel carrying batches of server-task ids whose state changed, for the
/// `subscriptions/listen` streams of every replica.
pub(crate) const TASK_CHANGES_CHANNEL: &str = "mcptask_task_changes";

/// Channel carrying batches of remote-task ids the tracker changed, for the
/// waiters and live views of every replica.
pub(crate) const REMOTE_CHANGES_CHANNEL: &str = "mcptask_remote_changes";

/// Channel telling every replica that the admin API changed the stored
/// configuration (`admin_config`).
pub(crate) const ADMIN_CONFIG_CHANNEL: &str = "mcptask_admin_config";

/// Publishes one payload of changed task ids on a channel (`$1`).
const PUBLISH_CHANGES: &str = "SELECT pg_notify($1, $2)";

/// The channel of `feed`.
fn channel_of(feed: Feed) -> &'static str {
    match feed {
        Feed::ServerTasks => TASK_CHANGES_CHANNEL,
        Feed::RemoteTasks => REMOTE_CHANGES_CHANNEL,
        Feed::AdminConfig => ADMIN_CONFIG_CHANNEL,
    }
}

/// A listener on `channel` as a stream of payloads; `None` marks an error
/// after which notifications may have been lost. PgListener reconnects by
/// itself; what was sent meanwhile is lost, which each channel's consumer
/// covers (the owners' backstop re-check, the feed's resync).
async fn listen_channel(
    pool: &Pool<Postgres>,
    channel: &str,
) -> Result<BoxStream<'static, Option<String>>, StoreError> {
    let mut listener = PgListener::connect_with(pool).await.map_err(db_err)?;
    listener.listen(channel).await.map_err(db_err)?;
    let stream = listener
        .into_stream()
        .map(|n| n.ok().map(|n| n.payload().to_string()));
    Ok(stream.boxed())
}

impl Dialect for Postgres {
    const SQL: &'static Statements = &SQL;
    // Commits from several connections share one WAL flush; a single
    // writer would leave PostgreSQL's own group commit idle between batches
    // (docs/BENCHMARKS.md, "Server against the raw limit").
    const CREATE_WRITERS: usize = 4;

    fn take_slot(
        store: &crate::flows::SqlStore<Self>,
    ) -> BoxFuture<'_, Result<Option<crate::slot::Slot>, StoreError>> {
        Box::pin(store.take_slot())
    }

    fn listen_signals(
        pool: &Pool<Self>,
    ) -> BoxFuture<'_, Result<Option<BoxStream<'static, String>>, StoreError>> {
        Box::pin(async move {
            let payloads = listen_channel(pool, SERVER_SIGNAL_CHANNEL).await?;
            Ok(Some(payloads.filter_map(|p| async move { p }).boxed()))
        })
    }

    fn publish_changes(
        pool: &Pool<Self>,
        feed: Feed,
        task_ids: Vec<String>,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let mut conn = pool.acquire().await.map_err(db_err)?;
            // NOTIFY takes a global lock at commit: one per batch, not per task.
            for payload in crate::flows::changes::payloads(&task_ids) {
                sqlx::query(PUBLISH_CHANGES)
                    .bind(channel_of(feed))
                    .bind(payload)
                    .execute(&mut *conn)
                    .await
                    .map_err(db_err)?;
            }
            Ok(())
        })
    }

    fn listen_changes(
        pool: &Pool<Self>,
        feed: Feed,
    ) -> BoxFuture<'_, Result<Option<BoxStream<'static, Vec<String>>>, StoreError>> {
        Box::pin(async move {
            let payloads = listen_channel(pool, channel_of(feed)).await?;
            // An empty batch tells the feed that changes may have been lost.
            let batches = payloads.map(|p| {
                p.map(|p| p.split_whitespace().map(str::to_string).collect())
                    .unwrap_or_default()
            });
            Ok(Some(batches.boxed()))
        })
    }

    fn rows_affected(result: &sqlx::postgres::PgQueryResult) -> u64 {
        result.rows_affected()
    }

    fn bind_ints(query: DbQuery<Self>, list: Vec<i64>) -> DbQuery<Self> {
        query.bind(list)
    }

    fn bind_texts(query: DbQuery<Self>, list: Vec<&str>) -> DbQuery<Self> {
        query.bind(list)
    }

    fn migrate(pool: &Pool<Self>) -> BoxFuture<'_, Result<(), sqlx::migrate::MigrateError>> {
        Box::pin(Self::migrator().run(pool))
    }

    fn migrator() -> &'static sqlx::migrate::Migrator {
        crate::migrations::postgres()
    }

    fn begin_write(
        pool: &Pool<Self>,
    ) -> BoxFuture<'_, Result<sqlx::Transaction<'static, Self>, StoreError>> {
        Box::pin(async move { pool.begin().await.map_err(db_err) })
    }
}

/// PostgreSQL's statements: writes lock the rows they read (`FOR UPDATE`);
/// claims skip rows other workers hold (`SKIP LOCKED`); lists are arrays.
static SQL: Statements = statements! {
    locks: (" FOR UPDATE", " FOR UPDATE SKIP LOCKED", " FOR UPDATE OF t SKIP LOCKED"),
    claim_status: "status",
    signal: Some("SELECT pg_notify('mcptask_server_signal', $1)"),
    in_list: ("= ANY(", ")"),
    greatest_least: ("GREATEST", "LEAST"),
    live_index_hint: "",
    // Results are stored as JSON text written by the tracker (always valid).
    tool_error: "COALESCE((result::jsonb -> 'isError') = 'true'::jsonb, FALSE)",
    fenced_set_update: Some(UPDATE_REMOTES_FENCED),
};

/// A batch of fenced worker writes in one round trip: the rows arrive as one
/// JSON array (a fixed statement text whatever the batch size, so it is
/// prepared once), the fence is in the join, and `RETURNING` names the rows
/// whose claim still held. The flow has locked the rows in id order already.
/// Like `update_remote_fenced`, it merges and clears a pending poll hint.
const UPDATE_REMOTES_FENCED: &str = concat!(
    "UPDATE remote_tasks AS t SET
        status = v.status, status_message = v.status_message,
        input_requests = v.input_requests, result = v.result,
        result_truncated = v.result_truncated, error = v.error,
        remote_created_at = v.remote_created_at, ttl_ms = v.ttl_ms,
        poll_interval_ms = v.poll_interval_ms, updated_at = v.updated_at,
        completed_at = v.completed_at,
        next_poll_at = ",
    crate::flows::sql::hinted_next_poll!("LEAST", "v.next_poll_at", "t.poll_hint_at"),
    ", poll_hint_at = NULL,
        last_polled_at = v.last_polled_at, poll_count = v.poll_count,
        consecutive_errors = v.consecutive_errors, last_error = v.last_error,
        cancel_requested_at = v.cancel_requested_at, cancel_sent_at = v.cancel_sent_at,
        next_cancel_at = v.next_cancel_at, cancel_attempts = v.cancel_attempts,
        next_update_at = v.next_update_at, event_version = v.event_version,
        delivered_version = v.delivered_version, next_notify_at = v.next_notify_at,
        notify_attempts = v.notify_attempts, last_notify_error = v.last_notify_error,
        dead_letters = v.dead_letters, attempt = v.attempt, claim_owner = v.claim_owner,
        claim_token = v.claim_token, claim_expires_at = v.claim_expires_at
     FROM json_to_recordset(CAST($1 AS json)) AS v(",
    crate::flows::sql::remote_fenced_rows!(),
    ")
     WHERE t.id = v.id AND t.claim_owner = v.fence_owner AND t.claim_token = v.fence_token
     RETURNING t.id"
);

#[cfg(test)]
mod tests {
    #[test]
    fn the_signal_statement_uses_the_channel() {
        assert!(
            super::SQL
                .signal
                .unwrap()
                .contains(super::SERVER_SIGNAL_CHANNEL)
        );
    }

    #[test]
    fn each_feed_has_a_channel_of_its_own() {
        use super::{Feed, channel_of};
        assert_eq!(channel_of(Feed::ServerTasks), super::TASK_CHANGES_CHANNEL);
        assert_eq!(channel_of(Feed::RemoteTasks), super::REMOTE_CHANGES_CHANNEL);
        assert_ne!(super::TASK_CHANGES_CHANNEL, super::REMOTE_CHANGES_CHANNEL);
    }
}
