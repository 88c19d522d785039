//! Calls whose work runs in this process's call runtime (a gateway's
//! SEP-1686 and synchronous calls): the tracker follows them as it follows
//! an upstream's task, through [`LocalWork`] instead of an MCP session, so
//! every call has the same row, events, answers and cancel.

use async_trait::async_trait;
use rmcp::model::{DetailedTask, InputResponses};

use crate::remote::RemoteError;

/// A call task as the tracker reads it: what `tasks/get` answers, and which
/// run of its work this is (a rerun after an interruption is recorded in
/// the call's timeline).
#[derive(Debug, Clone)]
pub struct LocalTask {
    /// The task as its caller would read it with `tasks/get`.
    pub task: DetailedTask,
    /// 1, then one more for each rerun.
    pub attempt: i64,
    /// The process running this attempt (its owner id), if any.
    pub by: Option<String>,
}

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
/// use mcptask_client::{LocalTask, LocalWork, remote::RemoteError};
/// use rmcp::model::InputResponses;
///
/// struct Nothing;
///
/// #[async_trait::async_trait]
/// impl LocalWork for Nothing {
///     async fn get(&self, id: &str, _: Option<&str>) -> Result<LocalTask, RemoteError> {
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
    /// The call task as its caller would read it with `tasks/get`, and its
    /// attempt.
    async fn get(&self, id: &str, principal: Option<&str>) -> Result<LocalTask, RemoteError>;
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
