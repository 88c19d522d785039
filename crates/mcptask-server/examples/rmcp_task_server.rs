//! An rmcp task server written as rmcp's own examples are (a
//! `#[tool_router]` struct, its own `ServerHandler`, a `tasks` field), made
//! durable by `mcptask_server::task_manager`: the lines marked `// durable:`
//! are all that differ from the same server on `rmcp::task_manager`
//! (docs/MIGRATING-FROM-RMCP-TASKS.md counts them).
//!
//! ```sh
//! cargo run -p mcptask-server --example rmcp_task_server -- sqlite:tasks.db --http 127.0.0.1:8080
//! cargo run -p mcptask-server --example rmcp_task_server -- postgres://… --http 127.0.0.1:8081  # a replica
//! cargo run -p mcptask-server --example rmcp_task_server                 # stdio, ./rmcp_task_server.db
//! ```
//!
//! Its tools are the ones the MCP conformance suite's task scenarios call:
//! `greet` (synchronous), `slow_compute` (a named tool: its task is rerun if
//! the process dies), `slow_sum`, `failing_job`, `protocol_error_job`,
//! `confirm_delete`, `multi_input` and `test_tool_with_task` (closures: after
//! a crash their tasks fail honestly), and `approved_sum` (a closure
//! registered under its name when the manager is built: rerun after a
//! crash, with the approval given before it answered again at once; rmcp
//! has no such thing, so the items that make it say `durable:` in their
//! doc comment and are wholly mcptask's).

use std::sync::Arc;
use std::time::Duration;

use mcptask_server::RuntimeConfig;
use mcptask_server::task_manager::{TaskContext, TaskExit, TaskManager, TaskOptions, exit_error}; // durable: the import
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::*;
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler, ServiceExt, schemars, tool, tool_router};
use serde_json::{Value, json};

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct GreetArgs {
    pub name: Option<String>,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct ComputeArgs {
    pub seconds: Option<f64>,
    pub label: Option<String>,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct SumArgs {
    pub a: i64,
    pub b: i64,
    /// How long the sum takes (default 2 s).
    pub seconds: Option<f64>,
}

#[derive(Debug, Default, serde::Deserialize, schemars::JsonSchema)]
pub struct FileArgs {
    pub filename: Option<String>,
}

#[derive(Clone)]
pub struct TaskServer {
    tool_router: ToolRouter<TaskServer>,
    tasks: TaskManager,
}

/// The tools that run as tasks when the request declares the tasks extension.
const TASK_TOOLS: [&str; 8] = [
    "slow_compute",
    "approved_sum", // durable: a rerunnable closure
    "slow_sum",
    "failing_job",
    "protocol_error_job",
    "confirm_delete",
    "multi_input",
    "test_tool_with_task",
];

fn text(s: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(s.into())])
}

fn form(message: &str, schema: Value) -> Result<InputRequest, McpError> {
    mcptask_server::input::elicit_form(message, schema)
        .map_err(|e| McpError::internal_error(e.to_string(), None))
}

fn accepted_field<'a>(answer: &'a Value, field: &str) -> Option<&'a Value> {
    mcptask_server::input::accepted(answer)?.get(field)
}

fn parse<T: serde::de::DeserializeOwned>(request: &CallToolRequestParams) -> Result<T, McpError> {
    serde_json::from_value(Value::Object(request.arguments.clone().unwrap_or_default()))
        .map_err(|e| McpError::invalid_params(e.to_string(), None))
}

#[tool_router]
impl TaskServer {
    pub fn new(tasks: TaskManager) -> Self {
        let server = Self {
            tool_router: Self::tool_router(),
            tasks,
        };
        server
            .tasks
            .serve_tools(server.clone(), Self::tool_router()); // durable: named tools rerun
        server
    }

    #[tool(description = "Say hello (always synchronous).")]
    async fn greet(
        &self,
        Parameters(args): Parameters<GreetArgs>,
    ) -> Result<CallToolResult, McpError> {
        Ok(text(format!(
            "Hello, {}!",
            args.name.as_deref().unwrap_or("World")
        )))
    }

    /// A named tool: as a task, its name and arguments are stored, so it is
    /// rerun if its process dies. It finds its task in the request's extensions.
    #[tool(description = "Sleep for `seconds`, then report; rerun if its server dies.")]
    async fn slow_compute(
        &self,
        Parameters(args): Parameters<ComputeArgs>,
        extensions: Extensions,
    ) -> Result<CallToolResult, McpError> {
        let seconds = args.seconds.unwrap_or(1.0).clamp(0.0, 86_400.0);
        let label = args.label.unwrap_or_else(|| "compute".into());
        let task = extensions.get::<TaskContext>();
        let mut left = Duration::from_secs_f64(seconds);
        while !left.is_zero() {
            let step = left.min(Duration::from_secs(1));
            if let Some(ctx) = task {
                let status = format!(
                    "{label}: {:.0}s left (attempt {})",
                    left.as_secs_f64().ceil(),
                    ctx.attempt()
                );
                ctx.set_status_message(status).await.map_err(exit_error)?;
                tokio::select! {
                    _ = ctx.cancelled() => {
                        // Where the work stops: an operator sees it in the log.
                        eprintln!("{label}: cancelled, the work stopped");
                        return Err(mcptask_server::task_manager::cancelled());
                    }
                    _ = tokio::time::sleep(step) => {}
                }
            } else {
                tokio::time::sleep(step).await;
            }
            left -= step;
        }
        Ok(text(format!("{label}: computed in {seconds}s")))
    }
}

impl TaskServer {
    /// A task's work, as a closure handed to `spawn` (rmcp's way).
    async fn spawn_closure(&self, request: &CallToolRequestParams) -> Result<Task, McpError> {
        let options = TaskOptions::default();
        let task = match request.name.as_ref() {
            "slow_sum" => {
                let SumArgs { a, b, seconds } = parse(request)?;
                let delay = Duration::from_secs_f64(seconds.unwrap_or(2.0).clamp(0.0, 86_400.0));
                self.tasks.spawn(options, move |ctx| Box::pin(async move {
                    ctx.set_status_message("adding slowly").await?; // durable: .await?
                    tokio::select! {
                        _ = ctx.cancelled() => Err(TaskExit::Cancelled),
                        _ = tokio::time::sleep(delay) => Ok(text((a + b).to_string())),
                    }
                })).await? // durable: .await?
            }
            "failing_job" => self.tasks.spawn(options, |ctx| Box::pin(async move {
                tokio::select! {
                    _ = ctx.cancelled() => Err(TaskExit::Cancelled),
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {
                        Ok(CallToolResult::error(vec![ContentBlock::text("failing_job: the job failed (as designed)")]))
                    }
                }
            })).await?,
            "protocol_error_job" => self.tasks.spawn(options, |_ctx| Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(100)).await;
                Err(McpError::internal_error("protocol_error_job: internal failure (as designed)", None).into())
            })).await?,
            "confirm_delete" => {
                let filename = parse::<FileArgs>(request)?.filename.unwrap_or_else(|| "file.txt".into());
                self.tasks.spawn(options, move |ctx| Box::pin(async move {
                    let schema = json!({"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]});
                    let answer = ctx.request_input("confirm_delete", form(&format!("Delete {filename}?"), schema)?).await?;
                    let yes = accepted_field(&answer, "confirm").and_then(Value::as_bool) == Some(true);
                    Ok(text(if yes { format!("Deleted {filename}") } else { format!("Kept {filename}") }))
                })).await?
            }
            "multi_input" => self.tasks.spawn(options, |ctx| Box::pin(async move {
                let name_form = form("What is your name?", json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}))?;
                let confirm_form = form("Proceed?", json!({"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]}))?;
                // Both outstanding at once: rmcp's way is two concurrent requests.
                let (name, confirm) = tokio::try_join!(ctx.request_input("name", name_form), ctx.request_input("confirm", confirm_form))?;
                let name = accepted_field(&name, "name").and_then(Value::as_str).unwrap_or("stranger").to_string();
                let confirm = accepted_field(&confirm, "confirm").and_then(Value::as_bool).unwrap_or(false);
                Ok(text(format!("Hello, {name}! confirmed={confirm}")))
            })).await?,
            "test_tool_with_task" => {
                let name = request
                    .input_responses
                    .as_ref()
                    .and_then(|r| r.get("user_name"))
                    .and_then(mcptask_server::input::accepted)
                    .and_then(|c| c.values().find_map(Value::as_str))
                    .unwrap_or("stranger")
                    .to_string();
                self.tasks.spawn(options, move |_ctx| Box::pin(async move {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    Ok(text(format!("Hello, {name}! (gathered before the task started)")))
                })).await?
            }
            _ => return Err(McpError::invalid_params("not a task tool", None)),
        };
        Ok(task)
    }

    /// durable: all of it (rmcp has no rerunnable closure). A closure
    /// registered as `approved_sum` ([`approved_sum`]): its task stores the
    /// name and arguments, so it is rerun if the process dies.
    async fn spawn_registered(&self, request: &CallToolRequestParams) -> Result<Task, McpError> {
        let arguments = request.arguments.clone().unwrap_or_default();
        self.tasks
            .spawn_rerunnable(TaskOptions::default(), "approved_sum", arguments)
            .await
    }

    fn closure_tools() -> Vec<Tool> {
        let object = |properties: Value| -> Arc<JsonObject> {
            Arc::new(
                serde_json::from_value(json!({"type": "object", "properties": properties}))
                    .expect("object"),
            )
        };
        vec![
            Tool::new(
                "slow_sum",
                "Sum two numbers after a delay (`seconds`, default 2).",
                object(
                    json!({"a": {"type": "integer"}, "b": {"type": "integer"}, "seconds": {"type": "number"}}),
                ),
            ),
            // durable: this tool (rmcp has no rerunnable closure).
            Tool::new(
                "approved_sum",
                "Ask for approval, then sum two numbers after a delay (`seconds`, default 2); rerun if its server dies.",
                object(
                    json!({"a": {"type": "integer"}, "b": {"type": "integer"}, "seconds": {"type": "number"}}),
                ),
            ),
            Tool::new(
                "failing_job",
                "A task that reports a tool error after about a second.",
                object(json!({})),
            ),
            Tool::new(
                "protocol_error_job",
                "A task that ends with a JSON-RPC error.",
                object(json!({})),
            ),
            Tool::new(
                "confirm_delete",
                "Ask to confirm deleting `filename`, then report.",
                object(json!({"filename": {"type": "string"}})),
            ),
            Tool::new(
                "multi_input",
                "Ask two questions at once.",
                object(json!({})),
            ),
            Tool::new(
                "test_tool_with_task",
                "Ask for your name first, then greet you in a task.",
                object(json!({})),
            ),
        ]
    }
}

impl ServerHandler for TaskServer {
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let client_supports_tasks = context
            .client_capabilities()
            .is_some_and(|caps| caps.supports_tasks());
        let name = request.name.as_ref();
        if name == "test_tool_with_task"
            && !request
                .input_responses
                .as_ref()
                .is_some_and(|r| r.contains_key("user_name"))
        {
            let ask = form(
                "What is your name?",
                json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}),
            )?;
            let requests: InputRequests = [("user_name".to_string(), ask)].into_iter().collect();
            return Ok(CallToolResponse::InputRequired(
                InputRequiredResult::from_input_requests(requests),
            ));
        }
        if TASK_TOOLS.contains(&name) && client_supports_tasks {
            let task = if name == "slow_compute" {
                self.tasks
                    .spawn_tool(TaskOptions::default(), request)
                    .await? // durable: a named tool
            } else if name == "approved_sum" {
                // durable: a rerunnable closure
                self.spawn_registered(&request).await?
            } else {
                self.spawn_closure(&request).await?
            };
            return Ok(CallToolResponse::Task(CreateTaskResult::new(task)));
        }
        if matches!(name, "failing_job" | "test_tool_with_task") {
            return Err(McpError::missing_required_client_capability(
                ClientCapabilities::builder().enable_tasks().build(),
            ));
        }
        let tcc = rmcp::handler::server::tool::ToolCallContext::new(self, request, context);
        self.tool_router.call(tcc).await
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let mut tools = self.tool_router.list_all();
        tools.extend(Self::closure_tools());
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        Ok(GetTaskResult::new(
            self.tasks.get_task(&request.task_id).await?,
        )) // durable: .await
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.tasks
            .update_task(&request.task_id, request.input_responses)
            .await // durable: .await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.tasks.cancel_task(&request.task_id).await // durable: .await
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tasks()
                .build(),
        )
        .with_instructions("An rmcp task server on a durable store.".to_string())
    }
}

/// durable: all of it (rmcp has no rerunnable closure). `approved_sum`'s
/// work, registered under that name when the manager is built: asks for
/// approval, then adds slowly. Made again from the stored arguments on
/// every run; on a rerun the approval given before the crash is answered
/// at once, so the status says which attempt is adding.
fn approved_sum(
    ctx: TaskContext,
    arguments: JsonObject,
) -> mcptask_server::task_manager::TaskFuture {
    Box::pin(async move {
        let SumArgs { a, b, seconds } = serde_json::from_value(Value::Object(arguments))
            .map_err(|e| TaskExit::Error(McpError::invalid_params(e.to_string(), None)))?;
        let schema = json!({"type": "object", "properties": {"approve": {"type": "boolean"}}, "required": ["approve"]});
        let answer = ctx
            .request_input("approve", form(&format!("Add {a} and {b}?"), schema)?)
            .await?;
        if accepted_field(&answer, "approve").and_then(Value::as_bool) != Some(true) {
            return Ok(text("not approved"));
        }
        ctx.set_status_message(format!("approved; adding (attempt {})", ctx.attempt()))
            .await?;
        let delay = Duration::from_secs_f64(seconds.unwrap_or(2.0).clamp(0.0, 86_400.0));
        tokio::select! {
            _ = ctx.cancelled() => Err(TaskExit::Cancelled),
            _ = tokio::time::sleep(delay) => Ok(text((a + b).to_string())),
        }
    })
}

/// Lease and recovery settings from the environment (the restart tests
/// shorten them), else the runtime's defaults.
fn config() -> RuntimeConfig {
    let ms = |name: &str| std::env::var(name).ok().and_then(|v| v.parse().ok());
    let mut config = RuntimeConfig::default();
    if let Some(lease) = ms("RMCP_TASK_SERVER_LEASE_MS") {
        config.lease_ms = lease;
    }
    if let Some(every) = ms("RMCP_TASK_SERVER_RECOVERY_EVERY_MS") {
        config.recovery_every_ms = every;
    }
    config
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let url = args
        .first()
        .filter(|a| !a.starts_with("--"))
        .cloned()
        .unwrap_or_else(|| "sqlite:rmcp_task_server.db".into());
    let http = args
        .iter()
        .position(|a| a == "--http")
        .and_then(|i| args.get(i + 1))
        .cloned();
    let store = mcptask_sql::open(&url).await?;
    let tasks = TaskManager::builder(store.server_tasks()) // durable: TaskManager::new()
        .config(config()) // durable: TaskManager::new()
        .rerunnable("approved_sum", approved_sum) // durable: a rerunnable closure
        .open() // durable: TaskManager::new()
        .await?; // durable: TaskManager::new()
    let server = TaskServer::new(tasks.clone());
    match http {
        Some(addr) => {
            use rmcp::transport::streamable_http_server::{
                StreamableHttpService, session::local::LocalSessionManager,
            };
            let service = StreamableHttpService::new(
                move || Ok(server.clone()),
                Arc::new(LocalSessionManager::default()),
                Default::default(),
            );
            let listener = tokio::net::TcpListener::bind(&addr).await?;
            eprintln!(
                "rmcp_task_server listening on http://{}/mcp",
                listener.local_addr()?
            );
            let app = axum::Router::new().nest_service("/mcp", service);
            axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = tokio::signal::ctrl_c().await;
                })
                .await?;
        }
        None => {
            eprintln!("rmcp_task_server: serving over stdio; tasks in {url}");
            // A client that closes stdin before initializing (the test
            // command's smoke run, stdin at end of file) ends the session.
            match server.serve(rmcp::transport::stdio()).await {
                Ok(session) => {
                    session.waiting().await?;
                }
                Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => {
                    eprintln!("rmcp_task_server: the client left before initializing");
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    tasks.shutdown().await;
    Ok(())
}
