//! An rmcp task server in the shape of rmcp's own task demo (a
//! `#[tool_router]` struct with a `tasks` field, `Default` and a sync
//! `new()`, closures handed to `spawn` from a sync helper, stdio and HTTP),
//! in two files:
//!
//! - `rmcp_task_server_before.rs`, on rmcp's in-memory
//!   `rmcp::task_manager::TaskManager`;
//! - `rmcp_task_server.rs`, the same server made durable by
//!   `mcptask_server::task_manager` (a SQLite file or a PostgreSQL database).
//!
//! The second is the first with `docs/migrating/rmcp_task_server.patch`
//! applied, and that patch is all that differs between them: a test applies
//! it and compares the result byte for byte, and
//! docs/MIGRATING-FROM-RMCP-TASKS.md walks through it.
//!
//! ```sh
//! cargo run -p mcptask-server --example rmcp_task_server_before -- --http 127.0.0.1:8080
//! cargo run -p mcptask-server --example rmcp_task_server -- sqlite:tasks.db --http 127.0.0.1:8080
//! cargo run -p mcptask-server --example rmcp_task_server -- postgres://… --http 127.0.0.1:8081
//! cargo run -p mcptask-server --example rmcp_task_server   # stdio, ./rmcp_task_server.db
//! ```
//!
//! Its tools are the ones the MCP conformance suite's task scenarios call:
//! `greet` (synchronous); `slow_compute`, a tool of the router that runs as
//! a task's work; `slow_sum`, `failing_job`, `protocol_error_job`,
//! `confirm_delete`, `multi_input`, `test_tool_with_task` and `approved_sum`,
//! closures. Durable, the tasks of `slow_compute` and `approved_sum` are run
//! again if their process dies (with the answers given before), and the
//! others' are answered `failed`.

use std::sync::Arc;
use std::time::Duration;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::*;
use rmcp::service::{RequestContext, RoleServer};
use rmcp::task_manager::{TaskContext, TaskExit, TaskFuture, TaskManager, TaskOptions};
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
    "approved_sum",
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

/// An elicitation form asking `message`, its answer shaped by `schema`.
fn form(message: &str, schema: Value) -> Result<InputRequest, McpError> {
    serde_json::from_value(json!({
        "method": "elicitation/create",
        "params": {"mode": "form", "message": message, "requestedSchema": schema}
    }))
    .map_err(|e| McpError::internal_error(e.to_string(), None))
}

/// The content of an accepted elicitation answer (`None` if declined).
fn accepted(answer: &Value) -> Option<&JsonObject> {
    if answer.get("action").and_then(Value::as_str) != Some("accept") {
        return None;
    }
    answer.get("content")?.as_object()
}

fn accepted_field<'a>(answer: &'a Value, field: &str) -> Option<&'a Value> {
    accepted(answer)?.get(field)
}

fn parse<T: serde::de::DeserializeOwned>(request: &CallToolRequestParams) -> Result<T, McpError> {
    serde_json::from_value(Value::Object(request.arguments.clone().unwrap_or_default()))
        .map_err(|e| McpError::invalid_params(e.to_string(), None))
}

/// What a tool returns when its task was cancelled (the "request
/// cancelled" code).
fn cancelled() -> McpError {
    McpError::new(ErrorCode(-32800), "the task was cancelled", None)
}

impl Default for TaskServer {
    fn default() -> Self {
        Self::new()
    }
}

#[tool_router]
impl TaskServer {
    pub fn new() -> Self {
        Self {
            tool_router: Self::tool_router(),
            tasks: TaskManager::new(),
        }
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

    /// A tool of the router; as a task's work, it finds its task in the
    /// request's extensions.
    #[tool(description = "Sleep for `seconds`, then report.")]
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
                let status = format!("{label}: {:.0}s left", left.as_secs_f64().ceil());
                ctx.set_status_message(status);
                tokio::select! {
                    _ = ctx.cancelled() => {
                        // Where the work stops: an operator sees it in the log.
                        eprintln!("{label}: cancelled, the work stopped");
                        return Err(cancelled());
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
    /// A task whose work is the router's tool `request.name`, its
    /// `TaskContext` in the request's extensions.
    fn spawn_tool(
        &self,
        request: CallToolRequestParams,
        mut context: RequestContext<RoleServer>,
    ) -> Task {
        let server = self.clone();
        self.tasks.spawn(TaskOptions::default(), move |ctx| {
            context.extensions.insert(ctx.clone());
            Box::pin(async move {
                let call =
                    rmcp::handler::server::tool::ToolCallContext::new(&server, request, context);
                match server.tool_router.call(call).await {
                    _ if ctx.is_cancel_requested() => Err(TaskExit::Cancelled),
                    Ok(CallToolResponse::Complete(result)) => Ok(result),
                    Ok(_) => Err(McpError::internal_error("not a tool result", None).into()),
                    Err(error) => Err(error.into()),
                }
            })
        })
    }

    /// A task's work, as a closure handed to `spawn` (rmcp's way).
    fn spawn_closure(&self, request: &CallToolRequestParams) -> Result<Task, McpError> {
        let options = TaskOptions::default();
        let task = match request.name.as_ref() {
            "slow_sum" => {
                let SumArgs { a, b, seconds } = parse(request)?;
                let delay = Duration::from_secs_f64(seconds.unwrap_or(2.0).clamp(0.0, 86_400.0));
                self.tasks.spawn(options, move |ctx| Box::pin(async move {
                    ctx.set_status_message("adding slowly");
                    tokio::select! {
                        _ = ctx.cancelled() => Err(TaskExit::Cancelled),
                        _ = tokio::time::sleep(delay) => Ok(text((a + b).to_string())),
                    }
                }))
            }
            "approved_sum" => {
                let arguments = request.arguments.clone().unwrap_or_default();
                self.tasks.spawn(options, move |ctx| approved_sum(ctx, arguments))
            }
            "failing_job" => self.tasks.spawn(options, |ctx| Box::pin(async move {
                tokio::select! {
                    _ = ctx.cancelled() => Err(TaskExit::Cancelled),
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {
                        Ok(CallToolResult::error(vec![ContentBlock::text("failing_job: the job failed (as designed)")]))
                    }
                }
            })),
            "protocol_error_job" => self.tasks.spawn(options, |_ctx| Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(100)).await;
                Err(McpError::internal_error("protocol_error_job: internal failure (as designed)", None).into())
            })),
            "confirm_delete" => {
                let filename = parse::<FileArgs>(request)?.filename.unwrap_or_else(|| "file.txt".into());
                self.tasks.spawn(options, move |ctx| Box::pin(async move {
                    let schema = json!({"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]});
                    let answer = ctx.request_input("confirm_delete", form(&format!("Delete {filename}?"), schema)?).await?;
                    let yes = accepted_field(&answer, "confirm").and_then(Value::as_bool) == Some(true);
                    Ok(text(if yes { format!("Deleted {filename}") } else { format!("Kept {filename}") }))
                }))
            }
            "multi_input" => self.tasks.spawn(options, |ctx| Box::pin(async move {
                let name_form = form("What is your name?", json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}))?;
                let confirm_form = form("Proceed?", json!({"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]}))?;
                // Both outstanding at once: two concurrent requests.
                let (name, confirm) = tokio::try_join!(ctx.request_input("name", name_form), ctx.request_input("confirm", confirm_form))?;
                let name = accepted_field(&name, "name").and_then(Value::as_str).unwrap_or("stranger").to_string();
                let confirm = accepted_field(&confirm, "confirm").and_then(Value::as_bool).unwrap_or(false);
                Ok(text(format!("Hello, {name}! confirmed={confirm}")))
            })),
            "test_tool_with_task" => {
                let name = request
                    .input_responses
                    .as_ref()
                    .and_then(|r| r.get("user_name"))
                    .and_then(accepted)
                    .and_then(|content| content.values().find_map(Value::as_str))
                    .unwrap_or("stranger")
                    .to_string();
                self.tasks.spawn(options, move |_ctx| Box::pin(async move {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    Ok(text(format!("Hello, {name}! (gathered before the task started)")))
                }))
            }
            _ => return Err(McpError::invalid_params("not a task tool", None)),
        };
        Ok(task)
    }

    fn closure_tools() -> Vec<Tool> {
        let object = |properties: Value| -> Arc<JsonObject> {
            Arc::new(
                serde_json::from_value(json!({"type": "object", "properties": properties}))
                    .expect("object"),
            )
        };
        let sum = json!({"a": {"type": "integer"}, "b": {"type": "integer"}, "seconds": {"type": "number"}});
        vec![
            Tool::new(
                "slow_sum",
                "Sum two numbers after a delay (`seconds`, default 2).",
                object(sum.clone()),
            ),
            Tool::new(
                "approved_sum",
                "Ask for approval, then sum two numbers after a delay (`seconds`, default 2).",
                object(sum),
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
                self.spawn_tool(request, context)
            } else {
                self.spawn_closure(&request)?
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
        Ok(GetTaskResult::new(self.tasks.get_task(&request.task_id)?))
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.tasks
            .update_task(&request.task_id, request.input_responses)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.tasks.cancel_task(&request.task_id)
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tasks()
                .build(),
        )
        .with_instructions("An rmcp task server.".to_string())
    }
}

/// `approved_sum`'s work, a function of its task and its arguments: asks
/// for approval, then adds slowly.
fn approved_sum(ctx: TaskContext, arguments: JsonObject) -> TaskFuture {
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
        ctx.set_status_message("approved; adding");
        let delay = Duration::from_secs_f64(seconds.unwrap_or(2.0).clamp(0.0, 86_400.0));
        tokio::select! {
            _ = ctx.cancelled() => Err(TaskExit::Cancelled),
            _ = tokio::time::sleep(delay) => Ok(text((a + b).to_string())),
        }
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let http = args
        .iter()
        .position(|a| a == "--http")
        .and_then(|i| args.get(i + 1))
        .cloned();
    let server = TaskServer::new();
    let tasks = server.tasks.clone();
    match http {
        Some(addr) => {
            use rmcp::transport::streamable_http_server::{
                StreamableHttpService, session::local::LocalSessionManager,
            };
            // One server for every session: a task outlives the session
            // that created it.
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
            eprintln!("rmcp_task_server: serving over stdio");
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
    tasks.shutdown();
    Ok(())
}
