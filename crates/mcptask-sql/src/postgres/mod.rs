//! PostgreSQL backend: the shared store for several gateway and server
//! processes. Claims use `FOR UPDATE SKIP LOCKED`; cross-process wake-ups use
//! `LISTEN/NOTIFY` (hints only: the store stays the truth).

mod dialect;

use std::time::Duration;

use std::str::FromStr;

use sqlx::Postgres;
use sqlx::postgres::{PgConnectOptions, PgPool};

use crate::OpenError;
use crate::flows::{SqlStore, connect_pool};

/// A store on a PostgreSQL database.
pub type PgStore = SqlStore<Postgres>;

impl SqlStore<Postgres> {
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
        let pool = connect_pool::<Postgres>(options, 16, Duration::from_secs(30))
            .await
            .map_err(connect_err)?;
        Ok(Self {
            writer: pool.clone(),
            reader: pool,
        })
    }

    /// The pool, for tests and tools that need raw SQL.
    pub fn pool(&self) -> &PgPool {
        &self.writer
    }
}
