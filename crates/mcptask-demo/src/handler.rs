//! The demo server's rmcp handler: the durable task tools and `tasks/*`
//! from [`DurableTaskServer`], and around them the conformance fixtures
//! (synchronous tools, prompts, resources, completions, list-change
//! subscriptions) from [`crate::fixtures`].

use std::sync::Arc;

use mcptask_server::DurableTaskServer;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, CompleteRequestParams,
    CompleteResult, CustomRequest, CustomResult, GetPromptRequestParams, GetPromptResponse,
    GetTaskParams, GetTaskResult, JsonObject, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, PromptsCapability,
    ReadResourceRequestParams, ReadResourceResponse, RequestMetaObject, ResourcesCapability,
    ServerConfig, SubscriptionFilter, Tool, UpdateTaskParams,
};
use rmcp::service::{RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};

use crate::fixtures::{FixtureCall, Fixtures, ListChanges, prompts, resources};

/// The demo tools' [`DurableTaskServer`] with the conformance fixtures.
#[derive(Clone)]
pub(crate) struct DemoServer {
    durable: DurableTaskServer,
    fixtures: Arc<Fixtures>,
}

impl DemoServer {
    pub(crate) fn new(durable: DurableTaskServer) -> Self {
        Self {
            durable,
            fixtures: Fixtures::new(),
        }
    }
}

impl ServerHandler for DemoServer {
    /// The durable server's capabilities (tools, the tasks extension) plus
    /// the fixtures': prompts, resources, completions, and list changes of
    /// tools and prompts on `subscriptions/listen`.
    fn get_info(&self) -> ServerConfig {
        let mut config = self.durable.get_info();
        let caps = &mut config.capabilities;
        caps.tools.get_or_insert_default().list_changed = Some(true);
        let mut prompts = PromptsCapability::default();
        prompts.list_changed = Some(true);
        caps.prompts = Some(prompts);
        caps.resources = Some(ResourcesCapability::default());
        caps.completions = Some(JsonObject::new());
        config
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut result = self.durable.list_tools(request, context).await?;
        result
            .tools
            .extend(self.fixtures.tool_definitions().cloned());
        Ok(result)
    }

    /// Also what rmcp validates `Mcp-Param-*` headers against (SEP-2243).
    fn get_tool(&self, name: &str) -> Option<Tool> {
        match self.fixtures.tool(name) {
            Some(fixture) => Some(fixture.definition().clone()),
            None => self.durable.get_tool(name),
        }
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        log_trace("tools/call", &request.name, request.meta.as_ref(), &context);
        let Some(fixture) = self.fixtures.tool(&request.name) else {
            return self.durable.call_tool(request, context).await;
        };
        fixture
            .call(FixtureCall {
                name: request.name.to_string(),
                arguments: request.arguments.unwrap_or_default(),
                input_responses: request.input_responses,
                request_state: request.request_state,
                context,
                fixtures: self.fixtures.clone(),
            })
            .await
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        log_trace(
            "tasks/get",
            &request.task_id,
            request.meta.as_ref(),
            &context,
        );
        self.durable.get_task(request, context).await
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.durable.update_task(request, context).await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.durable.cancel_task(request, context).await
    }

    /// Task subscriptions (`subscriptions/listen` with `taskIds`, set aside
    /// by the `TaskListenLayer`) and unparsable `tasks/*` requests.
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        self.durable.on_custom_request(request, context).await
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Ok(ListPromptsResult::with_all_items(prompts::list()))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        prompts::get(&self.fixtures, request, &context).await
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(ListResourcesResult::with_all_items(resources::list()))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(
            resources::templates(),
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        resources::read(&request.uri).map(ReadResourceResponse::Complete)
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        crate::fixtures::complete(&request)
    }

    fn accepted_subscription_filter(
        &self,
        _requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(ListChanges::offered())
    }

    async fn listen(&self, subscription: SubscriptionContext) -> Result<(), ErrorData> {
        self.fixtures.changes.serve(subscription).await
    }
}

/// Show the W3C trace context (SEP-414) a request came in, so whoever runs
/// the demo server behind a gateway sees the trace reach it.
fn log_trace(
    method: &str,
    subject: &str,
    meta: Option<&RequestMetaObject>,
    context: &RequestContext<RoleServer>,
) {
    let traceparent = meta
        .and_then(|m| m.get_traceparent())
        .or_else(|| context.meta.get_traceparent());
    if let Some(traceparent) = traceparent {
        tracing::info!(method, subject, traceparent, "request in a trace");
    }
}
