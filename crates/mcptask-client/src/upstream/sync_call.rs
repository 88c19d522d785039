//! A plain synchronous `tools/call` on an exclusive lane, as a stream of
//! events: progress, the server's questions, and the outcome.

use std::time::Duration;

use futures::FutureExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelledNotificationParam,
    ClientCapabilities, ClientRequest, GetExtensions, Implementation, InputResponses,
    ProgressNotificationParam, ProgressToken, RequestMetaObject, ServerResult,
};
use rmcp::service::PeerRequestOptions;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::Instrument;

use super::{Ask, Lane, UpstreamError};
use crate::remote::RemoteError;
use crate::remote::handler::{CallEvent, OpenQuestions, RouteGuard};
use crate::remote::relabel::CallerProgressToken;

/// How to make a [`sync_call`].
#[derive(Debug, Clone, Default)]
pub struct SyncOptions {
    /// Declare the tasks extension on the call (2026-07-28 sessions only).
    /// Off by default: the call is meant to be answered synchronously, so a
    /// SEP-2663 server must not turn it into a task.
    pub declare_tasks: bool,
    /// Bound on the upstream's exchange: how long the server may take to
    /// answer, not counting the time one of its questions
    /// ([`SyncEvent::Ask`]) waits for the caller's answer (that wait has a
    /// bound of its own, the caller's). At the bound the call ends with
    /// [`UpstreamError::Timeout`], is withdrawn upstream and its lane
    /// closed. `None` waits as long as the server works (cancel with
    /// [`SyncCall::cancel`]).
    pub timeout: Option<Duration>,
    /// Answers to the questions of the server's last input round (SEP-2322
    /// `inputResponses`), relayed as given.
    pub input_responses: Option<InputResponses>,
    /// The server's `requestState` of that round, given back untouched.
    pub request_state: Option<String>,
    /// The client capabilities to declare on the call (2026-07-28
    /// sessions): a front passes its caller's, exactly as declared. `None`
    /// declares what the lane can relay (elicitation, sampling).
    pub capabilities: Option<ClientCapabilities>,
    /// The caller's `_meta.progressToken`, sent upstream as the call's own
    /// (a front relays its caller's token; see `remote::relabel`). `None`
    /// sends a token of mcptask's, unique on the session. Progress comes
    /// back as [`SyncEvent::Progress`] either way.
    pub progress_token: Option<ProgressToken>,
    /// The caller's `clientInfo`, sent in `_meta`
    /// (`io.modelcontextprotocol/clientInfo`) on a 2026-07-28 session, where
    /// every request names its client. A session from before 2026-07-28 named
    /// its client once, at `initialize` (mcptask, for a session shared by
    /// every caller), and this is not sent.
    pub client_info: Option<Implementation>,
    /// The call's own credential, sent instead of the lane's
    /// (`crate::identity`).
    pub credential: Option<crate::identity::CallCredential>,
}

/// What a synchronous call reports, in order; [`SyncEvent::Done`] is last.
#[derive(Debug)]
pub enum SyncEvent {
    /// A `notifications/progress` for this call.
    Progress {
        /// Progress so far.
        progress: f64,
        /// Total, if the server knows it.
        total: Option<f64>,
        /// The server's text, if any (see `mcptask_core::front::progress_message`).
        message: Option<String>,
    },
    /// The server asks something (elicitation, sampling, roots) and waits.
    Ask(Ask),
    /// The call's outcome: a result, or (SEP-2322) an input round the
    /// server asks the caller to answer in a new call.
    Done(Result<CallToolResponse, UpstreamError>),
}

/// A synchronous call in flight; owns its lane until `Done` (then the lane
/// goes back to the pool) or until dropped.
/// Dropping it before `Done` withdraws the call like [`SyncCall::cancel`].
pub struct SyncCall {
    lane: Option<Lane>,
    events: mpsc::UnboundedReceiver<CallEvent>,
    response: Option<JoinHandle<Result<ServerResult, UpstreamError>>>,
    request_id: rmcp::model::RequestId,
    /// Progress lines the stdio tap had counted before the call.
    progress_base: Option<u64>,
    progress_seen: u64,
    outcome: Option<Result<CallToolResponse, UpstreamError>>,
    finished: bool,
    route: Option<RouteGuard>,
    /// The bound on the exchange ([`SyncOptions::timeout`]).
    deadline: Option<Deadline>,
    /// The server's questions handed out and not answered yet.
    questions: OpenQuestions,
    asking: tokio::sync::watch::Receiver<usize>,
}

/// A bound on an exchange that stands still while the caller is asked.
struct Deadline {
    bound: Duration,
    at: tokio::time::Instant,
    /// Since when it stands still.
    paused: Option<tokio::time::Instant>,
}

impl Deadline {
    fn new(bound: Duration) -> Self {
        Self {
            bound,
            at: tokio::time::Instant::now() + bound,
            paused: None,
        }
    }

    /// When it falls, if it runs (`asking`: a question waits, it stands
    /// still).
    fn running_until(&mut self, asking: bool) -> Option<tokio::time::Instant> {
        let now = tokio::time::Instant::now();
        match (asking, self.paused) {
            (true, None) => self.paused = Some(now),
            (false, Some(since)) => {
                self.at += now - since;
                self.paused = None;
            }
            _ => {}
        }
        self.paused.is_none().then_some(self.at)
    }
}

/// Start `tools/call name(arguments)` on `lane` and return its events.
///
/// ```no_run
/// use mcptask_client::upstream::{sync_call, LanePool, LaneOptions, SyncEvent, SyncOptions};
/// # async fn demo(pool: LanePool) -> Result<(), Box<dyn std::error::Error>> {
/// let lane = pool.acquire().await?;
/// let mut call = sync_call(lane, "trigger-long-running-operation",
///     serde_json::json!({"duration": 3, "steps": 3}), SyncOptions::default()).await?;
/// while let Some(event) = call.next().await {
///     match event {
///         SyncEvent::Progress { progress, total, .. } => println!("{progress}/{total:?}"),
///         SyncEvent::Ask(ask) => { ask.respond(Ok(serde_json::json!({"action": "decline"}))); }
///         SyncEvent::Done(answer) => println!("{:?}", answer?),
///     }
/// }
/// # Ok(()) }
/// ```
pub async fn sync_call(
    mut lane: Lane,
    name: &str,
    arguments: Value,
    options: SyncOptions,
) -> Result<SyncCall, UpstreamError> {
    let arguments = match arguments {
        Value::Object(map) => Some(map),
        Value::Null => None,
        other => {
            return Err(UpstreamError::Remote(RemoteError::Protocol(format!(
                "tool arguments must be an object, not {other}"
            ))));
        }
    };
    lane.ensure_listed().await;
    let mut params = CallToolRequestParams::new(name.to_string());
    if let Some(args) = arguments {
        params = params.with_arguments(args);
    }
    if let Some(responses) = options.input_responses {
        params = params.with_input_responses(responses);
    }
    if let Some(state) = options.request_state {
        params = params.with_request_state(state);
    }
    let span = crate::trace::tool_call_span(None, name);
    crate::trace::stamp(&mut params.meta, &span);
    // The bound is this call's own ([`Deadline`]), not rmcp's: rmcp's
    // would count the time the caller takes to answer the server's
    // questions.
    let mut request_options = PeerRequestOptions::default();
    let modern = lane
        .peer()
        .peer_info()
        .is_some_and(|i| mcptask_core::protocol::is_modern(i.protocol_version.as_str()));
    // Sampling is deprecated (SEP-2577) but still relayed; see remote::handler.
    // Stamped after the session's own metadata, so these win.
    let mut meta = RequestMetaObject::default();
    #[allow(deprecated)]
    if modern && !options.declare_tasks {
        meta.set_client_capabilities(options.capabilities.unwrap_or_else(|| {
            ClientCapabilities::builder()
                .enable_elicitation()
                .enable_sampling()
                .build()
        }));
    }
    if modern && let Some(client) = options.client_info {
        meta.set_client_info(client);
    }
    if !meta.is_empty() {
        request_options = request_options.with_meta(meta);
    }
    let mut request = ClientRequest::CallToolRequest(rmcp::model::CallToolRequest::new(params));
    if let Some(token) = options.progress_token {
        request.extensions_mut().insert(CallerProgressToken(token));
    }
    crate::identity::CallCredential::attach(options.credential.as_ref(), &mut request);

    let (sink, events) = mpsc::unbounded_channel();
    let route = lane.handler().attach_call(sink);
    let progress_base = lane.tap().map(|t| t.progress_lines());
    let sent = lane
        .peer()
        .send_request_with_option(request, request_options)
        .instrument(span.clone());
    // Sending is part of the exchange: an upstream that never takes the
    // request is bounded like one that never answers it.
    let sent = match options.timeout {
        Some(bound) => match tokio::time::timeout(bound, sent).await {
            Ok(sent) => sent,
            Err(_) => {
                lane.discard();
                return Err(UpstreamError::Timeout {
                    operation: "tools/call".into(),
                    after: bound,
                });
            }
        },
        None => sent.await,
    };
    let handle = sent.map_err(|e| UpstreamError::from_service("tools/call", e))?;
    let request_id = handle.id.clone();
    let response = tokio::spawn(
        handle
            .await_response()
            .map(|r| r.map_err(|e| UpstreamError::from_service("tools/call", e)))
            .instrument(span),
    );
    let questions = OpenQuestions::new();
    Ok(SyncCall {
        lane: Some(lane),
        events,
        response: Some(response),
        request_id,
        progress_base,
        progress_seen: 0,
        outcome: None,
        finished: false,
        route: Some(route),
        deadline: options.timeout.map(Deadline::new),
        asking: questions.watch(),
        questions,
    })
}

impl SyncCall {
    /// The next event; `None` after [`SyncEvent::Done`].
    pub async fn next(&mut self) -> Option<SyncEvent> {
        if self.finished {
            return None;
        }
        if self.outcome.is_some() {
            return Some(self.finish().await);
        }
        let next = loop {
            let asking = *self.asking.borrow_and_update() > 0;
            let falls = self.deadline.as_mut().and_then(|d| d.running_until(asking));
            let response = self.response.as_mut()?;
            tokio::select! {
                biased;
                Some(event) = self.events.recv() => break Next::Event(event),
                joined = response => break Next::Answer(Box::new(joined)),
                _ = tokio::time::sleep_until(falls.unwrap_or_else(tokio::time::Instant::now)), if falls.is_some() => {
                    break Next::Late;
                }
                // A question was asked or answered: the deadline stops or
                // runs again.
                Ok(()) = self.asking.changed(), if self.deadline.is_some() => {}
            }
        };
        match next {
            Next::Event(event) => Some(self.event(event)),
            Next::Answer(joined) => {
                self.response = None;
                self.outcome = Some(match *joined {
                    Ok(r) => r.and_then(call_response),
                    Err(e) => Err(UpstreamError::Remote(RemoteError::Transient(format!(
                        "tools/call: {e}"
                    )))),
                });
                Some(self.finish().await)
            }
            Next::Late => {
                let bound = self.deadline.as_ref().map(|d| d.bound).unwrap_or_default();
                Some(self.time_out(bound))
            }
        }
    }

    /// The server did not answer within `bound`: the call ends with the
    /// timeout, is withdrawn upstream, and its lane is closed (the server
    /// may still be working on it, or be one that never answers).
    fn time_out(&mut self, bound: Duration) -> SyncEvent {
        self.finished = true;
        if let Some(response) = self.response.take() {
            response.abort();
        }
        self.route = None;
        if let Some(lane) = self.lane.take() {
            withdraw_in_background(
                lane,
                self.request_id.clone(),
                "no answer within the call timeout",
            );
        }
        SyncEvent::Done(Err(UpstreamError::Timeout {
            operation: "tools/call".into(),
            after: bound,
        }))
    }

    /// The answer came; hand out the progress that preceded it first.
    /// rmcp dispatches notifications on tasks of their own, so they may
    /// reach us after the answer: on stdio the tap counted how many precede
    /// it (waited for up to 2 s), elsewhere a 50 ms grace picks up stragglers.
    async fn finish(&mut self) -> SyncEvent {
        let expected = match (self.progress_base, self.lane.as_ref().and_then(|l| l.tap())) {
            (Some(base), Some(tap)) => Some(tap.progress_lines().saturating_sub(base)),
            _ => None,
        };
        match expected {
            Some(n) if self.progress_seen < n => {
                let grace = Duration::from_millis(2000);
                if let Ok(Some(event)) = tokio::time::timeout(grace, self.events.recv()).await {
                    return self.event(event);
                }
            }
            Some(_) => {}
            // Without a count, only a call that reported progress waits for
            // stragglers: a fixed wait on every answer would cost every
            // quick pass-through call the whole grace (a trailing progress
            // report is cosmetic, the answer is not).
            None if self.progress_seen > 0 => {
                let grace = Duration::from_millis(50);
                if let Ok(Some(event)) = tokio::time::timeout(grace, self.events.recv()).await {
                    return self.event(event);
                }
            }
            None => {
                tokio::task::yield_now().await;
                if let Ok(event) = self.events.try_recv() {
                    return self.event(event);
                }
            }
        }
        self.finished = true;
        let outcome = self.outcome.take().expect("outcome set before finish");
        // The call is over: the lane goes back to the pool for the next one,
        // unless it ended without the server's answer (a timeout, a broken
        // transport): the server may still be working on it.
        self.route = None;
        if let (Err(UpstreamError::Remote(_) | UpstreamError::Timeout { .. }), Some(lane)) =
            (&outcome, self.lane.as_mut())
        {
            lane.discard();
        }
        self.lane = None;
        SyncEvent::Done(outcome)
    }

    fn event(&mut self, event: CallEvent) -> SyncEvent {
        match event {
            CallEvent::Progress(p) => {
                self.progress_seen += 1;
                progress_event(p)
            }
            CallEvent::Ask(ask) => SyncEvent::Ask(ask.counted_in(&self.questions)),
        }
    }

    /// Withdraw the call: `notifications/cancelled` goes upstream and the
    /// lane is closed rather than reused (the server may keep working on it).
    pub async fn cancel(mut self) {
        self.withdraw().await;
    }

    async fn withdraw(&mut self) {
        if self.finished {
            return;
        }
        self.finished = true;
        if let Some(response) = self.response.take() {
            response.abort();
        }
        self.route = None;
        if let Some(mut lane) = self.lane.take() {
            let notice = lane
                .peer()
                .notify_cancelled(CancelledNotificationParam::new(
                    Some(self.request_id.clone()),
                    Some("cancelled by the caller".into()),
                ));
            let _ = tokio::time::timeout(WITHDRAW_BOUND, notice).await;
            lane.discard();
        }
    }
}

impl Drop for SyncCall {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        if let Some(response) = self.response.take() {
            response.abort();
        }
        self.route = None;
        if let Some(lane) = self.lane.take() {
            withdraw_in_background(lane, self.request_id.clone(), "the caller went away");
        }
    }
}

/// What ended a wait in [`SyncCall::next`].
enum Next {
    Event(CallEvent),
    Answer(Box<Result<Result<ServerResult, UpstreamError>, tokio::task::JoinError>>),
    Late,
}

/// How long the `notifications/cancelled` of a call given up on may take:
/// its lane (a place in the server's pool) is held until then, and an
/// upstream that never answers must not hold it for good.
const WITHDRAW_BOUND: Duration = Duration::from_secs(5);

/// Tell the upstream the call `id` on `lane` is withdrawn (`why`), without
/// waiting for it; the lane is closed after, not reused.
fn withdraw_in_background(mut lane: Lane, id: rmcp::model::RequestId, why: &'static str) {
    lane.discard();
    let peer = lane.peer().clone();
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        rt.spawn(async move {
            let notice =
                peer.notify_cancelled(CancelledNotificationParam::new(Some(id), Some(why.into())));
            let _ = tokio::time::timeout(WITHDRAW_BOUND, notice).await;
            drop(lane);
        });
    }
}

fn progress_event(p: ProgressNotificationParam) -> SyncEvent {
    SyncEvent::Progress {
        progress: p.progress,
        total: p.total,
        message: p.message,
    }
}

/// A `tools/call` answer: a result, an input round (SEP-2322) or a task,
/// whichever variant of the untagged `ServerResult` rmcp decoded it into.
pub(crate) fn call_response(result: ServerResult) -> Result<CallToolResponse, UpstreamError> {
    match result {
        ServerResult::InputRequiredResult(round) => Ok(CallToolResponse::InputRequired(round)),
        ServerResult::CreateTaskResult(task) => Ok(CallToolResponse::Task(task)),
        other => call_result(other).map(CallToolResponse::Complete),
    }
}

/// A `tools/call` answer as a `CallToolResult`, whichever variant of the
/// untagged `ServerResult` rmcp decoded it into.
pub(crate) fn call_result(result: ServerResult) -> Result<CallToolResult, UpstreamError> {
    match result {
        ServerResult::CallToolResult(r) => Ok(r),
        other => {
            let value = serde_json::to_value(&other)
                .map_err(|e| UpstreamError::Remote(RemoteError::Protocol(e.to_string())))?;
            serde_json::from_value(value).map_err(|e| {
                UpstreamError::Remote(RemoteError::Protocol(format!(
                    "tools/call: the answer is not a tool result: {e}"
                )))
            })
        }
    }
}
