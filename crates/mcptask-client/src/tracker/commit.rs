//! Where a new handle's row is committed when the tracker does not commit
//! it alone: a gateway commits a call's row in the same transaction as the
//! MCP caller's task of the same id, so neither exists without the other.

use std::sync::Arc;

use async_trait::async_trait;
use mcptask_core::client::transition::Change;

use super::TrackerError;

/// Commits a handle's row ([`Change`], as `transition::new_record` made it)
/// together with whatever must commit with it.
///
/// An error means nothing was committed: the tracker then cancels the
/// upstream task (nothing would track it), unless the error is
/// [`TrackerError::AlreadyTracked`] (the row exists: another call holds it).
///
/// ```
/// use mcptask_client::{HandleCommit, TrackerError};
/// use mcptask_core::client::transition::Change;
///
/// /// Refuses every handle (a full queue, say).
/// struct Refuse;
///
/// #[async_trait::async_trait]
/// impl HandleCommit for Refuse {
///     async fn commit(&self, _row: Change) -> Result<(), TrackerError> {
///         Err(TrackerError::Unavailable("no room".into()))
///     }
/// }
/// ```
#[async_trait]
pub trait HandleCommit: Send + Sync {
    /// Commit `row`; return only once it is durable.
    async fn commit(&self, row: Change) -> Result<(), TrackerError>;
}

/// A [`HandleCommit`] in [`CallOptions`](super::CallOptions): cloned with
/// them, shown by name only.
#[derive(Clone)]
pub struct CommitWith(pub Arc<dyn HandleCommit>);

impl std::fmt::Debug for CommitWith {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CommitWith(..)")
    }
}
