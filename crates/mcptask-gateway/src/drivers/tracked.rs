//! The tracked drivers (SEP-2663 and toolsets): the tracker's leased workers
//! poll, answer and cancel the upstream task (on any replica); the call's
//! task here mirrors the tracked row until it settles, woken by its
//! changes only.

use std::collections::BTreeMap;
use std::time::Duration;

use mcptask_client::TrackerError;
use mcptask_core::TaskStatus;
use mcptask_core::client::RemoteTaskRecord;
use mcptask_server::{TaskContext, TaskExit};
use rmcp::ErrorData;
use rmcp::model::{CallToolResult, ContentBlock, InputRequest};
use serde_json::{Value, json};

use super::{internal, unanswered};
use crate::upstreams::Upstreams;

/// How long to wait before reading a tracked task again after the store
/// failed to answer.
const READ_RETRY: Duration = Duration::from_millis(500);

/// Follow the call's tracked task (the tracker's row of the same id; in
/// rows written before calls had one id, the one the state names) until it
/// settles. Polling, answers and cancels reach the upstream through the
/// tracker's leased workers (on any replica); this only mirrors.
pub(super) async fn mirror(
    upstreams: &Upstreams,
    ctx: &TaskContext,
    tracked: Option<String>,
) -> Result<CallToolResult, TaskExit> {
    let Some(id) = tracked.or_else(|| ctx.task_id().map(str::to_string)) else {
        return Err(internal("this call task has no tracked task"));
    };
    let tracker = &upstreams.tracker;
    let mut watch = tracker.watch(&id);
    let mut shown: Option<String> = None;
    let mut cancel_sent = false;
    loop {
        let record = match tracker.get(&id).await {
            Ok(r) => r,
            Err(TrackerError::NotFound(_)) => {
                return Err(internal("the tracked upstream task is no longer recorded"));
            }
            Err(e) => {
                tracing::warn!(remote = %id, error = %e, "cannot read a tracked upstream task; retrying");
                tokio::time::sleep(READ_RETRY).await;
                continue;
            }
        };
        if record.status_message != shown {
            if let Some(message) = &record.status_message {
                ctx.set_status_message(message.clone()).await?;
            }
            shown = record.status_message.clone();
        }
        match record.status {
            TaskStatus::Completed => return Ok(result_of(&record)),
            TaskStatus::Failed => return Err(TaskExit::Error(error_of(&record))),
            TaskStatus::Cancelled => return Err(TaskExit::Cancelled),
            TaskStatus::InputRequired if !cancel_sent => {
                let requests: BTreeMap<String, InputRequest> = record
                    .input_requests
                    .iter()
                    .filter_map(|(k, v)| {
                        serde_json::from_value(v.clone())
                            .ok()
                            .map(|r| (k.clone(), r))
                    })
                    .collect();
                if !requests.is_empty() {
                    let keys: Vec<String> = requests.keys().cloned().collect();
                    let bound = upstreams.question_timeout();
                    tokio::select! {
                        answers = ctx.request_inputs(requests) => match answers {
                            Ok(answers) => {
                                if let Err(e) = tracker.relay_answers(&id, answers).await {
                                    // Only a store failure or an oversized
                                    // answer gets here: asking again would
                                    // loop, so the front task ends.
                                    tracing::warn!(remote = %id, error = %e, "cannot pass a front answer to the tracked task");
                                    request_cancel(upstreams, &id).await;
                                    return Err(internal(format!("the answer could not be passed on: {e}")));
                                }
                            }
                            Err(TaskExit::Cancelled) => {
                                cancel_sent = request_cancel(upstreams, &id).await;
                            }
                            Err(other) => return Err(other),
                        },
                        _ = moved_on(upstreams, &id, &keys, &mut watch) => {
                            ctx.withdraw_inputs(&keys).await?;
                        }
                        // Nobody answers: the upstream task must not wait
                        // on forever (the tracker's workers send the cancel).
                        _ = tokio::time::sleep(bound) => {
                            ctx.withdraw_inputs(&keys).await?;
                            request_cancel(upstreams, &id).await;
                            return Err(unanswered(&keys, bound));
                        }
                    }
                    continue;
                }
            }
            _ => {}
        }
        if ctx.is_cancel_requested() && !cancel_sent {
            cancel_sent = request_cancel(upstreams, &id).await;
        }
        // Nothing runs for this call until its tracked task changes (here
        // or at another replica: the tracker's change feed) or its caller
        // cancels.
        tokio::select! {
            _ = watch.changed() => {}
            _ = ctx.cancelled(), if !cancel_sent => {}
        }
    }
}

/// Store the cancel intent for the tracker's workers; true once stored.
async fn request_cancel(upstreams: &Upstreams, id: &str) -> bool {
    match upstreams.tracker.cancel(id).await {
        Ok(_) => true,
        Err(e) => {
            tracing::warn!(remote = %id, error = %e, "cannot request the cancellation of a tracked task");
            false
        }
    }
}

/// Until the tracked task no longer waits for exactly `keys`.
async fn moved_on(
    upstreams: &Upstreams,
    id: &str,
    keys: &[String],
    watch: &mut mcptask_client::TaskWatch,
) {
    loop {
        watch.changed().await;
        if let Ok(record) = upstreams.tracker.get(id).await {
            let waiting: Vec<&String> = record.input_requests.iter().map(|(k, _)| k).collect();
            if record.status != TaskStatus::InputRequired
                || waiting.len() != keys.len()
                || !keys.iter().all(|k| waiting.contains(&k))
            {
                return;
            }
        }
    }
}

/// The result a settled call's record holds, as its caller reads it.
pub(crate) fn result_of(record: &RemoteTaskRecord) -> CallToolResult {
    let stored = record.result.clone().unwrap_or(Value::Null);
    if !record.result_truncated
        && let Ok(result) = serde_json::from_value::<CallToolResult>(stored.clone())
    {
        return result;
    }
    // What the tracker kept of a result too large to store whole.
    let mut result = CallToolResult::success(vec![ContentBlock::text(stored.to_string())]);
    result.meta = serde_json::from_value(json!({"mcptask/truncated": true})).ok();
    result
}

/// The error a failed call's record holds, as its caller reads it.
pub(crate) fn error_of(record: &RemoteTaskRecord) -> ErrorData {
    record
        .error
        .clone()
        .and_then(|e| serde_json::from_value::<ErrorData>(e).ok())
        .unwrap_or_else(|| ErrorData::internal_error("the upstream task failed", None))
}
