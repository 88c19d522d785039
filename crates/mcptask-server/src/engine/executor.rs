//! Runs a task's work in this process and records how it ended.
//!
//! The work runs under the claim it was started with: its end is written
//! fenced by that claim, so a result that arrives after another replica took
//! the task over (or after it expired) is dropped rather than overwriting the
//! task's real fate. What to write is decided in
//! [`mcptask_core::server::outcome`]; this module turns rmcp values into the
//! plain data that decision takes.

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use mcptask_core::server::outcome::{self, WorkEnd};
use mcptask_core::server::{Fence, Outcome, ServerTaskRecord, retention};
use rmcp::model::{CallToolResult, InputResponses, JsonObject};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::RuntimeInner;
use super::local::Running;
use super::quota::Slot;
use crate::tool::{TaskContext, TaskExit, TaskTool, ToolCall};

/// What a handler's future yields when run to the end: its return value, or
/// the payload of its panic.
type Finished = Result<Result<CallToolResult, TaskExit>, Box<dyn Any + Send>>;

/// Start a claimed task's work in this process; `slot` is its place in the
/// live-task counts, held until the work ends.
pub(crate) fn spawn_work(
    rt: &Arc<RuntimeInner>,
    tool: &TaskTool,
    record: ServerTaskRecord,
    slot: Slot,
) {
    let Some(fence) = record.fence() else { return };
    let expires_at = record.expires_at();
    let (wake, wake_rx) = watch::channel(0u64);
    let cancel = CancellationToken::new();
    if record.cancel_requested {
        cancel.cancel();
    }
    let stop = CancellationToken::new();
    rt.local.insert(
        record.id.clone(),
        Running {
            token: fence.token.clone(),
            wake,
            cancel: cancel.clone(),
            stop: stop.clone(),
        },
    );
    let call_inputs: InputResponses = record
        .call_inputs
        .clone()
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default();
    let arguments = match record.arguments {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    };
    let ctx = TaskContext::for_task(
        rt.clone(),
        fence.clone(),
        record.attempt,
        record.principal.clone(),
        call_inputs,
        cancel,
        wake_rx,
    )
    .with_state(record.driver_state.clone());
    // The handler is called inside the guarded future, not here: its
    // synchronous part (before its first `.await`) runs user code too, and a
    // panic there must end the task `failed` like any other, not unwind into
    // whoever started the work (a create's caller, the recovery loop).
    let handler = tool.handler.clone();
    let work = async move { handler(ToolCall { arguments, ctx }).await };
    let rt = rt.clone();
    rt.clone().work.spawn(async move {
        let _slot = slot;
        let finished = tokio::select! {
            _ = stop.cancelled() => None,
            r = AssertUnwindSafe(work).catch_unwind() => Some(r),
        };
        if let Some(settlement) =
            finished.and_then(|f| outcome::settle(work_end(f), &rt.config.limits))
        {
            if let Some(bytes) = settlement.truncated_from_bytes {
                tracing::warn!(bytes, "tool result truncated to the configured bound");
            }
            rt.settle(&fence, expires_at, settlement.outcome).await;
        }
        rt.local.remove(&fence);
    });
}

/// How the handler ended, as the plain data the outcome rule takes.
fn work_end(finished: Finished) -> WorkEnd {
    match finished {
        Ok(Ok(result)) => WorkEnd::Returned(
            serde_json::to_value(&result).unwrap_or_else(|_| json!({"content": []})),
        ),
        Ok(Err(TaskExit::Error(e))) => WorkEnd::Raised(
            serde_json::to_value(&e)
                .unwrap_or_else(|_| json!({"code": e.code.0, "message": e.message})),
        ),
        Ok(Err(TaskExit::Cancelled)) => WorkEnd::Cancelled,
        Ok(Err(TaskExit::Lost)) => WorkEnd::Lost,
        Err(panic) => WorkEnd::Panicked(panic_text(&panic)),
    }
}

/// The message a panic was raised with.
pub(crate) fn panic_text(panic: &Box<dyn Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

impl RuntimeInner {
    /// Record how the work ended (fenced). A lost claim drops the write.
    pub(crate) async fn settle(&self, fence: &Fence, expires_at: Option<i64>, outcome: Outcome) {
        let now = self.clock.now_ms();
        let purge_at = retention::purge_at(expires_at, now, self.config.retention_ms);
        match self
            .retrying("finish task", || {
                self.store.finish(fence, &outcome, now, purge_at)
            })
            .await
        {
            Ok(true) => self.feed.publish(&fence.task_id),
            Ok(false) => {
                tracing::info!(task_id = %fence.task_id, "task settled elsewhere or claim lost; result dropped")
            }
            Err(_) if !self.loops_stopped() => {
                // The store refused this outcome for good (a permanent error:
                // it cannot hold what the work returned). The task must still
                // end, so it fails with a reason the store can hold.
                let fallback = Outcome::failed(
                    -32603,
                    "the task finished, but the task store refused its outcome (see the server log)",
                );
                match self
                    .retrying("finish task", || {
                        self.store.finish(fence, &fallback, now, purge_at)
                    })
                    .await
                {
                    Ok(true) => self.feed.publish(&fence.task_id),
                    Ok(false) => {}
                    Err(_) => {
                        tracing::warn!(task_id = %fence.task_id, "could not record the task outcome; recovery will handle it")
                    }
                }
            }
            Err(_) => {
                tracing::warn!(task_id = %fence.task_id, "could not record the task outcome; recovery will handle it")
            }
        }
    }
}
