//! The MCP face: mcptask as one MCP server in front of the configured
//! servers, at `/mcp` on the gateway's listener (`[proxy] enabled = true`)
//! or over stdio (`mcptask proxy --stdio`). See docs/PROXY.md.

pub mod agent_tools;
pub(crate) mod bridge;
mod capabilities;
mod directory;
mod logging;
mod pass_through;
mod server;
mod sessions;
mod style;
mod subscriptions;
mod virtual_server;

use std::sync::Arc;

use anyhow::Context;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

pub use pass_through::PassThrough;
pub use server::{CallerFn, FrontServer};
pub use sessions::{Owned, OwnedSessions, SessionOwners};
pub use style::ByStyle;
pub use virtual_server::VirtualServers;

use crate::auth::Caller;
use crate::calls::Calls;

/// The front's MCP endpoint over Streamable HTTP, with task notifications,
/// the fast path of stateless pass-through calls, sessions bound to the
/// callers that opened them, and answers in the upstreams' style (JSON or
/// SSE, [`ByStyle`]), and the virtual servers under it
/// ([`VirtualServers`]).
pub type FrontService = VirtualServers<
    OwnedSessions<
        PassThrough<
            mcptask_server::TaskListenService<
                ByStyle<StreamableHttpService<FrontServer, Owned<LocalSessionManager>>>,
            >,
        >,
    >,
>;

/// The front server, with callers identified by `caller`.
pub fn server(calls: &Calls, caller: CallerFn) -> FrontServer {
    FrontServer::new(calls.clone(), caller)
}

/// The Streamable HTTP service for `/mcp` (2026-07-28 stateless, older
/// clients in sessions). Callers are those the HTTP layer authenticated
/// (a [`Caller`] in the request's extensions); the virtual servers of
/// `live` are served under it, at `/<name>`.
///
/// Mount it behind the guards ([`crate::guard`], as
/// [`crate::api::router_with_mcp`] does): the `Host` allow-list is checked
/// there, once, for every transport in this service (the byte relay of the
/// fast path comes before rmcp's, so rmcp's own check, which only rmcp's
/// transport would meet, is off).
pub fn http_service(
    calls: &Calls,
    live: &crate::live::LiveConfig,
    max_body_bytes: usize,
    stop: CancellationToken,
) -> FrontService {
    let config = StreamableHttpServerConfig::default()
        .disable_allowed_hosts()
        .with_json_response(true)
        .with_max_request_body_bytes(max_body_bytes)
        .with_cancellation_token(stop);
    let server = server(
        calls,
        Arc::new(|context| {
            context
                .extensions
                .get::<axum::http::request::Parts>()
                .and_then(|parts| parts.extensions.get::<Caller>())
                .cloned()
                .unwrap_or_default()
        }),
    );
    let owners = SessionOwners::default();
    let json = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(Owned::new(LocalSessionManager::default(), owners.clone())),
        config,
    );
    // The same service answering with SSE streams: a clone shares the
    // session manager and the server.
    let mut stream = json.clone();
    stream.config.json_response = false;
    let upstreams = calls.upstreams.clone();
    let service = ByStyle::new(json, stream, Arc::new(move || upstreams.streams()));
    // Front task notifications on `subscriptions/listen` (rmcp cannot
    // parse their filter; see TaskListenLayer).
    let service = mcptask_server::TaskListenLayer::new()
        .max_inspected_bytes(max_body_bytes)
        .wrap(service);
    let service = OwnedSessions::new(
        PassThrough::new(service, calls.clone(), max_body_bytes),
        owners,
    );
    VirtualServers::new(service, live.clone())
}

/// Serve the front on stdin/stdout, every call bound to `principal` (and
/// through the virtual server `through`, if one is given), until
/// the host goes away or `stop` is cancelled (at any time: before the
/// host's first message too). A line over `max_line_bytes` ends the session
/// with an error, as a read error of stdin does (see
/// [`mcptask_server::mcp::TaskListenStdio`]).
pub async fn serve_stdio(
    calls: &Calls,
    principal: Option<String>,
    through: Option<Arc<crate::virtual_server::Through>>,
    max_line_bytes: usize,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    use mcptask_server::mcp::Ended;
    use rmcp::ServiceExt;
    let caller = Caller {
        principal,
        through,
        ..Caller::default()
    };
    // The host gone (stdin closed), its calls relayed synchronously end
    // at once: rmcp would let them run on for its drain.
    let gone = CancellationToken::new();
    let transport = mcptask_server::mcp::stdio_with_listen()
        .max_line_bytes(max_line_bytes)
        .on_input_closed(gone.clone());
    let input_end = transport.input_end();
    let ended_badly = || {
        input_end
            .error()
            .map(|ended| anyhow::anyhow!("stdio session: {ended}"))
    };
    let starting = server(calls, Arc::new(move |_| caller.clone()))
        .with_caller_gone(gone)
        .serve(transport);
    let running = tokio::select! {
        () = stop.cancelled() => return Ok(()),
        started = starting => match (started, input_end.get()) {
            (Ok(running), _) => running,
            // The host went away before its first message: an end, not a failure.
            (Err(_), Some(Ended::Closed)) => return Ok(()),
            (Err(e), _) => {
                return Err(ended_badly()
                    .unwrap_or_else(|| anyhow::Error::new(e).context("starting the stdio transport")));
            }
        },
    };
    tokio::select! {
        () = stop.cancelled() => {}
        r = running.waiting() => { r.context("stdio session")?; }
    }
    ended_badly().map_or(Ok(()), Err)
}
