//! Why a task operation was refused, and how each refusal reads on the wire.
//!
//! The mapping to JSON-RPC errors matters for privacy: unknown, purged and
//! foreign task ids must be indistinguishable to the caller, so they are one
//! variant with one message.

use mcptask_core::StoreError;
use mcptask_core::redact::{Internal, Redacted};
use rmcp::ErrorData;

/// The message every "no such task for you" answer carries, so unknown,
/// purged and foreign ids are indistinguishable.
pub const TASK_NOT_FOUND: &str = "Failed to retrieve task: Task not found";

/// The JSON-RPC error code of a create refused by admission control (the
/// create queue is full, or a live-task cap is reached). Nothing was stored;
/// the caller may retry later. The error's `data` carries
/// `{"reason": "server_busy"}`.
pub const SERVER_BUSY: i32 = -32000;

/// Why a task operation was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TaskError {
    /// Unknown, purged, or bound to another principal (deliberately one case).
    #[error("{TASK_NOT_FOUND}")]
    NotFound,
    /// The request is malformed or exceeds a bound (answers `-32602`).
    #[error("{0}")]
    InvalidParams(String),
    /// No tool of this name is registered.
    #[error("unknown tool: {0}")]
    UnknownTool(String),
    /// A task-only tool was called without declaring the tasks extension (`-32021`).
    #[error("this tool only runs as a task: declare the io.modelcontextprotocol/tasks extension")]
    MissingCapability,
    /// Admission control refused a new task (create queue full, live-task cap
    /// reached); nothing was stored. Answers [`SERVER_BUSY`].
    #[error("server busy: {0}; retry later")]
    Overloaded(String),
    /// The runtime no longer accepts new tasks.
    #[error("the server is shutting down")]
    ShuttingDown,
    /// The store failed; the operation may be retried.
    #[error("task store unavailable: {0}")]
    Store(#[from] StoreError),
    /// A stored row could not be turned into its wire form.
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<TaskError> for ErrorData {
    fn from(e: TaskError) -> Self {
        match e {
            TaskError::NotFound => ErrorData::invalid_params(TASK_NOT_FOUND, None),
            TaskError::InvalidParams(m) => ErrorData::invalid_params(m, None),
            TaskError::UnknownTool(name) => {
                ErrorData::invalid_params(format!("unknown tool: {name}"), None)
            }
            TaskError::MissingCapability => ErrorData::missing_required_client_capability(
                rmcp::model::ClientCapabilities::builder()
                    .enable_tasks()
                    .build(),
            ),
            // The driver's text names tables, statements and paths: it goes
            // to the log, the client learns only that the store failed.
            TaskError::Store(e) => redacted_error(&redact(Internal::Store, &e)),
            TaskError::Internal(e) => redacted_error(&redact(Internal::Bug, &e)),
            TaskError::Overloaded(why) => ErrorData::new(
                rmcp::model::ErrorCode(SERVER_BUSY),
                format!("server busy: {why}; retry later"),
                Some(serde_json::json!({"reason": "server_busy"})),
            ),
            other => ErrorData::internal_error(other.to_string(), None),
        }
    }
}

/// Log `detail` (an error whose text is for the operator only) under a new
/// incident of `kind`, and return what the caller is told: the one
/// redaction rule of [`mcptask_core::redact`], used by every face.
pub fn redact(kind: Internal, detail: &dyn std::fmt::Display) -> Redacted {
    let redacted = Redacted::new(kind);
    tracing::warn!(incident = %redacted.incident, error = %detail, "a request failed: {}", kind.public_message());
    redacted
}

/// A redacted failure as a JSON-RPC error (`-32603`, the incident in
/// `data`).
pub fn redacted_error(redacted: &Redacted) -> ErrorData {
    ErrorData::internal_error(
        redacted.message(),
        Some(serde_json::json!({"incident": redacted.incident})),
    )
}
