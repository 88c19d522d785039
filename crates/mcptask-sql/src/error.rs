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
    #[error("cannot connect to {url}: {source}")]
    Connect {
        /// The URL, with any password redacted.
        url: String,
        /// What the driver reported.
        #[source]
        source: sqlx::Error,
    },
    /// A migration failed.
    #[error("migrating {url} failed: {source}")]
    Migrate {
        /// The URL, with any password redacted.
        url: String,
        /// What the migrator reported.
        #[source]
        source: sqlx::migrate::MigrateError,
    },
}

/// A driver error as the core sees it, with the driver's error kept as the
/// source. A row that does not decode is corrupt data, not a database fault.
pub(crate) fn db_err(e: sqlx::Error) -> StoreError {
    match e {
        sqlx::Error::ColumnDecode { .. }
        | sqlx::Error::Decode(_)
        | sqlx::Error::ColumnNotFound(_) => StoreError::Corrupt(e.to_string()),
        other => StoreError::Database(Box::new(other)),
    }
}
