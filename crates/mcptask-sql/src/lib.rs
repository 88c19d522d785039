#![deny(missing_docs)]
//! SQL stores for mcptask: SQLite (embedded default) and PostgreSQL (shared,
//! multi-process), both via sqlx, with versioned forward-only migrations.
//!
//! ```no_run
//! # async fn demo() -> Result<(), mcptask_sql::OpenError> {
//! let store = mcptask_sql::open("sqlite:mcptask.db").await?;
//! let server_tasks = store.server_tasks();
//! # let _ = server_tasks; Ok(()) }
//! ```

/// The crate's README, whose example is compiled as a doc test so that it
/// keeps matching the API (only then: it is not part of the documentation).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}

mod codec;
mod diagnose;
mod error;
pub mod flows;
mod migrations;
pub mod postgres;
pub mod slot;
pub mod sqlite;

use std::sync::Arc;

use mcptask_core::store::{RemoteTaskStore, ServerTaskStore};

pub use error::OpenError;
pub use flows::{NotReady, Released, SqlStore};
pub use postgres::PgStore;
pub use sqlite::SqliteStore;

/// Default database URL: an SQLite file in the working directory.
pub const DEFAULT_DATABASE_URL: &str = "sqlite:mcptask.db";

/// Which database engine a store runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// SQLite: one file, embedded.
    Sqlite,
    /// PostgreSQL: shared by several processes.
    Postgres,
}

/// A store opened from a URL, whichever backend it is.
#[derive(Clone)]
pub enum Store {
    /// A store on an SQLite file.
    Sqlite(SqliteStore),
    /// A store on a PostgreSQL database.
    Postgres(PgStore),
}

impl Store {
    /// Which engine this store runs on.
    pub fn engine(&self) -> Engine {
        match self {
            Store::Sqlite(_) => Engine::Sqlite,
            Store::Postgres(_) => Engine::Postgres,
        }
    }

    /// The server-side task store.
    pub fn server_tasks(&self) -> Arc<dyn ServerTaskStore> {
        match self {
            Store::Sqlite(s) => Arc::new(s.clone()),
            Store::Postgres(s) => Arc::new(s.clone()),
        }
    }

    /// The client-side store of tracked remote tasks.
    pub fn remote_tasks(&self) -> Arc<dyn RemoteTaskStore> {
        match self {
            Store::Sqlite(s) => Arc::new(s.clone()),
            Store::Postgres(s) => Arc::new(s.clone()),
        }
    }

    /// Whether the store can serve (see [`SqlStore::readiness`]): reachable
    /// within `within`, with every migration applied.
    pub async fn readiness(&self, within: std::time::Duration) -> Result<(), NotReady> {
        match self {
            Store::Sqlite(s) => s.readiness(within).await,
            Store::Postgres(s) => s.readiness(within).await,
        }
    }

    /// The sealed OAuth tokens of upstream servers.
    pub fn oauth_tokens(&self) -> Arc<dyn mcptask_core::store::OAuthTokenStore> {
        match self {
            Store::Sqlite(s) => Arc::new(s.clone()),
            Store::Postgres(s) => Arc::new(s.clone()),
        }
    }

    /// The configuration set through the admin API.
    pub fn admin_config(&self) -> Arc<dyn mcptask_core::admin::AdminConfigStore> {
        match self {
            Store::Sqlite(s) => Arc::new(s.clone()),
            Store::Postgres(s) => Arc::new(s.clone()),
        }
    }

    /// The audit trail.
    pub fn audit(&self) -> Arc<dyn mcptask_core::audit::AuditStore> {
        match self {
            Store::Sqlite(s) => Arc::new(s.clone()),
            Store::Postgres(s) => Arc::new(s.clone()),
        }
    }

    /// Take the lowest free process slot of this store ([`slot`]): the
    /// proof that every lease and claim named after it belongs to a process
    /// that is gone. `None` when every slot is held.
    pub async fn take_slot(&self) -> Result<Option<slot::Slot>, mcptask_core::StoreError> {
        match self {
            Store::Sqlite(s) => s.take_slot(),
            Store::Postgres(s) => s.take_slot().await,
        }
    }

    /// Let the leases and claims of `slot`'s earlier incarnations lapse now
    /// ([`SqlStore::release_slot`]).
    pub async fn release_slot(
        &self,
        slot: &slot::Slot,
        now: i64,
    ) -> Result<Released, mcptask_core::StoreError> {
        match self {
            Store::Sqlite(s) => s.release_slot(&slot.prefix(), now).await,
            Store::Postgres(s) => s.release_slot(&slot.prefix(), now).await,
        }
    }

    /// Close the pools (waits for in-flight statements).
    pub async fn close(&self) {
        match self {
            Store::Sqlite(s) => s.close().await,
            Store::Postgres(s) => s.close().await,
        }
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Store").field(&self.engine()).finish()
    }
}

/// Open a store and apply pending migrations (idempotent).
///
/// When migrations were applied, the store is opened again: connections
/// opened before hold the old schema, and SQLite reports a `SELECT *` of a
/// table that gained columns with the old column list on them (a read of the
/// new columns then fails).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = tempfile::tempdir()?;
/// let url = format!("sqlite:{}", dir.path().join("tasks.db").display());
/// // Creates the file and applies every migration.
/// let store = mcptask_sql::open(&url).await?;
/// assert_eq!(store.engine(), mcptask_sql::Engine::Sqlite);
/// // The schema is current: nothing left to apply.
/// assert_eq!(mcptask_sql::migrate(&store, &url).await?, 0);
/// store.close().await;
/// # Ok(()) }
/// ```
pub async fn open(url: &str) -> Result<Store, OpenError> {
    let store = open_without_migrating(url).await?;
    if migrate(&store, url).await? == 0 {
        return Ok(store);
    }
    store.close().await;
    open_without_migrating(url).await
}

/// Open a store without touching its schema.
pub async fn open_without_migrating(url: &str) -> Result<Store, OpenError> {
    if url.starts_with("sqlite:") {
        Ok(Store::Sqlite(SqliteStore::connect(url).await?))
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Store::Postgres(PgStore::connect(url).await?))
    } else {
        Err(OpenError::UnsupportedUrl(url.to_string()))
    }
}

/// Apply pending migrations; returns how many were applied.
pub async fn migrate(store: &Store, url: &str) -> Result<usize, OpenError> {
    let result = match store {
        Store::Sqlite(s) => s.migrate().await,
        Store::Postgres(s) => s.migrate().await,
    };
    result.map_err(|e| OpenError::migrate(redact(url), e))
}

/// A URL with any password replaced, safe to print.
///
/// ```
/// assert_eq!(mcptask_sql::redact("postgres://u:secret@h/db"), "postgres://u:***@h/db");
/// assert_eq!(mcptask_sql::redact("sqlite:x.db"), "sqlite:x.db");
/// ```
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let Some((userinfo, host)) = rest.split_once('@') else {
        return url.to_string();
    };
    match userinfo.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_string(),
    }
}
