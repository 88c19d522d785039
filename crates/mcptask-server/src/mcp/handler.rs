//! An rmcp [`ServerHandler`] that serves the registry's tools and the
//! `tasks/*` methods from the durable runtime.
//!
//! Servers with their own handler can instead call [`TaskRuntime`] from
//! theirs; [`declares_tasks`] and [`principal::of_request`](super::principal::of_request)
//! are public for that.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, CreateTaskResult, CustomRequest,
    CustomResult, ErrorCode, GetTaskParams, GetTaskResult, Implementation, InputRequiredResult,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    UpdateTaskParams,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};

use mcptask_core::server::TaskSupport;

use crate::{CreateRequest, Preflight, TaskError, TaskRuntime};

type PrincipalFn = Arc<dyn Fn(&RequestContext<RoleServer>) -> Option<String> + Send + Sync>;

/// Whether the request runs on the 2026-07-28 protocol or later. Tasks are
/// never created for, nor served to, older (`initialize`-based) sessions:
/// SEP-2663 is undefined there.
pub fn is_modern(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|v| mcptask_core::protocol::is_modern(v.as_str()))
}

/// Whether this very request declares the tasks extension in its own `_meta`
/// on a modern protocol. Earlier requests and `initialize` capabilities never count.
pub fn declares_tasks(context: &RequestContext<RoleServer>) -> bool {
    is_modern(context)
        && context
            .meta
            .client_capabilities()
            .is_some_and(|caps| caps.supports_tasks())
}

/// A ready-made MCP server over a [`TaskRuntime`].
///
/// ```no_run
/// # async fn demo(runtime: mcptask_server::TaskRuntime) {
/// use rmcp::ServiceExt;
/// let server = mcptask_server::DurableTaskServer::new(runtime)
///     .with_instructions("Long-running exports");
/// let stdio = (tokio::io::stdin(), tokio::io::stdout());
/// let running = server.serve(stdio).await.unwrap();
/// running.waiting().await.unwrap();
/// # }
/// ```
#[derive(Clone)]
pub struct DurableTaskServer {
    runtime: TaskRuntime,
    info: Implementation,
    instructions: Option<String>,
    principal: PrincipalFn,
}

impl DurableTaskServer {
    /// Serve `runtime`'s tools and tasks, with default server info and no instructions.
    pub fn new(runtime: TaskRuntime) -> Self {
        Self {
            runtime,
            info: Implementation::new("mcptask", env!("CARGO_PKG_VERSION")),
            instructions: None,
            principal: Arc::new(super::principal::of_request),
        }
    }

    /// The name and version announced to clients.
    pub fn with_server_info(mut self, info: Implementation) -> Self {
        self.info = info;
        self
    }

    /// Instructions announced to clients (how to use this server).
    pub fn with_instructions(mut self, instructions: impl Into<String>) -> Self {
        self.instructions = Some(instructions.into());
        self
    }

    /// Decide who the caller is (default: [`Principal`](crate::Principal) in
    /// the HTTP request extensions).
    pub fn with_principal<F>(mut self, f: F) -> Self
    where
        F: Fn(&RequestContext<RoleServer>) -> Option<String> + Send + Sync + 'static,
    {
        self.principal = Arc::new(f);
        self
    }

    /// The runtime behind this server.
    pub fn runtime(&self) -> &TaskRuntime {
        &self.runtime
    }

    fn tasks_gate(&self, context: &RequestContext<RoleServer>) -> Result<(), ErrorData> {
        if is_modern(context) {
            Ok(())
        } else {
            Err(ErrorData::method_not_found::<rmcp::model::GetTaskMethod>())
        }
    }
}

impl ServerHandler for DurableTaskServer {
    fn get_info(&self) -> ServerConfig {
        let mut config = ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tasks()
                .build(),
        )
        .with_server_info(self.info.clone());
        if let Some(i) = &self.instructions {
            config = config.with_instructions(i.clone());
        }
        config
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(
            self.runtime.tools().definitions(),
        ))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.runtime
            .tools()
            .lookup(name)
            .found()
            .map(|t| t.definition().clone())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        let tool = self
            .runtime
            .tools()
            .lookup(&name)
            .found()
            .ok_or_else(|| ErrorData::from(TaskError::UnknownTool(name.clone())))?;
        let arguments = request.arguments.unwrap_or_default();
        let call_inputs = request.input_responses.unwrap_or_default();
        let principal = (self.principal)(&context);
        let as_task = match (tool.task_support(), declares_tasks(&context)) {
            (TaskSupport::Forbidden, _) | (TaskSupport::Optional, false) => false,
            (TaskSupport::Required, false) => return Err(TaskError::MissingCapability.into()),
            (_, true) => true,
        };
        let preflight = match &tool.preflight {
            // The preflight is tool code: a panic in it is the tool's error,
            // answered like any other, never an unanswered request.
            Some(check) => std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                check(&arguments, &call_inputs)
            }))
            .map_err(|panic| {
                ErrorData::internal_error(
                    format!(
                        "tool preflight panicked: {}",
                        crate::engine::panic_text(&panic)
                    ),
                    None,
                )
            })?,
            None => Preflight::Proceed,
        };
        if let Preflight::NeedInput(requests) = preflight {
            if !is_modern(&context) {
                return Err(ErrorData::invalid_request(
                    "this tool needs input before it starts, which requires protocol 2026-07-28 or later",
                    None,
                ));
            }
            return Ok(CallToolResponse::InputRequired(
                InputRequiredResult::from_input_requests(requests),
            ));
        }
        if !as_task {
            return self
                .runtime
                .run_sync(&name, arguments, principal, call_inputs, context.ct.clone())
                .await
                .map(CallToolResponse::Complete);
        }
        let task = self
            .runtime
            .create_task(CreateRequest {
                tool: name,
                arguments,
                principal,
                call_inputs,
                ..Default::default()
            })
            .await?;
        Ok(CallToolResponse::Task(CreateTaskResult::new(task)))
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        self.tasks_gate(&context)?;
        super::validate::task_id(&request.task_id)?;
        let principal = (self.principal)(&context);
        let task = self
            .runtime
            .get_task(&request.task_id, principal.as_deref())
            .await?;
        Ok(GetTaskResult::new(task))
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.tasks_gate(&context)?;
        super::validate::task_id(&request.task_id)?;
        super::validate::input_keys(&request.input_responses)?;
        let principal = (self.principal)(&context);
        Ok(self
            .runtime
            .update_task(
                &request.task_id,
                principal.as_deref(),
                request.input_responses,
            )
            .await?)
    }

    /// rmcp routes a `tasks/*` request whose params do not parse to the custom
    /// handler; the method exists, so that is "invalid params", not "method not found".
    /// A `subscriptions/listen` for tasks arrives here too, its filter set
    /// aside by [`TaskListenLayer`](super::TaskListenLayer).
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        if request.method == super::LISTEN_METHOD {
            self.tasks_gate(&context)?;
            let principal = (self.principal)(&context);
            return super::listen::serve(&self.runtime, principal, context).await;
        }
        if !matches!(
            request.method.as_str(),
            "tasks/get" | "tasks/update" | "tasks/cancel"
        ) {
            return Err(ErrorData::new(
                ErrorCode::METHOD_NOT_FOUND,
                request.method,
                None,
            ));
        }
        self.tasks_gate(&context)?;
        if !context
            .meta
            .client_capabilities()
            .is_some_and(|c| c.supports_tasks())
        {
            return Err(TaskError::MissingCapability.into());
        }
        let expected = if request.method == "tasks/update" {
            "{taskId: string, inputResponses: object}"
        } else {
            "{taskId: string}"
        };
        Err(ErrorData::invalid_params(
            format!("invalid params for {}: expected {expected}", request.method),
            None,
        ))
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.tasks_gate(&context)?;
        super::validate::task_id(&request.task_id)?;
        let principal = (self.principal)(&context);
        Ok(self
            .runtime
            .cancel_task(&request.task_id, principal.as_deref())
            .await?)
    }
}
