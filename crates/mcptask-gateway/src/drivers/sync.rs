//! The synchronous driver: a plain upstream call run as the task's work on
//! an exclusive lane. Progress becomes the status message, questions become
//! the task's input requests; after a crash the call is failed or made again
//! (the server's `interrupt`).

use std::collections::VecDeque;

use mcptask_client::remote::Seen;
use mcptask_client::upstream::{Ask, SyncCall, SyncEvent, SyncOptions, sync_call};
use mcptask_core::front::progress_message;
use mcptask_server::{TaskContext, TaskExit, ToolCall};
use rmcp::model::{CallToolResponse, CallToolResult};
use serde_json::Value;

use super::relay::{Coalesced, STATUS_EVERY, bounded_answers, relay_ask};
use super::{exchange_options, exit_of, internal};
use crate::upstreams::Upstreams;
use crate::upstreams::catalog::Route;

use mcptask_core::protocol::MAX_INPUT_ROUNDS as MAX_ROUNDS;

/// A synchronous upstream call run as the call task's work: progress
/// becomes the status message, questions (asked mid-call, or as SEP-2322
/// input rounds) become the task's input requests.
pub(super) async fn synchronous(
    upstreams: &Upstreams,
    route: &Route,
    call: ToolCall,
    timeout: std::time::Duration,
) -> Result<CallToolResult, TaskExit> {
    let ctx = &call.ctx;
    // Each round's exchange is bounded as the route decided (`timeout`,
    // kept with the call), like a call that is not a task; the questions of
    // the caller between rounds and mid-call are bounded by the question
    // timeout instead.
    let mut bounded = exchange_options(timeout);
    let id = ctx.task_id().unwrap_or_default().to_string();
    // What is held for the call lives as long as its run here.
    let _held = Held(upstreams, &id);
    // The call's own credential where its server takes the caller's
    // identity; a call that can no longer be authorized ends failed.
    bounded.credential = upstreams
        .tracker
        .call_credential(&route.server, &id, ctx.principal())
        .await
        .map_err(|e| internal(e.to_string()))?;
    let mut round = bounded.clone();
    for _ in 0..MAX_ROUNDS {
        let lane = tokio::select! {
            lane = upstreams.lane(&route.server) => lane.map_err(|e| internal(e.to_string()))?,
            _ = ctx.cancelled() => return Err(TaskExit::Cancelled),
        };
        let running = sync_call(
            lane,
            &route.tool,
            Value::Object(call.arguments.clone()),
            round,
        )
        .await;
        upstreams.saw_outcome(&route.server, &running);
        let running = running.map_err(exit_of)?;
        let saw = |seen| upstreams.saw(&route.server, seen);
        match follow(ctx, running, upstreams.question_timeout(), &saw).await? {
            CallToolResponse::Complete(result) => return Ok(result),
            CallToolResponse::InputRequired(asked) => {
                let requests = asked.input_requests.unwrap_or_default();
                let bound = upstreams.question_timeout();
                let answers = bounded_answers(ctx, requests.into_iter().collect(), bound).await?;
                round = SyncOptions {
                    input_responses: Some(answers.into_iter().collect()),
                    request_state: asked.request_state,
                    ..bounded.clone()
                };
            }
            _ => {
                return Err(internal(
                    "the upstream made a task of a call made without tasks",
                ));
            }
        }
    }
    Err(internal(format!(
        "the upstream asked more than {MAX_ROUNDS} rounds of questions"
    )))
}

/// One upstream call to its answer, with its progress and mid-call
/// questions on the task. A question unanswered for `bound` ends the call
/// (dropping `running` cancels it upstream).
async fn follow(
    ctx: &TaskContext,
    mut running: SyncCall,
    bound: std::time::Duration,
    saw: &(dyn Fn(Seen) + Sync),
) -> Result<CallToolResponse, TaskExit> {
    let mut status = Coalesced::new();
    let mut asked: VecDeque<Ask> = VecDeque::new();
    loop {
        if let Some(ask) = asked.pop_front() {
            // The call is watched while its question waits: a session that
            // died (its server killed) never withdraws the question, but
            // the call itself ends.
            let relay = relay_ask(ctx, ask, bound);
            tokio::pin!(relay);
            loop {
                tokio::select! {
                    relayed = &mut relay => break relayed?,
                    event = running.next() => {
                        if let Some(answer) = on_event(ctx, &mut status, &mut asked, event, saw).await? {
                            return Ok(answer);
                        }
                    }
                }
            }
            continue;
        }
        tokio::select! {
            event = running.next() => {
                if let Some(answer) = on_event(ctx, &mut status, &mut asked, event, saw).await? {
                    return Ok(answer);
                }
            }
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

/// One event of the running call: progress goes to the status message, a
/// question joins the queue, the answer (after the last status) is returned
/// and what it says of the upstream is told to `saw`.
async fn on_event(
    ctx: &TaskContext,
    status: &mut Coalesced,
    asked: &mut VecDeque<Ask>,
    event: Option<SyncEvent>,
    saw: &(dyn Fn(Seen) + Sync),
) -> Result<Option<CallToolResponse>, TaskExit> {
    match event {
        Some(SyncEvent::Progress {
            progress,
            total,
            message,
        }) => {
            let text = progress_message(progress, total, message.as_deref());
            status.offer(ctx, text).await?;
            Ok(None)
        }
        Some(SyncEvent::Ask(ask)) => {
            asked.push_back(ask);
            Ok(None)
        }
        Some(SyncEvent::Done(answer)) => {
            saw(Seen::of_result(&answer));
            status.flush(ctx).await?;
            answer.map(Some).map_err(exit_of)
        }
        None => Err(internal("the upstream call ended without a result")),
    }
}

/// Forgets the credential held for a call when its run here ends.
struct Held<'a>(&'a Upstreams, &'a str);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.tracker.forget_credential(self.1);
    }
}
