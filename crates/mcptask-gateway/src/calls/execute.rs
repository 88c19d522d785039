//! Carrying out a routed call: the one switch over the plan, for every face.
//!
//! [`route::decide`](crate::route::decide) decides a call once; this carries
//! that decision out, whichever face made the call (the Rust API, REST, the
//! CLI, the MCP front): a run plan becomes a call task, a tracked plan the
//! tracker's call, a pass-through the upstream's answer. The route's
//! timeout bounds every exchange with the upstream on every plan (it is
//! kept with a call task, so its driver never recomputes it). A face only
//! translates its request into an [`Execution`] and renders the
//! [`Executed`]; what only it can do (the front's relay of progress and
//! questions during a pass-through) it passes in as a [`Relay`].

use std::time::{Duration, Instant};

use async_trait::async_trait;
use mcptask_client::identity::CallCredential;
use mcptask_client::{CallOptions, CallOutcome, RemoteTaskRecord, TrackerError};
use mcptask_core::call::{Driver, Face, Plan, RunDriver, TrackDriver};
use rmcp::ErrorData;
use rmcp::model::{CallToolResponse, CallToolResult, JsonObject, Task, TaskPayload};
use serde_json::Value;

use super::{CallError, Calls, count_answer};
use crate::metrics::{CallLabels, PASS_THROUGH};
use crate::route::Routed;
use crate::upstreams::catalog::Route;

/// A face's own synchronous exchange with the upstream (the MCP front relays
/// the upstream's progress and questions to its caller as they come, and
/// withdraws the call when its caller goes), bounded by the route's
/// `timeout`. It counts the call's end itself: only it knows whether its
/// caller went away.
#[async_trait]
pub trait Relay: Send + Sync {
    /// Call `route`'s tool with `arguments` and relay the exchange, each
    /// request carrying the call's own `credential` where it has one (see
    /// `mcptask_client::identity`).
    async fn pass_through(
        &self,
        route: &Route,
        exchange: (Duration, Option<CallCredential>),
        arguments: JsonObject,
    ) -> Result<CallToolResponse, ErrorData>;
}

/// A routed call as a face hands it over.
pub struct Execution<'a> {
    /// The tool's arguments (a JSON object, or null).
    pub arguments: Value,
    /// What is recorded with the call (who, which face, correlation, answers
    /// the caller gave); its id and timeout are set from the route.
    pub options: CallOptions,
    /// The face reads kept calls as tasks of the call runtime (`tasks/get`):
    /// a tracked call's row commits with a call task of the same id.
    pub as_tasks: bool,
    /// The face's own synchronous exchange; `None`: the tracker's.
    pub relay: Option<&'a dyn Relay>,
}

/// What became of a call.
pub enum Executed {
    /// The upstream answered; nothing was kept.
    Answered(CallToolResult),
    /// The call is kept: its row, and, for a face that reads calls as tasks
    /// (or a call task), the task as its caller sees it.
    Kept {
        /// The call's row, durable before this returns.
        record: Box<RemoteTaskRecord>,
        /// The call task of the same id, when there is one.
        task: Option<Task>,
    },
    /// The face's [`Relay`] carried the exchange: its answer, as it is.
    Relayed(Result<CallToolResponse, ErrorData>),
    /// The call was kept as a task and failed within the route's
    /// `answer_within`: the upstream's error, as a direct caller hears it.
    Failed(ErrorData),
}

/// The arguments as an object (null reads as none).
fn object(arguments: Value) -> Result<JsonObject, CallError> {
    match arguments {
        Value::Object(map) => Ok(map),
        Value::Null => Ok(JsonObject::new()),
        _ => Err(TrackerError::InvalidInput("arguments must be a JSON object".into()).into()),
    }
}

impl Calls {
    /// Carry out `routed` (the route's one decision) for the face that made
    /// it. The admission holds until the call is answered; a kept call holds
    /// its live place until it ends.
    pub async fn execute(
        &self,
        routed: Routed,
        execution: Execution<'_>,
    ) -> Result<Executed, CallError> {
        let Routed {
            route,
            plan,
            admitted: _admitted,
            live,
            timeout,
            answer_within,
            via,
            ..
        } = routed;
        let Execution {
            arguments,
            mut options,
            as_tasks,
            relay,
        } = execution;
        // The call is kept (if it is) under the id its live place holds, and
        // each of its exchanges is bounded as the route decided.
        options.id = Some(live.id().to_string());
        options.timeout = Some(timeout);
        let face = options.face.unwrap_or(Face::Rust);
        // Whom the call is for, in the audit trail of its end.
        let principal = options.principal.clone();
        let tracker = &self.upstreams.tracker;
        let executed = match plan {
            Plan::Run(driver) => {
                let arguments = object(arguments)?;
                // Its driver's exchanges read the call's credential back by
                // its id; an exchanged token is held now, while the
                // caller's token is at hand.
                let credential = tracker
                    .new_call_credential(&route.server, &mut options)
                    .await?;
                // A 2025-11-25 task's exchanges cannot carry a call's own
                // credential yet: refused rather than made with the
                // gateway's.
                if driver == RunDriver::Sep1686 && credential.is_some() {
                    tracker.forget_credential(live.id());
                    return Err(TrackerError::Unauthorized(format!(
                        "server {:?} speaks the 2025-11-25 tasks protocol, whose task calls cannot carry the caller's identity ([servers.identity]); use mode = \"gateway\" for it",
                        route.server
                    ))
                    .into());
                }
                let inputs = options.input_responses.clone();
                let (task, record) = self
                    .run(&route, driver, arguments, &options, inputs, timeout)
                    .await?;
                match answer_within {
                    Some(within) => self.answered_within(task, record, within).await,
                    None => Executed::Kept {
                        record: Box::new(record),
                        task: Some(task),
                    },
                }
            }
            Plan::Track(driver) => {
                let mirror = as_tasks.then(|| {
                    let arguments = arguments.as_object().cloned().unwrap_or_default();
                    self.mirrored(&route, arguments)
                });
                options.commit = mirror.as_ref().map(|m| m.commit_with());
                let began = Instant::now();
                let outcome = if driver == TrackDriver::Toolset {
                    tracker
                        .call_toolset(&route.server, &route.tool, arguments, options)
                        .await
                } else {
                    tracker
                        .call_tool(&route.server, &route.tool, arguments, options)
                        .await
                };
                let driver = Driver::from(driver).as_str();
                let labels =
                    CallLabels::new(&self.upstreams, &route.server, &route.tool, face, driver)
                        .by(principal.as_deref())
                        .via(via.as_deref());
                count_answer(&labels, &outcome, began);
                match outcome? {
                    CallOutcome::Completed(result) => Executed::Answered(result),
                    CallOutcome::Task(record) => Executed::Kept {
                        record,
                        task: mirror.and_then(|m| m.created()),
                    },
                }
            }
            Plan::PassThrough => match relay {
                Some(relay) => {
                    let arguments = object(arguments)?;
                    let credential = tracker
                        .new_call_credential(&route.server, &mut options)
                        .await?;
                    let relayed = relay
                        .pass_through(&route, (timeout, credential), arguments)
                        .await;
                    // Nothing is kept: nothing is held for later.
                    tracker.forget_credential(live.id());
                    Executed::Relayed(relayed)
                }
                None => {
                    let began = Instant::now();
                    let outcome = tracker
                        .call_tool(&route.server, &route.tool, arguments, options)
                        .await;
                    let labels = CallLabels::new(
                        &self.upstreams,
                        &route.server,
                        &route.tool,
                        face,
                        PASS_THROUGH,
                    )
                    .by(principal.as_deref())
                    .via(via.as_deref());
                    count_answer(&labels, &outcome, began);
                    match outcome? {
                        CallOutcome::Completed(result) => Executed::Answered(result),
                        CallOutcome::Task(record) => Executed::Kept { record, task: None },
                    }
                }
            },
        };
        if matches!(executed, Executed::Kept { .. }) {
            live.keep();
        }
        Ok(executed)
    }

    /// A call task that ends within `within` is answered directly (its
    /// result, or its error); one still working then, or waiting for its
    /// caller's input, is handed out as the task. Either way the call is
    /// the same record, counted and audited when it ends (the tracker
    /// applies the end to the record a moment later). The wait is woken by
    /// the call task's own changes only (`TaskRuntime::wait_for`), never a
    /// timer per call.
    async fn answered_within(
        &self,
        task: Task,
        record: RemoteTaskRecord,
        within: Duration,
    ) -> Executed {
        // The call task's own changes, made here where its work runs: its
        // end is seen as it commits, not after the tracker has applied it
        // to the call's record (which would cost a hop and a poll).
        let settled = self
            .runtime
            .wait_for(&record.id, record.principal.as_deref(), within, |t| {
                t.status() != rmcp::model::TaskStatus::Working
            })
            .await;
        match settled {
            Ok(Some(now)) => match now.payload {
                TaskPayload::Completed { result } => {
                    match serde_json::from_value::<CallToolResult>(Value::Object(result)) {
                        Ok(result) => return Executed::Answered(result),
                        Err(e) => {
                            tracing::warn!(call = %record.id, error = %e, "a call task's result does not read as a tool result; handing out its task");
                        }
                    }
                }
                TaskPayload::Failed { error } => {
                    if let Ok(error) = serde_json::from_value::<ErrorData>(Value::Object(error)) {
                        return Executed::Failed(error);
                    }
                }
                // Waiting for its caller, or cancelled: its task says so.
                _ => {}
            },
            Ok(None) => {}
            // The task exists and runs: its caller follows it.
            Err(e) => {
                tracing::warn!(call = %record.id, error = %e, "cannot wait for a call's direct answer; handing out its task");
            }
        }
        Executed::Kept {
            record: Box::new(record),
            task: Some(task),
        }
    }
}
