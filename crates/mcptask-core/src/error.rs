//! Error taxonomy shared by the stores and runtimes.

/// A failure of the store itself (not of a fenced write that lost its claim:
/// those are reported as `Ok(false)` / `None` by the store methods).
///
/// Whether a failure is worth retrying is part of the error:
/// [`StoreError::is_transient`] is true only for [`StoreError::Database`]
/// (the database was unreachable, busy, or aborted the transaction to resolve
/// a conflict). A database that *refused* the operation
/// ([`StoreError::Rejected`]: a constraint violation, data it cannot store)
/// will refuse it again, so retrying loops are told to stop.
///
/// ```
/// use mcptask_core::StoreError;
/// let e = StoreError::Database("connection reset".into());
/// assert!(e.is_transient());
/// assert_eq!(e.to_string(), "database error: connection reset");
/// let e = StoreError::Rejected("duplicate key".into());
/// assert!(!e.is_transient());
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The database could not be reached, was busy, or aborted the
    /// transaction (connection lost, pool timeout, serialization failure,
    /// deadlock, `SQLITE_BUSY`): retrying later may succeed. The driver's
    /// error is kept as the source.
    #[error("database error: {0}")]
    Database(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The database refused the operation (constraint violation, invalid or
    /// unrepresentable data): retrying the same operation fails the same way.
    #[error("database rejected the operation: {0}")]
    Rejected(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// Stored data could not be decoded: a bug or a manual edit of the database.
    #[error("corrupt stored data: {0}")]
    Corrupt(String),
    /// The caller asked for something the store cannot represent or refuses
    /// by its own rules (the message is meant for the caller).
    #[error("invalid request to the store: {0}")]
    Invalid(String),
    /// A call's row was to commit with its call task, but the tracker
    /// already holds a row for the same remote task (the same server,
    /// principal and remote task id): nothing was written. The call's id.
    #[error("call {0} is already tracked")]
    AlreadyTracked(String),
}

impl StoreError {
    /// Whether retrying the same operation later may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Database(_))
    }
}
