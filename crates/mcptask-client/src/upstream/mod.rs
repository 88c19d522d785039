//! Calling upstream MCP servers that do not speak durable tasks (SEP-2663)
//! on behalf of a front server: what protocol a server speaks
//! ([`UpstreamInfo`], `ServerRegistry::protocol`), plain synchronous calls
//! that report progress and relay the server's questions ([`sync_call`]),
//! and the 2025-11-25 tasks protocol (SEP-1686, [`sep1686`]).
//!
//! Every operation runs on a [`Lane`]: an upstream session exclusive to one
//! call or task, leased from the server's [`LanePool`], because rmcp cannot
//! attribute a server→client request to one of several calls on a session.

pub mod sep1686;
mod sync_call;

pub use crate::remote::detect::{Protocol, TaskSupport, UpstreamInfo};
pub use crate::remote::handler::Ask;
pub use crate::remote::lanes::{Lane, LaneOptions, LanePool};
pub use sync_call::{SyncCall, SyncEvent, SyncOptions, sync_call};

use rmcp::ErrorData;
use rmcp::service::ServiceError;

use crate::remote::RemoteError;

/// Why an upstream operation did not produce a result.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum UpstreamError {
    /// The server answered with a JSON-RPC error.
    #[error("{}", .0.message)]
    Rpc(ErrorData),
    /// The server could not be reached, timed out, or broke the protocol.
    #[error(transparent)]
    Remote(#[from] RemoteError),
    /// The server did not answer `operation` within `after` (its call
    /// timeout): it may still be working on it.
    #[error("{operation}: no answer within {after:?}")]
    Timeout {
        /// The request that went unanswered (`tools/call`, `tasks/result`…).
        operation: String,
        /// The bound it was given.
        after: std::time::Duration,
    },
    /// The server refused `operation` with HTTP `status` (401 or 403):
    /// the credentials sent for it are missing, wrong or not enough.
    #[error("{operation}: the server refused the request (HTTP {status})")]
    Refused {
        /// The request refused (`tools/call`, `tasks/result`…).
        operation: String,
        /// 401 or 403.
        status: u16,
    },
    /// We withdrew the call.
    #[error("cancelled")]
    Cancelled,
}

impl UpstreamError {
    pub(crate) fn from_service(operation: &str, e: ServiceError) -> Self {
        match e {
            ServiceError::McpError(data) => Self::Rpc(data),
            ServiceError::Timeout { timeout } => Self::Timeout {
                operation: operation.to_string(),
                after: timeout,
            },
            ServiceError::UnexpectedResponse => Self::Remote(RemoteError::Protocol(format!(
                "{operation}: the server answered with an unexpected result"
            ))),
            // A refusal keeps its status; anything else is told in plain
            // words (rmcp's own text starts with its transport's type).
            other => match crate::remote::classify::refusal(&other) {
                Some(status) => Self::Refused {
                    operation: operation.to_string(),
                    status,
                },
                None => Self::Remote(crate::remote::classify::transport_error(operation, &other)),
            },
        }
    }
}
