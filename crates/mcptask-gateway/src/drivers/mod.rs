//! The work of a call task, per driver: mirror a tracked task (SEP-2663,
//! toolsets), drive a 2025-11-25 task (SEP-1686), or run a synchronous
//! upstream call, with status, questions, cancellation and the result on
//! the call task.

mod relay;
mod sep1686;
mod sync;
mod tracked;

use mcptask_client::upstream::UpstreamError;
use mcptask_server::{TaskExit, ToolCall};
use rmcp::ErrorData;
use rmcp::model::CallToolResult;
use tracing::Instrument;

use mcptask_core::call::{CallState, Driver, Plan, Wants, plan};

use crate::upstreams::Upstreams;
use crate::upstreams::catalog::Route;

/// The driver a call task of `route` runs when its state does not name one
/// (front tasks written before states named their driver).
pub fn durable_driver(route: &Route) -> Driver {
    match plan(route.facts, Wants::Durable) {
        Plan::Track(driver) | Plan::Run(driver) => driver,
        Plan::PassThrough => Driver::Sync,
    }
}

/// A call task's work, by the driver its state names.
pub async fn run(
    upstreams: &Upstreams,
    route: &Route,
    call: ToolCall,
) -> Result<CallToolResult, TaskExit> {
    let state = call
        .ctx
        .state()
        .and_then(|s| CallState::from_json(&s, None).ok())
        .unwrap_or_else(|| CallState::new(durable_driver(route)));
    let span = driver_span(upstreams, route, &call, &state).await;
    match state {
        CallState::Tracked { tracked, .. } => {
            tracked::mirror(upstreams, &call.ctx, tracked)
                .instrument(span)
                .await
        }
        CallState::Sync => {
            sync::synchronous(upstreams, route, call)
                .instrument(span)
                .await
        }
        CallState::Sep1686 { upstream_task } => {
            sep1686::run(upstreams, route, call, upstream_task)
                .instrument(span)
                .await
        }
    }
}

/// The driver's span, in the trace kept with the call's row (read only when
/// telemetry is on).
async fn driver_span(
    upstreams: &Upstreams,
    route: &Route,
    call: &ToolCall,
    state: &CallState,
) -> tracing::Span {
    let id = call.ctx.task_id().unwrap_or_default();
    let span = crate::spans::driver(state.driver().as_str(), id, &route.tool);
    if !span.is_disabled()
        && let Ok(record) = upstreams.tracker.get(id).await
    {
        mcptask_client::trace::set_parent(&span, record.trace.as_ref());
    }
    span
}

pub(crate) fn internal(message: impl Into<String>) -> TaskExit {
    TaskExit::Error(ErrorData::internal_error(message.into(), None))
}

/// The outcome of a call task whose question (`keys`) went unanswered for
/// `bound`: failed, with a reason a caller can act on.
pub(crate) fn unanswered(keys: &[String], bound: std::time::Duration) -> TaskExit {
    TaskExit::Error(ErrorData::internal_error(
        format!(
            "no answer to the upstream's question ({}) within {} ms ([proxy] question_timeout_ms); the upstream call was cancelled",
            keys.join(", "),
            bound.as_millis()
        ),
        Some(serde_json::json!({"reason": "question_timeout"})),
    ))
}

/// An upstream failure as the front task's outcome.
pub fn exit_of(e: UpstreamError) -> TaskExit {
    match e {
        UpstreamError::Rpc(data) => TaskExit::Error(data),
        UpstreamError::Remote(e) => internal(e.to_string()),
        UpstreamError::Cancelled => TaskExit::Cancelled,
    }
}
