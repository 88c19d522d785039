//! The front's fast path for a stateless pass-through call: a 2026-07-28
//! `tools/call` of a synchronous tool, from a caller that does not declare
//! tasks, to a stateless HTTP upstream, is relayed as bytes.
//!
//! Such a call keeps nothing (no task, no row) and the upstream cannot ask
//! the caller anything mid-call (2026-07-28 asks with an input round, which
//! is part of the answer), so the front has nothing to read in the answer:
//! the caller's body goes upstream as sent (renamed for a prefixed tool),
//! and the upstream's answer, JSON or an SSE stream with its progress,
//! comes back as sent. Going through rmcp's server and client instead cost
//! a decode and an encode on each side, a session lease and several task
//! hops per call: the front's throughput was a fifth of the upstream's.
//!
//! The call is decided once, by the one route of every face
//! ([`crate::route::decide`]: policy, limits, plan, the upstream's call
//! timeout); the byte relay is only the transport chosen after it, for a
//! pass-through plan to a stateless HTTP upstream without OAuth. Anything
//! else goes the full way ([`super::FrontServer`]) with the decision handed
//! along ([`Handoff`]), so nothing is decided or admitted twice. The relay
//! has the full way's spans: the front's server span in the caller's trace
//! and a client span whose context the upstream gets.
//!
//! Fair limits are checked first of all, for any 2026-07-28 `tools/call`:
//! its headers name the method and the caller, so a flood's call is refused
//! before its body is read or rmcp sees it, and the refusal is held a while
//! (`calls::tarpit`). Every tool call is limited the full way too, and a
//! request whose body is not the `tools/call` its header says is rejected
//! there: refusing it here refuses nothing that would have passed.
//!
//! The relay answers as the full way does, in the one mapping's words
//! ([`Failure`]): an upstream's refusal (HTTP 401/403) is an upstream error,
//! never the gateway's own challenge; an answer cut at the deadline is an
//! error the caller sees ([`answer`]). What the full way's transport
//! judges (an oversized body, headers that contradict the body,
//! [`params`]), the relay leaves to it, so its answer is the one answer.

mod answer;
mod params;
mod tally;

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{
    HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode, header,
};
use futures::StreamExt;
use http_body::Body as _;
use mcptask_client::Transport;
use mcptask_client::remote::Seen;
use mcptask_client::trace;
use mcptask_core::call::Plan;
use mcptask_core::trace::TraceContext;
use rmcp::model::{ClientCapabilities, ErrorData};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tracing::Instrument;

use crate::auth::Caller;
use crate::calls::{Busy, Calls};
use crate::failure::Failure;
use crate::metrics::{CallLabels, PASS_THROUGH};
use crate::route::{self, Ask, Decided, Handoff, Intent, Routed, Target};
use crate::upstreams::Upstreams;
use mcptask_core::call::Face;
use mcptask_core::outcome::Outcome;

/// The request headers an upstream gets from the caller: the protocol's
/// routing headers, the tool's mirrored parameters (`Mcp-Param-*`) and the
/// trace context. Never the caller's credentials.
fn relayed(name: &HeaderName) -> bool {
    let name = name.as_str();
    matches!(
        name,
        "accept" | "mcp-protocol-version" | "mcp-method" | "traceparent" | "tracestate" | "baggage"
    ) || name.starts_with("mcp-param-")
}

/// The parts of a `tools/call` body the decision reads.
#[derive(Deserialize)]
struct Call {
    jsonrpc: String,
    #[serde(default)]
    id: Value,
    method: String,
    params: Option<Params>,
}

#[derive(Deserialize)]
struct Params {
    name: String,
    #[serde(rename = "_meta")]
    meta: Option<Map<String, Value>>,
    /// SEP-1686's task request: not a plain call.
    task: Option<Value>,
}

impl Params {
    /// Whether this request declares the tasks extension in its own
    /// `_meta` (its headers already say it is 2026-07-28 or later): what
    /// `mcptask_server::mcp::declares_tasks` reads the full way.
    fn declares_tasks(&self) -> bool {
        self.meta
            .as_ref()
            .and_then(|m| m.get("io.modelcontextprotocol/clientCapabilities"))
            .and_then(|c| ClientCapabilities::deserialize(c).ok())
            .is_some_and(|c| c.supports_tasks())
    }
}

/// Where a relayed call goes.
struct Upstream {
    url: String,
    /// The server's configured headers (its credentials among them).
    headers: Vec<(HeaderName, HeaderValue)>,
    /// The configured server.
    server: String,
    /// The tool's name there.
    tool: String,
    timeout: Duration,
}

/// Wraps the front's MCP service with the fast path.
#[derive(Clone)]
pub struct PassThrough<S> {
    inner: S,
    calls: Calls,
    max_body_bytes: usize,
}

impl<S> PassThrough<S> {
    pub(super) fn new(inner: S, calls: Calls, max_body_bytes: usize) -> Self {
        Self {
            inner,
            calls,
            max_body_bytes,
        }
    }
}

/// Whether the request's headers name a 2026-07-28 (or later) stateless
/// `tools/call`: only such a request's body is read here.
fn candidate(request: &Request<Body>) -> bool {
    names_a_call(request) && !request.headers().contains_key("mcp-session-id")
}

/// Whether the request's headers name a 2026-07-28 (or later) `tools/call`.
fn names_a_call(request: &Request<Body>) -> bool {
    let headers = request.headers();
    let is = |name: &str, want: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v == want)
    };
    request.method() == Method::POST
        && is("mcp-method", "tools/call")
        && headers
            .get("mcp-protocol-version")
            .and_then(|v| v.to_str().ok())
            .is_some_and(mcptask_core::protocol::is_modern)
}

impl<S, B> tower::Service<Request<Body>> for PassThrough<S>
where
    S: tower::Service<Request<Body>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        // The clone that was polled ready serves this request.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        if let Some((principal, busy)) = over_limits(&self.calls, &request) {
            let calls = self.calls.clone();
            let limit = self.max_body_bytes;
            return Box::pin(async move {
                Ok(refuse_early(&calls, request, principal, busy, limit).await)
            });
        }
        if !candidate(&request) {
            return Box::pin(async move { Ok(inner.call(request).await?.map(Body::new)) });
        }
        let calls = self.calls.clone();
        let limit = self.max_body_bytes;
        Box::pin(async move {
            let (mut parts, body) = request.into_parts();
            let bytes = match read_body(body, limit).await {
                Read::Whole(bytes) => bytes,
                // Too large or broken: the full way says so, as it does for
                // any request (413 for a body over the limit).
                Read::Unread(body) => {
                    let request = Request::from_parts(parts, body);
                    return Ok(inner.call(request).await?.map(Body::new));
                }
            };
            let full_way = |parts, bytes| Request::from_parts(parts, Body::from(bytes));
            let Some(call) = parse_call(&parts, &bytes) else {
                return Ok(inner.call(full_way(parts, bytes)).await?.map(Body::new));
            };
            let params = call.params.as_ref().expect("parse_call checked the params");
            let caller = parts
                .extensions
                .get::<Caller>()
                .cloned()
                .unwrap_or_default();
            let ask = if params.declares_tasks() {
                Ask::Tasks
            } else {
                Ask::Plain
            };
            let intent = Intent {
                caller: &caller,
                face: Face::Mcp,
                target: Target::Front(&params.name),
                ask,
            };
            let decided = match route::decide(&calls, intent).await {
                // Held already: answered here, as the early refusal is.
                Err(Failure::RateLimited(busy)) => {
                    return Ok(rpc_answer(&call.id, Failure::RateLimited(busy).into()));
                }
                Ok(Decided::Call(routed)) => match byte_relay(&calls, &routed)
                    // Headers the relay cannot vouch for are judged the
                    // full way (a contradiction refused, -32020).
                    .filter(|_| {
                        params::agree(
                            &parts.headers,
                            &routed.route.definition.input_schema,
                            &bytes,
                        )
                    }) {
                    Some(upstream) => {
                        let span = server_span(&parts.headers, &call);
                        let relayed = relay(
                            &calls.upstreams,
                            &parts.headers,
                            &call,
                            upstream,
                            &bytes,
                            routed,
                            &span,
                        )
                        .instrument(span.clone())
                        .await;
                        match relayed {
                            Ok(response) => return Ok(response),
                            // Nothing reached the upstream (it is down): the
                            // full way reports it as every other call does.
                            Err(NotSent(routed)) => Ok(Decided::Call(routed)),
                        }
                    }
                    None => Ok(Decided::Call(routed)),
                },
                other => other,
            };
            parts.extensions.insert(Handoff::new(ask, decided));
            Ok(inner.call(full_way(parts, bytes)).await?.map(Body::new))
        })
    }
}

/// A request's body as the relay read it.
enum Read {
    /// All of it, within the limit.
    Whole(Bytes),
    /// Over the limit, or broken mid-way: the body whole again (what was
    /// read, then the rest), for the full way to answer.
    Unread(Body),
}

/// Read `body` up to `limit` bytes. A body over it is not refused here:
/// it is handed back whole, so the full way's transport refuses it as it
/// refuses every other (413, its words), and a request the relay stepped
/// aside for reads the same as one it never saw.
async fn read_body(body: Body, limit: usize) -> Read {
    // Declared too large (`Content-Length`): nothing to read.
    if body.size_hint().lower() > limit as u64 {
        return Read::Unread(body);
    }
    let mut stream = body.into_data_stream();
    let mut read = Vec::new();
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(chunk) if chunk.len() <= limit - read.len() => read.extend_from_slice(&chunk),
            over_or_broken => {
                let head = futures::stream::iter([Ok(Bytes::from(read)), over_or_broken]);
                return Read::Unread(Body::from_stream(head.chain(stream)));
            }
        }
    }
    Read::Whole(Bytes::from(read))
}

/// The `tools/call` of a candidate's body, if it is a plain one the route
/// can decide here (well formed, its one `Mcp-Method` and one `Mcp-Name`
/// header naming its method and tool, no SEP-1686 task request); anything
/// else goes the full way undecided.
fn parse_call(parts: &axum::http::request::Parts, bytes: &Bytes) -> Option<Call> {
    let call: Call = serde_json::from_slice(bytes).ok()?;
    let params = call.params.as_ref()?;
    let one = |name: &str| {
        let mut values = parts.headers.get_all(name).iter();
        match (values.next(), values.next()) {
            (Some(value), None) => value.to_str().ok(),
            _ => None,
        }
    };
    if call.jsonrpc != "2.0"
        || call.method != "tools/call"
        || one("mcp-method") != Some("tools/call")
        || one("mcp-name") != Some(params.name.as_str())
        || params.task.is_some()
    {
        return None;
    }
    Some(call)
}

/// The byte relay as the transport of `routed`, where it can carry it: a
/// pass-through plan to a stateless HTTP upstream whose credentials are
/// the gateway's own and static (an upstream with OAuth gets its tokens
/// from rmcp's authorizing client, and one that takes the caller's
/// identity gets each call's own credential, the full way).
fn byte_relay(calls: &Calls, routed: &Routed) -> Option<Upstream> {
    let server = &routed.route.server;
    if routed.plan != Plan::PassThrough || !calls.upstreams.is_stateless(server) {
        return None;
    }
    let (def, _) = calls.upstreams.tracker.servers().get(server)?;
    if def.oauth.is_some() || def.identity != mcptask_client::identity::Identity::Gateway {
        return None;
    }
    let Transport::Http { url, headers } = &def.transport else {
        return None;
    };
    let mut configured = Vec::new();
    for (name, value) in headers {
        let value = if name.eq_ignore_ascii_case("authorization") {
            format!("Bearer {}", value.trim_start_matches("Bearer "))
        } else {
            value.clone()
        };
        configured.push((name.parse().ok()?, value.parse().ok()?));
    }
    Some(Upstream {
        url: url.clone(),
        headers: configured,
        server: server.clone(),
        tool: routed.route.tool.clone(),
        timeout: routed.timeout,
    })
}

/// The front's server span of a relayed call: the full way's, in the
/// caller's trace (`_meta`, else the HTTP headers).
fn server_span(headers: &HeaderMap, call: &Call) -> tracing::Span {
    let params = call.params.as_ref();
    let name = params.map_or("", |p| p.name.as_str());
    let id = match &call.id {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let version = headers
        .get("mcp-protocol-version")
        .and_then(|v| v.to_str().ok());
    crate::spans::front_call_span(
        name,
        &id,
        version,
        params.and_then(|p| p.meta.as_ref()),
        crate::spans::Arrival::Http(headers),
    )
}

/// The principal of a `tools/call` (its headers say so) over its fair
/// limits, and why.
fn over_limits(calls: &Calls, request: &Request<Body>) -> Option<(Option<String>, Busy)> {
    if !names_a_call(request) {
        return None;
    }
    let principal = request
        .extensions()
        .get::<Caller>()
        .and_then(|c| c.principal.clone());
    let busy = calls.limiter.check(principal.as_deref()).err()?;
    Some((principal, busy))
}

/// The id of a JSON-RPC request, all its answer needs.
#[derive(Deserialize)]
struct Id {
    #[serde(default)]
    id: Value,
}

/// The busy answer to a call refused from its headers, once held. Its body
/// is read only then, for the request's id (the connection stays usable).
async fn refuse_early(
    calls: &Calls,
    request: Request<Body>,
    principal: Option<String>,
    busy: Busy,
    limit: usize,
) -> Response<Body> {
    crate::metrics::call_ended(
        &CallLabels::unnamed(Face::Mcp).by(principal.as_deref()),
        Outcome::RefusedLimit,
        Duration::ZERO,
    );
    // Only the body is kept while held.
    let (_, body) = request.into_parts();
    let busy = calls.limiter.hold(principal.as_deref(), busy).await;
    let bytes = axum::body::to_bytes(body, limit).await.unwrap_or_default();
    let id = serde_json::from_slice::<Id>(&bytes)
        .map(|call| call.id)
        .unwrap_or(Value::Null);
    rpc_answer(&id, super::server::busy_error(&busy))
}

/// The request never left: the upstream could not be reached. The call's
/// decision comes back, for the full way.
struct NotSent(Box<Routed>);

/// Send the call upstream and its answer back as it comes, in a client
/// span under `server_span` whose context the upstream gets (in the
/// `traceparent` header and the body's `_meta`, as the full way sends it).
async fn relay(
    upstreams: &Upstreams,
    headers: &HeaderMap,
    call: &Call,
    upstream: Upstream,
    bytes: &Bytes,
    routed: Box<Routed>,
    server_span: &tracing::Span,
) -> Result<Response<Body>, NotSent> {
    let Ok(http) = mcptask_client::remote::upstream_http_client() else {
        return Err(NotSent(routed));
    };
    let client_span = trace::tool_call_span(Some(&upstream.server), &upstream.tool);
    let cx = trace::of(&client_span);
    let front_name = call.params.as_ref().map(|p| p.name.as_str());
    let body = if front_name == Some(upstream.tool.as_str()) && cx.is_none() {
        Some(bytes.clone())
    } else {
        restamped(bytes, &upstream.tool, cx.as_ref())
    };
    let Some(body) = body else {
        return Err(NotSent(routed));
    };
    let mut request = http
        .post(&upstream.url)
        .header(header::CONTENT_TYPE, "application/json")
        .header("mcp-name", upstream.tool.as_str());
    for (name, value) in headers.iter().filter(|(n, _)| relayed(n)) {
        // The upstream's parent is the front's span, not the caller's.
        if cx.is_some() && matches!(name.as_str(), "traceparent" | "tracestate") {
            continue;
        }
        request = request.header(name, value);
    }
    if let Some(cx) = &cx {
        request = request.header("traceparent", cx.traceparent.as_str());
        if let Some(state) = &cx.tracestate {
            request = request.header("tracestate", state.as_str());
        }
    }
    for (name, value) in &upstream.headers {
        request = request.header(name, value);
    }
    let deadline = tokio::time::Instant::now() + upstream.timeout;
    let sent = request.body(body).send().instrument(client_span.clone());
    // What the upstream's answer (or its absence) says of it goes to its
    // health, as the full way's does; a request that never left is the
    // full way's to report.
    let saw = |seen| upstreams.saw(&upstream.server, seen);
    // The call's end is counted as the full way counts it.
    let started = std::time::Instant::now();
    let labels = CallLabels::new(
        upstreams,
        &upstream.server,
        &upstream.tool,
        Face::Mcp,
        PASS_THROUGH,
    )
    .by(routed.principal.as_deref())
    .via(routed.via.as_deref());
    let failed = |labels: &CallLabels, failure: &Failure| {
        let labels = labels.clone().failed_with(failure.code());
        crate::metrics::call_ended(&labels, Outcome::Failed, started.elapsed());
    };
    let answer = match tokio::time::timeout_at(deadline, sent).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(e)) if e.is_connect() => return Err(NotSent(routed)),
        // reqwest's text names the upstream's URL: logged, not relayed.
        Ok(Err(e)) => {
            saw(Seen::Failed(format!("tools/call: {e}")));
            let failure = Failure::unreachable(&e);
            failed(&labels, &failure);
            return Ok(rpc_answer(&call.id, failure.into()));
        }
        Err(_) => {
            let timeout = Failure::no_answer("tools/call", upstream.timeout);
            saw(Seen::Failed(timeout.message()));
            failed(&labels, &timeout);
            return Ok(rpc_answer(&call.id, timeout.into()));
        }
    };
    let status = answer.status();
    // An MCP answer goes back with its status (a JSON-RPC error may come
    // with a 400); a refusal of the gateway's credentials (401, 403: whose
    // status the caller would take for the gateway's own challenge) and
    // anything that is not MCP (a proxy's error page) are upstream errors.
    let style = answer
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            if v.starts_with("application/json") {
                Some(answer::Style::Json)
            } else if v.starts_with("text/event-stream") {
                Some(answer::Style::Sse)
            } else {
                None
            }
        })
        .filter(|_| !matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN));
    let (Some(style), Some(content_type)) = (style, answer.headers().get(header::CONTENT_TYPE))
    else {
        saw(Seen::of_http("tools/call", status.as_u16()));
        let failure = Failure::upstream_http("tools/call", status.as_u16());
        failed(&labels, &failure);
        return Ok(rpc_answer(&call.id, failure.into()));
    };
    saw(Seen::Answered);
    // An MCP answer with an error status is a JSON-RPC error: the call failed.
    let mut tally = tally::Tally::new(labels, started);
    if !status.is_success() {
        tally.saw(None);
    }
    let content_type = content_type.clone();
    // The admission and the spans hold until the answer is through; the
    // answer ends at the call's deadline like any other call.
    let held = (
        routed.admitted,
        routed.live,
        server_span.clone(),
        client_span,
    );
    let relayed = answer::relayed(
        answer.bytes_stream(),
        style,
        call.id.clone(),
        deadline,
        upstream.timeout,
    );
    let stream = futures::stream::unfold(
        (Box::pin(relayed), tally, held),
        |(mut relayed, mut tally, held)| async move {
            let Some(chunk) = relayed.next().await else {
                // Counted as the state drops.
                tally.finished();
                return None;
            };
            tally.saw(chunk.as_ref().ok().map(|b| b.as_ref()));
            Some((chunk, (relayed, tally, held)))
        },
    );
    let mut response = Response::new(Body::from_stream(stream));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, content_type);
    Ok(response)
}

/// `bytes` with `params.name` set to `tool` (a prefixed front name) and,
/// with telemetry on, `params._meta` carrying the front's trace context.
fn restamped(bytes: &Bytes, tool: &str, cx: Option<&TraceContext>) -> Option<Bytes> {
    let mut value: Value = serde_json::from_slice(bytes).ok()?;
    let params = value.get_mut("params")?.as_object_mut()?;
    params.insert("name".into(), Value::String(tool.to_string()));
    if let Some(cx) = cx {
        let meta = params
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(meta) = meta.as_object_mut() {
            trace::to_meta(meta, cx);
        }
    }
    serde_json::to_vec(&value).ok().map(Bytes::from)
}

/// A JSON-RPC error answer to the request `id`.
fn rpc_answer(id: &Value, error: ErrorData) -> Response<Body> {
    let body = json!({"jsonrpc": "2.0", "id": id, "error": error});
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = StatusCode::OK;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
