//! The task runtime: creates tasks durably, runs their work, serves reads,
//! answers and cancellations from the store, and keeps leases and sweeps going.

use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use mcptask_core::clock::SharedClock;
use mcptask_core::server::{
    CancelOutcome, Fence, NewServerTask, Outcome, ServerTaskRecord, interrupted_error,
};
use mcptask_core::store::ServerTaskStore;
use mcptask_core::{StoreError, SystemClock, ids, payload};
use rmcp::ErrorData;
use rmcp::model::{CallToolResult, DetailedTask, InputResponses, JsonObject, Task};
use serde_json::Value;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::batcher::CreateBatcher;
use crate::config::RuntimeConfig;
use crate::context::{TaskContext, TaskExit};
use crate::registry::{TaskTool, ToolCall, ToolRegistry};
use crate::wire;

/// Longest accepted task id; anything longer cannot be one of ours.
const MAX_TASK_ID_LEN: usize = 128;
/// Most `inputResponses` entries accepted in one `tasks/update`.
const MAX_RESPONSES_PER_UPDATE: usize = 256;
/// The message every "no such task for you" answer carries, so unknown,
/// purged and foreign ids are indistinguishable.
pub const TASK_NOT_FOUND: &str = "Failed to retrieve task: Task not found";

/// Why a task operation was refused.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// Unknown, purged, or bound to another principal (deliberately one case).
    #[error("{TASK_NOT_FOUND}")]
    NotFound,
    #[error("{0}")]
    InvalidParams(String),
    #[error("unknown tool: {0}")]
    UnknownTool(String),
    #[error("this tool only runs as a task: declare the io.modelcontextprotocol/tasks extension")]
    MissingCapability,
    #[error("the server is shutting down")]
    ShuttingDown,
    #[error("task store unavailable: {0}")]
    Store(#[from] StoreError),
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<TaskError> for ErrorData {
    fn from(e: TaskError) -> Self {
        match e {
            TaskError::NotFound => ErrorData::invalid_params(TASK_NOT_FOUND, None),
            TaskError::InvalidParams(m) => ErrorData::invalid_params(m, None),
            TaskError::UnknownTool(name) => {
                ErrorData::invalid_params(format!("unknown tool: {name}"), None)
            }
            TaskError::MissingCapability => ErrorData::missing_required_client_capability(
                rmcp::model::ClientCapabilities::builder()
                    .enable_tasks()
                    .build(),
            ),
            other => ErrorData::internal_error(other.to_string(), None),
        }
    }
}

/// A request to create a task.
#[derive(Debug, Clone, Default)]
pub struct CreateRequest {
    pub tool: String,
    pub arguments: JsonObject,
    pub principal: Option<String>,
    /// Answers from a multi-round-trip exchange that preceded the task.
    pub call_inputs: InputResponses,
}

pub(crate) struct Running {
    token: String,
    wake: watch::Sender<u64>,
    cancel: CancellationToken,
    stop: CancellationToken,
}

pub(crate) struct RuntimeInner {
    pub(crate) store: Arc<dyn ServerTaskStore>,
    pub(crate) clock: SharedClock,
    pub(crate) config: RuntimeConfig,
    pub(crate) registry: ToolRegistry,
    pub(crate) owner: String,
    running: Mutex<HashMap<String, Running>>,
    creator: CreateBatcher,
    pub(crate) shutdown: CancellationToken,
    accepting: AtomicBool,
    work: TaskTracker,
    pub(crate) last_heartbeat_ok: AtomicI64,
}

/// Builder for a [`TaskRuntime`].
pub struct RuntimeBuilder {
    store: Arc<dyn ServerTaskStore>,
    registry: ToolRegistry,
    clock: SharedClock,
    config: RuntimeConfig,
    owner: Option<String>,
}

impl RuntimeBuilder {
    pub fn clock(mut self, clock: SharedClock) -> Self {
        self.clock = clock;
        self
    }

    pub fn config(mut self, config: RuntimeConfig) -> Self {
        self.config = config;
        self
    }

    /// Use a fixed owner id (tests); by default each process start gets a fresh one.
    pub fn owner_id(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }

    /// Register the owner lease and start the maintenance loops.
    pub async fn start(self) -> Result<TaskRuntime, StoreError> {
        let owner = self.owner.unwrap_or_else(|| ids::new_owner_id("server"));
        let now = self.clock.now_ms();
        self.store
            .heartbeat(&owner, now, self.config.lease_ms)
            .await?;
        let creator = CreateBatcher::start(
            self.store.clone(),
            self.config.create_writers,
            self.config.max_create_batch,
        );
        let inner = Arc::new(RuntimeInner {
            store: self.store,
            clock: self.clock,
            config: self.config,
            registry: self.registry,
            owner,
            running: Mutex::new(HashMap::new()),
            creator,
            shutdown: CancellationToken::new(),
            accepting: AtomicBool::new(true),
            work: TaskTracker::new(),
            last_heartbeat_ok: AtomicI64::new(now),
        });
        let runtime = TaskRuntime { inner };
        if runtime.inner.config.background {
            crate::maintenance::spawn_loops(runtime.inner.clone());
        }
        // The push channel is not time-driven, so it runs even when tests drive
        // the maintenance steps by hand.
        crate::signals::spawn_listener(runtime.inner.clone()).await;
        Ok(runtime)
    }
}

/// The durable task runtime. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct TaskRuntime {
    pub(crate) inner: Arc<RuntimeInner>,
}

impl TaskRuntime {
    /// Start configuring a runtime over `store` serving `registry`.
    pub fn builder(store: Arc<dyn ServerTaskStore>, registry: ToolRegistry) -> RuntimeBuilder {
        RuntimeBuilder {
            store,
            registry,
            clock: Arc::new(SystemClock),
            config: RuntimeConfig::default(),
            owner: None,
        }
    }

    /// This process incarnation's owner id.
    pub fn owner_id(&self) -> &str {
        &self.inner.owner
    }

    pub fn registry(&self) -> &ToolRegistry {
        &self.inner.registry
    }

    pub fn config(&self) -> &RuntimeConfig {
        &self.inner.config
    }

    pub fn store(&self) -> &Arc<dyn ServerTaskStore> {
        &self.inner.store
    }

    /// Tasks whose work runs in this process right now.
    pub fn running_count(&self) -> usize {
        self.inner.running.lock().expect("running map").len()
    }

    /// Whether this process runs `task_id`'s work right now.
    pub fn is_running_here(&self, task_id: &str) -> bool {
        self.inner
            .running
            .lock()
            .expect("running map")
            .contains_key(task_id)
    }

    /// Create a task: validate, commit it (group commit), start its work, and
    /// return the seed state for `CreateTaskResult`.
    pub async fn create_task(&self, request: CreateRequest) -> Result<Task, TaskError> {
        let rt = &self.inner;
        if !rt.accepting.load(Ordering::SeqCst) {
            return Err(TaskError::ShuttingDown);
        }
        let tool = rt
            .registry
            .get(&request.tool)
            .ok_or_else(|| TaskError::UnknownTool(request.tool.clone()))?
            .clone();
        let arguments = Value::Object(request.arguments);
        rt.check_arguments(&arguments)?;
        let call_inputs = if request.call_inputs.is_empty() {
            None
        } else {
            let v = serde_json::to_value(&request.call_inputs)
                .map_err(|e| TaskError::Internal(e.to_string()))?;
            rt.check_arguments(&v)?;
            Some(v)
        };
        let now = rt.clock.now_ms();
        let new = NewServerTask {
            id: ids::new_task_id(),
            principal: request.principal,
            tool: tool.name().to_string(),
            arguments,
            call_inputs,
            created_at: now,
            ttl_ms: tool.ttl_ms.unwrap_or(rt.config.default_ttl_ms),
            poll_interval_ms: Some(
                tool.poll_interval_ms
                    .unwrap_or(rt.config.default_poll_interval_ms),
            ),
            status_message: None,
            owner: rt.owner.clone(),
            claim_token: mcptask_core::lease::mint_token(),
        };
        rt.creator.create(new.clone()).await?;
        let record = new.into_record();
        let task = wire::created_task(&record);
        spawn_work(rt, &tool, record);
        Ok(task)
    }

    /// `tasks/get`: the task as `principal` may see it.
    pub async fn get_task(
        &self,
        task_id: &str,
        principal: Option<&str>,
    ) -> Result<DetailedTask, TaskError> {
        let view = self.inner.visible(task_id, principal).await?;
        wire::detailed_task(&view, self.inner.clock.now_ms())
    }

    /// `tasks/update`: store answers to outstanding input requests (others are
    /// ignored, as the spec asks) and wake the work waiting for them.
    pub async fn update_task(
        &self,
        task_id: &str,
        principal: Option<&str>,
        responses: InputResponses,
    ) -> Result<(), TaskError> {
        let rt = &self.inner;
        if responses.len() > MAX_RESPONSES_PER_UPDATE {
            return Err(TaskError::InvalidParams(format!(
                "too many inputResponses ({}, at most {MAX_RESPONSES_PER_UPDATE})",
                responses.len()
            )));
        }
        for (key, value) in &responses {
            rt.config
                .limits
                .check_input_response(value)
                .map_err(|why| {
                    TaskError::InvalidParams(format!("inputResponses[{key:?}] {why}"))
                })?;
        }
        rt.visible(task_id, principal).await?;
        let entries: Vec<(String, Value)> = responses.into_iter().collect();
        let outcome = rt
            .store
            .answer_inputs(task_id, &entries, rt.clock.now_ms())
            .await?;
        if !outcome.applied.is_empty() {
            rt.wake_local(task_id);
        }
        Ok(())
    }

    /// `tasks/cancel`: record the durable intent and signal the work.
    pub async fn cancel_task(
        &self,
        task_id: &str,
        principal: Option<&str>,
    ) -> Result<(), TaskError> {
        let rt = &self.inner;
        rt.visible(task_id, principal).await?;
        match rt.store.request_cancel(task_id, rt.clock.now_ms()).await? {
            CancelOutcome::NotFound => Err(TaskError::NotFound),
            CancelOutcome::AlreadyTerminal => Ok(()),
            CancelOutcome::Requested { .. } => {
                rt.cancel_local(task_id);
                Ok(())
            }
        }
    }

    /// Run a tool synchronously (the client did not ask for tasks).
    pub async fn run_sync(
        &self,
        tool: &str,
        arguments: JsonObject,
        principal: Option<String>,
        call_inputs: InputResponses,
        cancel: CancellationToken,
    ) -> Result<CallToolResult, ErrorData> {
        let tool = self
            .inner
            .registry
            .get(tool)
            .ok_or_else(|| ErrorData::from(TaskError::UnknownTool(tool.to_string())))?;
        self.inner
            .check_arguments(&Value::Object(arguments.clone()))?;
        let ctx = TaskContext::synchronous(principal, call_inputs, cancel);
        let handler = tool.handler.clone();
        match AssertUnwindSafe(handler(ToolCall { arguments, ctx }))
            .catch_unwind()
            .await
        {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(TaskExit::Error(e))) => Err(e),
            Ok(Err(TaskExit::Cancelled | TaskExit::Lost)) => Err(ErrorData::internal_error(
                "the tool call was cancelled",
                None,
            )),
            Err(panic) => Err(ErrorData::internal_error(
                format!("tool panicked: {}", panic_text(&panic)),
                None,
            )),
        }
    }

    /// Handles to run maintenance steps by hand (tests with a manual clock).
    pub fn maintenance(&self) -> crate::maintenance::Maintenance {
        crate::maintenance::Maintenance {
            rt: self.inner.clone(),
        }
    }

    /// Stop accepting tasks, give running work until `deadline` to finish, then
    /// stop it and let the owner lease lapse at once so another replica
    /// recovers whatever is left (per each tool's interrupt policy). Never hangs.
    pub async fn shutdown(&self, deadline: Duration) {
        let rt = &self.inner;
        rt.accepting.store(false, Ordering::SeqCst);
        rt.shutdown.cancel();
        rt.work.close();
        if tokio::time::timeout(deadline, rt.work.wait())
            .await
            .is_err()
        {
            let running = rt.running.lock().expect("running map");
            tracing::warn!(
                count = running.len(),
                "shutdown deadline passed; leaving tasks to recovery"
            );
            for r in running.values() {
                r.stop.cancel();
            }
        }
        let _ = tokio::time::timeout(Duration::from_secs(5), rt.work.wait()).await;
        if let Err(e) = rt.store.release_owner(&rt.owner, rt.clock.now_ms()).await {
            tracing::warn!(error = %e, "could not release the owner lease; it will lapse on its own");
        }
    }
}

impl RuntimeInner {
    /// The task if it exists, is not purged, and belongs to `principal`.
    pub(crate) async fn visible(
        &self,
        task_id: &str,
        principal: Option<&str>,
    ) -> Result<mcptask_core::server::ServerTaskView, TaskError> {
        if task_id.is_empty() || task_id.len() > MAX_TASK_ID_LEN {
            return Err(TaskError::NotFound);
        }
        let view = self
            .store
            .get_task(task_id)
            .await?
            .ok_or(TaskError::NotFound)?;
        if view.record.principal.as_deref() != principal
            || view.record.is_purged(self.clock.now_ms())
        {
            return Err(TaskError::NotFound);
        }
        Ok(view)
    }

    fn check_arguments(&self, arguments: &Value) -> Result<(), TaskError> {
        let size = payload::json_size(arguments);
        let max = self.config.limits.max_arguments_bytes;
        if size > max {
            return Err(TaskError::InvalidParams(format!(
                "arguments are {size} bytes; this server accepts at most {max}"
            )));
        }
        Ok(())
    }

    pub(crate) fn wake_local(&self, task_id: &str) {
        if let Some(r) = self.running.lock().expect("running map").get(task_id) {
            r.wake.send_modify(|g| *g = g.wrapping_add(1));
        }
    }

    pub(crate) fn cancel_local(&self, task_id: &str) {
        if let Some(r) = self.running.lock().expect("running map").get(task_id) {
            r.cancel.cancel();
        }
    }

    /// Stop local work that this process no longer holds (expired, or taken over).
    pub(crate) fn stop_local(&self, task_id: &str) {
        if let Some(r) = self.running.lock().expect("running map").get(task_id) {
            r.stop.cancel();
        }
    }

    pub(crate) fn running_ids(&self) -> Vec<String> {
        self.running
            .lock()
            .expect("running map")
            .keys()
            .cloned()
            .collect()
    }

    /// Re-read one task after a cross-process hint and act on what the store says.
    pub(crate) async fn refresh_local(&self, task_id: &str) {
        if !self
            .running
            .lock()
            .expect("running map")
            .contains_key(task_id)
        {
            return;
        }
        match self.store.get_task(task_id).await {
            Ok(Some(view)) => {
                let r = &view.record;
                if r.status.is_terminal() || r.owner.as_deref() != Some(&self.owner) {
                    self.stop_local(task_id);
                } else {
                    if r.cancel_requested {
                        self.cancel_local(task_id);
                    }
                    self.wake_local(task_id);
                }
            }
            Ok(None) => self.stop_local(task_id),
            Err(e) => {
                tracing::debug!(task_id, error = %e, "refresh after signal failed; backstop will retry")
            }
        }
    }

    /// Run a store operation, retrying transient failures with capped backoff
    /// until it succeeds or the runtime shuts down.
    pub(crate) async fn retrying<T, F, Fut>(&self, what: &str, op: F) -> Result<T, TaskExit>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let mut delay = Duration::from_millis(50);
        loop {
            match op().await {
                Ok(v) => return Ok(v),
                Err(e) if e.is_transient() && !self.shutdown.is_cancelled() => {
                    tracing::warn!(error = %e, what, "store write failed; retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        _ = self.shutdown.cancelled() => {}
                    }
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
                Err(e) => {
                    return Err(TaskExit::Error(ErrorData::internal_error(
                        format!("task store unavailable ({what}): {e}"),
                        None,
                    )));
                }
            }
        }
    }

    /// Record how the work ended (fenced). A lost claim drops the write.
    async fn settle(&self, fence: &Fence, expires_at: Option<i64>, outcome: Outcome) {
        let now = self.clock.now_ms();
        let purge_at =
            mcptask_core::server::retention::purge_at(expires_at, now, self.config.retention_ms);
        match self
            .retrying("finish task", || {
                self.store.finish(fence, &outcome, now, purge_at)
            })
            .await
        {
            Ok(true) => {}
            Ok(false) => {
                tracing::info!(task_id = %fence.task_id, "task settled elsewhere or claim lost; result dropped")
            }
            Err(_) => {
                tracing::warn!(task_id = %fence.task_id, "could not record the task outcome; recovery will handle it")
            }
        }
    }

    /// Decide what to do with a task this process just claimed from a dead owner.
    pub(crate) async fn adopt(self: &Arc<Self>, record: ServerTaskRecord) {
        let Some(fence) = record.fence() else { return };
        let now = self.clock.now_ms();
        let tool = self.registry.get(&record.tool).cloned();
        let outcome = if record.is_overdue(now) {
            Some(Outcome::Failed {
                error: mcptask_core::server::expired_error(),
                message: mcptask_core::server::EXPIRED_MESSAGE.to_string(),
            })
        } else if record.cancel_requested {
            Some(Outcome::Cancelled {
                message: Some("Cancelled while no server process was running it".into()),
            })
        } else {
            match &tool {
                None => Some(Outcome::failed(
                    -32603,
                    format!(
                        "tool {:?} is not available on the server that recovered this task",
                        record.tool
                    ),
                )),
                Some(t) if t.interrupt == mcptask_core::server::InterruptPolicy::Fail => {
                    Some(Outcome::Failed {
                        error: interrupted_error(record.attempt),
                        message: format!(
                            "Interrupted: the server process running attempt {} stopped before it finished",
                            record.attempt
                        ),
                    })
                }
                Some(_) => None,
            }
        };
        if let Some(outcome) = outcome {
            self.settle(&fence, record.expires_at(), outcome).await;
            return;
        }
        let tool = tool.expect("rerun needs the tool");
        match self
            .retrying("begin rerun", || self.store.begin_rerun(&fence, now))
            .await
        {
            Ok(Some(attempt)) => {
                tracing::info!(task_id = %record.id, attempt, "rerunning interrupted task");
                spawn_work(self, &tool, ServerTaskRecord { attempt, ..record });
            }
            Ok(None) => {}
            Err(_) => {
                tracing::warn!(task_id = %record.id, "could not start the rerun; the claim will lapse and be retried")
            }
        }
    }
}

fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

fn outcome_of(
    rt: &RuntimeInner,
    result: Result<Result<CallToolResult, TaskExit>, Box<dyn std::any::Any + Send>>,
) -> Option<Outcome> {
    let limits = &rt.config.limits;
    let error_outcome = |e: ErrorData| {
        let message = payload::truncate_text(&e.message, limits.max_message_bytes);
        let error = serde_json::to_value(&e)
            .unwrap_or_else(|_| serde_json::json!({"code": e.code.0, "message": message}));
        Outcome::Failed {
            error: limits.bound_error(error),
            message,
        }
    };
    match result {
        Ok(Ok(result)) => {
            let value = serde_json::to_value(&result)
                .unwrap_or_else(|_| serde_json::json!({"content": []}));
            let bounded = payload::bound_tool_result(value, limits.max_result_bytes);
            if bounded.truncated {
                tracing::warn!(
                    bytes = bounded.original_bytes,
                    "tool result truncated to the configured bound"
                );
            }
            Some(Outcome::Completed {
                result: bounded.value,
            })
        }
        Ok(Err(TaskExit::Cancelled)) => Some(Outcome::Cancelled {
            message: Some("Cancelled at the client's request".into()),
        }),
        Ok(Err(TaskExit::Error(e))) => Some(error_outcome(e)),
        Ok(Err(TaskExit::Lost)) => None,
        Err(panic) => Some(error_outcome(ErrorData::internal_error(
            format!("tool panicked: {}", panic_text(&panic)),
            None,
        ))),
    }
}

/// Start a claimed task's work in this process.
fn spawn_work(rt: &Arc<RuntimeInner>, tool: &TaskTool, record: ServerTaskRecord) {
    let Some(fence) = record.fence() else { return };
    let expires_at = record.expires_at();
    let (wake, wake_rx) = watch::channel(0u64);
    let cancel = CancellationToken::new();
    if record.cancel_requested {
        cancel.cancel();
    }
    let stop = CancellationToken::new();
    rt.running.lock().expect("running map").insert(
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
    );
    let work = (tool.handler)(ToolCall { arguments, ctx });
    let rt = rt.clone();
    rt.clone().work.spawn(async move {
        let result = tokio::select! {
            _ = stop.cancelled() => None,
            r = AssertUnwindSafe(work).catch_unwind() => Some(r),
        };
        if let Some(outcome) = result.and_then(|r| outcome_of(&rt, r)) {
            rt.settle(&fence, expires_at, outcome).await;
        }
        let mut running = rt.running.lock().expect("running map");
        if running
            .get(&fence.task_id)
            .is_some_and(|r| r.token == fence.token)
        {
            running.remove(&fence.task_id);
        }
    });
}
