//! PostgreSQL backend: the shared store for several gateway and server
//! processes. Claims use `FOR UPDATE SKIP LOCKED`; cross-process wake-ups use
//! `LISTEN/NOTIFY` (hints only: the store stays the truth).

mod remote;

mod server;

use std::time::Duration;

use std::str::FromStr;

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

use crate::OpenError;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

/// Channel carrying server-task ids whose owner should re-read them.
pub(crate) const SERVER_SIGNAL_CHANNEL: &str = "mcptask_server_signal";

/// A store on a PostgreSQL database.
#[derive(Clone, Debug)]
pub struct PgStore {
    pub(crate) pool: PgPool,
}

impl PgStore {
    /// Connect to `postgres://…`. Does not migrate.
    pub async fn connect(url: &str) -> Result<Self, OpenError> {
        let connect_err = |source| OpenError::Connect {
            url: crate::redact(url),
            source,
        };
        // A process that stalls inside a transaction (paused, swapped out)
        // would hold its row locks and block every other process's claims on
        // those rows; the server ends such a session instead. Our own
        // transactions are short, far below this bound.
        let options = PgConnectOptions::from_str(url)
            .map_err(connect_err)?
            .options([("idle_in_transaction_session_timeout", "30s")]);
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(options)
            .await
            .map_err(connect_err)?;
        Ok(Self { pool })
    }

    /// Apply pending migrations; returns how many ran. Concurrent callers are
    /// serialised by sqlx's advisory lock.
    pub async fn migrate(&self) -> Result<usize, sqlx::migrate::MigrateError> {
        let before = applied_count(&self.pool).await;
        MIGRATOR.run(&self.pool).await?;
        Ok(applied_count(&self.pool).await.saturating_sub(before))
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// The pool, for tests and tools that need raw SQL.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

async fn applied_count(pool: &PgPool) -> usize {
    sqlx::query_scalar::<_, i64>("SELECT count(*) FROM _sqlx_migrations WHERE success")
        .fetch_one(pool)
        .await
        .map(|n| n as usize)
        .unwrap_or(0)
}
