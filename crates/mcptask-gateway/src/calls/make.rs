//! Making a call. Core's [`plan`] decides, from what the upstream speaks,
//! what the tool declares and what the caller asked for, whether a call is
//! passed through, tracked upstream, or run as a call task; every call that
//! is kept has one row (the tracker's) under one id, whichever face made it.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;
use mcptask_client::{
    CallOptions, CallOutcome, CommitWith, HandleCommit, RemoteTaskRecord, TrackerError,
};
use mcptask_core::call::{CallState, Driver, Face, RunDriver, TrackDriver};
use mcptask_core::client::RemoteDriver;
use mcptask_core::client::transition::Change;
use mcptask_core::ids;
use mcptask_core::outcome::Outcome;
use mcptask_server::{CreateRequest, TaskError, TaskRuntime};
use rmcp::model::{CallToolResult, InputResponses, JsonObject, Task};
use serde_json::Value;

use super::execute::{Executed, Execution};
use super::{Calls, LiveCall};
use crate::auth::Caller;
use crate::failure::Failure;
use crate::metrics::{CallLabels, PASS_THROUGH};
use crate::route::{self, Ask, Decided, Intent, Target};
use crate::upstreams::catalog::Route;

/// One tool call, as a face asks for it.
#[derive(Debug, Clone, Default)]
pub struct CallRequest {
    /// The configured server.
    pub server: String,
    /// The tool's name on that server.
    pub tool: String,
    /// The arguments (a JSON object, or null).
    pub arguments: Value,
    /// `Some(true)`: keep the call as a task whatever the tool (a synchronous
    /// tool runs as durable work); `Some(false)`: the synchronous answer
    /// where the tool has one; `None`: the tool's `background` setting.
    pub background: Option<bool>,
    /// Who calls, through which face, and what to record with the call.
    pub options: CallOptions,
    /// Who makes the request (tool policy applies to it; an operator may
    /// act for another principal in `options`).
    pub caller: Caller,
}

/// What a call produced.
#[derive(Debug, Clone)]
pub enum Started {
    /// The upstream answered synchronously; nothing was kept.
    Completed(CallToolResult),
    /// The call is kept: its row, durable before this returns.
    Task(Box<RemoteTaskRecord>),
}

/// Why a call was not made.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The tracker refused or failed the call (bad input, unknown server,
    /// the upstream's error, input needed before the task starts…).
    #[error(transparent)]
    Tracker(#[from] TrackerError),
    /// The call runtime refused a new call task; nothing was kept.
    #[error(transparent)]
    Runtime(#[from] TaskError),
    /// The route refused the call before anything was done: no such
    /// server or tool for this caller, or the caller is over its fair
    /// limits.
    #[error("{}", .0.message())]
    Refused(Failure),
}

impl From<CallOutcome> for Started {
    fn from(outcome: CallOutcome) -> Self {
        match outcome {
            CallOutcome::Completed(result) => Started::Completed(result),
            CallOutcome::Task(record) => Started::Task(record),
        }
    }
}

/// A kept call holds its live place until it ends; an answered one gives
/// it back now.
fn kept(started: Started, live: LiveCall) -> Started {
    if matches!(started, Started::Task(_)) {
        live.keep();
    }
    started
}

impl Calls {
    /// Make a call through the REST, CLI or Rust face.
    ///
    /// ```no_run
    /// # async fn demo(calls: mcptask_gateway::Calls) -> Result<(), mcptask_gateway::calls::CallError> {
    /// use mcptask_gateway::calls::{CallRequest, Started};
    /// let started = calls
    ///     .call(CallRequest {
    ///         server: "everything".into(),
    ///         tool: "trigger-long-running-operation".into(),
    ///         arguments: serde_json::json!({"duration": 4}),
    ///         background: Some(true),
    ///         ..Default::default()
    ///     })
    ///     .await?;
    /// if let Started::Task(call) = started {
    ///     let done = calls.upstreams.tracker.wait(&call.id, std::time::Duration::from_secs(60)).await;
    ///     println!("{:?}", done.map(|r| r.status));
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn call(&self, request: CallRequest) -> Result<Started, CallError> {
        let tracker = &self.upstreams.tracker;
        let CallRequest {
            server,
            tool,
            arguments,
            background,
            mut options,
            caller,
        } = request;
        let face = options.face.unwrap_or(Face::Rust);
        // Whom the call is for, in the audit trail of its end.
        let principal = options.principal.clone();
        let intent = Intent {
            caller: &caller,
            face,
            target: Target::Upstream {
                server: &server,
                tool: &tool,
            },
            ask: Ask::Background(background),
        };
        let routed = match route::decide(self, intent)
            .await
            .map_err(CallError::Refused)?
        {
            Decided::Call(routed) => routed,
            // A server never listed (down since the gateway started): the
            // upstream says what it makes of the call.
            Decided::Unlisted {
                server,
                tool,
                toolset,
                admitted: _admitted,
                live,
            } => {
                let began = Instant::now();
                options.id = Some(live.id().to_string());
                let outcome = if toolset {
                    tracker
                        .call_toolset(&server, &tool, arguments, options)
                        .await
                } else {
                    tracker.call_tool(&server, &tool, arguments, options).await
                };
                let labels = CallLabels::new(&self.upstreams, &server, &tool, face, PASS_THROUGH)
                    .by(principal.as_deref());
                count_answer(&labels, &outcome, began);
                return Ok(kept(outcome?.into(), live));
            }
            Decided::Agent(..) => {
                return Err(CallError::Refused(Failure::UnknownTool {
                    server: Some(server),
                    tool,
                }));
            }
        };
        let executed = self
            .execute(
                *routed,
                Execution {
                    arguments,
                    options,
                    as_tasks: false,
                    relay: None,
                },
            )
            .await?;
        match executed {
            Executed::Answered(result) => Ok(Started::Completed(result)),
            Executed::Kept { record, .. } => Ok(Started::Task(record)),
            // No relay was given (the tracker answers), and only a caller
            // that declares tasks is answered within a deadline.
            Executed::Relayed(_) | Executed::Failed(_) => Err(CallError::Refused(
                Failure::internal(&"a call of this face was relayed"),
            )),
        }
    }

    /// Start a call task of `route` running `driver` (SEP-1686 or
    /// synchronous), with its row, in one commit; returns the task as its
    /// caller sees it and the row. `timeout`, the route's bound on each
    /// exchange with the upstream, is kept in the task's state for its
    /// driver.
    pub(super) async fn run(
        &self,
        route: &Route,
        driver: RunDriver,
        arguments: JsonObject,
        options: &CallOptions,
        call_inputs: InputResponses,
        timeout: std::time::Duration,
    ) -> Result<(Task, RemoteTaskRecord), CallError> {
        let tracker = &self.upstreams.tracker;
        let local = match driver {
            RunDriver::Sep1686 => RemoteDriver::Sep1686,
            RunDriver::Sync => RemoteDriver::Sync,
        };
        // What a crash does to the call is decided now, with the call, and
        // kept in its state: recovery reads it back, never today's catalog.
        let interrupt = route.interrupt;
        let options = CallOptions {
            id: Some(options.id.clone().unwrap_or_else(ids::new_local_task_id)),
            ..options.clone()
        };
        let row = tracker.local_call_row(
            &route.server,
            &route.tool,
            &Value::Object(arguments.clone()),
            local,
            &options,
        )?;
        let record = row.record.clone();
        let task = self
            .runtime
            .create_task(CreateRequest {
                tool: route.front.clone(),
                arguments,
                principal: options.principal.clone(),
                call_inputs,
                driver: Some(Driver::from(driver).as_str().to_string()),
                state: Some(CallState::run(driver, interrupt).bounded(timeout).to_json()),
                id: Some(record.id.clone()),
                call_row: Some(Box::new(row)),
                max_ttl_ms: None,
                ..Default::default()
            })
            .await?;
        tracker.call_committed(&record.id);
        Ok((task, record))
    }

    /// How the MCP face keeps a call the tracker follows upstream: its row
    /// commits with a call task of the same id that mirrors it (so a caller
    /// that declares tasks reads it with `tasks/get`), in one transaction.
    /// Refused by admission control, nothing is kept and the upstream task
    /// is cancelled.
    pub fn mirrored(&self, route: &Route, arguments: JsonObject) -> Arc<Mirror> {
        Arc::new(Mirror {
            runtime: self.runtime.clone(),
            tool: route.front.clone(),
            arguments,
            created: Mutex::new(None),
        })
    }
}

/// [`Calls::mirrored`]: a tracked call's row committed with its call task.
pub struct Mirror {
    runtime: TaskRuntime,
    tool: String,
    arguments: JsonObject,
    created: Mutex<Option<Task>>,
}

impl Mirror {
    /// The call task as its caller sees it, once committed.
    pub fn created(&self) -> Option<Task> {
        self.created.lock().expect("mirror lock").clone()
    }

    /// This, as [`CallOptions::commit`] takes it.
    pub fn commit_with(self: &Arc<Self>) -> CommitWith {
        CommitWith(self.clone())
    }
}

#[async_trait]
impl HandleCommit for Mirror {
    async fn commit(&self, row: Change) -> Result<(), TrackerError> {
        let record = &row.record;
        let driver = match record.driver.driver() {
            Driver::Toolset => TrackDriver::Toolset,
            _ => TrackDriver::Sep2663,
        };
        let state = CallState::tracked(driver);
        let request = CreateRequest {
            tool: self.tool.clone(),
            arguments: self.arguments.clone(),
            principal: record.principal.clone(),
            call_inputs: InputResponses::new(),
            driver: Some(record.driver.as_str().to_string()),
            state: Some(state.to_json()),
            id: Some(record.id.clone()),
            call_row: Some(Box::new(row.clone())),
            // What the upstream granted its task (`None`: unlimited): the
            // caller's task must not promise to outlive it.
            max_ttl_ms: record.ttl_ms,
            ..Default::default()
        };
        // The commit of the row with its call task, one transaction: before
        // it the upstream task exists and mcptask holds nothing, after it
        // both (the crash tests open both windows through the store,
        // `tests/gateway/crash.rs`).
        match self.runtime.create_task(request).await {
            Ok(task) => {
                *self.created.lock().expect("mirror lock") = Some(task);
                Ok(())
            }
            Err(TaskError::Overloaded(why)) => Err(TrackerError::Busy(why)),
            Err(TaskError::Store(mcptask_core::StoreError::AlreadyTracked(_))) => Err(
                TrackerError::AlreadyTracked(row.record.remote_task_id.clone()),
            ),
            Err(TaskError::Store(e)) => Err(TrackerError::Store(e)),
            Err(TaskError::ShuttingDown) => Err(TrackerError::ShuttingDown),
            Err(e) => Err(TrackerError::Unavailable(e.to_string())),
        }
    }
}

/// Count a call the tracker answered at once (`outcome`): a result ends the
/// call (completed, or the tool's error); a task kept ends later, counted
/// when it settles (`drivers::spawn_tracked_ends`, or its call task's end);
/// a failure to make it ends it as failed.
pub(crate) fn count_answer(
    labels: &CallLabels,
    outcome: &Result<CallOutcome, TrackerError>,
    started: Instant,
) {
    let (ended, labels) = match outcome {
        Ok(CallOutcome::Completed(result)) => (
            Outcome::answered(result.is_error == Some(true)),
            labels.clone(),
        ),
        Ok(CallOutcome::Task(_)) | Err(TrackerError::InputNeeded { .. }) => return,
        Err(e) => (
            Outcome::Failed,
            labels.clone().failed_with(crate::failure::class_of(e)),
        ),
    };
    crate::metrics::call_ended(&labels, ended, started.elapsed());
}
