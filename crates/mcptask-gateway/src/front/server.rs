//! The front MCP server: the upstream servers' tools under one name space,
//! every call of a client that declares tasks made durable as a front task,
//! other calls passed through.

use std::sync::Arc;

use mcptask_client::remote::Seen;
use mcptask_client::upstream::{SyncEvent, SyncOptions, sync_call};
use mcptask_client::{CallOptions, TrackerError};
use mcptask_core::call::Face;
use mcptask_core::outcome::Outcome;
use mcptask_server::mcp::declares_tasks;
use mcptask_server::{DurableTaskServer, TaskRuntime};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams,
    CompleteRequestParams, CompleteResult, ContentBlock, CreateTaskResult, CustomRequest,
    CustomResult, GetPromptRequestParams, GetPromptResponse, GetTaskParams, GetTaskResult,
    Implementation, InitializeRequestParams, InitializeResult, InputRequiredResult, JsonObject,
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ReadResourceRequestParams,
    ReadResourceResponse, ServerConfig, SubscriptionFilter, Task, Tool, UpdateTaskParams,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};
use tracing::Instrument;

use super::agent_tools;
use super::bridge::Bridged;
use super::capabilities;
use super::directory::Directory;
use super::logging;
use super::subscriptions::Subscriptions;
use crate::auth::Caller;
use crate::calls::{CallError, Calls, Executed, Execution, Relay};
use crate::failure::Failure;
use crate::metrics::{CallLabels, PASS_THROUGH};
use crate::route::{self, Ask, Decided, Intent, Target};
use crate::upstreams::Upstreams;
use crate::upstreams::catalog::Route;
use mcptask_client::identity::CallCredential;

/// Who the caller of a front request is.
pub type CallerFn = Arc<dyn Fn(&RequestContext<RoleServer>) -> Caller + Send + Sync>;

/// The front server. Cheap to clone.
#[derive(Clone)]
pub struct FrontServer {
    calls: Calls,
    upstreams: Arc<Upstreams>,
    runtime: TaskRuntime,
    tasks: DurableTaskServer,
    caller: CallerFn,
    /// Where upstream prompts and resources were last seen.
    directory: Arc<Directory>,
    /// The callers' resource subscriptions, held at the upstreams.
    subscriptions: Arc<Subscriptions>,
    /// Cancelled when the transport's one caller is gone (stdio: its input
    /// closed): its calls relayed synchronously are withdrawn upstream.
    caller_gone: tokio_util::sync::CancellationToken,
}

/// A call task as the caller hears of it: a task for a caller that declares
/// tasks, else the agent tools' "started" answer.
fn started(task: Task, route: &Route, declares: bool) -> CallToolResponse {
    if declares {
        CallToolResponse::Task(CreateTaskResult::new(task))
    } else {
        CallToolResponse::Complete(agent_tools::started(&task.task_id, &route.front))
    }
}

/// What the front's caller hears of an executed call: a result, the task
/// it is kept as (or the agent tools' "started" answer), a question round
/// for a caller that declares tasks, or the one error mapping's words.
fn render(
    answer: Result<Executed, CallError>,
    route: &Route,
    declares: bool,
    caller: &Caller,
) -> Result<CallToolResponse, ErrorData> {
    match answer {
        Ok(Executed::Answered(result)) => Ok(CallToolResponse::Complete(result)),
        Ok(Executed::Kept {
            task: Some(task), ..
        }) => Ok(started(task, route, declares)),
        Ok(Executed::Kept { record, task: None }) => {
            Err(Failure::internal(&format!("call {} was kept without its task", record.id)).into())
        }
        Ok(Executed::Relayed(answer)) => answer,
        Ok(Executed::Failed(error)) => Err(error),
        Err(CallError::Tracker(TrackerError::InputNeeded {
            requests,
            request_state,
            ..
        })) if declares => {
            let mut round = InputRequiredResult::from_input_requests(requests);
            round.request_state = request_state;
            Ok(CallToolResponse::InputRequired(round))
        }
        Err(CallError::Tracker(TrackerError::InputNeeded { requests, .. })) => {
            let keys: Vec<String> = requests.keys().cloned().collect();
            Ok(CallToolResponse::Complete(CallToolResult::error(vec![
                ContentBlock::text(format!(
                    "{} asks questions ({}) before it starts, which this client cannot answer; call it from a client that declares tasks.",
                    route.front,
                    keys.join(", ")
                )),
            ])))
        }
        Err(e) => Err(refused(e, caller)),
    }
}

/// A call that could not be made, as `caller`'s JSON-RPC error.
fn refused(e: CallError, caller: &Caller) -> ErrorData {
    Failure::from(e).for_caller(caller).into()
}

/// The protocol's busy error for a caller over its fair limits.
pub(super) fn busy_error(busy: &crate::calls::Busy) -> ErrorData {
    Failure::RateLimited(busy.clone()).into()
}

impl FrontServer {
    /// The MCP front over `calls`, naming each request's caller with
    /// `caller` (its principal binds the front tasks it creates).
    pub fn new(calls: Calls, caller: CallerFn) -> Self {
        let who = caller.clone();
        let tasks =
            DurableTaskServer::new(calls.runtime.clone()).with_principal(move |c| who(c).principal);
        // The front's lists are its upstreams': their changes are heard
        // between calls too, to be passed on (see `list_changes`).
        for server in calls.upstreams.servers() {
            if let Ok(pool) = calls.upstreams.lanes(&server.name) {
                pool.follow_lists();
            }
        }
        Self {
            upstreams: calls.upstreams.clone(),
            runtime: calls.runtime.clone(),
            calls,
            tasks,
            caller,
            directory: Arc::default(),
            subscriptions: Arc::default(),
            caller_gone: tokio_util::sync::CancellationToken::new(),
        }
    }

    /// This server with `token` saying its transport's caller is gone.
    pub fn with_caller_gone(mut self, token: tokio_util::sync::CancellationToken) -> Self {
        self.caller_gone = token;
        self
    }

    /// A call answered synchronously by the upstream, relayed as is
    /// (progress to a caller that asked for it), counted when it ends.
    async fn pass_through(
        &self,
        route: &Route,
        (timeout, principal, via, credential): (
            std::time::Duration,
            Option<&str>,
            Option<&str>,
            Option<CallCredential>,
        ),
        arguments: JsonObject,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let started = std::time::Instant::now();
        let answer = self
            .relay_call(route, (timeout, credential), arguments, request, context)
            .await;
        let labels = CallLabels::new(
            &self.upstreams,
            &route.server,
            &route.tool,
            Face::Mcp,
            PASS_THROUGH,
        )
        .by(principal)
        .via(via);
        let (outcome, labels) = match &answer {
            Ok(CallToolResponse::Complete(result)) => {
                (Outcome::answered(result.is_error == Some(true)), labels)
            }
            // A question round goes back to the caller: the call goes on.
            Ok(_) => return answer,
            Err(_) if context.ct.is_cancelled() || self.caller_gone.is_cancelled() => {
                (Outcome::Cancelled, labels)
            }
            Err(e) => (
                Outcome::Failed,
                labels.failed_with(crate::failure::class_of_rpc(e)),
            ),
        };
        crate::metrics::call_ended(&labels, outcome, started.elapsed());
        answer
    }

    /// [`FrontServer::pass_through`]'s exchange with the upstream.
    async fn relay_call(
        &self,
        route: &Route,
        (timeout, credential): (std::time::Duration, Option<CallCredential>),
        arguments: JsonObject,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let lane = self
            .upstreams
            .lane(&route.server)
            .await
            .map_err(|e| Failure::unreachable(&e))?;
        let mut running = sync_call(
            lane,
            &route.tool,
            Value::Object(arguments),
            SyncOptions {
                declare_tasks: false,
                // An input round (SEP-2322) is the caller's to answer: its
                // answers and the upstream's state go back untouched, and
                // the upstream sees the capabilities the caller declared.
                input_responses: request.input_responses.clone(),
                request_state: request.request_state.clone(),
                capabilities: context.meta.client_capabilities(),
                // Relay, don't rewrite: the upstream sees who calls and
                // the token its progress is for, as the caller sent them.
                progress_token: context.meta.get_progress_token(),
                client_info: caller_info(context),
                credential,
                ..crate::drivers::exchange_options(timeout)
            },
        )
        .await
        .inspect_err(|e| self.upstreams.saw(&route.server, Seen::of_upstream(e)))
        .map_err(error_of)?;
        let token = context.meta.get_progress_token();
        // The last progress relayed. rmcp hands each notification from the
        // upstream to its own task, so two can arrive here swapped; the
        // protocol says progress only increases, so a value not above the
        // last one relayed is stale and is dropped (the caller saw `2, 1`).
        let mut relayed: Option<f64> = None;
        loop {
            tokio::select! {
                event = running.next() => match event {
                    Some(SyncEvent::Progress { progress, total, message }) => {
                        if !advances(&mut relayed, progress) {
                            continue;
                        }
                        if let Some(token) = &token {
                            let mut note = ProgressNotificationParam::new(token.clone(), progress);
                            note.total = total;
                            note.message = message;
                            let _ = context.peer.notify_progress(note).await;
                        }
                    }
                    Some(SyncEvent::Ask(ask)) => {
                        // A session-ful caller that offers the capability
                        // answers as it would the upstream itself; a
                        // 2026-07-28 caller cannot be asked mid-call (its
                        // way is a task).
                        if caller_can_answer(context, &ask.method) {
                            tokio::spawn(relay_ask(context.peer.clone(), ask, self.upstreams.question_timeout()));
                        } else {
                            let why = format!(
                                "{}: the client of this call cannot answer it mid-call; call the tool as a task",
                                ask.method
                            );
                            ask.respond(Err(ErrorData::invalid_request(why, None)));
                        }
                    }
                    Some(SyncEvent::Done(answer)) => {
                        self.upstreams.saw_outcome(&route.server, &answer);
                        return answer.map_err(error_of);
                    }
                    None => {
                        return Err(ErrorData::internal_error(
                            "the upstream call ended without a result",
                            None,
                        ));
                    }
                },
                _ = context.ct.cancelled() => {
                    running.cancel().await;
                    return Err(ErrorData::internal_error("the call was cancelled", None));
                }
                _ = self.caller_gone.cancelled() => {
                    running.cancel().await;
                    return Err(ErrorData::internal_error("the caller went away", None));
                }
            }
        }
    }
}

/// The front's own pass-through exchange, for [`Calls::execute`]: the
/// upstream's progress and questions go to this request's caller, and the
/// call is withdrawn when the caller cancels or goes away.
struct FrontRelay<'a> {
    front: &'a FrontServer,
    /// Whom the call is for (the audit trail of its end).
    principal: Option<&'a str>,
    /// The virtual server it came through (the audit trail of its end).
    via: Option<&'a str>,
    request: &'a CallToolRequestParams,
    context: &'a RequestContext<RoleServer>,
}

#[async_trait::async_trait]
impl Relay for FrontRelay<'_> {
    async fn pass_through(
        &self,
        route: &Route,
        (timeout, credential): (std::time::Duration, Option<CallCredential>),
        arguments: JsonObject,
    ) -> Result<CallToolResponse, ErrorData> {
        self.front
            .pass_through(
                route,
                (timeout, self.principal, self.via, credential),
                arguments,
                self.request,
                self.context,
            )
            .await
    }
}

/// The caller's `clientInfo`: in the request's `_meta` (2026-07-28), or as
/// it named itself at `initialize` (a session from before).
fn caller_info(context: &RequestContext<RoleServer>) -> Option<rmcp::model::Implementation> {
    context
        .meta
        .client_info()
        .or_else(|| context.peer.peer_info().map(|p| p.client_info.clone()))
}

/// The protocol era of the caller of this request: the revision its
/// request names (2026-07-28) or its session agreed to (before).
fn caller_era(context: &RequestContext<RoleServer>) -> mcptask_core::protocol::Era {
    let version = context.protocol_version();
    mcptask_core::protocol::Era::of(version.as_ref().map_or("", |v| v.as_str()))
}

/// Whether the caller of a pass-through call can be sent `method` now: a
/// session before 2026-07-28 that declared the matching capability.
fn caller_can_answer(context: &RequestContext<RoleServer>, method: &str) -> bool {
    let Some(info) = context.peer.peer_info() else {
        return false;
    };
    if mcptask_core::protocol::is_modern(info.protocol_version.as_str()) {
        return false;
    }
    let caps = &info.capabilities;
    match method {
        "elicitation/create" => caps.elicitation.is_some(),
        #[allow(deprecated)]
        "sampling/createMessage" => caps.sampling.is_some(),
        "roots/list" => caps.roots.is_some(),
        _ => false,
    }
}

/// Send the upstream's request to the caller and its answer back; withdrawn
/// when the upstream withdraws it, given up after `bound` (the question
/// timeout: while the caller is asked, the call's own deadline stands still).
async fn relay_ask(
    peer: rmcp::Peer<RoleServer>,
    ask: mcptask_client::upstream::Ask,
    bound: std::time::Duration,
) {
    let withdrawn = ask.withdrawn();
    let mut params = ask.params.clone();
    if let Some(obj) = params.as_object_mut() {
        // The upstream's own routing marks mean nothing to the caller.
        obj.remove("_meta");
    }
    let request = rmcp::model::ServerRequest::CustomRequest(rmcp::model::CustomRequest::new(
        ask.method.clone(),
        Some(params),
    ));
    let answer = tokio::select! {
        _ = withdrawn.cancelled() => return,
        answer = peer.send_request(request) => answer,
        _ = tokio::time::sleep(bound) => {
            let why = format!(
                "{}: no answer from the client within {} ms ([proxy] question_timeout_ms)",
                ask.method,
                bound.as_millis()
            );
            ask.respond(Err(ErrorData::internal_error(why, None)));
            return;
        }
    };
    ask.respond(match answer {
        Ok(result) => serde_json::to_value(result).map_err(|e| Failure::internal(&e).into()),
        Err(rmcp::service::ServiceError::McpError(data)) => Err(data),
        Err(e) => Err(ErrorData::internal_error(
            format!("the client did not answer: {e}"),
            None,
        )),
    });
}

fn error_of(e: mcptask_client::upstream::UpstreamError) -> ErrorData {
    Failure::from(e).into()
}

/// How long after the gateway's start the front's `tools/list` may wait
/// for the first listings under way: a host's first list right after it
/// spawned `proxy --stdio` gets the servers that answer within it, and no
/// server, mute or slow, ever holds the list past it (its tools are
/// announced with `notifications/tools/list_changed` when they come).
const FIRST_LIST_GRACE: std::time::Duration = std::time::Duration::from_millis(900);

/// How often a session's list-change follower checks that its session lives.
const SESSION_CHECK: std::time::Duration = std::time::Duration::from_secs(60);

impl ServerHandler for FrontServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(capabilities::offered(&self.upstreams))
            .with_server_info(Implementation::new(
                "mcptask-proxy",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(
                "mcptask proxy: the tools of several MCP servers; declare the \
             io.modelcontextprotocol/tasks extension and every call becomes a durable task.",
            )
    }

    /// What the front offers depends on its upstreams (see `get_info`):
    /// right after the start, the servers that answer at once are waited
    /// for, as the first `tools/list` waits for them.
    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        self.upstreams.first_listings(FIRST_LIST_GRACE).await;
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    // Deprecated by SEP-2577; sessions before 2026-07-28 still use it.
    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let caller = (self.caller)(&context);
        logging::set_level(&self.calls, &caller, request).await
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        // What is listed now; right after the start, the servers that
        // answer at once (a slow or mute one is announced when it answers).
        self.upstreams.first_listings(FIRST_LIST_GRACE).await;
        // Only the tools this caller may call (tool policy).
        let caller = (self.caller)(&context);
        let mut tools: Vec<Tool> = self
            .upstreams
            .catalog()
            .routes()
            .filter(|r| route::visible(&self.calls, &caller, &r.server, &r.tool))
            .map(|r| r.definition.clone())
            .collect();
        if !declares_tasks(&context) {
            tools.extend(agent_tools::definitions());
        }
        Ok(ListToolsResult::with_all_items(tools))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.upstreams
            .catalog()
            .get(name)
            .map(|r| r.definition.clone())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let span = crate::spans::front_call(&request, &context);
        let caller = (self.caller)(&context);
        let declares = declares_tasks(&context);
        let ask = if declares { Ask::Tasks } else { Ask::Plain };
        // The fast path decided this request already when it chose not to
        // relay it: that decision (and its admission) is the call's.
        let decided = match route::Handoff::take_from(&context, ask) {
            Some(decided) => decided,
            None => {
                let intent = Intent {
                    caller: &caller,
                    face: Face::Mcp,
                    target: Target::Front(&request.name),
                    ask,
                };
                route::decide(&self.calls, intent).await
            }
        };
        // The front's own refusals, in the shape of an upstream of the
        // caller's era (`failure::tool_call_refusal`).
        let refused = |failure: Failure| {
            crate::failure::tool_call_refusal(failure.for_caller(&caller), caller_era(&context))
                .map(|result| CallToolResponse::Complete(result.bridged()))
        };
        let decided = match decided {
            Ok(decided) => decided,
            Err(failure) => return refused(failure),
        };
        let routed = match decided {
            Decided::Call(routed) => routed,
            Decided::Agent(tool, _admitted) => {
                let principal = caller.principal.clone();
                let arguments = request.arguments.clone().unwrap_or_default();
                return agent_tools::call(&self.runtime, tool, arguments, principal.as_deref())
                    .await
                    .map(CallToolResponse::Complete);
            }
            // The front names only listed tools.
            Decided::Unlisted { tool, .. } => {
                return refused(Failure::UnknownTool { server: None, tool });
            }
        };
        let routed = *routed;
        let (route, declares) = (routed.route.clone(), routed.declares);
        let relay = FrontRelay {
            front: self,
            principal: caller.principal.as_deref(),
            via: caller.via(),
            request: &request,
            context: &context,
        };
        let execution = Execution {
            arguments: Value::Object(request.arguments.clone().unwrap_or_default()),
            options: CallOptions {
                principal: caller.principal.clone(),
                face: Some(Face::Mcp),
                // The virtual server it came through, kept with the call
                // for the audit trail of its end (`drivers::count`).
                correlation: Some(match caller.via() {
                    Some(via) => json!({"frontTool": route.front, "via": via}),
                    None => json!({"frontTool": route.front}),
                }),
                input_responses: request.input_responses.clone().unwrap_or_default(),
                request_state: request.request_state.clone(),
                // The caller's answers go to the upstream, which judges them.
                relay_answers: true,
                subject_token: caller.token.clone(),
                ..Default::default()
            },
            as_tasks: true,
            relay: Some(&relay),
        };
        let answer = self.calls.execute(routed, execution).instrument(span).await;
        render(answer, &route, declares, &caller).map(Bridged::bridged)
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        self.tasks.get_task(request, context).await
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.tasks.update_task(request, context).await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.tasks.cancel_task(request, context).await
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        self.tasks.on_custom_request(request, context).await
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let caller = (self.caller)(&context);
        let prompts = self.directory.list_prompts(&self.calls, &caller).await?;
        Ok(ListPromptsResult::with_all_items(prompts))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let caller = (self.caller)(&context);
        self.directory
            .get_prompt(&self.calls, &caller, request)
            .await
            .map(Bridged::bridged)
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let caller = (self.caller)(&context);
        let resources = self.directory.list_resources(&self.calls, &caller).await?;
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let caller = (self.caller)(&context);
        let templates = self.directory.list_templates(&self.calls, &caller).await?;
        Ok(ListResourceTemplatesResult::with_all_items(templates))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let caller = (self.caller)(&context);
        self.directory
            .read_resource(&self.calls, &caller, request)
            .await
            .map(Bridged::bridged)
    }

    // Deprecated by SEP-2575 (2026-07-28 listens instead); sessions before
    // it still subscribe.
    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: rmcp::model::SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let caller = (self.caller)(&context);
        self.subscriptions
            .subscribe(&self.calls, &self.directory, &caller, request, &context)
            .await
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: rmcp::model::UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let caller = (self.caller)(&context);
        self.subscriptions
            .unsubscribe(&self.calls, &self.directory, &caller, request, &context)
            .await
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let caller = (self.caller)(&context);
        self.directory
            .complete(&self.calls, &caller, request)
            .await
            .map(Bridged::bridged)
    }

    /// A session-ful caller (a legacy `initialize`) hears the list changes
    /// (`ListChanges`) until its session ends.
    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let mut changes = ListChanges::new(&self.upstreams);
        let peer = context.peer;
        tokio::spawn(async move {
            loop {
                let sent = tokio::select! {
                    change = changes.next() => match change {
                        Some(ListKind::Tools) => peer.notify_tool_list_changed().await,
                        Some(ListKind::Prompts) => peer.notify_prompt_list_changed().await,
                        Some(ListKind::Resources) => peer.notify_resource_list_changed().await,
                        None => return,
                    },
                    // A session that ended while the lists stood still
                    // must not keep this task forever.
                    _ = tokio::time::sleep(SESSION_CHECK) => {
                        if peer.is_transport_closed() {
                            return;
                        }
                        Ok(())
                    }
                };
                if sent.is_err() {
                    return;
                }
            }
        });
    }

    /// `subscriptions/listen` (SEP-2575) for list changes; task status
    /// notifications are the `taskIds` filter, served by the task server
    /// (see `on_custom_request`).
    fn accepted_subscription_filter(
        &self,
        _requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(
            SubscriptionFilter::builder()
                .tools_list_changed()
                .prompts_list_changed()
                .resources_list_changed()
                .build(),
        )
    }

    /// One acknowledged stream hears the list changes (`ListChanges`) it
    /// asked for, until the client goes away.
    async fn listen(&self, subscription: SubscriptionContext) -> Result<(), ErrorData> {
        // Before anything awaits: the acknowledgment is on its way, and a
        // change the client causes once it reads it must be heard.
        let mut changes = ListChanges::new(&self.upstreams);
        let sink = subscription.sink();
        loop {
            let change = tokio::select! {
                _ = subscription.cancelled() => return Ok(()),
                change = changes.next() => change,
            };
            let sent = match change {
                Some(ListKind::Tools) => sink.notify_tool_list_changed().await,
                Some(ListKind::Prompts) => sink.notify_prompt_list_changed().await,
                Some(ListKind::Resources) => sink.notify_resource_list_changed().await,
                None => return Ok(()),
            };
            match sent {
                // A kind this stream did not ask for is not sent (the sink filters).
                Ok(()) | Err(rmcp::service::SubscriptionSendError::NotificationNotAccepted(_)) => {}
                Err(_) => return Ok(()),
            }
        }
    }
}

/// A list the front offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ListKind {
    Tools,
    Prompts,
    Resources,
}

/// The changes of the front's lists, from the moment it is made: the tool
/// catalog's (rebuilt after an upstream said its tools changed, or found
/// changed by a periodic listing), and the upstreams' word that their
/// prompts or resources changed (the front lists those live, so the word
/// is passed on at once).
struct ListChanges {
    tools: tokio::sync::watch::Receiver<u64>,
    prompts: Vec<tokio::sync::watch::Receiver<u64>>,
    resources: Vec<tokio::sync::watch::Receiver<u64>>,
}

impl ListChanges {
    fn new(upstreams: &Upstreams) -> Self {
        let pools: Vec<_> = upstreams
            .servers()
            .iter()
            .filter_map(|s| upstreams.lanes(&s.name).ok())
            .collect();
        let mut tools = upstreams.catalog_changes();
        tools.borrow_and_update();
        let seen = |mut r: tokio::sync::watch::Receiver<u64>| {
            r.borrow_and_update();
            r
        };
        Self {
            tools,
            prompts: pools.iter().map(|p| seen(p.prompts_changed())).collect(),
            resources: pools.iter().map(|p| seen(p.resources_changed())).collect(),
        }
    }

    /// The next change; `None` once nothing can change any more.
    async fn next(&mut self) -> Option<ListKind> {
        tokio::select! {
            r = self.tools.changed() => r.ok().map(|()| ListKind::Tools),
            () = any_changed(&mut self.prompts) => Some(ListKind::Prompts),
            () = any_changed(&mut self.resources) => Some(ListKind::Resources),
        }
    }
}

/// Until one of `signals` changes (marking it seen); forever if none can.
async fn any_changed(signals: &mut [tokio::sync::watch::Receiver<u64>]) {
    let mut waits: Vec<_> = signals
        .iter_mut()
        .map(|s| Box::pin(async move { s.changed().await.is_ok() }))
        .collect();
    while !waits.is_empty() {
        let (changed, _, rest) = futures::future::select_all(waits).await;
        if changed {
            return;
        }
        // That server's pool is gone: wait on the others.
        waits = rest;
    }
    std::future::pending().await
}

/// Whether `progress` is above the last one relayed (`last`, updated when
/// it is): progress only increases, so anything else is stale.
fn advances(last: &mut Option<f64>, progress: f64) -> bool {
    if last.is_some_and(|last| progress <= last) {
        return false;
    }
    *last = Some(progress);
    true
}

#[cfg(test)]
mod progress_tests {
    use super::advances;

    #[test]
    fn progress_arriving_swapped_is_relayed_increasing_only() {
        let mut last = None;
        let relayed: Vec<f64> = [1.0, 3.0, 2.0, 3.0, 4.0]
            .into_iter()
            .filter(|p| advances(&mut last, *p))
            .collect();
        assert_eq!(relayed, [1.0, 3.0, 4.0]);
    }
}
