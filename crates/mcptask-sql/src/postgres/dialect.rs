//! What PostgreSQL does differently: its statement fragments and the dialect
//! seam.

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use mcptask_core::StoreError;
use sqlx::postgres::PgListener;
use sqlx::{Pool, Postgres};

use crate::error::db_err;
use crate::flows::backend::{DbQuery, Dialect};
use crate::flows::sql::{Statements, statements};

/// Channel carrying server-task ids whose owner should re-read them.
pub(crate) const SERVER_SIGNAL_CHANNEL: &str = "mcptask_server_signal";

impl Dialect for Postgres {
    const SQL: &'static Statements = &SQL;

    fn listen_signals(
        pool: &Pool<Self>,
    ) -> BoxFuture<'_, Result<Option<BoxStream<'static, String>>, StoreError>> {
        Box::pin(async move {
            let mut listener = PgListener::connect_with(pool).await.map_err(db_err)?;
            listener
                .listen(SERVER_SIGNAL_CHANNEL)
                .await
                .map_err(db_err)?;
            // PgListener reconnects by itself; notifications sent while it was
            // reconnecting are lost, which the periodic backstop covers.
            let stream = listener
                .into_stream()
                .filter_map(|n| async move { n.ok().map(|n| n.payload().to_string()) });
            Ok(Some(stream.boxed()))
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
        static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");
        Box::pin(MIGRATOR.run(pool))
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
};

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
}
