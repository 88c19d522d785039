//! What a tracker operation can fail with.

use mcptask_core::StoreError;
use mcptask_core::client::RemoteTaskRecord;
use rmcp::ErrorData;

use crate::remote::RemoteError;

/// Why a tracker operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TrackerError {
    /// The call cannot be authorized at its upstream as its server's
    /// `identity` requires (`crate::identity`); nothing was sent.
    #[error("{0}")]
    Unauthorized(String),
    /// No tracked task has this local id.
    #[error("unknown task {0:?}")]
    NotFound(String),
    /// The request itself is unusable (arguments, answers, ids, sizes).
    #[error("{0}")]
    InvalidInput(String),
    /// An answer does not fit the input request it answers (for an
    /// elicitation: its `requestedSchema`). Nothing was stored.
    #[error("answer {key:?} does not fit the question: {}", match field {
        Some(f) => format!("field {f:?}: {reason}"),
        None => reason.clone(),
    })]
    AnswerRejected {
        /// The input key whose answer was refused.
        key: String,
        /// The form field at fault, when one is.
        field: Option<String>,
        /// What was expected and what was given, in words.
        reason: String,
    },
    /// No server of this name is in the registry.
    #[error(
        "server {0:?} is not configured (the configured ones: `mcptask config check` or GET /api/v1/servers; add it under [[servers]] in mcptask.toml)"
    )]
    UnknownServer(String),
    /// The tool call itself failed with a JSON-RPC error from the server.
    #[error("the server returned an error: {} ({})", .0.message, .0.code.0)]
    Remote(ErrorData),
    /// The server could not be reached (or recording the task failed mid-way).
    #[error("the server could not be reached: {0}")]
    Unavailable(String),
    /// The server answered something that is not valid MCP / SEP-2663.
    #[error("the server broke the protocol: {0}")]
    Protocol(String),
    /// The tool asked for input before starting and nothing answered it (a
    /// resolver answer that does not fit the question counts as none).
    #[error(
        "the tool needs input before it starts ({keys:?}) and no resolver answered it (with an answer that fits the question)"
    )]
    InputNeeded {
        /// The keys nobody answered.
        keys: Vec<String>,
        /// The server's `inputRequests`, as sent.
        requests: rmcp::model::InputRequests,
        /// The server's `requestState` of that round, to give back with the
        /// answers ([`CallOptions::request_state`](super::CallOptions::request_state)).
        request_state: Option<String>,
    },
    /// The server did not answer `operation` within `after` (its call
    /// timeout); it may still be working on it, and nothing was kept.
    #[error("{operation}: no answer within {after:?}")]
    NoAnswer {
        /// The request that went unanswered.
        operation: String,
        /// The bound it was given.
        after: std::time::Duration,
    },
    /// `wait` gave up; the task (as last read) is still live.
    #[error("timed out waiting; the task is still {}", .0.status)]
    Timeout(Box<RemoteTaskRecord>),
    /// `shutdown` has begun: no new calls are accepted.
    #[error("the tracker is shutting down")]
    ShuttingDown,
    /// Admission control refused to keep the call (a full queue, a cap
    /// reached); nothing was kept, and an upstream task it started was
    /// cancelled. Retry later.
    #[error("busy: {0}; retry later")]
    Busy(String),
    /// The server handed out a task id a live tracked task already holds
    /// (of another call); nothing new was recorded.
    #[error("the server handed out task {0:?}, which another call already tracks")]
    AlreadyTracked(String),
    /// The task store failed.
    #[error("task store: {0}")]
    Store(#[from] StoreError),
}

impl From<RemoteError> for TrackerError {
    fn from(e: RemoteError) -> Self {
        match e {
            RemoteError::Rpc(e) => TrackerError::Remote(e),
            RemoteError::Unauthorized(m) => TrackerError::Unauthorized(m),
            RemoteError::Protocol(m) => TrackerError::Protocol(m),
            RemoteError::NotFound(m) => TrackerError::Protocol(m),
            RemoteError::ConnectionUnavailable(m) | RemoteError::Transient(m) => {
                TrackerError::Unavailable(m)
            }
        }
    }
}

impl TrackerError {
    /// The answer to `key` does not fit its question.
    pub(crate) fn rejected(key: &str, e: mcptask_core::elicit::AnswerError) -> Self {
        TrackerError::AnswerRejected {
            key: key.to_string(),
            field: e.field,
            reason: e.reason,
        }
    }
}
