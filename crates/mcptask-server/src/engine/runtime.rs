//! The public face of the engine: create, read, answer and cancel tasks.
//!
//! Every method here is what one `tools/call` or `tasks/*` request needs,
//! whichever transport or handler it came through; the request is checked,
//! the store is written first, and only then is the running work signalled,
//! so an answer is never acknowledged that a restart could lose.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use mcptask_core::server::{CancelOutcome, NewServerTask, ServerTaskState, TaskCursor};
use mcptask_core::store::ServerTaskStore;
use mcptask_core::{SystemClock, ids, lease};
use rmcp::model::{DetailedTask, InputResponses, JsonObject, Task};
use serde_json::Value;

use super::batcher::Enqueue;
use super::executor::spawn_work;
use super::maintenance::Maintenance;
use super::quota::Refusal;
use super::{RuntimeBuilder, RuntimeInner};
use crate::TaskError;
use crate::config::RuntimeConfig;
use crate::mcp::wire;
use crate::tool::{ToolRegistry, ToolSource};

/// Most tasks one [`TaskRuntime::list_tasks`] page returns.
pub const MAX_LIST_LIMIT: i64 = 100;

/// What the wire task leaves out and an operator wants to see: the tool
/// that was called and what drives the work (`None` for a native tool; a
/// proxy names its upstream driver, with the driver's saved state).
#[derive(Debug, Clone, PartialEq)]
pub struct TaskOverview {
    /// The tool that was called.
    pub tool: String,
    /// The driver behind the work, if the tool is not a native one.
    pub driver: Option<String>,
    /// The driver's durable state, if it saved any.
    pub driver_state: Option<Value>,
}

impl TaskOverview {
    fn of(r: &mcptask_core::server::ServerTaskRecord) -> Self {
        TaskOverview {
            tool: r.tool.clone(),
            driver: r.driver.clone(),
            driver_state: r.driver_state.clone(),
        }
    }
}

/// How long shutdown waits for stopped work to unwind after its deadline.
const STOPPED_WORK_GRACE: Duration = Duration::from_secs(5);

/// A request to create a task.
#[derive(Debug, Clone, Default)]
pub struct CreateRequest {
    /// The registered tool to run.
    pub tool: String,
    /// The `tools/call` arguments.
    pub arguments: JsonObject,
    /// The authenticated subject the task is bound to, if any.
    pub principal: Option<String>,
    /// Answers from a multi-round-trip exchange that preceded the task.
    pub call_inputs: InputResponses,
    /// The driver that runs the task's work, stored with the task (a proxy's
    /// upstream protocol, e.g. `"sep2663"`); `None` for a native tool.
    pub driver: Option<String>,
    /// Durable state the work starts from, as if an earlier attempt had saved
    /// it with [`TaskContext::save_state`](crate::TaskContext::save_state)
    /// (a proxy records here which upstream task the front task follows, in
    /// the same commit as the task itself).
    pub state: Option<Value>,
    /// The task's id; `None` mints a fresh one. A given id must be as
    /// unguessable as a minted one (a gateway gives a call's id).
    pub id: Option<String>,
    /// A tracker row committed in the same transaction as the task (a
    /// gateway's call row, as `transition::new_record` made it).
    pub call_row: Option<Box<mcptask_core::client::transition::Change>>,
    /// The longest TTL the task may have, whatever its tool's or the
    /// runtime's default: a proxy's task keeps no longer than the upstream
    /// task it follows is kept. `None`: no cap.
    pub max_ttl_ms: Option<i64>,
    /// `pollIntervalMs` suggested for this task; `None`: its tool's, else
    /// the runtime's default.
    pub poll_interval_ms: Option<i64>,
    /// The status message the task starts with (shown from its
    /// `CreateTaskResult` on); `None`: none until the work sets one.
    pub status_message: Option<String>,
}

/// A task's TTL: `ttl_ms` (`None`: unlimited) bounded by `cap`.
fn capped_ttl(ttl_ms: Option<i64>, cap: Option<i64>) -> Option<i64> {
    match (ttl_ms, cap) {
        (Some(ttl), Some(cap)) => Some(ttl.min(cap)),
        (ttl, None) => ttl,
        (None, cap) => cap,
    }
}

/// The durable task runtime. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct TaskRuntime {
    pub(crate) inner: Arc<RuntimeInner>,
}

impl TaskRuntime {
    /// Start configuring a runtime over `store` serving `registry` (a fixed
    /// set of tools).
    pub fn builder(store: Arc<dyn ServerTaskStore>, registry: ToolRegistry) -> RuntimeBuilder {
        let source: Arc<dyn ToolSource> = Arc::new(registry.clone());
        RuntimeBuilder {
            store,
            registry,
            source,
            clock: Arc::new(SystemClock),
            config: RuntimeConfig::default(),
            owner: None,
            incarnation: None,
        }
    }

    /// Start configuring a runtime over `store` serving the tools of `source`,
    /// which may change while the runtime runs (see [`ToolSource`]).
    ///
    /// ```no_run
    /// use std::sync::Arc;
    /// use mcptask_server::{TaskRuntime, ToolRegistry, ToolSource};
    ///
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = mcptask_sql::open("sqlite:mcptask.db").await?;
    /// // Any `ToolSource`; a registry is the fixed one.
    /// let source: Arc<dyn ToolSource> = Arc::new(ToolRegistry::new());
    /// let runtime = TaskRuntime::builder_with_source(store.server_tasks(), source)
    ///     .start()
    ///     .await?;
    /// assert!(runtime.tools().definitions().is_empty());
    /// # Ok(()) }
    /// ```
    pub fn builder_with_source(
        store: Arc<dyn ServerTaskStore>,
        source: Arc<dyn ToolSource>,
    ) -> RuntimeBuilder {
        RuntimeBuilder {
            store,
            registry: ToolRegistry::new(),
            source,
            clock: Arc::new(SystemClock),
            config: RuntimeConfig::default(),
            owner: None,
            incarnation: None,
        }
    }

    /// This process incarnation's owner id.
    pub fn owner_id(&self) -> &str {
        &self.inner.owner
    }

    /// The registry this runtime was built with by [`TaskRuntime::builder`];
    /// empty for a runtime built with [`TaskRuntime::builder_with_source`].
    /// [`TaskRuntime::tools`] is what the runtime actually serves.
    pub fn registry(&self) -> &ToolRegistry {
        &self.inner.registry
    }

    /// The source of the tools this runtime serves (calls, creates, recovery
    /// and `tools/list` all ask it).
    pub fn tools(&self) -> &Arc<dyn ToolSource> {
        &self.inner.source
    }

    /// The settings the runtime was started with.
    pub fn config(&self) -> &RuntimeConfig {
        &self.inner.config
    }

    /// Hear which tasks change status from now on, here or on another
    /// replica sharing the store (hints: re-read the task; after
    /// `TaskChange::Resync`, every task of interest).
    pub fn changes(&self) -> tokio::sync::broadcast::Receiver<super::TaskChange> {
        self.inner.feed.subscribe()
    }

    /// Hear which tasks this process changes from now on (each change once,
    /// where it was made; [`TaskRuntime::changes`] also hears the other
    /// replicas').
    pub fn changes_here(&self) -> tokio::sync::broadcast::Receiver<std::sync::Arc<str>> {
        self.inner.feed.subscribe_here()
    }

    /// Tasks whose work runs in this process right now.
    pub fn running_count(&self) -> usize {
        self.inner.local.len()
    }

    /// Whether this process runs `task_id`'s work right now.
    pub fn is_running_here(&self, task_id: &str) -> bool {
        self.inner.local.contains(task_id)
    }

    /// Create a task: validate, commit it (group commit), start its work, and
    /// return the seed state for `CreateTaskResult`.
    pub async fn create_task(&self, request: CreateRequest) -> Result<Task, TaskError> {
        let rt = &self.inner;
        if !rt.accepting.load(Ordering::SeqCst) {
            return Err(TaskError::ShuttingDown);
        }
        let tool = rt
            .source
            .lookup(&request.tool)
            .found()
            .ok_or_else(|| TaskError::UnknownTool(request.tool.clone()))?;
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
            id: request.id.unwrap_or_else(ids::new_task_id),
            principal: request.principal,
            tool: tool.name().to_string(),
            arguments,
            call_inputs,
            created_at: now,
            ttl_ms: capped_ttl(
                tool.ttl_ms.unwrap_or(rt.config.default_ttl_ms),
                request.max_ttl_ms,
            ),
            poll_interval_ms: Some(
                request
                    .poll_interval_ms
                    .or(tool.poll_interval_ms)
                    .unwrap_or(rt.config.default_poll_interval_ms),
            ),
            status_message: request.status_message.map(|m| {
                mcptask_core::payload::truncate_text(&m, rt.config.limits.max_message_bytes)
            }),
            owner: rt.owner.clone(),
            claim_token: lease::mint_token(),
            driver: request.driver,
            driver_state: request.state,
            call_row: request.call_row,
        };
        if let Some(state) = &new.driver_state {
            rt.check_arguments(state)?;
        }
        let slot = rt
            .quota
            .admit(new.principal.as_deref())
            .map_err(|refusal| {
                TaskError::Overloaded(match refusal {
                    Refusal::Total(max) => format!("this server runs {max} live tasks already"),
                    Refusal::Principal(max) => {
                        format!("you have {max} live tasks on this server already")
                    }
                })
            })?;
        let committed = rt.creator.create(new.clone()).map_err(|e| match e {
            Enqueue::Full => TaskError::Overloaded(format!(
                "{} task creations are already waiting for the store",
                rt.config.max_create_queue
            )),
            Enqueue::Store(e) => TaskError::Store(e),
        })?;
        let record = new.into_record();
        let task = wire::created_task(&record);
        // The work starts from the commit, not from this future: if the
        // caller goes away (a cancelled request, a closed connection) once the
        // task is queued, the spawned step still waits for the commit and
        // starts the work, so a committed row never sits with nobody running it.
        let start = tokio::spawn({
            let rt = rt.clone();
            async move {
                committed.await?;
                spawn_work(&rt, &tool, record, slot);
                Ok::<(), mcptask_core::StoreError>(())
            }
        });
        start
            .await
            .map_err(|e| TaskError::Internal(format!("task start failed: {e}")))??;
        Ok(task)
    }

    /// `tasks/get`: the task as `principal` may see it.
    pub async fn get_task(
        &self,
        task_id: &str,
        principal: Option<&str>,
    ) -> Result<DetailedTask, TaskError> {
        let state = self.inner.visible_state(task_id, principal).await?;
        wire::detailed_task(state, self.inner.clock.now_ms())
    }

    /// [`TaskRuntime::get_task`], which run of the task's work this is (1,
    /// then one more per rerun after an interruption) and the process
    /// running it (its owner id), from one read.
    ///
    /// ```no_run
    /// # async fn demo(runtime: mcptask_server::TaskRuntime) -> Result<(), mcptask_server::TaskError> {
    /// let (task, attempt, by) = runtime.get_task_and_attempt("t1", Some("alice")).await?;
    /// println!("{:?}: attempt {attempt} on {by:?}", task.task.status);
    /// # Ok(()) }
    /// ```
    pub async fn get_task_and_attempt(
        &self,
        task_id: &str,
        principal: Option<&str>,
    ) -> Result<(DetailedTask, i64, Option<String>), TaskError> {
        let state = self.inner.visible_state(task_id, principal).await?;
        let (attempt, by) = (state.attempt, state.owner.clone());
        Ok((
            wire::detailed_task(state, self.inner.clock.now_ms())?,
            attempt,
            by,
        ))
    }

    /// `tasks/get` of `task_id` once `done` holds for it, or as it is after
    /// `within`: woken by the task's own changes made in this process (its
    /// work runs here), never by a timer. `Ok(None)`: `within` passed first.
    ///
    /// ```no_run
    /// # async fn demo(runtime: mcptask_server::TaskRuntime) -> Result<(), mcptask_server::TaskError> {
    /// use rmcp::model::TaskStatus;
    /// let within = std::time::Duration::from_secs(1);
    /// if let Some(t) = runtime.wait_for("t1", None, within, |t| t.status() != TaskStatus::Working).await? {
    ///     println!("{:?}", t.status());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn wait_for(
        &self,
        task_id: &str,
        principal: Option<&str>,
        within: Duration,
        done: impl Fn(&DetailedTask) -> bool,
    ) -> Result<Option<DetailedTask>, TaskError> {
        // Watched before the first read: a change between the two wakes it.
        let mut watch = self.inner.feed.watch(task_id);
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let task = self.get_task(task_id, principal).await?;
            if done(&task) {
                return Ok(Some(task));
            }
            if tokio::time::timeout_at(deadline, watch.changed())
                .await
                .is_err()
            {
                return Ok(None);
            }
        }
    }

    /// The tasks bound to `principal` (`None`: the anonymous callers'
    /// tasks), newest first, at most `limit` (capped at [`MAX_LIST_LIMIT`]),
    /// after `cursor`; only live ones with `live_only`. Returns the page and
    /// the cursor of the next one, if any. Tasks past retention are left out.
    ///
    /// ```no_run
    /// # async fn demo(runtime: mcptask_server::TaskRuntime) -> Result<(), mcptask_server::TaskError> {
    /// let mut cursor = None;
    /// loop {
    ///     let (tasks, next) = runtime.list_tasks(Some("alice"), true, cursor.as_ref(), 50).await?;
    ///     for t in tasks { println!("{} {:?}", t.task_id, t.status); }
    ///     match next { Some(c) => cursor = Some(c), None => break }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn list_tasks(
        &self,
        principal: Option<&str>,
        live_only: bool,
        cursor: Option<&TaskCursor>,
        limit: i64,
    ) -> Result<(Vec<Task>, Option<TaskCursor>), TaskError> {
        let (tasks, next) = self
            .list_task_overviews(principal, live_only, cursor, limit)
            .await?;
        Ok((tasks.into_iter().map(|(task, _)| task).collect(), next))
    }

    /// [`TaskRuntime::list_tasks`] with what an operator's view adds to each
    /// task: its tool and the driver behind it.
    ///
    /// ```no_run
    /// # async fn f(rt: mcptask_server::TaskRuntime) -> Result<(), mcptask_server::TaskError> {
    /// let (page, _next) = rt.list_task_overviews(None, true, None, 20).await?;
    /// for (task, overview) in page {
    ///     println!("{} {} {:?}", task.task_id, overview.tool, overview.driver);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn list_task_overviews(
        &self,
        principal: Option<&str>,
        live_only: bool,
        cursor: Option<&TaskCursor>,
        limit: i64,
    ) -> Result<(Vec<(Task, TaskOverview)>, Option<TaskCursor>), TaskError> {
        let now = self.inner.clock.now_ms();
        let page = self
            .inner
            .store
            .list_tasks(
                principal,
                live_only,
                cursor,
                limit.clamp(1, MAX_LIST_LIMIT),
                now,
            )
            .await?;
        let tasks = page
            .tasks
            .iter()
            .map(|r| (wire::listed_task(r, now), TaskOverview::of(r)))
            .collect();
        Ok((tasks, page.next))
    }

    /// [`TaskRuntime::get_task`] with the task's [`TaskOverview`].
    pub async fn get_task_overview(
        &self,
        task_id: &str,
        principal: Option<&str>,
    ) -> Result<(DetailedTask, TaskOverview), TaskError> {
        let view = self.inner.visible(task_id, principal).await?;
        let task = wire::detailed_task(ServerTaskState::of(&view), self.inner.clock.now_ms())?;
        Ok((task, TaskOverview::of(&view.record)))
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
        rt.check_responses(&responses)?;
        rt.visible(task_id, principal).await?;
        let entries: Vec<(String, Value)> = responses.into_iter().collect();
        let outcome = rt
            .store
            .answer_inputs(task_id, &entries, rt.clock.now_ms())
            .await?;
        if !outcome.applied.is_empty() {
            rt.local.wake(task_id);
            rt.feed.publish(task_id);
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
                rt.local.cancel(task_id);
                Ok(())
            }
        }
    }

    /// Handles to run maintenance steps by hand (tests with a manual clock).
    pub fn maintenance(&self) -> Maintenance {
        Maintenance {
            rt: self.inner.clone(),
        }
    }

    /// Stop accepting tasks, give running work until `deadline` to finish, then
    /// stop it and let the owner lease lapse at once so another replica
    /// recovers whatever is left (per each tool's interrupt policy): at once
    /// where the store has a push channel, which tells the others of the
    /// release. Never hangs.
    ///
    /// Until the drain ends the process stays a full member: its owner lease
    /// is renewed, and answers (`tasks/update`) and cancellations reach the
    /// draining work, whichever replica received them.
    pub async fn shutdown(&self, deadline: Duration) {
        let rt = &self.inner;
        rt.accepting.store(false, Ordering::SeqCst);
        // Draining: no new tasks, no recovery of other replicas' tasks. The
        // heartbeat, the signal listener and the backstop keep running, so
        // the draining work keeps its lease and still receives the answers
        // and cancellations sent to it meanwhile.
        rt.shutdown.cancel();
        rt.work.close();
        if tokio::time::timeout(deadline, rt.work.wait())
            .await
            .is_err()
        {
            let count = rt.local.stop_all();
            tracing::warn!(count, "shutdown deadline passed; leaving tasks to recovery");
        }
        let _ = tokio::time::timeout(STOPPED_WORK_GRACE, rt.work.wait()).await;
        rt.stopped.cancel();
        if let Err(e) = rt.store.release_owner(&rt.owner, rt.clock.now_ms()).await {
            tracing::warn!(error = %e, "could not release the owner lease; it will lapse on its own");
        }
    }
}

#[cfg(test)]
mod ttl_cap {
    use super::capped_ttl;

    #[test]
    fn the_cap_bounds_every_ttl_and_none_is_unlimited() {
        assert_eq!(capped_ttl(Some(3_600_000), Some(60_000)), Some(60_000));
        assert_eq!(capped_ttl(Some(1_000), Some(60_000)), Some(1_000));
        assert_eq!(capped_ttl(None, Some(60_000)), Some(60_000));
        assert_eq!(capped_ttl(Some(1_000), None), Some(1_000));
        assert_eq!(capped_ttl(None, None), None);
    }
}
