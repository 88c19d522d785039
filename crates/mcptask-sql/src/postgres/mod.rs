//! PostgreSQL backend: the shared store for several gateway and server
//! processes. Claims use `FOR UPDATE SKIP LOCKED`; cross-process wake-ups use
//! `LISTEN/NOTIFY` (hints only: the store stays the truth).

mod dialect;
pub(crate) mod failover;
pub mod hosts;

use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::Postgres;
use sqlx::postgres::{PgConnectOptions, PgPool};

use crate::OpenError;
use crate::flows::{SqlStore, connect_pool, ping_if_idle, pool_options};
use failover::{Primary, Watcher};
use hosts::HostList;

/// A store on a PostgreSQL database.
pub type PgStore = SqlStore<Postgres>;

/// Connections of one process (every store handle shares them).
const POOL_SIZE: u32 = 16;
/// How long a statement waits for a connection (through a failover too).
const ACQUIRE_WITHIN: Duration = Duration::from_secs(30);

/// What a store on a host list keeps beside its pool (in
/// `SqlStore::background`): the list, and the watcher that follows its
/// primary, stopped with the last handle.
struct HostListState {
    primary: Arc<Primary>,
    _watcher: Watcher,
}

/// A process that stalls inside a transaction (paused, swapped out) would
/// hold its row locks and block every other process's claims on those rows;
/// the server ends such a session instead. Our own transactions are short,
/// far below this bound.
fn with_session_settings(options: PgConnectOptions) -> PgConnectOptions {
    options.options([("idle_in_transaction_session_timeout", "30s")])
}

impl SqlStore<Postgres> {
    /// Connect to `postgres://…`. Does not migrate.
    ///
    /// A libpq-style host list (`postgres://u@h1:5432,h2:5432/db?target_session_attrs=read-write`,
    /// [`hosts`]) connects to the first host that accepts writes and follows
    /// the primary when it moves (`failover`); so does one host with
    /// `target_session_attrs=read-write` or `primary`.
    pub async fn connect(url: &str) -> Result<Self, OpenError> {
        let redacted = crate::redact(url);
        let connect_err = |reason: String, driver: Option<sqlx::Error>| OpenError::Connect {
            url: redacted.clone(),
            reason,
            driver,
        };
        let list = HostList::parse(url)
            .map_err(|e| connect_err(format!("the URL is not valid: {e}"), None))?;
        // One host with a stated target_session_attrs (a `-rw` address
        // that may briefly reach a demoted server) gets the same checks.
        if list.hosts().len() > 1 || list.attrs() != hosts::SessionAttrs::Any {
            return Self::connect_list(&list)
                .await
                .map_err(|(reason, driver)| connect_err(reason, driver));
        }
        let options = PgConnectOptions::from_str(&list.url_of(0))
            .map_err(|e| connect_err(format!("the URL is not valid: {e}"), Some(e)))?;
        let options = with_session_settings(options);
        // The pool retries a refused connection until its acquire timeout and
        // then says only "pool timed out": one direct attempt first says why,
        // in seconds.
        crate::diagnose::probe_postgres(&options, crate::diagnose::PG_PROBE)
            .await
            .map_err(|(reason, driver)| connect_err(reason, driver))?;
        let pool = connect_pool::<Postgres>(options, POOL_SIZE, ACQUIRE_WITHIN)
            .await
            .map_err(|e| connect_err(e.to_string(), Some(e)))?;
        Ok(Self::on_pool(pool, None))
    }

    /// A store on a host list: wait (for [`crate::diagnose::PG_PROBE`]) for
    /// a host that qualifies, open the pool on it with the failover checks,
    /// and start the watcher.
    async fn connect_list(list: &HostList) -> Result<Self, (String, Option<sqlx::Error>)> {
        let mut primary =
            Primary::new(list).map_err(|e| (format!("the URL is not valid: {e}"), Some(e)))?;
        primary.map_options(with_session_settings);
        let primary = Arc::new(primary);
        let deadline = Instant::now() + crate::diagnose::PG_PROBE;
        let first = loop {
            match primary.find().await {
                Ok(i) => break i,
                Err(why) if Instant::now() >= deadline => {
                    return Err((
                        format!(
                            "no host of the list accepts a session with target_session_attrs={} ({why})",
                            list.attrs().as_str()
                        ),
                        None,
                    ));
                }
                Err(_) => tokio::time::sleep(failover::PROBE_EVERY).await,
            }
        };
        primary.choose(first, None, false);
        let (admit, keep) = (primary.clone(), primary.clone());
        let pool = pool_options::<Postgres>(POOL_SIZE, ACQUIRE_WITHIN)
            .after_connect(move |conn, _meta| {
                let admit = admit.clone();
                Box::pin(async move { admit.admit(conn).await })
            })
            .before_acquire(move |conn, meta| {
                let fresh = keep.keep(&meta);
                Box::pin(async move {
                    if !fresh {
                        return Ok(false);
                    }
                    ping_if_idle(conn, meta).await
                })
            })
            .connect_with(primary.current_options())
            .await
            .map_err(|e| (e.to_string(), Some(e)))?;
        let watcher = Watcher(tokio::spawn(primary.clone().watch(pool.clone())));
        let state = HostListState {
            primary,
            _watcher: watcher,
        };
        Ok(Self::on_pool(pool, Some(Arc::new(state))))
    }

    fn on_pool(pool: PgPool, list: Option<Arc<HostListState>>) -> Self {
        Self {
            writer: pool.clone(),
            reader: pool,
            background: list.map(|l| l as Arc<dyn std::any::Any + Send + Sync>),
            gate: None,
            file: None,
        }
    }

    /// The primary of this store's host list, if it was opened on one.
    fn primary(&self) -> Option<Arc<Primary>> {
        let state = self.background.clone()?.downcast::<HostListState>().ok()?;
        Some(state.primary.clone())
    }

    /// The pool, for tests and tools that need raw SQL.
    pub fn pool(&self) -> &PgPool {
        &self.writer
    }

    /// Take the lowest free process slot of this database
    /// ([`crate::slot`]): an advisory lock on a session of its own.
    pub async fn take_slot(&self) -> Result<Option<crate::slot::Slot>, mcptask_core::StoreError> {
        crate::slot::take_postgres(self.writer.clone(), self.primary()).await
    }
}
