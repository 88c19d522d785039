//! SQLite backend: one file, WAL journal, durable (`synchronous=FULL`) commits.
//!
//! SQLite has a single writer, so all writes go through a one-connection pool
//! (in-process writers queue instead of failing with `SQLITE_BUSY`); reads use
//! a separate pool and never block on the writer thanks to WAL. Several
//! processes may share a file: `busy_timeout` makes them wait for the lock.

mod changes;
mod checkpoint;
mod dialect;

use std::str::FromStr;
use std::time::Duration;

use sqlx::Sqlite;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqliteSynchronous};

use crate::OpenError;
use crate::flows::{SqlStore, connect_pool};

/// A store on one SQLite file.
pub type SqliteStore = SqlStore<Sqlite>;

impl SqlStore<Sqlite> {
    /// Connect to `sqlite:PATH` (the file is created if missing; its
    /// directory must exist). Does not migrate.
    ///
    /// The URL may carry `?synchronous=normal` to trade power-loss durability
    /// for commit latency (the default is `full`), and `?busy_timeout_ms=N`:
    /// how long a write waits for another process's write lock before it
    /// fails with `SQLITE_BUSY` (default 30 000).
    pub async fn connect(url: &str) -> Result<Self, OpenError> {
        let connect_err = |reason: String, driver: Option<sqlx::Error>| OpenError::Connect {
            url: url.to_string(),
            reason,
            driver,
        };
        let (base, synchronous, busy_timeout) = split_params(url);
        if base.contains(":memory:") || base.contains("mode=memory") {
            return Err(OpenError::UnsupportedUrl(format!(
                "{url} (in-memory SQLite is not durable; use a file)"
            )));
        }
        let options = SqliteConnectOptions::from_str(&base)
            .map_err(|e| connect_err(format!("the URL is not valid: {e}"), Some(e)))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(synchronous)
            .foreign_keys(true)
            .pragma("cache_size", SQLITE_CACHE_SIZE)
            .busy_timeout(busy_timeout);
        let path = options.get_filename().to_path_buf();
        crate::diagnose::sqlite_preflight(&path).map_err(|reason| connect_err(reason, None))?;
        create_private(&path);
        let failed =
            |e: sqlx::Error| connect_err(crate::diagnose::sqlite_reason(&path, &e), Some(e));
        let acquire = Duration::from_secs(60);
        // Checkpoints run in the background; the writer's own automatic one
        // is only the backstop (see `checkpoint`).
        let writer_options = options
            .clone()
            .pragma("wal_autocheckpoint", checkpoint::BACKSTOP_PAGES);
        let writer = connect_pool::<Sqlite>(writer_options, 1, acquire)
            .await
            .map_err(failed)?;
        let reader = connect_pool::<Sqlite>(options, 8, acquire)
            .await
            .map_err(failed)?;
        let background = checkpoint::Checkpointer::start(reader.clone());
        Ok(Self {
            writer,
            reader,
            background: Some(std::sync::Arc::new(background)),
            gate: Some(Default::default()),
            file: Some(path.into()),
        })
    }

    /// The write pool, for tests and tools that need raw SQL.
    pub fn writer_pool(&self) -> &SqlitePool {
        &self.writer
    }

    /// Take the lowest free process slot of this database file
    /// ([`crate::slot`]): a lock on a file beside it.
    pub fn take_slot(&self) -> Result<Option<crate::slot::Slot>, mcptask_core::StoreError> {
        match &self.file {
            Some(file) => crate::slot::take_sqlite(file),
            None => Ok(None),
        }
    }
}

/// Create the database file, readable by its owner only, if it does not
/// exist yet: it holds every call's arguments and results and the sealed
/// OAuth tokens, and SQLite gives its -wal and -shm files the main file's
/// mode. An existing file keeps the mode its owner gave it; a failure here
/// is left to the connection to report.
fn create_private(path: &std::path::Path) {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let _ = options.open(path);
}

/// Each connection's page cache (`PRAGMA cache_size`; negative: KiB), 8 MiB
/// instead of SQLite's 2 MiB. The bundled SQLite pools every connection's
/// cache into one budget for the process (the sum of their sizes), and 2 MiB
/// per connection holds less than the live rows of 10,000 tasks once eight
/// readers each want them: every `tasks/get` then read three pages from the
/// file again (docs/BENCHMARKS.md). At most 72 MiB for the store's nine
/// connections, and only as much as the file holds.
pub const SQLITE_CACHE_SIZE: &str = "-8192";

/// How long a write waits for another process's write lock by default.
const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// Pull our own `synchronous=` and `busy_timeout_ms=` parameters out of the
/// URL (sqlx does not parse them).
fn split_params(url: &str) -> (String, SqliteSynchronous, Duration) {
    let Some((path, query)) = url.split_once('?') else {
        return (
            url.to_string(),
            SqliteSynchronous::Full,
            DEFAULT_BUSY_TIMEOUT,
        );
    };
    let mut synchronous = SqliteSynchronous::Full;
    let mut busy_timeout = DEFAULT_BUSY_TIMEOUT;
    let kept: Vec<&str> = query
        .split('&')
        .filter(|kv| match kv.split_once('=') {
            Some(("synchronous", v)) => {
                synchronous = SqliteSynchronous::from_str(v).unwrap_or(SqliteSynchronous::Full);
                false
            }
            Some(("busy_timeout_ms", v)) => {
                if let Ok(ms) = v.parse() {
                    busy_timeout = Duration::from_millis(ms);
                }
                false
            }
            _ => true,
        })
        .collect();
    let base = if kept.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{}", kept.join("&"))
    };
    (base, synchronous, busy_timeout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synchronous_parameter_is_ours() {
        let (u, s, b) = split_params("sqlite:a.db?synchronous=normal&mode=rwc");
        assert_eq!(u, "sqlite:a.db?mode=rwc");
        assert!(matches!(s, SqliteSynchronous::Normal));
        assert_eq!(b, DEFAULT_BUSY_TIMEOUT);
        let (u, s, b) = split_params("sqlite:a.db");
        assert_eq!(u, "sqlite:a.db");
        assert!(matches!(s, SqliteSynchronous::Full));
        assert_eq!(b, DEFAULT_BUSY_TIMEOUT);
        let (u, _, b) = split_params("sqlite:a.db?busy_timeout_ms=250");
        assert_eq!(u, "sqlite:a.db");
        assert_eq!(b, Duration::from_millis(250));
    }
}
