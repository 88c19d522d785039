//! Error taxonomy shared by the stores and runtimes.

/// A failure of the store itself (not of a fenced write that lost its claim:
/// those are reported as `Ok(false)` / `None` by the store methods).
///
/// ```
/// use mcptask_core::StoreError;
/// let e = StoreError::Database("connection reset".into());
/// assert!(e.is_transient());
/// assert_eq!(e.to_string(), "database error: connection reset");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The database could not be reached or returned an error. Usually
    /// transient. The driver's error is kept as the source.
    #[error("database error: {0}")]
    Database(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// Stored data could not be decoded: a bug or a manual edit of the database.
    #[error("corrupt stored data: {0}")]
    Corrupt(String),
    /// The caller asked for something the store cannot represent.
    #[error("invalid request to the store: {0}")]
    Invalid(String),
}

impl StoreError {
    /// Whether retrying the same operation later may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Database(_))
    }
}
