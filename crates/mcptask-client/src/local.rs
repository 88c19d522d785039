//! Calls whose work runs in this process's call runtime (a gateway's
//! SEP-1686 and synchronous calls): the tracker follows them as it follows
//! an upstream's task, through [`LocalWork`] instead of an MCP session, so
//! every call has the same row, events, answers and cancel.

use async_trait::async_trait;
use rmcp::model::{DetailedTask, InputResponses};

use crate::remote::RemoteError;

/// `tasks/get`, `tasks/update` and `tasks/cancel` of the call runtime, for
/// the tracker's workers. Each call task has the id of its call and is
/// bound to the call's principal.
///
/// Errors are classified as an upstream's are: [`RemoteError::NotFound`]
/// for a task that does not exist (the call is settled `failed`),
/// [`RemoteError::Transient`] for a store that is unavailable now (retried),
/// and for `update`, [`RemoteError::Rpc`] with `-32602` for answers the task
/// refused (the keys can be answered again).
///
/// ```
/// use mcptask_client::{LocalWork, remote::RemoteError};
/// use rmcp::model::{DetailedTask, InputResponses};
///
/// struct Nothing;
///
/// #[async_trait::async_trait]
/// impl LocalWork for Nothing {
///     async fn get(&self, id: &str, _: Option<&str>) -> Result<DetailedTask, RemoteError> {
///         Err(RemoteError::NotFound(format!("no task {id}")))
///     }
///     async fn update(&self, id: &str, _: Option<&str>, _: InputResponses) -> Result<(), RemoteError> {
///         Err(RemoteError::NotFound(format!("no task {id}")))
///     }
///     async fn cancel(&self, id: &str, _: Option<&str>) -> Result<(), RemoteError> {
///         Err(RemoteError::NotFound(format!("no task {id}")))
///     }
/// }
/// ```
#[async_trait]
pub trait LocalWork: Send + Sync {
    /// The call task as its caller would read it with `tasks/get`.
    async fn get(&self, id: &str, principal: Option<&str>) -> Result<DetailedTask, RemoteError>;
    /// Deliver stored answers to the call task's open questions.
    async fn update(
        &self,
        id: &str,
        principal: Option<&str>,
        answers: InputResponses,
    ) -> Result<(), RemoteError>;
    /// Ask the call task to stop.
    async fn cancel(&self, id: &str, principal: Option<&str>) -> Result<(), RemoteError>;
}
