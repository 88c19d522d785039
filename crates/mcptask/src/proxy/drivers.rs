//! The work of a front task, per upstream kind: follow a tracked SEP-2663
//! task, run a synchronous upstream call, or drive a SEP-1686 task, and
//! mirror status, questions, cancellation and the result onto the front task.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use mcptask_client::TrackerError;
use mcptask_client::upstream::{Ask, SyncEvent, SyncOptions, UpstreamError, legacy, sync_call};
use mcptask_core::TaskStatus;
use mcptask_core::client::RemoteTaskRecord;
use mcptask_core::front::{input_key, progress_message};
use mcptask_server::{TaskContext, TaskExit, ToolCall};
use rmcp::ErrorData;
use rmcp::model::{CallToolResult, ContentBlock, InputRequest};
use serde_json::{Value, json};

use super::catalog::{Kind, Route};
use super::source::Upstreams;

/// How often a front task re-reads its tracked task when no local change
/// hint arrived (another replica's tracker may have applied it).
const TRACKED_TICK: Duration = Duration::from_millis(500);
/// At most one status-message write per task per this interval.
const STATUS_EVERY: Duration = Duration::from_millis(500);
/// How often a SEP-1686 task's status is read for its status message.
const LEGACY_POLL: Duration = Duration::from_secs(1);

/// The front task's work for `route`.
pub async fn run(
    upstreams: &Upstreams,
    route: &Route,
    call: ToolCall,
) -> Result<CallToolResult, TaskExit> {
    match route.kind {
        Kind::Sep2663 | Kind::Triplet => tracked(upstreams, &call.ctx).await,
        Kind::Plain => synchronous(upstreams, route, call).await,
        Kind::Sep1686 { .. } => legacy_task(upstreams, route, call).await,
    }
}

fn internal(message: impl Into<String>) -> TaskExit {
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

/// Follow the tracked upstream task recorded in the front task's state until
/// it settles. Polling, answers and cancels reach the upstream through the
/// tracker's leased workers (on any replica); this only mirrors.
async fn tracked(upstreams: &Upstreams, ctx: &TaskContext) -> Result<CallToolResult, TaskExit> {
    let Some(id) = ctx
        .state()
        .and_then(|s| s.get("remote").and_then(Value::as_str).map(String::from))
    else {
        return Err(internal("this front task has no upstream task recorded"));
    };
    let tracker = &upstreams.tracker;
    let mut changes = tracker.changes();
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
                tokio::time::sleep(TRACKED_TICK).await;
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
                        _ = moved_on(upstreams, &id, &keys, &mut changes) => {
                            ctx.withdraw_inputs(&keys).await?;
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
        tokio::select! {
            _ = changed(&mut changes, &id) => {}
            _ = tokio::time::sleep(TRACKED_TICK) => {}
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
    changes: &mut tokio::sync::broadcast::Receiver<String>,
) {
    loop {
        tokio::select! {
            _ = changed(changes, id) => {}
            _ = tokio::time::sleep(TRACKED_TICK) => {}
        }
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

/// Until this process's tracker reports a change of `id` (lagging counts).
async fn changed(changes: &mut tokio::sync::broadcast::Receiver<String>, id: &str) {
    loop {
        match changes.recv().await {
            Ok(changed) if changed == id => return,
            Ok(_) => {}
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => return,
            Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                std::future::pending::<()>().await
            }
        }
    }
}

fn result_of(record: &RemoteTaskRecord) -> CallToolResult {
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

fn error_of(record: &RemoteTaskRecord) -> ErrorData {
    record
        .error
        .clone()
        .and_then(|e| serde_json::from_value::<ErrorData>(e).ok())
        .unwrap_or_else(|| ErrorData::internal_error("the upstream task failed", None))
}

/// Writes status messages at most once per [`STATUS_EVERY`], last wins.
struct Coalesced {
    last: Option<Instant>,
    pending: Option<String>,
}

impl Coalesced {
    fn new() -> Self {
        Self {
            last: None,
            pending: None,
        }
    }

    async fn offer(&mut self, ctx: &TaskContext, text: String) -> Result<(), TaskExit> {
        if self.last.is_some_and(|at| at.elapsed() < STATUS_EVERY) {
            self.pending = Some(text);
            return Ok(());
        }
        self.last = Some(Instant::now());
        self.pending = None;
        ctx.set_status_message(text).await
    }

    async fn flush(&mut self, ctx: &TaskContext) -> Result<(), TaskExit> {
        match self.pending.take() {
            Some(text) => {
                self.last = Some(Instant::now());
                ctx.set_status_message(text).await
            }
            None => Ok(()),
        }
    }
}

/// An upstream question as a front input request; answered, refused, or
/// withdrawn when the upstream stops waiting.
async fn relay_ask(ctx: &TaskContext, ask: Ask) -> Result<(), TaskExit> {
    let mut params = ask.params.clone();
    if let Some(map) = params.as_object_mut() {
        map.remove("_meta");
    }
    let request: Option<InputRequest> =
        serde_json::from_value(json!({"method": ask.method, "params": params})).ok();
    let Some(request) = request else {
        let refusal = format!("mcptask cannot relay a {} request", ask.method);
        ask.respond(Err(ErrorData::invalid_request(refusal, None)));
        return Ok(());
    };
    let key = input_key(&params);
    let withdrawn = ask.withdrawn();
    tokio::select! {
        answer = ctx.request_input(key.clone(), request) => {
            ask.respond(Ok(answer?));
        }
        _ = withdrawn.cancelled() => {
            ctx.withdraw_inputs(std::slice::from_ref(&key)).await?;
            ctx.set_status_message("The upstream stopped waiting for an answer").await?;
        }
    }
    Ok(())
}

/// A plain synchronous upstream call run as the front task's work: progress
/// becomes the status message, questions become the front task's input.
async fn synchronous(
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

/// A SEP-1686 upstream task driven to its end. Such a task lives in one
/// upstream session: after a crash it is gone, and the front task says so.
async fn legacy_task(
    upstreams: &Upstreams,
    route: &Route,
    call: ToolCall,
) -> Result<CallToolResult, TaskExit> {
    let ctx = &call.ctx;
    if let Some(lost) = ctx.state().and_then(|s| {
        s.get("upstreamTask")
            .and_then(Value::as_str)
            .map(String::from)
    }) {
        return Err(internal(format!(
            "the upstream lost task {lost} when its session ended (tasks of the 2025-11-25 protocol live in one upstream session)"
        )));
    }
    let pool = upstreams.lanes(&route.server).map_err(internal)?;
    let lane = tokio::select! {
        lane = pool.acquire() => lane.map_err(|e| internal(e.to_string()))?,
        _ = ctx.cancelled() => return Err(TaskExit::Cancelled),
    };
    let handle = legacy::create(lane, &route.tool, Value::Object(call.arguments), None)
        .await
        .map_err(exit_of)?;
    ctx.save_state(json!({"upstreamTask": handle.id()})).await?;
    let mut shown = handle.created().snapshot.status_message.clone();
    if let Some(message) = &shown {
        ctx.set_status_message(message.clone()).await?;
    }
    let result = handle.result();
    tokio::pin!(result);
    let mut poll = tokio::time::interval(LEGACY_POLL);
    let mut cancel_sent = false;
    let mut asks_open = true;
    loop {
        tokio::select! {
            outcome = &mut result => {
                return match outcome {
                    _ if cancel_sent => Err(TaskExit::Cancelled),
                    Ok(result) => Ok(result),
                    Err(e) => Err(exit_of(e)),
                };
            }
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
                    match relay_ask(ctx, ask).await {
                        Err(TaskExit::Cancelled) if !cancel_sent => {
                            let _ = handle.cancel().await;
                            cancel_sent = true;
                        }
                        other => other?,
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
