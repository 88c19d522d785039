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
        let redacted = crate::redact(url);
        let connect_err = |reason: String, driver: Option<sqlx::Error>| OpenError::Connect {
            url: redacted.clone(),
            reason,
            driver,
        };
        // A process that stalls inside a transaction (paused, swapped out)
        // would hold its row locks and block every other process's claims on
        // those rows; the server ends such a session instead. Our own
        // transactions are short, far below this bound.
        let options = PgConnectOptions::from_str(url)
            .map_err(|e| connect_err(format!("the URL is not valid: {e}"), Some(e)))?
            .options([("idle_in_transaction_session_timeout", "30s")]);
        // The pool retries a refused connection until its acquire timeout and
        // then says only "pool timed out": one direct attempt first says why,
        // in seconds.
        crate::diagnose::probe_postgres(&options, crate::diagnose::PG_PROBE)
            .await
            .map_err(|(reason, driver)| connect_err(reason, driver))?;
        let pool = connect_pool::<Postgres>(options, 16, Duration::from_secs(30))
            .await
            .map_err(|e| connect_err(e.to_string(), Some(e)))?;
        Ok(Self {
            writer: pool.clone(),
            reader: pool,
            background: None,
            gate: None,
            file: None,
        })
    }

    /// The pool, for tests and tools that need raw SQL.
    pub fn pool(&self) -> &PgPool {
        &self.writer
    }

    /// Take the lowest free process slot of this database
    /// ([`crate::slot`]): an advisory lock on a session of its own.
    pub async fn take_slot(&self) -> Result<Option<crate::slot::Slot>, mcptask_core::StoreError> {
        crate::slot::take_postgres((*self.writer.connect_options()).clone()).await
    }
}
