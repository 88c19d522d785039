//! The SEP-1686 driver (the 2025-11-25 tasks protocol): the upstream task is
//! created on an exclusive lane and driven to its end there; its questions
//! (`related-task`) are relayed as the task's input requests.

use std::time::Duration;

use mcptask_client::upstream::sep1686;
use mcptask_core::TaskStatus;
use mcptask_core::call::CallState;
use mcptask_server::{TaskExit, ToolCall};
use rmcp::model::CallToolResult;
use serde_json::Value;

use super::relay::relay_ask;
use super::{exit_of, internal};
use crate::upstreams::Upstreams;
use crate::upstreams::catalog::Route;

/// How often a SEP-1686 task's status is read for its status message.
const STATUS_POLL: Duration = Duration::from_secs(1);

/// A SEP-1686 upstream task driven to its end. Such a task lives in one
/// upstream session: after a crash it is gone, and the front task says so.
pub(super) async fn run(
    upstreams: &Upstreams,
    route: &Route,
    call: ToolCall,
    upstream_task: Option<String>,
    timeout: Duration,
) -> Result<CallToolResult, TaskExit> {
    let ctx = &call.ctx;
    if let Some(lost) = upstream_task {
        return Err(internal(format!(
            "the upstream lost task {lost} when its session ended (tasks of the 2025-11-25 protocol live in one upstream session)"
        )));
    }
    // A rerun without a saved upstream id: the interrupted run may have
    // created the task before it could save the id, and over HTTP that task
    // still runs in its session. Creating it again would run the call twice.
    if ctx.attempt() > 1 {
        return Err(internal(
            "the proxy stopped while this call was starting upstream; it is not made again (a 2025-11-25 task lives in the session that was lost)",
        ));
    }
    let lane = tokio::select! {
        lane = upstreams.lane(&route.server) => lane.map_err(|e| internal(e.to_string()))?,
        _ = ctx.cancelled() => return Err(TaskExit::Cancelled),
    };
    // Every exchange of the task on its lane (create, status, cancel) is
    // bounded as the route decided, kept with the call.
    let lane = lane.bounded_by(timeout);
    let created = sep1686::create(lane, &route.tool, Value::Object(call.arguments), None).await;
    upstreams.saw_outcome(&route.server, &created);
    let handle = created.map_err(exit_of)?;
    let state = CallState::Sep1686 {
        upstream_task: Some(handle.id().to_string()),
        timeout_ms: None,
    }
    .bounded(timeout);
    ctx.save_state(state.to_json()).await?;
    let mut shown = handle.created().snapshot.status_message.clone();
    if let Some(message) = &shown {
        ctx.set_status_message(message.clone()).await?;
    }
    let result = handle.result();
    tokio::pin!(result);
    let mut poll = tokio::time::interval(STATUS_POLL);
    let mut cancel_sent = false;
    let mut asks_open = true;
    let settle = |outcome: Result<CallToolResult, _>, cancel_sent: bool| {
        upstreams.saw_outcome(&route.server, &outcome);
        match outcome {
            _ if cancel_sent => Err(TaskExit::Cancelled),
            Ok(result) => Ok(result),
            Err(e) => Err(exit_of(e)),
        }
    };
    loop {
        tokio::select! {
            outcome = &mut result => return settle(outcome, cancel_sent),
            _ = poll.tick() => {
                if let Ok(task) = handle.status().await {
                    if task.snapshot.status_message != shown {
                        if let Some(message) = &task.snapshot.status_message {
                            ctx.set_status_message(message.clone()).await?;
                        }
                        shown = task.snapshot.status_message.clone();
                    }
                    if task.status() == TaskStatus::Cancelled {
                        return Err(TaskExit::Cancelled);
                    }
                }
            }
            ask = handle.next_ask(), if asks_open => {
                asks_open = ask.is_some();
                if let Some(ask) = ask {
                    // The upstream may end (or die) while its question
                    // waits: a session that died never withdraws it.
                    let relayed = tokio::select! {
                        relayed = relay_ask(ctx, ask, upstreams.question_timeout()) => relayed,
                        outcome = &mut result => return settle(outcome, cancel_sent),
                    };
                    match relayed {
                        Err(TaskExit::Cancelled) if !cancel_sent => {
                            let _ = handle.cancel().await;
                            cancel_sent = true;
                        }
                        Err(TaskExit::Cancelled) | Ok(()) => {}
                        // The front task ends here: its upstream task must
                        // not run on unseen.
                        Err(e) => {
                            if !cancel_sent {
                                let _ = handle.cancel().await;
                            }
                            return Err(e);
                        }
                    }
                }
            }
            _ = ctx.cancelled(), if !cancel_sent => {
                let _ = handle.cancel().await;
                cancel_sent = true;
            }
        }
    }
}
