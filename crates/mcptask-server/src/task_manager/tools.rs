//! What the runtime runs for a [`TaskManager`](super::TaskManager): a
//! closure handed to `spawn`, or a tool of the server's `#[tool_router]`.
//!
//! Both are tools to the runtime (it stores a tool name with each task and
//! asks a [`ToolSource`] for it at run and recovery time):
//!
//! - closures share one tool, [`CLOSURE_TOOL`], whose handler takes the
//!   future `spawn` made out of an in-memory table. The future dies with the
//!   process, so the tool's interrupt policy is `Fail`: after a crash the
//!   task settles as an honest `failed`, never as a rerun of nothing.
//! - a router tool is stored under its own name with its arguments, so any
//!   process with the same router can call it again: policy `Rerun`.
//! - a closure registered under a name when the manager is built
//!   ([`TaskManagerBuilder::rerunnable`](super::TaskManagerBuilder::rerunnable))
//!   is stored as [`RERUNNABLE_PREFIX`] and that name, with its arguments:
//!   every process built the same way holds it, so it is `Rerun` too. A name
//!   no longer registered is unknown, and its task fails honestly.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use mcptask_core::server::{InterruptPolicy, TaskSupport};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::model::{CallToolRequestParams, CallToolResponse, RequestId, Tool};
use rmcp::service::{Peer, RequestContext, RunningService};
use rmcp::task_manager::{TaskExit, TaskFuture};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use tokio::sync::watch;

use super::context::{TaskContext, durable_exit};
use super::exit::CANCELLED_CODE;
use crate::TaskTool;
use crate::tool::{Lookup, ToolCall, ToolSource};

/// The tool name every closure-created task is stored under.
pub const CLOSURE_TOOL: &str = "rmcp-task-manager.closure";

/// What a registered closure's task is stored under: this, then its name.
pub const RERUNNABLE_PREFIX: &str = "rmcp-task-manager.closure/";

/// The work of a rerunnable closure: made again from the task's arguments
/// on every run, the first and each rerun.
pub(crate) type Rerunnable =
    Arc<dyn Fn(super::TaskContext, rmcp::model::JsonObject) -> TaskFuture + Send + Sync>;

/// Looks a router tool up by name, as a runtime tool.
type RouterLookup = Arc<dyn Fn(&str) -> Option<TaskTool> + Send + Sync>;

/// The runtime's tools for one manager.
pub(crate) struct Tools {
    /// Futures made by `spawn`, waiting for their task's work to start.
    pub(crate) pending: Arc<Mutex<HashMap<String, (TaskContext, TaskFuture)>>>,
    closure: TaskTool,
    /// Registered closures, by the name they were registered under.
    rerunnable: HashMap<String, TaskTool>,
    router: OnceLock<(RouterLookup, Vec<Tool>)>,
    version: watch::Sender<u64>,
}

impl Tools {
    pub(crate) fn new(rerunnable: HashMap<String, Rerunnable>) -> Self {
        let pending: Arc<Mutex<HashMap<String, (TaskContext, TaskFuture)>>> = Arc::default();
        let table = pending.clone();
        let closure = TaskTool::new(
            Tool::new(CLOSURE_TOOL, "a task made from a closure", Arc::default()),
            move |call: ToolCall| {
                let work = call
                    .ctx
                    .task_id()
                    .and_then(|id| table.lock().expect("pending").remove(id));
                async move {
                    let Some((ctx, future)) = work else {
                        return Err(crate::TaskExit::Error(ErrorData::internal_error(
                            "this task's work was a closure of a process that is gone; there is nothing to run",
                            None,
                        )));
                    };
                    ctx.bind(call.ctx);
                    future.await.map_err(durable_exit)
                }
            },
        )
        .support(TaskSupport::Required)
        .interrupt(InterruptPolicy::Fail)
        // The TTL is each task's own (`TaskOptions::ttl_ms`, a cap on "unlimited").
        .ttl_ms(None);
        let rerunnable = rerunnable
            .into_iter()
            .map(|(name, work)| {
                let tool = rerunnable_tool(&name, work);
                (name, tool)
            })
            .collect();
        Self {
            pending,
            closure,
            rerunnable,
            router: OnceLock::new(),
            version: watch::channel(0).0,
        }
    }

    /// Whether a closure is registered as `name`.
    pub(crate) fn has_rerunnable(&self, name: &str) -> bool {
        self.rerunnable.contains_key(name)
    }

    /// Serve `router`'s tools on `service`; false if a router was set already.
    pub(crate) fn set_router<S>(&self, service: S, router: ToolRouter<S>) -> bool
    where
        S: Send + Sync + 'static,
    {
        let definitions = router.list_all();
        let service = Arc::new(service);
        let detached = Arc::new(Detached::start());
        let lookup: RouterLookup = Arc::new(move |name| {
            let definition = router.get(name)?.clone();
            Some(router_tool(
                definition,
                service.clone(),
                router.clone(),
                detached.clone(),
            ))
        });
        let set = self.router.set((lookup, definitions)).is_ok();
        if set {
            // Recovery retries the named tasks it deferred meanwhile.
            self.version.send_modify(|v| *v += 1);
        }
        set
    }
}

impl ToolSource for Tools {
    fn lookup(&self, name: &str) -> Lookup {
        if name == CLOSURE_TOOL {
            return Lookup::Found(self.closure.clone());
        }
        if let Some(registered) = name.strip_prefix(RERUNNABLE_PREFIX) {
            // Registered before the runtime started: known now or never.
            return self
                .rerunnable
                .get(registered)
                .map_or(Lookup::Unknown, |tool| Lookup::Found(tool.clone()));
        }
        match self.router.get() {
            // The server has not handed its router over yet (it is being
            // built, holding this manager): a recovered named task waits.
            None => Lookup::NotYet,
            Some((lookup, _)) => lookup(name).map_or(Lookup::Unknown, Lookup::Found),
        }
    }

    fn definitions(&self) -> Vec<Tool> {
        self.router
            .get()
            .map(|(_, tools)| tools.clone())
            .unwrap_or_default()
    }

    fn changed(&self) -> watch::Receiver<u64> {
        self.version.subscribe()
    }
}

/// A registered closure as a runtime tool: each run makes its future anew
/// from the task's stored arguments, with the task's context bound.
fn rerunnable_tool(name: &str, work: Rerunnable) -> TaskTool {
    let definition = Tool::new(
        format!("{RERUNNABLE_PREFIX}{name}"),
        "a rerunnable closure",
        Arc::default(),
    );
    TaskTool::new(definition, move |call: ToolCall| {
        let future = work(TaskContext::bound(call.ctx.clone()), call.arguments);
        async move { future.await.map_err(durable_exit) }
    })
    .support(TaskSupport::Required)
    .interrupt(InterruptPolicy::Rerun)
    // The TTL is each task's own (`TaskOptions::ttl_ms`, a cap on "unlimited").
    .ttl_ms(None)
}

/// A router tool as a runtime tool: its work calls the tool through the
/// router, with the task's [`TaskContext`] in the request's extensions (a
/// `#[tool]` takes it with `Extension<TaskContext>`) and `tasks/cancel`
/// mapped onto the request's cancellation token.
fn router_tool<S>(
    definition: Tool,
    service: Arc<S>,
    router: ToolRouter<S>,
    detached: Arc<Detached>,
) -> TaskTool
where
    S: Send + Sync + 'static,
{
    let name = definition.name.clone();
    TaskTool::new(definition, move |call: ToolCall| {
        let (service, router, detached) = (service.clone(), router.clone(), detached.clone());
        let name = name.clone();
        async move {
            let ctx = TaskContext::bound(call.ctx.clone());
            let mut request = RequestContext::new(RequestId::Number(0), detached.peer.clone());
            request.extensions.insert(ctx.clone());
            let ct = request.ct.clone();
            let cancel = call.ctx.clone();
            let watcher = tokio::spawn(async move {
                cancel.cancelled().await;
                ct.cancel();
            });
            let params = CallToolRequestParams::new(name).with_arguments(call.arguments);
            let answer = router
                .call(ToolCallContext::new(&*service, params, request))
                .await;
            watcher.abort();
            match answer {
                Ok(CallToolResponse::Complete(result)) => Ok(result),
                Ok(_) => Err(crate::TaskExit::Error(ErrorData::internal_error(
                    "the tool asked for input or made a task of its own; a task's work must complete \
                     (ask with TaskContext::request_input instead)",
                    None,
                ))),
                Err(e) if e.code.0 == CANCELLED_CODE && call.ctx.is_cancel_requested() => {
                    Err(crate::TaskExit::Cancelled)
                }
                Err(e) => Err(durable_exit(TaskExit::Error(e))),
            }
        }
    })
    .support(TaskSupport::Optional)
    .interrupt(InterruptPolicy::Rerun)
    .ttl_ms(None)
}

/// The peer a router tool's request context carries. A task's work outlives
/// the request that created it (and a rerun has no request at all), so the
/// work never talks to a live client through it: requests it sends are never
/// answered and notifications go nowhere. Input goes through
/// [`TaskContext::request_input`] instead.
struct Detached {
    peer: Peer<RoleServer>,
    _service: RunningService<RoleServer, NoHandler>,
}

/// A server that answers nothing (it never receives anything).
struct NoHandler;
impl ServerHandler for NoHandler {}

impl Detached {
    fn start() -> Self {
        let (ours, theirs) = tokio::io::duplex(64 * 1024);
        let service = rmcp::service::serve_directly(NoHandler, ours, None);
        // Read and drop whatever the work sends, so it never blocks on a
        // full pipe.
        tokio::spawn(async move {
            let (mut read, _write) = tokio::io::split(theirs);
            let _ = tokio::io::copy(&mut read, &mut tokio::io::sink()).await;
        });
        Self {
            peer: service.peer().clone(),
            _service: service,
        }
    }
}
