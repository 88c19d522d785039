//! The 2025-11-25 tasks protocol (SEP-1686) as TypeScript-SDK servers speak
//! it, on one lane pinned for the task's life: such a task lives in the
//! upstream session that created it (in memory), so every call about it,
//! and the server's questions for it, use that session.
//!
//! rmcp 3.11 does not model SEP-1686, so the calls are custom requests and
//! the answers are read leniently from JSON (`mcptask_core::client::sep1686`).
//!
//! A SEP-1686 server delivers a task's questions only while a `tasks/result`
//! is open: keep one [`Sep1686Handle::result`] running from creation and
//! read [`Sep1686Handle::next_ask`] beside it.

use mcptask_core::client::sep1686::{self as read, CancelRefusal, Sep1686Task};
use rmcp::model::{CallToolResult, ClientRequest, CustomRequest, ServerResult};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::{Mutex, mpsc};
use tracing::Instrument;

use super::sync_call::call_result;
use super::{Ask, Lane, UpstreamError};
use crate::remote::RemoteError;
use crate::remote::handler::RouteGuard;

/// A SEP-1686 task on its lane. Dropping it returns the lane to the pool
/// (the upstream task keeps running there until it ends or expires; its
/// later questions are refused), unless a request on it failed below the
/// protocol: then the session is closed.
pub struct Sep1686Handle {
    created: Sep1686Task,
    asks: Mutex<mpsc::UnboundedReceiver<Ask>>,
    _route: RouteGuard,
    lane: Lane,
    /// A request on the lane failed below the protocol (its server died,
    /// its response stream broke): the session is not given to another call.
    broken: AtomicBool,
}

impl Drop for Sep1686Handle {
    fn drop(&mut self) {
        if *self.broken.get_mut() {
            self.lane.discard();
        }
    }
}

/// How a [`Sep1686Handle::cancel`] ended.
#[derive(Debug, Clone, PartialEq)]
pub enum CancelOutcome {
    /// The server cancelled it; its task object as it answered.
    Cancelled(Sep1686Task),
    /// It had already ended (SEP-1686 refuses the cancel); its status now.
    AlreadyTerminal(Sep1686Task),
}

/// Start `name(arguments)` as a SEP-1686 task (a `tools/call` with
/// `task: {ttl}`; the server may choose another ttl). Only for tools whose
/// `taskSupport` is `required` or `optional`: a forbidden tool runs and then
/// fails the call.
///
/// ```no_run
/// use mcptask_client::upstream::{sep1686, LanePool};
/// # async fn demo(pool: LanePool) -> Result<(), Box<dyn std::error::Error>> {
/// let task = sep1686::create(pool.acquire().await?, "simulate-research-query",
///     serde_json::json!({"topic": "rust"}), Some(60_000)).await?;
/// let result = task.result().await?; // blocks until the task ends
/// # Ok(()) }
/// ```
pub async fn create(
    lane: Lane,
    name: &str,
    arguments: Value,
    ttl_ms: Option<u64>,
) -> Result<Sep1686Handle, UpstreamError> {
    let task = match ttl_ms {
        Some(ttl) => json!({ "ttl": ttl }),
        None => json!({}),
    };
    let params = json!({ "name": name, "arguments": arguments, "task": task });
    let answer = request(&lane, "tools/call", params, true).await?;
    let created = read::created(&answer)
        .map_err(|e| UpstreamError::Remote(RemoteError::Protocol(format!("tools/call: {e}"))))?;
    let (sink, asks) = mpsc::unbounded_channel();
    let route = lane.handler().attach_task(&created.task_id, sink);
    Ok(Sep1686Handle {
        created,
        asks: Mutex::new(asks),
        _route: route,
        lane,
        broken: AtomicBool::new(false),
    })
}

impl Sep1686Handle {
    /// The server's task id.
    pub fn id(&self) -> &str {
        &self.created.task_id
    }

    /// The task as the creation answer described it.
    pub fn created(&self) -> &Sep1686Task {
        &self.created
    }

    /// `tasks/get`: the task's status now.
    pub async fn status(&self) -> Result<Sep1686Task, UpstreamError> {
        let answer = self.noted(
            request(
                &self.lane,
                "tasks/get",
                json!({ "taskId": self.id() }),
                true,
            )
            .await,
        )?;
        read::snapshot(&answer)
            .map_err(|e| UpstreamError::Remote(RemoteError::Protocol(format!("tasks/get: {e}"))))
    }

    /// `tasks/result`: blocks until the task ends, then its tool result (a
    /// failed tool is a result with `isError`), or the server's error (e.g.
    /// `-32603 … has no result stored` for a cancelled task). Unbounded in
    /// time: the caller bounds it. The server's questions arrive meanwhile
    /// on [`Sep1686Handle::next_ask`].
    pub async fn result(&self) -> Result<CallToolResult, UpstreamError> {
        let answer = self
            .lane
            .peer()
            .send_request(ClientRequest::CustomRequest(CustomRequest::new(
                "tasks/result",
                Some(json!({ "taskId": self.id() })),
            )))
            .await
            .map_err(|e| UpstreamError::from_service("tasks/result", e));
        call_result(self.noted(answer)?)
    }

    /// `outcome`, noting a failure below the protocol (see `broken`).
    fn noted<T>(&self, outcome: Result<T, UpstreamError>) -> Result<T, UpstreamError> {
        if let Err(
            UpstreamError::Remote(_)
            | UpstreamError::Timeout { .. }
            | UpstreamError::Refused { .. },
        ) = &outcome
        {
            self.broken.store(true, Ordering::Relaxed);
        }
        outcome
    }

    /// `tasks/cancel`. A task that had already ended is not an error.
    pub async fn cancel(&self) -> Result<CancelOutcome, UpstreamError> {
        match request(
            &self.lane,
            "tasks/cancel",
            json!({ "taskId": self.id() }),
            true,
        )
        .await
        {
            Ok(answer) => read::snapshot(&answer)
                .map(CancelOutcome::Cancelled)
                .map_err(|e| {
                    UpstreamError::Remote(RemoteError::Protocol(format!("tasks/cancel: {e}")))
                }),
            Err(UpstreamError::Rpc(e))
                if read::cancel_refusal(e.code.0, &e.message) == CancelRefusal::AlreadyTerminal =>
            {
                self.status().await.map(CancelOutcome::AlreadyTerminal)
            }
            Err(e) => Err(e),
        }
    }

    /// The next question the server asks for this task (marked with its
    /// `related-task`); `None` once the session is gone.
    pub async fn next_ask(&self) -> Option<Ask> {
        self.asks.lock().await.recv().await
    }

    /// The lane the task lives on.
    pub fn lane(&self) -> &Lane {
        &self.lane
    }
}

/// A custom request whose answer is read as raw JSON (rmcp decodes it into
/// whichever `ServerResult` variant fits, sometimes dropping fields).
async fn request(
    lane: &Lane,
    method: &'static str,
    mut params: Value,
    bounded: bool,
) -> Result<Value, UpstreamError> {
    // Borrowed, not copied: with telemetry off the span reads nothing.
    let span = match method {
        "tools/call" => {
            crate::trace::tool_call_span(None, params["name"].as_str().unwrap_or_default())
        }
        _ => crate::trace::task_request_span(
            method,
            None,
            params["taskId"].as_str().unwrap_or_default(),
            None,
        ),
    };
    if let (Some(cx), Some(params)) = (crate::trace::of(&span), params.as_object_mut()) {
        let meta = params
            .entry("_meta")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(meta) = meta.as_object_mut() {
            crate::trace::to_meta(meta, &cx);
        }
    }
    let call = lane
        .peer()
        .send_request(ClientRequest::CustomRequest(CustomRequest::new(
            method,
            Some(params),
        )));
    let answer = if bounded {
        crate::remote::bounded(method, lane.call_timeout(), call)
            .instrument(span)
            .await
    } else {
        call.instrument(span).await
    }
    .map_err(|e| UpstreamError::from_service(method, e))?;
    result_json(method, answer)
}

fn result_json(method: &str, answer: ServerResult) -> Result<Value, UpstreamError> {
    match answer {
        ServerResult::CustomResult(v) => Ok(v.0),
        other => serde_json::to_value(&other)
            .map_err(|e| UpstreamError::Remote(RemoteError::Protocol(format!("{method}: {e}")))),
    }
}
