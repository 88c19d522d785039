//! The synchronous driver: a plain upstream call run as the task's work on
//! an exclusive lane. Progress becomes the status message, questions become
//! the task's input requests; after a crash the call is failed or made again
//! (the server's `interrupt`).

use mcptask_client::upstream::{SyncEvent, SyncOptions, sync_call};
use mcptask_core::front::progress_message;
use mcptask_server::{TaskExit, ToolCall};
use rmcp::model::CallToolResult;
use serde_json::Value;

use super::relay::{Coalesced, STATUS_EVERY, relay_ask};
use super::{exit_of, internal};
use crate::upstreams::Upstreams;
use crate::upstreams::catalog::Route;

/// A plain synchronous upstream call run as the front task's work: progress
/// becomes the status message, questions become the front task's input.
pub(super) async fn synchronous(
    upstreams: &Upstreams,
    route: &Route,
    call: ToolCall,
) -> Result<CallToolResult, TaskExit> {
    let ctx = &call.ctx;
    let pool = upstreams.lanes(&route.server).map_err(internal)?;
    let lane = tokio::select! {
        lane = pool.acquire() => lane.map_err(|e| internal(e.to_string()))?,
        _ = ctx.cancelled() => return Err(TaskExit::Cancelled),
    };
    let mut running = sync_call(
        lane,
        &route.tool,
        Value::Object(call.arguments),
        SyncOptions {
            declare_tasks: false,
            timeout: None,
        },
    )
    .await
    .map_err(exit_of)?;
    let mut status = Coalesced::new();
    loop {
        tokio::select! {
            event = running.next() => match event {
                Some(SyncEvent::Progress { progress, total, message }) => {
                    status.offer(ctx, progress_message(progress, total, message.as_deref())).await?;
                }
                Some(SyncEvent::Ask(ask)) => relay_ask(ctx, ask).await?,
                Some(SyncEvent::Done(result)) => {
                    status.flush(ctx).await?;
                    return result.map_err(exit_of);
                }
                None => return Err(internal("the upstream call ended without a result")),
            },
            _ = tokio::time::sleep(STATUS_EVERY), if status.pending.is_some() => {
                status.flush(ctx).await?;
            }
            _ = ctx.cancelled() => {
                running.cancel().await;
                return Err(TaskExit::Cancelled);
            }
        }
    }
}
