//! [`TaskManager`]: rmcp's `TaskManager` methods over the durable runtime.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use mcptask_core::ids;
use mcptask_core::store::ServerTaskStore;
use rmcp::ErrorData;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::model::{CallToolRequestParams, DetailedTask, InputResponses, JsonObject, Task};
use rmcp::task_manager::{TaskFuture, TaskOptions};
use serde_json::Value;

use super::context::TaskContext;
use super::tools::{CLOSURE_TOOL, RERUNNABLE_PREFIX, Rerunnable, Tools};
use crate::mcp::validate;
use crate::{CreateRequest, RuntimeConfig, TaskError, TaskRuntime, ToolSource};

/// How long [`TaskManager::shutdown`] lets running work finish before it
/// stops it and leaves the tasks to recovery.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// rmcp's `TaskManager`, durable: each task is a row in a SQLite or
/// PostgreSQL store, committed before [`TaskManager::spawn`] returns, and
/// `tasks/get`, `tasks/update` and `tasks/cancel` work on any process that
/// shares the store.
///
/// The methods keep rmcp's names, arguments and results; those that write
/// the store are `async` and return a `Result`. What durability changes:
///
/// - a task made by [`TaskManager::spawn`] from a closure cannot outlive its
///   process (the closure is code, not data): if the process dies, the task
///   settles `failed` ("interrupted");
/// - a task made by [`TaskManager::spawn_rerunnable`] from a closure
///   registered under a name when the manager was built
///   ([`TaskManagerBuilder::rerunnable`]) is stored as that name and its
///   arguments: rerun like a named tool;
/// - a task made by [`TaskManager::spawn_tool`] from a tool of the server's
///   `#[tool_router]` is stored as the tool's name and arguments: a process
///   with the same router reruns it, and input answered before the crash is
///   answered again at once;
/// - either happens as soon as the dead process is started again on the same
///   store (it takes the dead one's process slot, [`crate::Incarnation`]),
///   or else on another process once the dead one's owner lease lapses
///   ([`RuntimeConfig::lease_ms`]);
/// - TTLs run on the store's clock and a settled task stays readable for
///   [`RuntimeConfig::retention_ms`] after its TTL (rmcp: one more TTL).
///
/// ```no_run
/// use mcptask_server::task_manager::{TaskExit, TaskManager, TaskOptions};
/// use rmcp::model::{CallToolResult, ContentBlock};
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let store = mcptask_sql::open("sqlite:tasks.db").await?;
/// let tasks = TaskManager::open(store.server_tasks()).await?;
/// let task = tasks
///     .spawn(TaskOptions::default(), |ctx| {
///         Box::pin(async move {
///             ctx.set_status_message("working").await?;
///             Ok::<_, TaskExit>(CallToolResult::success(vec![ContentBlock::text("done")]))
///         })
///     })
///     .await?;
/// let seen = tasks.get_task(&task.task_id).await?;
/// assert_eq!(seen.task.task_id, task.task_id);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct TaskManager {
    runtime: TaskRuntime,
    tools: Arc<Tools>,
}

impl TaskManager {
    /// Start a manager over `store` with the runtime's default settings.
    ///
    /// It takes a process slot of the store and, at once, the tasks the
    /// slot's previous holder (this server before a crash) left: see
    /// [`RuntimeBuilder::start`](crate::RuntimeBuilder::start). rmcp's
    /// `TaskManager::new()` and `Default` have no counterpart here, since
    /// opening a store is async and can fail: open the manager once where
    /// the server starts and pass it in.
    pub async fn open(store: Arc<dyn ServerTaskStore>) -> Result<Self, TaskError> {
        Self::open_with(store, RuntimeConfig::default()).await
    }

    /// Start a manager over `store` with `config` (lease, recovery and TTL
    /// sweeps, caps). Its default TTL is never used: each task's is its
    /// [`TaskOptions::ttl_ms`], as in rmcp.
    pub async fn open_with(
        store: Arc<dyn ServerTaskStore>,
        config: RuntimeConfig,
    ) -> Result<Self, TaskError> {
        Self::builder(store).config(config).open().await
    }

    /// A manager over `store` to configure before it starts: its settings
    /// and the closures its tasks can be rerun from
    /// ([`TaskManagerBuilder::rerunnable`]).
    pub fn builder(store: Arc<dyn ServerTaskStore>) -> TaskManagerBuilder {
        TaskManagerBuilder {
            store,
            config: RuntimeConfig::default(),
            rerunnable: HashMap::new(),
        }
    }

    /// Serve the tools of `router` (the server's `#[tool_router]`) on
    /// `service` as tasks made by [`TaskManager::spawn_tool`]. Call it once,
    /// when the server holding this manager is built; until then, named
    /// tasks recovered from a dead process wait. Returns false (and changes
    /// nothing) if a router was served already.
    ///
    /// ```no_run
    /// # use rmcp::handler::server::router::tool::ToolRouter;
    /// # #[derive(Clone)] struct Server { tasks: mcptask_server::task_manager::TaskManager, tool_router: ToolRouter<Server> }
    /// # fn demo(server: Server) {
    /// server.tasks.serve_tools(server.clone(), server.tool_router.clone());
    /// # }
    /// ```
    pub fn serve_tools<S>(&self, service: S, router: ToolRouter<S>) -> bool
    where
        S: Send + Sync + 'static,
    {
        self.tools.set_router(service, router)
    }

    /// The durable runtime underneath (listings, listen, maintenance).
    pub fn runtime(&self) -> &TaskRuntime {
        &self.runtime
    }

    /// Create a task running the future `make_future` makes, and return its
    /// seed state for `CreateTaskResult`. The task's row is committed before
    /// this returns. The future runs in this process only: see
    /// [`TaskManager`] for what a crash does to it.
    pub async fn spawn<F>(&self, options: TaskOptions, make_future: F) -> Result<Task, ErrorData>
    where
        F: FnOnce(TaskContext) -> TaskFuture,
    {
        let id = ids::new_task_id();
        let ctx = TaskContext::unbound(&id);
        let future = make_future(ctx.clone());
        self.tools
            .pending
            .lock()
            .expect("pending")
            .insert(id.clone(), (ctx, future));
        let created = self
            .create(
                options,
                CLOSURE_TOOL.into(),
                Default::default(),
                Some(id.clone()),
            )
            .await;
        if created.is_err() {
            self.tools.pending.lock().expect("pending").remove(&id);
        }
        created
    }

    /// Create a task running the closure registered as `name`
    /// ([`TaskManagerBuilder::rerunnable`]) on `arguments`, and return its
    /// seed state for `CreateTaskResult`. The name and arguments are stored
    /// with the task, so a process built with the same registration reruns
    /// it if this one dies, answering again at once the input answered
    /// before. Refused (invalid params) for a name not registered.
    ///
    /// ```no_run
    /// # async fn demo(tasks: mcptask_server::task_manager::TaskManager) -> Result<(), rmcp::ErrorData> {
    /// let arguments = serde_json::json!({"n": 3}).as_object().cloned().unwrap_or_default();
    /// let task = tasks
    ///     .spawn_rerunnable(Default::default(), "count", arguments)
    ///     .await?;
    /// # let _ = task; Ok(()) }
    /// ```
    pub async fn spawn_rerunnable(
        &self,
        options: TaskOptions,
        name: &str,
        arguments: JsonObject,
    ) -> Result<Task, ErrorData> {
        if !self.tools.has_rerunnable(name) {
            return Err(ErrorData::invalid_params(
                format!("no closure is registered as {name:?} (TaskManagerBuilder::rerunnable)"),
                None,
            ));
        }
        self.create(
            options,
            format!("{RERUNNABLE_PREFIX}{name}"),
            arguments,
            None,
        )
        .await
    }

    /// Create a task calling the router tool `request.name` with
    /// `request.arguments` (see [`TaskManager::serve_tools`]). Its name and
    /// arguments are stored with it, so it is rerun if its process dies.
    pub async fn spawn_tool(
        &self,
        options: TaskOptions,
        request: CallToolRequestParams,
    ) -> Result<Task, ErrorData> {
        self.create(
            options,
            request.name.to_string(),
            request.arguments.unwrap_or_default(),
            None,
        )
        .await
    }

    async fn create(
        &self,
        options: TaskOptions,
        tool: String,
        arguments: rmcp::model::JsonObject,
        id: Option<String>,
    ) -> Result<Task, ErrorData> {
        let as_ms = |ms: u64| i64::try_from(ms).unwrap_or(i64::MAX);
        Ok(self
            .runtime
            .create_task(CreateRequest {
                tool,
                arguments,
                id,
                max_ttl_ms: options.ttl_ms.map(as_ms),
                poll_interval_ms: options.poll_interval_ms.map(as_ms),
                status_message: options.status_message,
                ..Default::default()
            })
            .await?)
    }

    /// `tasks/get`: the task as stored now (a live task past its TTL reads
    /// `failed`).
    pub async fn get_task(&self, task_id: &str) -> Result<DetailedTask, ErrorData> {
        validate::task_id(task_id)?;
        Ok(self.runtime.get_task(task_id, None).await?)
    }

    /// `tasks/update`: store the answers to outstanding input requests (others
    /// are ignored) and wake the work waiting for them, wherever it runs.
    pub async fn update_task(
        &self,
        task_id: &str,
        input_responses: impl IntoIterator<Item = (String, Value)>,
    ) -> Result<(), ErrorData> {
        validate::task_id(task_id)?;
        let responses: InputResponses = input_responses.into_iter().collect();
        validate::input_keys(&responses)?;
        Ok(self.runtime.update_task(task_id, None, responses).await?)
    }

    /// `tasks/cancel`: record the intent durably and signal the work,
    /// wherever it runs. Cooperative, as in rmcp.
    pub async fn cancel_task(&self, task_id: &str) -> Result<(), ErrorData> {
        validate::task_id(task_id)?;
        Ok(self.runtime.cancel_task(task_id, None).await?)
    }

    /// Tasks whose work runs in this process now (rmcp: tasks not yet
    /// terminal; a durable store's live tasks may run on other processes).
    pub fn running_task_count(&self) -> usize {
        self.runtime.running_count()
    }

    /// Stop taking tasks, give running work [`SHUTDOWN_GRACE`] to finish, then
    /// stop it and hand the rest to recovery (rmcp aborts everything and
    /// forgets it).
    pub async fn shutdown(&self) {
        self.runtime.shutdown(SHUTDOWN_GRACE).await;
    }
}

/// [`TaskManager::builder`]: a manager's settings and rerunnable closures,
/// fixed before its runtime starts (recovery runs at start and must find
/// every closure a dead process's tasks name).
///
/// ```no_run
/// use mcptask_server::task_manager::{TaskExit, TaskManager};
/// use rmcp::model::{CallToolResult, ContentBlock};
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let store = mcptask_sql::open("sqlite:tasks.db").await?;
/// let tasks = TaskManager::builder(store.server_tasks())
///     .rerunnable("count", |ctx, arguments| {
///         Box::pin(async move {
///             let n = arguments.get("n").and_then(|n| n.as_u64()).unwrap_or(1);
///             ctx.set_status_message(format!("counting to {n} (attempt {})", ctx.attempt()))
///                 .await?;
///             Ok::<_, TaskExit>(CallToolResult::success(vec![ContentBlock::text(n.to_string())]))
///         })
///     })
///     .open()
///     .await?;
/// # let _ = tasks; Ok(()) }
/// ```
pub struct TaskManagerBuilder {
    store: Arc<dyn ServerTaskStore>,
    config: RuntimeConfig,
    rerunnable: HashMap<String, Rerunnable>,
}

impl TaskManagerBuilder {
    /// The runtime's settings (lease, recovery and TTL sweeps, caps); its
    /// default TTL is never used: each task's is its [`TaskOptions::ttl_ms`].
    pub fn config(mut self, config: RuntimeConfig) -> Self {
        self.config = config;
        self
    }

    /// Register `work` as `name`: tasks made with
    /// [`TaskManager::spawn_rerunnable`] run it on their stored arguments,
    /// and run it again if their process dies, with the input answered
    /// before answered again at once. Unlike [`TaskManager::spawn`]'s
    /// `FnOnce`, the closure is kept and may be called once per run; the
    /// same name registered twice keeps the last.
    pub fn rerunnable<F>(mut self, name: impl Into<String>, work: F) -> Self
    where
        F: Fn(TaskContext, JsonObject) -> TaskFuture + Send + Sync + 'static,
    {
        self.rerunnable.insert(name.into(), Arc::new(work));
        self
    }

    /// Start the manager: it takes a process slot of the store and, at
    /// once, the tasks the slot's previous holder left (see
    /// [`TaskManager::open`]).
    pub async fn open(self) -> Result<TaskManager, TaskError> {
        let tools = Arc::new(Tools::new(self.rerunnable));
        let source: Arc<dyn ToolSource> = tools.clone();
        let runtime = TaskRuntime::builder_with_source(self.store, source)
            .config(self.config)
            .start()
            .await?;
        Ok(TaskManager { runtime, tools })
    }
}
