//! The store flows, written once for every backend.
//!
//! [`SqlStore`] implements the core store traits over any [`Backend`]; the
//! SQLite and PostgreSQL stores are `SqlStore<Sqlite>` and
//! `SqlStore<Postgres>`. A flow locks what it reads, asks the pure functions
//! of `mcptask-core` what to change, and writes the change fenced
//! (`mcptask_core::lease`). The backends differ only in their statement
//! fragments and the seam in [`backend`].

mod admin;
mod audit;
pub mod backend;
pub(crate) mod changes;
mod delivery;
mod gate;
mod oauth;
mod remote;
mod server;
mod slots;
pub mod sql;

pub use slots::Released;

use sqlx::Pool;

pub use backend::Backend;
use backend::{Arg, Sql};

/// A store on one database: the server-task store and the remote-task store
/// of `mcptask-core`, for any backend.
///
/// Writes go through `writer`, reads through `reader`. On SQLite these are
/// two pools (a single writer connection, so in-process writers queue instead
/// of failing with `SQLITE_BUSY`, and readers that never wait for it); on
/// PostgreSQL both are the same pool.
pub struct SqlStore<D: sqlx::Database> {
    pub(crate) writer: Pool<D>,
    pub(crate) reader: Pool<D>,
    /// Background work that lives as long as some handle of this store
    /// (SQLite's WAL checkpoints); dropped with the last one.
    pub(crate) background: Option<std::sync::Arc<dyn std::any::Any + Send + Sync>>,
    /// Who gets the single writer next (SQLite): a caller's task create
    /// before background bookkeeping (`gate`). `None`: the pool decides.
    pub(crate) gate: Option<std::sync::Arc<gate::WriteGate>>,
    /// The database file (SQLite), beside which process slots are locked
    /// (`crate::slot`). `None` on PostgreSQL.
    pub(crate) file: Option<std::sync::Arc<std::path::Path>>,
}

impl<D: sqlx::Database> Clone for SqlStore<D> {
    fn clone(&self) -> Self {
        SqlStore {
            writer: self.writer.clone(),
            reader: self.reader.clone(),
            background: self.background.clone(),
            gate: self.gate.clone(),
            file: self.file.clone(),
        }
    }
}

impl<D: sqlx::Database> std::fmt::Debug for SqlStore<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlStore")
            .field("backend", &D::NAME)
            .finish_non_exhaustive()
    }
}

/// A write transaction, holding the writer's turn ([`SqlStore::begin_write`]).
pub(crate) struct WriteTx<D: sqlx::Database> {
    // Dropped before the permit: the next writer finds the connection back.
    tx: sqlx::Transaction<'static, D>,
    _permit: Option<gate::Permit>,
}

impl<D: sqlx::Database> WriteTx<D> {
    pub(crate) async fn commit(self) -> Result<(), sqlx::Error> {
        let WriteTx { tx, _permit } = self;
        tx.commit().await
    }

    pub(crate) async fn rollback(self) -> Result<(), sqlx::Error> {
        let WriteTx { tx, _permit } = self;
        tx.rollback().await
    }
}

impl<D: sqlx::Database> std::ops::Deref for WriteTx<D> {
    type Target = sqlx::Transaction<'static, D>;
    fn deref(&self) -> &Self::Target {
        &self.tx
    }
}

impl<D: sqlx::Database> std::ops::DerefMut for WriteTx<D> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.tx
    }
}

/// The writer connection outside a transaction, holding its turn
/// ([`SqlStore::write_conn`]).
pub(crate) struct WriteConn<D: sqlx::Database> {
    conn: sqlx::pool::PoolConnection<D>,
    _permit: Option<gate::Permit>,
}

impl<D: sqlx::Database> std::ops::Deref for WriteConn<D> {
    type Target = sqlx::pool::PoolConnection<D>;
    fn deref(&self) -> &Self::Target {
        &self.conn
    }
}

impl<D: sqlx::Database> std::ops::DerefMut for WriteConn<D> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.conn
    }
}

impl<D: Backend> SqlStore<D> {
    /// The writer's turn: at once where the backend has no single writer.
    async fn turn(&self, urgent: bool) -> Option<gate::Permit> {
        match &self.gate {
            Some(gate) => Some(gate.enter(urgent).await),
            None => None,
        }
    }

    /// A write transaction for background work (claims, applies, the
    /// outbox, maintenance): it waits its turn behind urgent ones.
    pub(crate) async fn begin_write(&self) -> Result<WriteTx<D>, mcptask_core::StoreError> {
        self.begin_in_turn(false).await
    }

    /// A write transaction a caller is waiting on (a task create): served
    /// before background writes on a single-writer backend.
    pub(crate) async fn begin_urgent(&self) -> Result<WriteTx<D>, mcptask_core::StoreError> {
        self.begin_in_turn(true).await
    }

    async fn begin_in_turn(&self, urgent: bool) -> Result<WriteTx<D>, mcptask_core::StoreError> {
        let permit = self.turn(urgent).await;
        let tx = D::begin_write(&self.writer).await?;
        Ok(WriteTx {
            tx,
            _permit: permit,
        })
    }

    /// The writer connection for a single statement, in its turn.
    pub(crate) async fn write_conn(&self) -> Result<WriteConn<D>, mcptask_core::StoreError> {
        let permit = self.turn(false).await;
        let conn = self.writer.acquire().await.map_err(crate::error::db_err)?;
        Ok(WriteConn {
            conn,
            _permit: permit,
        })
    }

    /// Apply pending migrations; returns how many ran. Idempotent; concurrent
    /// callers on PostgreSQL are serialised by sqlx's advisory lock.
    pub async fn migrate(&self) -> Result<usize, sqlx::migrate::MigrateError> {
        let before = self.applied_migrations().await;
        D::migrate(&self.writer).await?;
        Ok(self.applied_migrations().await.saturating_sub(before))
    }

    /// Whether the store can serve: reachable within `within`, and every
    /// migration this build knows applied. The error says which is not.
    pub async fn readiness(&self, within: std::time::Duration) -> Result<(), NotReady> {
        let check =
            async {
                let mut conn =
                    self.reader.acquire().await.map_err(|e| {
                        NotReady::Database(format!("the database is unreachable: {e}"))
                    })?;
                let row = D::fetch_optional(
                    &mut conn,
                    "SELECT count(*) AS n FROM _sqlx_migrations WHERE success",
                    Vec::new(),
                )
                .await
                .map_err(|e| NotReady::Database(format!("the schema cannot be read: {e}")))?;
                let applied = match row {
                    Some(row) => D::column::<i64>(&row, "n")
                        .map_err(|e| NotReady::Database(e.to_string()))?,
                    None => 0,
                };
                let known = D::migrator().iter().count() as i64;
                if applied < known {
                    return Err(NotReady::MigrationsPending {
                        pending: known - applied,
                        known,
                    });
                }
                Ok(())
            };
        match tokio::time::timeout(within, check).await {
            Ok(r) => r,
            Err(_) => Err(NotReady::Database(format!(
                "the database did not answer within {within:?}"
            ))),
        }
    }

    async fn applied_migrations(&self) -> usize {
        let count = async {
            let mut conn = self.writer.acquire().await.map_err(crate::error::db_err)?;
            let row = D::fetch_optional(
                &mut conn,
                "SELECT count(*) AS n FROM _sqlx_migrations WHERE success",
                Vec::new(),
            )
            .await?;
            match row {
                Some(row) => D::column::<i64>(&row, "n"),
                None => Ok(0),
            }
        };
        // Before the first migration the table does not exist: none applied.
        count.await.map(|n| n.max(0) as usize).unwrap_or(0)
    }

    /// Close the pools (waits for in-flight statements).
    pub async fn close(&self) {
        self.reader.close().await;
        self.writer.close().await;
    }
}

/// A connection idle for less than this is handed out without a ping.
const TRUSTED_IDLE: std::time::Duration = std::time::Duration::from_secs(1);

/// A connection pool of `max` connections that waits at most `acquire` for
/// a free one.
///
/// sqlx pings every connection it hands out by default: one more round trip
/// (PostgreSQL) or thread hop (SQLite) on every request, as much as a lookup
/// by id costs. Only connections idle for [`TRUSTED_IDLE`] or more are pinged
/// here; sqlx still pings each connection when it goes back to the pool, off
/// the caller's path, and a connection broken in between fails one statement,
/// a transient `StoreError::Database` that callers already retry.
pub(crate) async fn connect_pool<D: sqlx::Database>(
    options: <D::Connection as sqlx::Connection>::Options,
    max: u32,
    acquire: std::time::Duration,
) -> Result<Pool<D>, sqlx::Error> {
    pool_options::<D>(max, acquire)
        .before_acquire(|conn, meta| Box::pin(ping_if_idle(conn, meta)))
        .connect_with(options)
        .await
}

/// The options of [`connect_pool`] before its `before_acquire`, for a
/// backend that adds its own checks around [`ping_if_idle`].
pub(crate) fn pool_options<D: sqlx::Database>(
    max: u32,
    acquire: std::time::Duration,
) -> sqlx::pool::PoolOptions<D> {
    sqlx::pool::PoolOptions::<D>::new()
        .max_connections(max)
        .acquire_timeout(acquire)
        .test_before_acquire(false)
}

/// Ping a connection about to be handed out only if it was idle for
/// [`TRUSTED_IDLE`] or more ([`connect_pool`] says why).
pub(crate) async fn ping_if_idle<C: sqlx::Connection>(
    conn: &mut C,
    meta: sqlx::pool::PoolConnectionMetadata,
) -> Result<bool, sqlx::Error> {
    if meta.idle_for >= TRUSTED_IDLE {
        conn.ping().await?;
    }
    Ok(true)
}

/// A statement assembled at run time: fragments with `$N` parameters
/// numbered as they are pushed.
pub(crate) struct DynamicSql<'a> {
    text: String,
    args: Vec<Arg<'a>>,
}

impl<'a> DynamicSql<'a> {
    pub(crate) fn new(base: &str) -> Self {
        DynamicSql {
            text: base.to_string(),
            args: Vec::new(),
        }
    }

    pub(crate) fn push(&mut self, fragment: &str) -> &mut Self {
        self.text.push_str(fragment);
        self
    }

    pub(crate) fn push_arg(&mut self, arg: impl Into<Arg<'a>>) -> &mut Self {
        self.args.push(arg.into());
        self.text.push_str(&format!("${}", self.args.len()));
        self
    }

    pub(crate) fn build(self) -> (Sql, Vec<Arg<'a>>) {
        (Sql::Owned(self.text), self.args)
    }
}

/// Why a store cannot serve yet ([`SqlStore::readiness`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotReady {
    /// The database is unreachable, or did not answer in time; the text is
    /// the driver's, for the log.
    #[error("{0}")]
    Database(String),
    /// Migrations this build knows are not applied yet.
    #[error("{pending} of {known} migrations are not applied yet (`mcptask migrate`)")]
    MigrationsPending {
        /// How many are missing.
        pending: i64,
        /// How many this build knows.
        known: i64,
    },
}
