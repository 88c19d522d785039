//! The work of a call task, per driver: mirror a tracked task (SEP-2663,
//! toolsets), drive a 2025-11-25 task (SEP-1686), or run a synchronous
//! upstream call, with status, questions, cancellation and the result on
//! the call task.

mod relay;
mod sep1686;
mod sync;
mod tracked;

use mcptask_client::upstream::{SyncOptions, UpstreamError};
use mcptask_server::{TaskExit, ToolCall};
use rmcp::ErrorData;
use rmcp::model::CallToolResult;
use tracing::Instrument;

use mcptask_client::RemoteTaskRecord;
use mcptask_core::TaskStatus;
use mcptask_core::call::{CallState, Driver, Face};
use mcptask_core::client::{EventKind, RemoteDriver};
use mcptask_core::outcome::Outcome;
use mcptask_core::server::{InterruptPolicy, ServerTaskRecord};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

use crate::failure::Failure;
use crate::front::bridge::Bridged;
use crate::metrics::CallLabels;
use crate::route;
use crate::upstreams::Upstreams;
use crate::upstreams::catalog::Route;

/// What recovery does with an interrupted call task of `route`: what its
/// stored state says (decided when the call was made), never a plan of
/// today's catalog, whose upstream may speak another protocol by now.
pub fn interrupt_of(route: &Route, record: &ServerTaskRecord) -> InterruptPolicy {
    let stored = record
        .driver_state
        .as_ref()
        .and_then(|s| CallState::from_json(s, record.driver.as_deref()).ok());
    stored
        .unwrap_or_else(|| route::legacy_state(route))
        .interrupt()
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
        .unwrap_or_else(|| route::legacy_state(route));
    let span = driver_span(upstreams, route, &call, &state).await;
    let id = call.ctx.task_id().unwrap_or_default().to_string();
    let driver = state.driver().as_str();
    // The bound the route decided, kept with the call; a call task written
    // before calls kept it is bounded by its server's setting.
    let timeout = state
        .timeout()
        .unwrap_or_else(|| upstreams.call_timeout(&route.server));
    let result = match state {
        CallState::Tracked { tracked, .. } => {
            tracked::mirror(upstreams, &call.ctx, tracked)
                .instrument(span)
                .await
        }
        CallState::Sync { .. } => {
            sync::synchronous(upstreams, route, call, timeout)
                .instrument(span)
                .await
        }
        CallState::Sep1686 { upstream_task, .. } => {
            sep1686::run(upstreams, route, call, upstream_task, timeout)
                .instrument(span)
                .await
        }
    };
    count_end(upstreams, &route.server, &route.tool, &id, driver, &result).await;
    // Whatever revision the upstream speaks, the call's result reads as the
    // newest one's.
    result.map(Bridged::bridged)
}

/// Count a kept call's end (`mcptask_calls_total`, `mcptask_call_seconds`
/// from its creation), with the face its record names. A run this process
/// no longer holds ([`TaskExit::Lost`]) ends elsewhere and is counted there.
async fn count_end(
    upstreams: &Upstreams,
    server: &str,
    tool: &str,
    id: &str,
    driver: &'static str,
    result: &Result<CallToolResult, TaskExit>,
) {
    let Some(ended) = ended(result) else { return };
    let record = upstreams.tracker.get(id).await.ok();
    count(upstreams, server, tool, id, driver, ended, record.as_ref());
}

/// How a call that `result` ended is counted: its outcome and error class;
/// `None` for a run this process no longer holds (counted where it ends).
fn ended(result: &Result<CallToolResult, TaskExit>) -> Option<(Outcome, Option<&'static str>)> {
    match result {
        Ok(result) => Some((Outcome::answered(result.is_error == Some(true)), None)),
        Err(TaskExit::Cancelled) => Some((Outcome::Cancelled, None)),
        Err(TaskExit::Error(e)) => Some((Outcome::Failed, Some(crate::failure::class_of_rpc(e)))),
        Err(_) => None,
    }
}

/// Count call `id`'s end, with the face, principal and age its `record`
/// names.
fn count(
    upstreams: &Upstreams,
    server: &str,
    tool: &str,
    id: &str,
    driver: &'static str,
    (outcome, class): (Outcome, Option<&'static str>),
    record: Option<&RemoteTaskRecord>,
) {
    let face = record.and_then(|r| r.face).unwrap_or(Face::Rust);
    let principal = record.and_then(|r| r.principal.as_deref());
    let took = record.map_or(0, |r| {
        use mcptask_core::Clock;
        mcptask_core::SystemClock
            .now_ms()
            .saturating_sub(r.created_at)
    });
    // A front call through a virtual server keeps its name with the call.
    let via = record
        .and_then(|r| r.correlation.as_ref())
        .and_then(|c| c.get("via"))
        .and_then(serde_json::Value::as_str);
    let mut labels = CallLabels::new(upstreams, server, tool, face, driver)
        .by(principal)
        .via(via)
        .call(id);
    if let Some(class) = class {
        labels = labels.failed_with(class);
    }
    crate::metrics::call_ended(
        &labels,
        outcome,
        Duration::from_millis(u64::try_from(took).unwrap_or(0)),
    );
}

/// Count the ends of the calls the tracker's workers carry to the end with
/// no call task of the gateway's (tracked calls made through REST, the CLI
/// or Rust: a front's tracked call ends with its call task, counted by
/// [`run`]), until `stop`. Each settled task's terminal event comes once
/// from the tracker's outbox, whichever replica applied it.
pub fn spawn_tracked_ends(upstreams: Arc<Upstreams>, stop: CancellationToken) {
    let mut events = upstreams.tracker.subscribe();
    tokio::spawn(async move {
        loop {
            let event = tokio::select! {
                _ = stop.cancelled() => return,
                event = events.recv() => event,
            };
            match event {
                // The event that settled the task (its status change, or its
                // creation when the upstream handed it out settled).
                Ok(event)
                    if event.status.is_terminal()
                        && matches!(event.kind, EventKind::Status | EventKind::Created) =>
                {
                    if let Ok(record) = upstreams.tracker.get(&event.task_id).await {
                        count_tracked_end(&upstreams, &record);
                    }
                }
                Ok(_) => {}
                Err(tokio::sync::broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::warn!(
                        missed,
                        "tracked calls ended uncounted: the event stream lagged"
                    );
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    });
}

/// Count a settled tracked call unless a call task of the front counts it.
fn count_tracked_end(upstreams: &Upstreams, record: &RemoteTaskRecord) {
    let driver = match record.driver {
        RemoteDriver::Sep2663 => Driver::Sep2663,
        RemoteDriver::Toolset { .. } => Driver::Toolset,
        // Run as call tasks, counted by `run`.
        _ => return,
    };
    if record.face == Some(Face::Mcp) {
        return;
    }
    let result = match record.status {
        TaskStatus::Completed => Ok(tracked::result_of(record)),
        TaskStatus::Failed => Err(TaskExit::Error(tracked::error_of(record))),
        TaskStatus::Cancelled => Err(TaskExit::Cancelled),
        _ => return,
    };
    // The record just read is the one counted: no second read.
    if let Some(ended) = ended(&result) {
        count(
            upstreams,
            &record.server,
            &record.tool,
            &record.id,
            driver.as_str(),
            ended,
            Some(record),
        );
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

/// The options of an upstream call bounded by `timeout` (the route's
/// decision, `Routed::timeout`): every path that calls a synchronous
/// upstream (the front's pass-through, the synchronous driver's rounds)
/// starts from these, so the bound is the same on every path.
pub fn exchange_options(timeout: std::time::Duration) -> SyncOptions {
    SyncOptions {
        timeout: Some(timeout),
        ..Default::default()
    }
}

/// An upstream failure as the front task's outcome: the one mapping of
/// every face ([`Failure`]), so a task's status message says what a
/// synchronous caller is told (the upstream's own JSON-RPC error as it is;
/// a timeout in the words of a plain call; a transport's text logged under
/// an incident, never shown).
pub fn exit_of(e: UpstreamError) -> TaskExit {
    match e {
        UpstreamError::Cancelled => TaskExit::Cancelled,
        e => TaskExit::Error(Failure::from(e).into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcptask_core::call::{Protocol, RunDriver};
    use mcptask_core::server::NewServerTask;

    fn route(protocol: Protocol, rerun: bool) -> Route {
        crate::upstreams::catalog::test_route(protocol, rerun, false)
    }

    fn task(state: &CallState) -> ServerTaskRecord {
        NewServerTask {
            id: "ft_1".into(),
            principal: None,
            tool: "s__t".into(),
            arguments: serde_json::json!({}),
            call_inputs: None,
            created_at: 0,
            ttl_ms: None,
            poll_interval_ms: None,
            status_message: None,
            owner: "A".into(),
            claim_token: "k".into(),
            driver: Some(state.driver().as_str().into()),
            driver_state: Some(state.to_json()),
            call_row: None,
        }
        .into_record()
    }

    /// A synchronous call made on a server whose `interrupt` was `fail`
    /// stays at most once after the upstream learned the tasks protocol
    /// (today's catalog would plan a tracked driver, which resumes): the
    /// policy is the one stored with the call.
    #[test]
    fn recovery_keeps_the_interrupt_policy_the_call_was_made_with() {
        let made = CallState::run(RunDriver::Sync, InterruptPolicy::Fail);
        let upgraded = route(Protocol::Sep2663, false);
        assert_eq!(interrupt_of(&upgraded, &task(&made)), InterruptPolicy::Fail);
        // And the other way round: a rerun call stays a rerun call after
        // the server's setting changed.
        let rerun = CallState::run(RunDriver::Sync, InterruptPolicy::Rerun);
        let now_fail = route(Protocol::Sync, false);
        assert_eq!(
            interrupt_of(&now_fail, &task(&rerun)),
            InterruptPolicy::Rerun
        );
        // Work that lives upstream resumes, whatever the catalog says.
        let tracked = CallState::tracked(mcptask_core::call::TrackDriver::Sep2663);
        assert_eq!(
            interrupt_of(&route(Protocol::Sync, false), &task(&tracked)),
            InterruptPolicy::Rerun
        );
    }

    /// A row of an older release (a synchronous call's state without its
    /// policy) is at most once: never rerun on a guess.
    #[test]
    fn an_old_synchronous_state_is_failed_not_rerun() {
        let mut old = task(&CallState::run(RunDriver::Sync, InterruptPolicy::Rerun));
        old.driver_state = Some(serde_json::json!({"driver": "sync"}));
        assert_eq!(
            interrupt_of(&route(Protocol::Sep2663, true), &old),
            InterruptPolicy::Fail
        );
    }
}
