//! One MCP session to a server: opening it (declaring the tasks extension),
//! and bounding every call made on it in time.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams,
    CancelTaskRequest, ClientCapabilities, ClientConfig, ClientRequest, ErrorCode, GetTaskParams,
    GetTaskRequest, GetTaskResult, Implementation, ProtocolVersion, ServerResult, UpdateTaskParams,
    UpdateTaskRequest,
};
use rmcp::service::{
    ClientInitializeError, ClientLifecycleMode, ClientServiceExt, RunningService, ServiceError,
};
use rmcp::{Peer, RoleClient};
use tokio::sync::Mutex;

use mcptask_core::protocol::Era;

use super::RemoteError;
use super::handler::UpstreamHandler;
use super::relabel::Relabel;
use super::server_def::{ServerDef, Transport};
use crate::identity::CallCredential;

pub(super) type Session = RunningService<RoleClient, ClientConfig>;

/// The pool slot of one server: its open session, if any, and how the last
/// attempt to open one ended. Callers that queued behind a failing connect
/// share its failure instead of trying again one after another, so an
/// unreachable host costs one connect timeout per wave of calls, not one per
/// call.
#[derive(Default)]
pub(super) struct SlotState {
    pub(super) session: Option<Arc<Session>>,
    /// When the last connect attempt failed, and why.
    pub(super) failed: Option<(Instant, RemoteError)>,
}

pub(super) type Slot = Arc<Mutex<SlotState>>;

/// When the server last answered anything (a wedged stdio child answers nothing).
pub(super) type Heard = Arc<std::sync::Mutex<Option<Instant>>>;

/// Time bounds the tracker applies when a [`ServerDef`] sets none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// Bound on opening a session.
    pub connect: Duration,
    /// Bound on each remote call.
    pub call: Duration,
}

/// A usable connection: the peer, and the bound for calls on it.
#[derive(Clone)]
pub struct Connection {
    /// The rmcp peer to call.
    pub peer: Peer<RoleClient>,
    /// Bound on each call (the server's own, or the tracker default).
    pub call_timeout: Duration,
    pub(super) session: Arc<Session>,
    pub(super) slot: Slot,
    pub(super) stdio: bool,
    pub(super) heard: Heard,
    /// The credential this call's requests carry instead of the session's
    /// own ([`Connection::acting_as`]).
    pub(super) acting: Option<CallCredential>,
}

impl Connection {
    /// This connection with each call bounded by `timeout` when one is
    /// given: the bound a gateway's route decided for the call it carries,
    /// which wins over the server's own (so nothing downstream recomputes
    /// it).
    pub fn bounded_by(mut self, timeout: Option<Duration>) -> Self {
        if let Some(timeout) = timeout {
            self.call_timeout = timeout;
        }
        self
    }

    /// This connection with every request made through its methods
    /// carrying `credential` (a call's own, see [`crate::identity`]) instead
    /// of the session's credential: the session stays shared, each request
    /// says whose it is.
    pub fn acting_as(mut self, credential: Option<CallCredential>) -> Self {
        self.acting = credential;
        self
    }

    /// `request` sent on this connection with its credential.
    async fn send(&self, mut request: ClientRequest) -> Result<ServerResult, ServiceError> {
        CallCredential::attach(self.acting.as_ref(), &mut request);
        self.peer.send_request(request).await
    }

    /// `tools/call`, once (no input rounds driven).
    pub async fn call_tool_once(
        &self,
        params: CallToolRequestParams,
    ) -> Result<CallToolResponse, ServiceError> {
        if self.acting.is_none() {
            return self.peer.call_tool_once(params).await;
        }
        match self
            .send(ClientRequest::CallToolRequest(CallToolRequest::new(params)))
            .await?
        {
            ServerResult::CallToolResult(r) => Ok(CallToolResponse::Complete(r)),
            ServerResult::InputRequiredResult(r) => Ok(CallToolResponse::InputRequired(r)),
            ServerResult::CreateTaskResult(r) => Ok(CallToolResponse::Task(r)),
            _ => Err(ServiceError::UnexpectedResponse),
        }
    }

    /// `tools/call` of a tool that answers at once.
    pub async fn call_tool(
        &self,
        params: CallToolRequestParams,
    ) -> Result<CallToolResult, ServiceError> {
        if self.acting.is_none() {
            return self.peer.call_tool(params).await;
        }
        match self.call_tool_once(params).await? {
            CallToolResponse::Complete(r) => Ok(r),
            _ => Err(ServiceError::UnexpectedResponse),
        }
    }

    /// `tasks/get`.
    pub async fn get_task(&self, params: GetTaskParams) -> Result<GetTaskResult, ServiceError> {
        if self.acting.is_none() {
            return self.peer.get_task(params).await;
        }
        match self
            .send(ClientRequest::GetTaskRequest(GetTaskRequest::new(params)))
            .await?
        {
            ServerResult::GetTaskResult(r) => Ok(r),
            _ => Err(ServiceError::UnexpectedResponse),
        }
    }

    /// `tasks/cancel`.
    pub async fn cancel_task(&self, params: CancelTaskParams) -> Result<(), ServiceError> {
        if self.acting.is_none() {
            return self.peer.cancel_task(params).await;
        }
        match self
            .send(ClientRequest::CancelTaskRequest(CancelTaskRequest::new(
                params,
            )))
            .await?
        {
            ServerResult::TaskAckResult(_) | ServerResult::EmptyResult(_) => Ok(()),
            _ => Err(ServiceError::UnexpectedResponse),
        }
    }

    /// `tasks/update`.
    pub async fn update_task(&self, params: UpdateTaskParams) -> Result<(), ServiceError> {
        if self.acting.is_none() {
            return self.peer.update_task(params).await;
        }
        match self
            .send(ClientRequest::UpdateTaskRequest(UpdateTaskRequest::new(
                params,
            )))
            .await?
        {
            ServerResult::TaskAckResult(_) | ServerResult::EmptyResult(_) => Ok(()),
            _ => Err(ServiceError::UnexpectedResponse),
        }
    }

    /// Forget this connection if it is still the pooled one (after a real disconnect).
    pub async fn discard(&self) {
        let mut slot = self.slot.lock().await;
        if slot
            .session
            .as_ref()
            .is_some_and(|s| Arc::ptr_eq(s, &self.session))
        {
            slot.session = None;
        }
    }

    /// After a call that started at `started` timed out: if this is a stdio
    /// child that has answered nothing since, it is wedged (alive but not
    /// reading or answering, which no retry on the same pipe can cure), so
    /// it is recycled: dropped from the pool, its session closed (the child
    /// is killed) and the next call spawns a fresh one. An HTTP session is
    /// kept: a new one would reach the same hung server. Returns whether the
    /// child was recycled.
    pub async fn recycle_if_wedged(&self, started: Instant) -> bool {
        if !self.stdio {
            return false;
        }
        let heard = *self.heard.lock().expect("heard lock");
        if heard.is_some_and(|at| at >= started) {
            return false;
        }
        let mut slot = self.slot.lock().await;
        if !slot
            .session
            .as_ref()
            .is_some_and(|s| Arc::ptr_eq(s, &self.session))
        {
            // Someone else recycled it already.
            return false;
        }
        slot.session = None;
        drop(slot);
        // Closing the transport kills the child (after a bounded grace).
        self.session.cancellation_token().cancel();
        true
    }

    /// Note that the server answered (see [`Connection::recycle_if_wedged`]).
    pub fn heard(&self) {
        *self.heard.lock().expect("heard lock") = Some(Instant::now());
    }
}

/// Run a remote call with a time bound; a timeout is transient.
pub(crate) async fn bounded<T, F>(
    operation: &str,
    timeout: Duration,
    call: F,
) -> Result<T, ServiceError>
where
    F: Future<Output = Result<T, ServiceError>>,
{
    match tokio::time::timeout(timeout, call).await {
        Ok(r) => r,
        Err(_) => {
            tracing::debug!(operation, ?timeout, "remote call timed out");
            Err(ServiceError::Timeout { timeout })
        }
    }
}

pub(crate) fn client_config() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::builder().enable_tasks().build(),
        Implementation::new("mcptask", env!("CARGO_PKG_VERSION")),
    )
}

/// For stdio servers: prefer 2026-07-28 (the version that carries tasks) and
/// fall back to `initialize` for older servers on the same process (HTTP
/// servers: [`open_http_with`]).
fn lifecycle() -> ClientLifecycleMode {
    ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        legacy_version: None,
    }
}

/// `transport` with its handshake guarded against late probe answers
/// ([`ProbeGuard`](super::ProbeGuard)).
fn guarded<T, E, A>(transport: T) -> super::ProbeGuard<impl rmcp::transport::Transport<RoleClient>>
where
    T: rmcp::transport::IntoTransport<RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    super::ProbeGuard::new(transport.into_transport())
}

/// Open a Streamable HTTP session to `def` (an HTTP server) served by
/// `handler` (every HTTP session: the tracker's, the lanes', the push
/// listener's). The
/// `server/discover` probe is bounded by the caller's connect timeout, not by
/// rmcp's 10 s `Auto` probe: an OAuth authorization runs inside it, and on a
/// loaded machine that alone can take longer, after which `Auto` would
/// fall back to `initialize` with a modern server. A server that answers the
/// probe as a pre-2026 one does is asked again with `initialize` on a new
/// connection (cheap over HTTP; a stdio server keeps `Auto` and its process).
pub(crate) async fn open_http_with<H: rmcp::ClientHandler + Clone>(
    def: &ServerDef,
    handler: H,
) -> Result<RunningService<RoleClient, H>, RemoteError> {
    let (transport, fail) = http_transport(def)?;
    let discover = ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    };
    match handler
        .clone()
        .serve_with_lifecycle(Relabel::new(transport), discover)
        .await
    {
        Ok(session) => Ok(session),
        Err(probe) if answered_as_legacy(&probe) => {
            let (transport, fail) = http_transport(def)?;
            handler
                .serve_with_lifecycle(Relabel::new(transport), ClientLifecycleMode::Initialize)
                .await
                .map_err(|fallback| {
                    fail(super::why::init_failure(
                        &ClientInitializeError::LegacyFallbackFailed {
                            discover: Box::new(probe),
                            fallback: Box::new(fallback),
                        },
                    ))
                })
        }
        Err(e) => Err(fail(super::why::init_failure(&e))),
    }
}

/// Whether the answer to the `server/discover` probe says "a server from
/// before 2026-07-28", to be asked again with `initialize`:
/// - a JSON-RPC error other than the modern rejections of a request it
///   understood (what rmcp's `Auto` falls back on: -32601, or the HTTP
///   404/405 of a server that has no such method);
/// - a version list with no 2026-07-28 in it (rmcp's own servers capped at
///   2025-11-25 answer the probe with -32022 and the versions they speak,
///   which rmcp's client reports as "no compatible version"): a plain
///   server needs no tasks of its own behind the front, so `initialize`
///   with one of those versions is the way in.
fn answered_as_legacy(probe: &ClientInitializeError) -> bool {
    match probe {
        ClientInitializeError::JsonRpcError(data) => answered_with_legacy_error(data),
        ClientInitializeError::NoCompatibleProtocolVersion {
            server_supported, ..
        } => server_supported
            .iter()
            .any(|v| Era::of(v.as_str()) == Era::Session),
        _ => false,
    }
}

/// Whether a JSON-RPC error answering `server/discover` says "a server from
/// before 2026-07-28" (what rmcp's `Auto` falls back on): any error but the
/// modern rejections of a request it understood.
fn answered_with_legacy_error(error: &rmcp::model::ErrorData) -> bool {
    !matches!(
        error.code,
        ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY | ErrorCode::HEADER_MISMATCH
    )
}

/// Open a session to `def`, negotiating the protocol version that carries tasks.
pub(super) async fn open(def: &ServerDef) -> Result<Session, RemoteError> {
    let name = &def.name;
    match &def.transport {
        Transport::Http { .. } => open_http_with(def, client_config()).await,
        Transport::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            let mut cmd = tokio::process::Command::new(command);
            cmd.args(args).envs(env).kill_on_drop(true);
            super::tap::tie_to_parent(&mut cmd);
            if let Some(dir) = cwd {
                cmd.current_dir(dir);
            }
            let fail =
                |e: String| RemoteError::Transient(format!("cannot start server {name:?}: {e}"));
            let transport = rmcp::transport::TokioChildProcess::new(cmd).map_err(|e| {
                fail(super::why::spawn_failure(
                    command,
                    cwd.as_deref().map(std::path::Path::new),
                    &e,
                ))
            })?;
            client_config()
                .serve_with_lifecycle(guarded(transport), lifecycle())
                .await
                .map_err(|e| fail(super::why::stdio_init_failure(&e)))
        }
    }
}

type Fail<'a> = Box<dyn Fn(String) -> RemoteError + Send + Sync + 'a>;

/// The Streamable HTTP transport to `def` (which must be an HTTP server),
/// with the way to word a failure to reach it.
fn http_transport(
    def: &ServerDef,
) -> Result<
    (
        rmcp::transport::StreamableHttpClientTransport<crate::oauth::AuthorizingClient>,
        Fail<'_>,
    ),
    RemoteError,
> {
    let Transport::Http { url, headers } = &def.transport else {
        return Err(RemoteError::ConnectionUnavailable(format!(
            "{:?} is not an HTTP server",
            def.name
        )));
    };
    let name = &def.name;
    let fail: Fail<'_> = Box::new(move |e: String| {
        RemoteError::Transient(format!("cannot connect to {name:?} at {url}: {e}"))
    });
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.clone());
    config.retry_config = Arc::new(resume_policy());
    let mut custom = HashMap::new();
    for (k, v) in headers {
        if k.eq_ignore_ascii_case("authorization") {
            config = config.auth_header(v.trim_start_matches("Bearer ").to_string());
            continue;
        }
        let name = http_header_name(k).map_err(RemoteError::ConnectionUnavailable)?;
        let value = v.parse().map_err(|_| {
            RemoteError::ConnectionUnavailable(format!("header {k:?} has an invalid value"))
        })?;
        custom.insert(name, value);
    }
    if !custom.is_empty() {
        config = config.custom_headers(custom);
    }
    let http =
        upstream_http_client().map_err(|e| fail(format!("cannot build the HTTP client: {e}")))?;
    let auth = def.oauth.as_ref().map(|settings| {
        let runtime = settings
            .runtime
            .get()
            .unwrap_or_else(crate::oauth::OAuthRuntime::fallback);
        runtime.server(name, url, &def.hash(), settings)
    });
    let client = crate::oauth::AuthorizingClient::new(http, auth, name.as_str());
    Ok((
        StreamableHttpClientTransport::with_client(client, config),
        fail,
    ))
}

/// How long a broken response stream is resumed (SSE reconnects with
/// `Last-Event-ID`) before its request fails: 2, 4, 8, 8 s apart, about
/// 25 s in all. rmcp's default resumes forever, so a request in flight when
/// its server died (a synchronous call, a 2025-11-25 `tasks/result`) never
/// ended and its front task stayed `working`.
fn resume_policy() -> rmcp::transport::common::client_side_sse::ExponentialBackoff {
    let mut policy = rmcp::transport::common::client_side_sse::ExponentialBackoff::default();
    policy.max_times = Some(5);
    policy.max_delay = Some(Duration::from_secs(8));
    policy
}

/// The HTTP client upstream sessions share, one per tokio runtime.
///
/// rmcp's own default client would panic where this one reports. Its
/// connections stay open between requests: a new TCP connection per request
/// cost the upstream more than the call itself. It is shared because
/// building one reads and parses the system's whole CA store (hundreds of
/// files): built per session, that was paid by every new session, and the
/// tracker's push listener opens one for each newly tracked task. Sessions
/// are told apart by their `Mcp-Session-Id`, not by their TCP connection, so
/// one pool serves them all. Per runtime: a pooled connection is driven by a
/// task of the runtime that opened it, and dies with it (tests run a runtime
/// each).
pub fn upstream_http_client() -> Result<reqwest::Client, reqwest::Error> {
    static SHARED: std::sync::Mutex<Option<(tokio::runtime::Id, reqwest::Client)>> =
        std::sync::Mutex::new(None);
    let runtime = tokio::runtime::Handle::try_current().ok().map(|h| h.id());
    if let Some(runtime) = runtime
        && let Some((id, client)) = SHARED.lock().expect("client lock").as_ref()
        && *id == runtime
    {
        return Ok(client.clone());
    }
    let client = crate::tls::build_http_client(|| {
        reqwest::Client::builder()
            .pool_idle_timeout(UPSTREAM_IDLE)
            .redirect(same_origin_redirect_policy())
    })?;
    if let Some(runtime) = runtime {
        *SHARED.lock().expect("client lock") = Some((runtime, client.clone()));
    }
    Ok(client)
}

/// How long an idle connection to an upstream is kept for reuse: shorter
/// than the servers' own keep-alive (Node's and uvicorn's default is 5 s),
/// since a request sent on a connection the server is closing is lost (a
/// `tools/call` cannot be retried: the server may have run it). A new
/// connection after a quiet spell costs a handshake; a lost call costs the
/// call.
pub const UPSTREAM_IDLE: std::time::Duration = std::time::Duration::from_secs(4);

/// A session to an upstream that relays input ([`UpstreamHandler`]), with the
/// raw-answer tap for stdio servers (HTTP sessions have none).
pub(crate) type UpstreamSession = RunningService<RoleClient, UpstreamHandler>;

/// Open an upstream session to `def` (see `upstream::lanes`).
pub(crate) async fn open_upstream(
    def: &ServerDef,
    handler: UpstreamHandler,
) -> Result<(UpstreamSession, Option<Arc<super::tap::Tap>>), RemoteError> {
    let name = &def.name;
    match &def.transport {
        Transport::Http { .. } => Ok((open_http_with(def, handler).await?, None)),
        Transport::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            let mut cmd = tokio::process::Command::new(command);
            cmd.args(args).envs(env);
            if let Some(dir) = cwd {
                cmd.current_dir(dir);
            }
            let fail =
                |e: String| RemoteError::Transient(format!("cannot start server {name:?}: {e}"));
            let (sink, stream, tap) = super::tap::spawn(cmd).map_err(|e| {
                fail(super::why::spawn_failure(
                    command,
                    cwd.as_deref().map(std::path::Path::new),
                    &e,
                ))
            })?;
            let session = handler
                .serve_with_lifecycle(Relabel::new(guarded((sink, stream))), lifecycle())
                .await
                .map_err(|e| fail(super::why::stdio_init_failure(&e)))?;
            Ok((session, Some(tap)))
        }
    }
}

fn http_header_name(name: &str) -> Result<http::HeaderName, String> {
    name.parse()
        .map_err(|_| format!("header name {name:?} is invalid"))
}

/// rmcp's default client's redirect policy (not public there): only
/// same-origin 307/308, which keep the method and body, up to 10 hops. A
/// 301/302/303 would turn the POST into a bodyless GET, and a cross-origin
/// hop would replay the session id and headers to another host.
fn same_origin_redirect_policy() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let preserves_body = matches!(
            attempt.status(),
            reqwest::StatusCode::TEMPORARY_REDIRECT | reqwest::StatusCode::PERMANENT_REDIRECT
        );
        let same_origin = attempt
            .previous()
            .first()
            .is_some_and(|original| original.origin() == attempt.url().origin());
        if !preserves_body || !same_origin {
            attempt.stop()
        } else if attempt.previous().len() > 10 {
            attempt.error("exceeded 10 redirects")
        } else {
            attempt.follow()
        }
    })
}
