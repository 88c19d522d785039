//! What the driven drivers (synchronous and SEP-1686) share: an upstream
//! question relayed as the task's input request, and status messages
//! written at a bounded rate.

use std::time::{Duration, Instant};

use mcptask_client::upstream::Ask;
use mcptask_core::front::input_key;
use mcptask_server::{TaskContext, TaskExit};
use rmcp::ErrorData;
use rmcp::model::InputRequest;
use serde_json::{Value, json};

use super::unanswered;

/// At most one status-message write per task per this interval.
pub(super) const STATUS_EVERY: Duration = Duration::from_millis(500);

/// Writes status messages at most once per [`STATUS_EVERY`], last wins.
pub(super) struct Coalesced {
    last: Option<Instant>,
    pub(super) pending: Option<String>,
}

impl Coalesced {
    pub(super) fn new() -> Self {
        Self {
            last: None,
            pending: None,
        }
    }

    pub(super) async fn offer(&mut self, ctx: &TaskContext, text: String) -> Result<(), TaskExit> {
        if self.last.is_some_and(|at| at.elapsed() < STATUS_EVERY) {
            self.pending = Some(text);
            return Ok(());
        }
        self.last = Some(Instant::now());
        self.pending = None;
        ctx.set_status_message(text).await
    }

    pub(super) async fn flush(&mut self, ctx: &TaskContext) -> Result<(), TaskExit> {
        match self.pending.take() {
            Some(text) => {
                self.last = Some(Instant::now());
                ctx.set_status_message(text).await
            }
            None => Ok(()),
        }
    }
}

/// An upstream question as a front input request; answered, refused,
/// withdrawn when the upstream stops waiting, or given up after `bound`
/// (the task then ends with [`unanswered`]; the caller cancels the
/// upstream call).
pub(super) async fn relay_ask(
    ctx: &TaskContext,
    ask: Ask,
    bound: Duration,
) -> Result<(), TaskExit> {
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
        _ = tokio::time::sleep(bound) => {
            let keys = [key];
            ctx.withdraw_inputs(&keys).await?;
            let gave_up = unanswered(&keys, bound);
            if let TaskExit::Error(e) = &gave_up {
                ask.respond(Err(e.clone()));
            }
            return Err(gave_up);
        }
    }
    Ok(())
}

/// The answers to `requests` (a SEP-2322 input round), or [`unanswered`]
/// once `bound` passed without them.
pub(super) async fn bounded_answers(
    ctx: &TaskContext,
    requests: std::collections::BTreeMap<String, InputRequest>,
    bound: Duration,
) -> Result<std::collections::BTreeMap<String, Value>, TaskExit> {
    let keys: Vec<String> = requests.keys().cloned().collect();
    match tokio::time::timeout(bound, ctx.request_inputs(requests)).await {
        Ok(answers) => answers,
        Err(_) => {
            ctx.withdraw_inputs(&keys).await?;
            Err(unanswered(&keys, bound))
        }
    }
}
