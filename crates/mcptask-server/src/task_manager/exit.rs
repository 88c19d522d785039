//! rmcp's [`TaskExit`] and the `ErrorData` a `#[tool]` returns, each
//! spelled as the other: a router tool running as a task can only return
//! `ErrorData`, and the helpers a server shares between its closures and its
//! tools return `TaskExit`.

use rmcp::ErrorData;
use rmcp::model::ErrorCode;
use rmcp::task_manager::TaskExit;

/// The JSON-RPC code of [`cancelled`] (the "request cancelled" code).
pub(crate) const CANCELLED_CODE: i32 = -32800;

/// What a `#[tool]` running as a task returns to settle its task
/// `cancelled` (a router tool returns `ErrorData`, and rmcp's
/// [`TaskExit::Cancelled`] has no `ErrorData` spelling). Only after
/// `tasks/cancel`: otherwise it is an error like any other.
///
/// ```
/// let e = mcptask_server::task_manager::cancelled();
/// assert_eq!(e.code.0, -32800);
/// ```
pub fn cancelled() -> ErrorData {
    ErrorData::new(ErrorCode(CANCELLED_CODE), "the task was cancelled", None)
}

/// A [`TaskExit`] as the `ErrorData` a `#[tool]` returns, so `?` works on
/// the context's methods inside a router tool: `Cancelled` becomes
/// [`cancelled`] (the task then settles `cancelled`, as from a closure),
/// an error stays itself.
///
/// ```
/// use mcptask_server::task_manager::{TaskExit, exit_error};
/// use rmcp::ErrorData;
///
/// assert_eq!(exit_error(TaskExit::Cancelled).code.0, -32800);
/// let e = ErrorData::invalid_params("no such file", None);
/// assert_eq!(exit_error(TaskExit::Error(e.clone())), e);
/// // In a `#[tool]`: `ctx.set_status_message("halfway").await.map_err(exit_error)?;`
/// ```
pub fn exit_error(exit: TaskExit) -> ErrorData {
    match exit {
        TaskExit::Cancelled => cancelled(),
        TaskExit::Error(e) => e,
    }
}
