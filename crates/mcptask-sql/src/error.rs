//! Errors of opening a store, and how database errors reach the core.

use mcptask_core::StoreError;

/// Why a store could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The URL names no backend this crate has.
    #[error(
        "unsupported database URL {0:?}: use sqlite:PATH (e.g. sqlite:mcptask.db) or postgres://USER@HOST/DB"
    )]
    UnsupportedUrl(String),
    /// The database could not be reached or opened.
    #[error("cannot open the database {url}: {reason}")]
    Connect {
        /// The URL, with any password redacted.
        url: String,
        /// Why, in plain words, with what to check or change.
        reason: String,
        /// What the driver reported, when it was the driver that failed (not
        /// part of the message: `reason` already says what it means).
        driver: Option<sqlx::Error>,
    },
    /// A migration failed.
    #[error("cannot migrate the database {url}: {reason}")]
    Migrate {
        /// The URL, with any password redacted.
        url: String,
        /// Why, in plain words.
        reason: String,
        /// What the migrator reported.
        driver: sqlx::migrate::MigrateError,
    },
}

impl OpenError {
    /// A failed migration, said plainly: a schema newer than this binary is
    /// the one an operator meets (after a downgrade, or an older process on a
    /// store a newer one migrated).
    pub(crate) fn migrate(url: String, e: sqlx::migrate::MigrateError) -> Self {
        use sqlx::migrate::MigrateError;
        let reason = match &e {
            MigrateError::VersionMissing(version) => format!(
                "its schema is newer than this mcptask {} knows (migration {version} was applied by a newer version); run a newer mcptask on it, or use another database",
                env!("CARGO_PKG_VERSION")
            ),
            MigrateError::VersionMismatch(version) => format!(
                "migration {version} was changed after it was applied (its checksum differs); this database was migrated by a different build of mcptask"
            ),
            MigrateError::Dirty(version) => format!(
                "migration {version} failed part-way earlier and left the schema dirty; restore a backup, or repair it by hand"
            ),
            other => other.to_string(),
        };
        OpenError::Migrate {
            url,
            reason,
            driver: e,
        }
    }
}

/// A driver error as the core sees it, with the driver's error kept as the
/// source. A row that does not decode is corrupt data, not a database fault;
/// an error the database will raise again (a constraint, bad data) is
/// [`StoreError::Rejected`], so retry loops stop; everything else
/// (connections, pool timeouts, lock conflicts) is transient.
pub(crate) fn db_err(e: sqlx::Error) -> StoreError {
    match e {
        sqlx::Error::ColumnDecode { .. }
        | sqlx::Error::Decode(_)
        | sqlx::Error::ColumnNotFound(_) => StoreError::Corrupt(e.to_string()),
        sqlx::Error::Database(ref db)
            if !transient_code(
                db.code().as_deref(),
                db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
                    .is_some(),
            ) =>
        {
            StoreError::Rejected(Box::new(e))
        }
        sqlx::Error::Encode(_)
        | sqlx::Error::InvalidArgument(_)
        | sqlx::Error::TypeNotFound { .. }
        | sqlx::Error::ColumnIndexOutOfBounds { .. }
        | sqlx::Error::Configuration(_) => StoreError::Rejected(Box::new(e)),
        other => StoreError::Database(Box::new(other)),
    }
}

/// Whether a database error code names a condition that passes: the engine
/// was busy, out of a resource, shutting down, or aborted the transaction to
/// resolve a conflict. SQLite reports numeric (extended) result codes,
/// PostgreSQL five-character SQLSTATEs (`sqlstate`). An error without a code
/// is taken as transient: nothing says it will repeat.
fn transient_code(code: Option<&str>, sqlstate: bool) -> bool {
    let Some(code) = code else { return true };
    if !sqlstate && let Ok(extended) = code.parse::<i32>() {
        // SQLITE_NOMEM 7, BUSY 5, LOCKED 6, IOERR 10, FULL 13, CANTOPEN 14, PROTOCOL 15.
        return matches!(extended & 0xff, 5 | 6 | 7 | 10 | 13 | 14 | 15);
    }
    matches!(
        code.get(..2),
        // connection exception, transaction rollback (serialization failure,
        // deadlock), insufficient resources, operator intervention (shutdown,
        // statement timeout), system error (I/O).
        Some("08" | "40" | "53" | "57" | "58")
    ) || matches!(
        code,
        // lock_not_available, idle_in_transaction_session_timeout,
        // read_only_sql_transaction (a standby during failover).
        "55P03" | "25P03" | "25006"
    )
}

#[cfg(test)]
mod tests {
    use super::transient_code;

    #[test]
    fn busy_locks_conflicts_and_lost_connections_are_transient() {
        // SQLITE_BUSY, SQLITE_BUSY_SNAPSHOT, SQLITE_LOCKED.
        for code in [None, Some("5"), Some("517"), Some("6")] {
            assert!(transient_code(code, false), "{code:?}");
        }
        for code in ["40001", "40P01", "08006", "57P01", "53300", "55P03"] {
            assert!(transient_code(Some(code), true), "{code:?}");
        }
    }

    /// What a primary switch throws at statements in flight and at new
    /// connects, each of which the store's callers must retry on the new
    /// primary: a cut or refused connection, the pool timing out, a session
    /// refused as read-only by the host-list check, admin shutdown,
    /// "cannot connect now", a read-only transaction on a demoted server.
    #[test]
    fn what_a_failover_raises_is_transient() {
        use std::io::{Error, ErrorKind};
        let errors = [
            sqlx::Error::Io(Error::from(ErrorKind::ConnectionReset)),
            sqlx::Error::Io(Error::from(ErrorKind::ConnectionRefused)),
            sqlx::Error::Io(Error::from(ErrorKind::UnexpectedEof)),
            sqlx::Error::PoolTimedOut,
            sqlx::Error::Protocol("refused a connection to a server that is a standby".into()),
        ];
        for e in errors {
            let shown = e.to_string();
            assert!(super::db_err(e).is_transient(), "{shown}");
        }
        for code in ["57P01", "57P02", "57P03", "25006", "08006", "08001"] {
            assert!(transient_code(Some(code), true), "{code}");
        }
    }

    #[test]
    fn constraints_and_bad_data_are_permanent() {
        // SQLITE_CONSTRAINT, _PRIMARYKEY, _TRIGGER, _DATATYPE, SQLITE_ERROR.
        for code in ["19", "1555", "1811", "3091", "1"] {
            assert!(!transient_code(Some(code), false), "{code:?}");
        }
        // 22021: a NUL byte in text.
        for code in ["23505", "23514", "22021", "22P02", "42P01"] {
            assert!(!transient_code(Some(code), true), "{code:?}");
        }
    }
}
