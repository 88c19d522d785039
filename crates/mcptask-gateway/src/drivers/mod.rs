//! The work of a front task, per upstream kind: follow a tracked SEP-2663
//! task, run a synchronous upstream call, or drive a SEP-1686 task, and
//! mirror status, questions, cancellation and the result onto the front task.

mod relay;
mod sep1686;
mod sync;
mod tracked;

use mcptask_client::upstream::UpstreamError;
use mcptask_server::{TaskExit, ToolCall};
use rmcp::ErrorData;
use rmcp::model::CallToolResult;

use crate::upstreams::Upstreams;
use crate::upstreams::catalog::{Kind, Route};

/// The front task's work for `route`.
pub async fn run(
    upstreams: &Upstreams,
    route: &Route,
    call: ToolCall,
) -> Result<CallToolResult, TaskExit> {
    match route.kind {
        Kind::Sep2663 | Kind::Triplet => tracked::tracked(upstreams, &call.ctx).await,
        Kind::Plain => sync::synchronous(upstreams, route, call).await,
        Kind::Sep1686 { .. } => sep1686::run(upstreams, route, call).await,
    }
}

pub(crate) fn internal(message: impl Into<String>) -> TaskExit {
    TaskExit::Error(ErrorData::internal_error(message.into(), None))
}

/// An upstream failure as the front task's outcome.
pub fn exit_of(e: UpstreamError) -> TaskExit {
    match e {
        UpstreamError::Rpc(data) => TaskExit::Error(data),
        UpstreamError::Remote(e) => internal(e.to_string()),
        UpstreamError::Cancelled => TaskExit::Cancelled,
    }
}
