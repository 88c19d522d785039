//! The application-facing API: call tools, track handles, read, list, cancel,
//! answer, wait and subscribe.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use mcptask_core::client::{
    AnswerResult, Cursor, InsertOutcome, ListFilter, NewRemoteTask, RemoteInput, RemoteTaskRecord,
    TaskEvent,
};
use mcptask_core::clock::SharedClock;
use mcptask_core::store::RemoteTaskStore;
use mcptask_core::{StoreError, SystemClock, ids, payload};
use rmcp::ErrorData;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, GetTaskParams,
    InputResponses,
};
use serde_json::Value;
use tokio::sync::{Notify, broadcast};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::TrackerConfig;
use crate::notify::{ChannelNotifier, FanoutNotifier, Notifier};
use crate::remote::{RemoteError, bounded, classify_call_error, classify_task_error};
use crate::resolver::{InputContext, InputResolver};
use crate::servers::{ServerDef, ServerRegistry};
use crate::snapshot;

/// Most multi-round-trip rounds a `tools/call` may take before a task or result.
const MAX_MRTR_ROUNDS: usize = 10;

/// Why a tracker operation failed.
#[derive(Debug, thiserror::Error)]
pub enum TrackerError {
    #[error("unknown task {0:?}")]
    NotFound(String),
    #[error("{0}")]
    InvalidInput(String),
    #[error("server {0:?} is not configured")]
    UnknownServer(String),
    /// The tool call itself failed with a JSON-RPC error from the server.
    #[error("the server returned an error: {} ({})", .0.message, .0.code.0)]
    Remote(ErrorData),
    #[error("the server could not be reached: {0}")]
    Unavailable(String),
    #[error("the server broke the protocol: {0}")]
    Protocol(String),
    /// The tool asked for input before starting and nothing answered it.
    #[error("the tool needs input before it starts ({keys:?}) and no resolver answered")]
    InputNeeded { keys: Vec<String>, requests: Value },
    #[error("timed out waiting; the task is still {}", .0.status)]
    Timeout(Box<RemoteTaskRecord>),
    #[error("the tracker is shutting down")]
    ShuttingDown,
    #[error("task store: {0}")]
    Store(#[from] StoreError),
}

impl From<RemoteError> for TrackerError {
    fn from(e: RemoteError) -> Self {
        match e {
            RemoteError::Rpc(e) => TrackerError::Remote(e),
            RemoteError::Protocol(m) => TrackerError::Protocol(m),
            RemoteError::NotFound(m) => TrackerError::Protocol(m),
            RemoteError::ConnectionUnavailable(m) | RemoteError::Transient(m) => {
                TrackerError::Unavailable(m)
            }
        }
    }
}

/// Application context recorded with a task and echoed in its events.
#[derive(Debug, Clone, Default)]
pub struct CallOptions {
    pub principal: Option<String>,
    pub conversation: Option<String>,
    pub call_id: Option<String>,
    pub correlation: Option<Value>,
}

/// What `call_tool` produced.
#[derive(Debug, Clone)]
pub enum CallOutcome {
    /// The server answered synchronously.
    Completed(CallToolResult),
    /// The server created a task; it is durably tracked.
    Task(Box<RemoteTaskRecord>),
}

pub(crate) struct Inner {
    pub store: Arc<dyn RemoteTaskStore>,
    pub servers: ServerRegistry,
    pub clock: SharedClock,
    pub config: TrackerConfig,
    pub owner: String,
    pub notifier: Arc<dyn Notifier>,
    pub channel: ChannelNotifier,
    pub resolver: Option<Arc<dyn InputResolver>>,
    /// Local hints that a task changed (ids), for `wait` and live views.
    pub changes: broadcast::Sender<String>,
    /// Stop claiming new work.
    pub shutdown: CancellationToken,
    /// Give up on in-flight calls (the shutdown deadline passed).
    pub abort: CancellationToken,
    pub wake: [Notify; 4],
    pub loops: TaskTracker,
}

impl Inner {
    pub(crate) fn defaults(&self) -> (Duration, Duration) {
        (self.config.connect_timeout, self.config.call_timeout)
    }

    pub(crate) fn changed(&self, task_id: &str) {
        let _ = self.changes.send(task_id.to_string());
    }
}

/// Builder for a [`Tracker`].
pub struct TrackerBuilder {
    store: Arc<dyn RemoteTaskStore>,
    servers: ServerRegistry,
    clock: SharedClock,
    config: TrackerConfig,
    notifiers: Vec<Arc<dyn Notifier>>,
    resolver: Option<Arc<dyn InputResolver>>,
    owner: Option<String>,
}

impl TrackerBuilder {
    pub fn server(self, def: ServerDef) -> Self {
        self.servers.upsert(def);
        self
    }

    /// Share a registry (e.g. one the application edits at run time).
    pub fn servers(mut self, registry: ServerRegistry) -> Self {
        self.servers = registry;
        self
    }

    pub fn clock(mut self, clock: SharedClock) -> Self {
        self.clock = clock;
        self
    }

    pub fn config(mut self, config: TrackerConfig) -> Self {
        self.config = config;
        self
    }

    /// Add a notifier (in addition to the in-process stream of `subscribe`).
    pub fn notifier(mut self, notifier: Arc<dyn Notifier>) -> Self {
        self.notifiers.push(notifier);
        self
    }

    pub fn resolver(mut self, resolver: Arc<dyn InputResolver>) -> Self {
        self.resolver = Some(resolver);
        self
    }

    /// Use a fixed owner id (tests); each process start gets a fresh one by default.
    pub fn owner_id(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }

    /// Start the workers (unless `config.background` is false).
    pub async fn start(self) -> Result<Tracker, TrackerError> {
        let channel = ChannelNotifier::new(4096);
        let mut targets: Vec<Arc<dyn Notifier>> = vec![Arc::new(channel.clone())];
        targets.extend(self.notifiers);
        let inner = Arc::new(Inner {
            store: self.store,
            servers: self.servers,
            clock: self.clock,
            config: self.config,
            owner: self.owner.unwrap_or_else(|| ids::new_owner_id("tracker")),
            notifier: Arc::new(FanoutNotifier::new(targets)),
            channel,
            resolver: self.resolver,
            changes: broadcast::channel(4096).0,
            shutdown: CancellationToken::new(),
            abort: CancellationToken::new(),
            wake: Default::default(),
            loops: TaskTracker::new(),
        });
        if inner.config.background {
            crate::workers::spawn_all(&inner);
        }
        Ok(Tracker { inner })
    }
}

/// Durable tracker of remote MCP tasks. Cheap to clone.
#[derive(Clone)]
pub struct Tracker {
    pub(crate) inner: Arc<Inner>,
}

impl Tracker {
    pub fn builder(store: Arc<dyn RemoteTaskStore>) -> TrackerBuilder {
        TrackerBuilder {
            store,
            servers: ServerRegistry::new(),
            clock: Arc::new(SystemClock),
            config: TrackerConfig::default(),
            notifiers: Vec::new(),
            resolver: None,
            owner: None,
        }
    }

    pub fn owner_id(&self) -> &str {
        &self.inner.owner
    }

    pub fn servers(&self) -> &ServerRegistry {
        &self.inner.servers
    }

    pub fn config(&self) -> &TrackerConfig {
        &self.inner.config
    }

    pub fn store(&self) -> &Arc<dyn RemoteTaskStore> {
        &self.inner.store
    }

    /// Manual access to the workers' steps (tests with a manual clock).
    pub fn workers(&self) -> crate::workers::Workers {
        crate::workers::Workers {
            inner: self.inner.clone(),
        }
    }

    /// Call `tool` on `server`, declaring the tasks extension. Returns the
    /// result, or, once the task handle is durably recorded, the tracked task.
    /// Multi-round-trip input requested before a task exists is answered by the
    /// resolver (or the call fails with [`TrackerError::InputNeeded`]).
    pub async fn call_tool(
        &self,
        server: &str,
        tool: &str,
        arguments: Value,
        options: CallOptions,
    ) -> Result<CallOutcome, TrackerError> {
        let inner = &self.inner;
        if inner.shutdown.is_cancelled() {
            return Err(TrackerError::ShuttingDown);
        }
        let arguments = match arguments {
            Value::Object(map) => map,
            Value::Null => Default::default(),
            _ => {
                return Err(TrackerError::InvalidInput(
                    "arguments must be a JSON object".into(),
                ));
            }
        };
        let size = payload::json_size(&Value::Object(arguments.clone()));
        if size > inner.config.policy.limits.max_arguments_bytes {
            return Err(TrackerError::InvalidInput(format!(
                "arguments are {size} bytes; the limit is {}",
                inner.config.policy.limits.max_arguments_bytes
            )));
        }
        let (_, hash) = inner
            .servers
            .get(server)
            .ok_or_else(|| TrackerError::UnknownServer(server.into()))?;
        let conn = inner
            .servers
            .connect(server, Some(&hash), inner.defaults())
            .await?;
        let mut responses = InputResponses::new();
        for _round in 0..MAX_MRTR_ROUNDS {
            let mut params =
                CallToolRequestParams::new(tool.to_string()).with_arguments(arguments.clone());
            if !responses.is_empty() {
                params = params.with_input_responses(responses.clone());
            }
            let response = bounded(
                "tools/call",
                conn.call_timeout,
                conn.peer.call_tool_once(params),
            )
            .await
            .map_err(|e| {
                if RemoteError::is_disconnect(&e) {
                    let conn = conn.clone();
                    tokio::spawn(async move { conn.discard().await });
                }
                classify_call_error(&e)
            })?;
            match response {
                CallToolResponse::Complete(result) => return Ok(CallOutcome::Completed(result)),
                CallToolResponse::Task(created) => {
                    return self
                        .record_created(
                            server,
                            &hash,
                            tool,
                            &arguments,
                            &created.task,
                            &options,
                            &conn,
                        )
                        .await;
                }
                CallToolResponse::InputRequired(required) => {
                    let requests = required.input_requests.unwrap_or_default();
                    let mut unanswered = Vec::new();
                    for (key, request) in &requests {
                        let request = serde_json::to_value(request).unwrap_or(Value::Null);
                        let answer = match &inner.resolver {
                            Some(r) => {
                                r.resolve(InputContext {
                                    task_id: None,
                                    server,
                                    tool,
                                    principal: options.principal.as_deref(),
                                    key,
                                    request: &request,
                                })
                                .await
                            }
                            None => None,
                        };
                        match answer {
                            Some(a) => {
                                responses.insert(key.clone(), a);
                            }
                            None => unanswered.push(key.clone()),
                        }
                    }
                    if !unanswered.is_empty() || requests.is_empty() {
                        return Err(TrackerError::InputNeeded {
                            keys: unanswered,
                            requests: serde_json::to_value(&requests).unwrap_or(Value::Null),
                        });
                    }
                }
                #[allow(unreachable_patterns)]
                _ => return Err(TrackerError::Protocol("unknown tools/call response".into())),
            }
        }
        Err(TrackerError::Protocol(format!(
            "no result after {MAX_MRTR_ROUNDS} input rounds"
        )))
    }

    /// Record a `CreateTaskResult`. Runs detached so that a caller giving up
    /// mid-write can never leave a live remote task untracked.
    #[allow(clippy::too_many_arguments)]
    async fn record_created(
        &self,
        server: &str,
        hash: &str,
        tool: &str,
        arguments: &rmcp::model::JsonObject,
        task: &rmcp::model::Task,
        options: &CallOptions,
        conn: &crate::servers::Connection,
    ) -> Result<CallOutcome, TrackerError> {
        let inner = self.inner.clone();
        let limits = inner.config.policy.limits;
        let arguments = Value::Object(arguments.clone());
        let arguments =
            (payload::json_size(&arguments) <= limits.max_arguments_bytes).then_some(arguments);
        let correlation = bound_correlation(options.correlation.clone(), &limits)?;
        let remote_id = task.task_id.clone();
        let seed = snapshot::from_created(task, &limits);
        let new = seed.map(|snapshot| NewRemoteTask {
            id: ids::new_local_task_id(),
            server: server.to_string(),
            server_hash: hash.to_string(),
            remote_task_id: remote_id.clone(),
            principal: options.principal.clone(),
            conversation: options.conversation.clone(),
            call_id: options.call_id.clone(),
            correlation,
            tool: tool.to_string(),
            arguments,
            snapshot,
            created_at: inner.clock.now_ms(),
        });
        let conn = conn.clone();
        let job = tokio::spawn(async move {
            let outcome = match new {
                Ok(new) => inner
                    .store
                    .insert_remote(&new, &inner.config.policy)
                    .await
                    .map_err(TrackerError::from),
                Err(e) => Err(TrackerError::from(e)),
            };
            match outcome {
                Ok(outcome) => {
                    inner.wake[0].notify_one();
                    inner.wake[3].notify_one();
                    inner.changed(&outcome.record().id);
                    Ok(outcome)
                }
                Err(e) => {
                    // Nothing durable holds this handle: cancel it rather than
                    // leave an untracked task running on the server.
                    let cancel = conn
                        .peer
                        .cancel_task(CancelTaskParams::new(remote_id.clone()));
                    if let Err(ce) = bounded("tasks/cancel", Duration::from_secs(5), cancel).await {
                        tracing::error!(remote_id, error = %ce, "could not cancel an untracked remote task");
                    }
                    Err(e)
                }
            }
        });
        match job.await {
            Ok(Ok(outcome)) => Ok(CallOutcome::Task(Box::new(outcome.record().clone()))),
            Ok(Err(e)) => Err(e),
            Err(e) => Err(TrackerError::Unavailable(format!(
                "recording the task failed: {e}"
            ))),
        }
    }

    /// Track a handle obtained elsewhere (e.g. by another client). The first
    /// `tasks/get` validates it.
    pub async fn track(
        &self,
        server: &str,
        remote_task_id: &str,
        tool: &str,
        options: CallOptions,
    ) -> Result<RemoteTaskRecord, TrackerError> {
        let inner = &self.inner;
        let (_, hash) = inner
            .servers
            .get(server)
            .ok_or_else(|| TrackerError::UnknownServer(server.into()))?;
        if remote_task_id.is_empty() || remote_task_id.len() > snapshot::MAX_REMOTE_ID_LEN {
            return Err(TrackerError::InvalidInput(
                "remote task id must be 1..=512 characters".into(),
            ));
        }
        let conn = inner
            .servers
            .connect(server, Some(&hash), inner.defaults())
            .await?;
        let got = bounded(
            "tasks/get",
            conn.call_timeout,
            conn.peer.get_task(GetTaskParams::new(remote_task_id)),
        )
        .await
        .map_err(|e| classify_task_error("tasks/get", &e))?;
        let limits = inner.config.policy.limits;
        let mut snapshot = snapshot::from_detailed(remote_task_id, &got.task, &limits)?;
        // Start from "working" so the first poll records the real state as an event.
        snapshot.status = Some(mcptask_core::TaskStatus::Working);
        snapshot.input_requests.clear();
        let new = NewRemoteTask {
            id: ids::new_local_task_id(),
            server: server.to_string(),
            server_hash: hash,
            remote_task_id: remote_task_id.to_string(),
            principal: options.principal,
            conversation: options.conversation,
            call_id: options.call_id,
            correlation: bound_correlation(options.correlation, &limits)?,
            tool: tool.to_string(),
            arguments: None,
            snapshot,
            created_at: inner.clock.now_ms(),
        };
        let outcome = inner
            .store
            .insert_remote(&new, &inner.config.policy)
            .await?;
        inner.wake[0].notify_one();
        inner.wake[3].notify_one();
        Ok(match outcome {
            InsertOutcome::Inserted(r) | InsertOutcome::AlreadyTracked(r) => *r,
        })
    }

    pub async fn get(&self, id: &str) -> Result<RemoteTaskRecord, TrackerError> {
        self.inner
            .store
            .get_remote(id)
            .await?
            .ok_or_else(|| TrackerError::NotFound(id.to_string()))
    }

    pub async fn inputs(&self, id: &str) -> Result<Vec<RemoteInput>, TrackerError> {
        Ok(self.inner.store.remote_inputs(id).await?)
    }

    /// The task's timeline (events after version `after`).
    pub async fn events(
        &self,
        id: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<TaskEvent>, TrackerError> {
        Ok(self
            .inner
            .store
            .remote_events(id, after, limit.clamp(1, 1000))
            .await?)
    }

    /// Newest first; pass the returned cursor to get the next page.
    pub async fn list(
        &self,
        filter: &ListFilter,
        after: Option<&Cursor>,
        limit: i64,
    ) -> Result<(Vec<RemoteTaskRecord>, Option<Cursor>), TrackerError> {
        let limit = limit.clamp(1, 500);
        let page = self.inner.store.list_remote(filter, after, limit).await?;
        let next = (page.len() as i64 == limit).then(|| {
            let last = page.last().expect("non-empty page");
            Cursor {
                created_at: last.created_at,
                id: last.id.clone(),
            }
        });
        Ok((page, next))
    }

    /// Durable intent to cancel; the cancel worker sends `tasks/cancel` and the
    /// task settles with what the server reports.
    pub async fn cancel(&self, id: &str) -> Result<RemoteTaskRecord, TrackerError> {
        let record = self
            .inner
            .store
            .request_remote_cancel(id, self.inner.clock.now_ms())
            .await?
            .ok_or_else(|| TrackerError::NotFound(id.to_string()))?;
        self.inner.wake[1].notify_one();
        self.inner.wake[3].notify_one();
        self.inner.changed(id);
        Ok(record)
    }

    /// Answer outstanding input requests; each key is answered once and sent
    /// with `tasks/update` by the update worker.
    pub async fn answer(
        &self,
        id: &str,
        answers: BTreeMap<String, Value>,
    ) -> Result<AnswerResult, TrackerError> {
        let limits = self.inner.config.policy.limits;
        for (key, value) in &answers {
            limits
                .check_input_response(value)
                .map_err(|why| TrackerError::InvalidInput(format!("answer {key:?} {why}")))?;
        }
        let answers: Vec<(String, Value)> = answers.into_iter().collect();
        let result = self
            .inner
            .store
            .store_answers(id, &answers, self.inner.clock.now_ms())
            .await?
            .ok_or_else(|| TrackerError::NotFound(id.to_string()))?;
        if !result.stored.is_empty() {
            self.inner.wake[2].notify_one();
            self.inner.wake[3].notify_one();
            self.inner.changed(id);
        }
        Ok(result)
    }

    /// Wait until the task is terminal (or `timeout` passes).
    pub async fn wait(
        &self,
        id: &str,
        timeout: Duration,
    ) -> Result<RemoteTaskRecord, TrackerError> {
        self.wait_until(id, timeout, RemoteTaskRecord::is_terminal)
            .await
    }

    /// Wait until `done` holds for the task (or it settles, or `timeout` passes).
    pub async fn wait_until(
        &self,
        id: &str,
        timeout: Duration,
        done: impl Fn(&RemoteTaskRecord) -> bool,
    ) -> Result<RemoteTaskRecord, TrackerError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut changes = self.inner.changes.subscribe();
        loop {
            let record = self.get(id).await?;
            if done(&record) || record.is_terminal() {
                return Ok(record);
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Err(TrackerError::Timeout(Box::new(record)));
            }
            // Local hints wake us early; the periodic re-read covers other processes.
            let tick = (deadline - now).min(Duration::from_millis(250));
            let _ = tokio::time::timeout(tick, async {
                loop {
                    match changes.recv().await {
                        Ok(changed) if changed == id => return,
                        Ok(_) => continue,
                        Err(broadcast::error::RecvError::Lagged(_)) => return,
                        Err(broadcast::error::RecvError::Closed) => return,
                    }
                }
            })
            .await;
        }
    }

    /// Events as they are delivered (in-process, at least once per event).
    pub fn subscribe(&self) -> broadcast::Receiver<TaskEvent> {
        self.inner.channel.subscribe()
    }

    /// Ids of tasks that changed in this process (a hint for live views).
    pub fn changes(&self) -> broadcast::Receiver<String> {
        self.inner.changes.subscribe()
    }

    /// Stop claiming, let in-flight calls finish until `deadline`, then give
    /// their claims back (not counted as errors). Never hangs.
    pub async fn shutdown(&self, deadline: Duration) {
        let inner = &self.inner;
        inner.shutdown.cancel();
        inner.loops.close();
        if tokio::time::timeout(deadline, inner.loops.wait())
            .await
            .is_err()
        {
            tracing::warn!("tracker shutdown deadline passed; releasing in-flight claims");
        }
        inner.abort.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(5), inner.loops.wait()).await;
    }
}

fn bound_correlation(
    value: Option<Value>,
    limits: &payload::PayloadLimits,
) -> Result<Option<Value>, TrackerError> {
    match value {
        Some(v) if payload::json_size(&v) > limits.max_message_bytes * 4 => {
            Err(TrackerError::InvalidInput(format!(
                "correlation data is limited to {} bytes",
                limits.max_message_bytes * 4
            )))
        }
        other => Ok(other),
    }
}
