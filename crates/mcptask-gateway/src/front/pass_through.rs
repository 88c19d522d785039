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
//! Anything else, or any doubt, goes the full way ([`super::FrontServer`]):
//! the same checks run there again and say what is wrong. Admission and
//! tool policy are checked here as there, before anything is sent.
//!
//! Fair limits are checked first of all, for any 2026-07-28 `tools/call`:
//! its headers name the method and the caller, so a flood's call is refused
//! before its body is read or rmcp sees it, and the refusal is held a while
//! (`calls::tarpit`). Every tool call is limited the full way too, and a
//! request whose body is not the `tools/call` its header says is rejected
//! there: refusing it here refuses nothing that would have passed.

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
use mcptask_client::Transport;
use mcptask_core::call::{Plan, Wants, plan};
use rmcp::model::{ClientCapabilities, ErrorData};
use serde::Deserialize;
use serde_json::{Value, json};

use super::agent_tools;
use crate::auth::Caller;
use crate::calls::{Admitted, Busy, Calls};
use crate::failure::Failure;

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
    meta: Option<Meta>,
    /// SEP-1686's task request: not a plain call.
    task: Option<Value>,
}

#[derive(Deserialize)]
struct Meta {
    #[serde(rename = "io.modelcontextprotocol/clientCapabilities")]
    capabilities: Option<ClientCapabilities>,
}

/// Where a relayed call goes.
struct Upstream {
    url: String,
    /// The server's configured headers (its credentials among them).
    headers: Vec<(HeaderName, HeaderValue)>,
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
            .is_some_and(|v| v >= "2026-07-28")
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
            let (parts, body) = request.into_parts();
            let bytes = match axum::body::to_bytes(body, limit).await {
                Ok(bytes) => bytes,
                // Too large or broken: the full way says so.
                Err(_) => Bytes::new(),
            };
            let full_way = |parts, bytes| Request::from_parts(parts, Body::from(bytes));
            let (call, upstream, admitted) = match decide(&calls, &parts, &bytes) {
                Decision::Relay(relayed) => *relayed,
                Decision::Busy(id, principal, busy) => {
                    let busy = calls.limiter.hold(principal.as_deref(), busy).await;
                    return Ok(rpc_answer(&id, super::server::busy_error(&busy)));
                }
                Decision::FullWay => {
                    return Ok(inner.call(full_way(parts, bytes)).await?.map(Body::new));
                }
            };
            match relay(&parts.headers, &call, &upstream, &bytes, admitted).await {
                Ok(response) => Ok(response),
                // Nothing reached the upstream (it is down): the full way
                // reports it as every other call does.
                Err(NotSent) => Ok(inner.call(full_way(parts, bytes)).await?.map(Body::new)),
            }
        })
    }
}

/// What becomes of a candidate request.
enum Decision {
    /// Relayed: the call, where it goes, and its admission.
    Relay(Box<(Call, Upstream, Admitted)>),
    /// Refused: the caller is over its fair limits (request id, principal,
    /// why).
    Busy(Value, Option<String>, Busy),
    /// Served by the front's MCP server.
    FullWay,
}

fn decide(calls: &Calls, parts: &axum::http::request::Parts, bytes: &Bytes) -> Decision {
    match relayable(calls, parts, bytes) {
        Some((call, upstream, caller)) => match calls.limiter.admit(caller.principal.as_deref()) {
            Ok(admitted) => Decision::Relay(Box::new((call, upstream, admitted))),
            Err(busy) => Decision::Busy(call.id, caller.principal, busy),
        },
        None => Decision::FullWay,
    }
}

/// The call, where it goes, and who makes it, if it is one for the fast
/// path.
fn relayable(
    calls: &Calls,
    parts: &axum::http::request::Parts,
    bytes: &Bytes,
) -> Option<(Call, Upstream, Caller)> {
    let call: Call = serde_json::from_slice(bytes).ok()?;
    let params = call.params.as_ref()?;
    let header_name = parts.headers.get("mcp-name").and_then(|v| v.to_str().ok());
    if call.jsonrpc != "2.0"
        || call.method != "tools/call"
        || header_name != Some(params.name.as_str())
        || params.task.is_some()
        || agent_tools::is_agent_tool(&params.name)
    {
        return None;
    }
    let declares = params
        .meta
        .as_ref()
        .and_then(|m| m.capabilities.as_ref())
        .is_some_and(|c| c.supports_tasks());
    if declares {
        return None;
    }
    let caller = parts
        .extensions
        .get::<Caller>()
        .cloned()
        .unwrap_or_default();
    let catalog = calls.upstreams.catalog();
    let route = catalog
        .get(&params.name)
        .filter(|r| calls.permits(&caller, &r.server, &r.tool))?;
    let wants = if route.background {
        Wants::Durable
    } else {
        Wants::Sync
    };
    if plan(route.facts, wants) != Plan::PassThrough || !calls.upstreams.is_stateless(&route.server)
    {
        return None;
    }
    let tracker = &calls.upstreams.tracker;
    let (def, _) = tracker.servers().get(&route.server)?;
    // An upstream with OAuth gets its tokens from rmcp's authorizing client.
    if def.oauth.is_some() {
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
    let upstream = Upstream {
        url: url.clone(),
        headers: configured,
        tool: route.tool.clone(),
        timeout: def.call_timeout.unwrap_or(tracker.config().call_timeout),
    };
    Some((call, upstream, caller))
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
    // Only the body is kept while held.
    let (_, body) = request.into_parts();
    let busy = calls.limiter.hold(principal.as_deref(), busy).await;
    let bytes = axum::body::to_bytes(body, limit).await.unwrap_or_default();
    let id = serde_json::from_slice::<Id>(&bytes)
        .map(|call| call.id)
        .unwrap_or(Value::Null);
    rpc_answer(&id, super::server::busy_error(&busy))
}

/// The request never left: the upstream could not be reached.
struct NotSent;

/// Send the call upstream and its answer back as it comes.
async fn relay(
    headers: &HeaderMap,
    call: &Call,
    upstream: &Upstream,
    bytes: &Bytes,
    admitted: Admitted,
) -> Result<Response<Body>, NotSent> {
    let http = mcptask_client::remote::upstream_http_client().map_err(|_| NotSent)?;
    let front_name = call.params.as_ref().map(|p| p.name.as_str());
    let body = if front_name == Some(upstream.tool.as_str()) {
        bytes.clone()
    } else {
        renamed(bytes, &upstream.tool).ok_or(NotSent)?
    };
    let mut request = http
        .post(&upstream.url)
        .header(header::CONTENT_TYPE, "application/json")
        .header("mcp-name", upstream.tool.as_str());
    for (name, value) in headers.iter().filter(|(n, _)| relayed(n)) {
        request = request.header(name, value);
    }
    for (name, value) in &upstream.headers {
        request = request.header(name, value);
    }
    let deadline = tokio::time::Instant::now() + upstream.timeout;
    let answer = match tokio::time::timeout_at(deadline, request.body(body).send()).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(e)) if e.is_connect() => return Err(NotSent),
        // reqwest's text names the upstream's URL: logged, not relayed.
        Ok(Err(e)) => return Ok(rpc_answer(&call.id, Failure::unreachable(&e).into())),
        Err(_) => {
            let timeout = upstream.timeout;
            return Ok(rpc_error(
                &call.id,
                format!("tools/call: the upstream did not answer within {timeout:?}"),
            ));
        }
    };
    let status = answer.status();
    // An MCP answer goes back with its status (a JSON-RPC error may come
    // with a 400); anything else (a proxy's error page) is not the caller's
    // to parse.
    let content_type = answer
        .headers()
        .get(header::CONTENT_TYPE)
        .filter(|v| {
            v.to_str().is_ok_and(|v| {
                v.starts_with("application/json") || v.starts_with("text/event-stream")
            })
        })
        .cloned();
    let Some(content_type) = content_type else {
        return Ok(rpc_error(
            &call.id,
            format!("tools/call: the upstream answered HTTP {status} without an MCP message"),
        ));
    };
    // The admission holds until the answer is through; the answer ends at
    // the call's deadline like any other call.
    let stream = answer
        .bytes_stream()
        .take_until(tokio::time::sleep_until(deadline))
        .map(move |chunk| {
            let _held = &admitted;
            chunk
        });
    let mut response = Response::new(Body::from_stream(stream));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, content_type);
    Ok(response)
}

/// `bytes` with `params.name` set to `tool` (a prefixed front name).
fn renamed(bytes: &Bytes, tool: &str) -> Option<Bytes> {
    let mut value: Value = serde_json::from_slice(bytes).ok()?;
    *value.pointer_mut("/params/name")? = Value::String(tool.to_string());
    serde_json::to_vec(&value).ok().map(Bytes::from)
}

/// A JSON-RPC internal error answer to the request `id`.
fn rpc_error(id: &Value, message: String) -> Response<Body> {
    rpc_answer(id, ErrorData::internal_error(message, None))
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
