//! The client side of an upstream session that relays a caller's work: it
//! declares `elicitation` and `sampling` (servers such as the reference
//! "everything" server only offer their input paths to a client that does),
//! and hands every server→client request and progress report to whoever
//! holds the session at the moment, instead of refusing them as the
//! tracker's own sessions do.
//!
//! Routing rule: a request carrying SEP-1686's `related-task` marker goes to
//! that task's receiver and nowhere else; any other request and every
//! progress notification goes to the synchronous call holding the session.
//! Sessions are exclusive to one call (see `lanes`), which is what makes the
//! second half exact: rmcp gives a client no way to tell which outstanding
//! request a server→client request belongs to.

// Sampling and roots are deprecated by SEP-2577, but 2025-11-25 servers
// (the everything server among them) still send them: relaying them is the point.
#![allow(deprecated)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use mcptask_core::client::sep1686::related_task;
use rmcp::model::{
    ClientCapabilities, ClientConfig, CreateMessageRequestParams, CreateMessageResult,
    CustomNotification, CustomRequest, CustomResult, ElicitRequestParams, ElicitResult, ErrorCode,
    ErrorData, Implementation, ListRootsResult, ProgressNotificationParam,
    ResourceUpdatedNotificationParam, TaskStatusNotificationParams,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ClientHandler, RoleClient};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

/// A request the upstream server sent while working for us (elicitation,
/// sampling, roots, or any method rmcp did not recognise), waiting for an
/// answer from whoever the call or task belongs to.
///
/// Dropping it unanswered answers the upstream with an internal error.
#[derive(Debug)]
pub struct Ask {
    /// The JSON-RPC method, e.g. `elicitation/create`, `sampling/createMessage`, `roots/list`.
    pub method: String,
    /// The request's params as JSON, `_meta` included.
    pub params: Value,
    withdrawn: CancellationToken,
    responder: oneshot::Sender<Result<Value, ErrorData>>,
    /// Counts this question as open while it lives (see
    /// [`OpenQuestions`]); released when it is answered or dropped.
    open: Option<OpenQuestion>,
}

/// How many of a call's questions wait for an answer: the call's deadline
/// stands still meanwhile (the upstream waits on the caller, not the other
/// way round).
#[derive(Debug, Clone)]
pub(crate) struct OpenQuestions(Arc<tokio::sync::watch::Sender<usize>>);

impl OpenQuestions {
    pub(crate) fn new() -> Self {
        Self(Arc::new(tokio::sync::watch::Sender::new(0)))
    }

    /// Watch the count.
    pub(crate) fn watch(&self) -> tokio::sync::watch::Receiver<usize> {
        self.0.subscribe()
    }

    fn open(&self) -> OpenQuestion {
        self.0.send_modify(|n| *n += 1);
        OpenQuestion(self.0.clone())
    }
}

/// One open question of [`OpenQuestions`].
#[derive(Debug)]
struct OpenQuestion(Arc<tokio::sync::watch::Sender<usize>>);

impl Drop for OpenQuestion {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl Ask {
    /// The SEP-1686 task this request is for, if it says.
    pub fn related_task(&self) -> Option<String> {
        related_task(&self.params)
    }

    /// Cancelled when the upstream withdraws the request (its
    /// `notifications/cancelled`, e.g. its own 60 s timeout fired) or the
    /// session closes: an answer after that reaches nobody.
    pub fn withdrawn(&self) -> CancellationToken {
        self.withdrawn.clone()
    }

    /// Answer with a result object (e.g. `{"action":"accept","content":{…}}`
    /// for an elicitation) or a JSON-RPC error. Returns `false` if nobody
    /// waits any more (withdrawn, or the session is gone).
    pub fn respond(self, answer: Result<Value, ErrorData>) -> bool {
        !self.withdrawn.is_cancelled() && self.responder.send(answer).is_ok()
    }

    /// This question, counted among `questions` until it is answered.
    pub(crate) fn counted_in(mut self, questions: &OpenQuestions) -> Self {
        self.open = Some(questions.open());
        self
    }
}

/// What the session's current synchronous call receives.
#[derive(Debug)]
pub(crate) enum CallEvent {
    Progress(ProgressNotificationParam),
    Ask(Ask),
}

#[derive(Default)]
struct Routes {
    current: Option<mpsc::UnboundedSender<CallEvent>>,
    tasks: HashMap<String, mpsc::UnboundedSender<Ask>>,
}

/// What a server's `notifications/{tools,prompts,resources}/list_changed`
/// bump, one counter per list (cheap to clone: shared senders).
#[derive(Clone)]
pub(crate) struct ListSignals {
    pub(crate) tools: Arc<watch::Sender<u64>>,
    pub(crate) prompts: Arc<watch::Sender<u64>>,
    pub(crate) resources: Arc<watch::Sender<u64>>,
}

impl ListSignals {
    pub(crate) fn new() -> Self {
        Self {
            tools: Arc::new(watch::channel(0).0),
            prompts: Arc::new(watch::channel(0).0),
            resources: Arc::new(watch::channel(0).0),
        }
    }
}

fn bump(signal: &watch::Sender<u64>) {
    signal.send_modify(|v| *v = v.wrapping_add(1));
}

/// The `ClientHandler` of upstream sessions (cheap to clone: shared routes).
#[derive(Clone, Default)]
pub struct UpstreamHandler {
    routes: Arc<Mutex<Routes>>,
    /// Bumped on the server's list-changed notifications.
    lists_changed: Option<ListSignals>,
    /// Where the server's `notifications/resources/updated` go (see
    /// `remote::watch`); a session without it drops them.
    resource_updates: Option<mpsc::UnboundedSender<ResourceUpdatedNotificationParam>>,
}

/// Unregisters a route when dropped.
pub(crate) struct RouteGuard {
    routes: Arc<Mutex<Routes>>,
    task: Option<String>,
}

impl Drop for RouteGuard {
    fn drop(&mut self) {
        let mut routes = self.routes.lock().expect("routes lock");
        match self.task.take() {
            Some(id) => {
                routes.tasks.remove(&id);
            }
            None => routes.current = None,
        }
    }
}

impl UpstreamHandler {
    /// Bump `signals` whenever the server says one of its lists changed.
    pub(crate) fn on_lists_changed(mut self, signals: ListSignals) -> Self {
        self.lists_changed = Some(signals);
        self
    }

    /// Hand the server's `notifications/resources/updated` to `sink`.
    pub(crate) fn on_resource_updates(
        mut self,
        sink: mpsc::UnboundedSender<ResourceUpdatedNotificationParam>,
    ) -> Self {
        self.resource_updates = Some(sink);
        self
    }

    /// Make `sink` the receiver of progress and untagged asks until the guard drops.
    pub(crate) fn attach_call(&self, sink: mpsc::UnboundedSender<CallEvent>) -> RouteGuard {
        self.routes.lock().expect("routes lock").current = Some(sink);
        RouteGuard {
            routes: self.routes.clone(),
            task: None,
        }
    }

    /// Route asks marked with `related-task: task_id` to `sink` until the guard drops.
    pub(crate) fn attach_task(
        &self,
        task_id: &str,
        sink: mpsc::UnboundedSender<Ask>,
    ) -> RouteGuard {
        self.routes
            .lock()
            .expect("routes lock")
            .tasks
            .insert(task_id.to_string(), sink);
        RouteGuard {
            routes: self.routes.clone(),
            task: Some(task_id.to_string()),
        }
    }

    /// Hand `params` to its receiver and wait for the answer, or for the
    /// upstream to withdraw the request.
    async fn ask(
        &self,
        method: &str,
        mut params: Value,
        context: RequestContext<RoleClient>,
    ) -> Result<Value, ErrorData> {
        // rmcp moves the request's `_meta` (where `related-task` lives) into
        // the context; put it back so the receiver sees the request whole.
        if !context.meta.0.0.is_empty()
            && let Some(obj) = params.as_object_mut()
            && !obj.contains_key("_meta")
        {
            obj.insert("_meta".into(), Value::Object(context.meta.0.0.clone()));
        }
        let (responder, answer) = oneshot::channel();
        let ask = Ask {
            method: method.to_string(),
            params,
            withdrawn: context.ct.clone(),
            responder,
            open: None,
        };
        let delivered = {
            let routes = self.routes.lock().expect("routes lock");
            match ask.related_task() {
                Some(task) => match routes.tasks.get(&task) {
                    Some(sink) => sink.send(ask).is_ok(),
                    None => false,
                },
                None => match &routes.current {
                    Some(sink) => sink.send(CallEvent::Ask(ask)).is_ok(),
                    None => false,
                },
            }
        };
        if !delivered {
            return Err(ErrorData::new(
                ErrorCode::INTERNAL_ERROR,
                format!("{method}: nobody is waiting for input on this session"),
                None,
            ));
        }
        tokio::select! {
            answer = answer => answer.unwrap_or_else(|_| Err(ErrorData::new(
                ErrorCode::INTERNAL_ERROR,
                format!("{method}: the caller went away without answering"),
                None,
            ))),
            _ = context.ct.cancelled() => Err(ErrorData::new(
                ErrorCode::INTERNAL_ERROR,
                format!("{method}: withdrawn by the server"),
                None,
            )),
        }
    }
}

fn decode<T: serde::de::DeserializeOwned>(method: &str, v: Value) -> Result<T, ErrorData> {
    serde_json::from_value(v).map_err(|e| {
        ErrorData::invalid_params(format!("{method}: the answer does not fit: {e}"), None)
    })
}

fn encode<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

impl ClientHandler for UpstreamHandler {
    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let m = "elicitation/create";
        decode(m, self.ask(m, encode(&request), context).await?)
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let m = "sampling/createMessage";
        decode(m, self.ask(m, encode(&params), context).await?)
    }

    async fn list_roots(
        &self,
        context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        let m = "roots/list";
        decode(
            m,
            self.ask(m, Value::Object(Default::default()), context)
                .await?,
        )
    }

    /// Also receives an `elicitation/create` whose schema rmcp cannot parse.
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleClient>,
    ) -> Result<CustomResult, ErrorData> {
        let params = request.params.unwrap_or(Value::Object(Default::default()));
        self.ask(&request.method, params, context)
            .await
            .map(CustomResult)
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let routes = self.routes.lock().expect("routes lock");
        if let Some(sink) = &routes.current {
            let _ = sink.send(CallEvent::Progress(params));
        }
    }

    async fn on_task_status(
        &self,
        _params: TaskStatusNotificationParams,
        _context: NotificationContext<RoleClient>,
    ) {
        // SEP-1686 status notifications are optional hints; tasks are polled.
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        if let Some(signals) = &self.lists_changed {
            bump(&signals.tools);
        }
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        if let Some(signals) = &self.lists_changed {
            bump(&signals.prompts);
        }
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        if let Some(signals) = &self.lists_changed {
            bump(&signals.resources);
        }
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        if let Some(sink) = &self.resource_updates {
            let _ = sink.send(params);
        }
    }

    async fn on_custom_notification(
        &self,
        _notification: CustomNotification,
        _context: NotificationContext<RoleClient>,
    ) {
    }

    fn get_info(&self) -> ClientConfig {
        upstream_client_config()
    }
}

/// Capabilities of an upstream session: input (elicitation, sampling) is
/// relayed, and the tasks extension is declared for SEP-2663 servers.
pub(crate) fn upstream_client_config() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::builder()
            .enable_elicitation()
            .enable_sampling()
            .enable_tasks()
            .build(),
        Implementation::new("mcptask", env!("CARGO_PKG_VERSION")),
    )
}
