//! The OpenTelemetry spans of the faces and the drivers, named and
//! attributed as the MCP semantic conventions say (`tools/call {tool}`,
//! `mcp.method.name`, `gen_ai.tool.name`, …). Each joins the caller's trace:
//! the `traceparent` of the request's `_meta` (SEP-414) at the MCP front, of
//! the HTTP headers at the REST face, or, for work done later, the one kept
//! with the call. With telemetry off the spans are disabled and nothing
//! here reads or formats anything.

use mcptask_client::trace::{TARGET, from_headers, from_meta, set_parent};
use rmcp::RoleServer;
use rmcp::model::CallToolRequestParams;
use rmcp::service::RequestContext;
use tracing::Span;
use tracing::field::Empty;

/// How a front request arrived, for its span.
pub enum Arrival<'a> {
    /// Over HTTP, with its headers (a legacy session's id among them).
    Http(&'a axum::http::HeaderMap),
    /// Over stdio.
    Pipe,
}

/// The server span of a `tools/call` of `name` at the MCP front (`/mcp` or
/// stdio), whichever path serves it (the full way, or the fast path's
/// relay). Its parent is the caller's: the `traceparent` of the request's
/// `_meta` (SEP-414), else of the HTTP headers.
pub fn front_call_span(
    name: &str,
    request_id: &dyn std::fmt::Display,
    protocol_version: Option<&str>,
    meta: Option<&serde_json::Map<String, serde_json::Value>>,
    arrival: Arrival<'_>,
) -> Span {
    let span = tracing::info_span!(
        target: TARGET,
        "tools/call",
        otel.name = %format_args!("tools/call {name}"),
        otel.kind = "server",
        mcp.method.name = "tools/call",
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = name,
        jsonrpc.request.id = %request_id,
        jsonrpc.protocol.version = "2.0",
        mcp.protocol.version = Empty,
        mcp.session.id = Empty,
        network.transport = Empty,
        network.protocol.name = Empty,
    );
    if span.is_disabled() {
        return span;
    }
    if let Some(version) = protocol_version {
        span.record("mcp.protocol.version", version);
    }
    let mut parent = meta.and_then(from_meta);
    match arrival {
        Arrival::Http(headers) => {
            span.record("network.transport", "tcp");
            span.record("network.protocol.name", "http");
            if let Some(id) = headers.get("mcp-session-id").and_then(|v| v.to_str().ok()) {
                span.record("mcp.session.id", id);
            }
            if parent.is_none() {
                parent = from_headers(headers);
            }
        }
        Arrival::Pipe => {
            span.record("network.transport", "pipe");
        }
    }
    set_parent(&span, parent.as_ref());
    span
}

/// [`front_call_span`] of a request rmcp decoded (the full way).
pub fn front_call(request: &CallToolRequestParams, context: &RequestContext<RoleServer>) -> Span {
    let version = context.protocol_version().map(|v| v.to_string());
    // rmcp hands the request's `_meta` to the handler in the context; a
    // client that put it in the params is read too.
    let meta = request
        .meta
        .as_ref()
        .map(|m| &m.0.0)
        .filter(|m| from_meta(m).is_some())
        .unwrap_or(&context.meta.0.0);
    let arrival = match context.extensions.get::<axum::http::request::Parts>() {
        Some(parts) => Arrival::Http(&parts.headers),
        None => Arrival::Pipe,
    };
    front_call_span(
        &request.name,
        &context.id,
        version.as_deref(),
        Some(meta),
        arrival,
    )
}

/// The server span of `POST /api/v1/calls`, in the trace of the request's
/// `traceparent` header.
pub fn rest_call(server: &str, tool: &str, headers: &axum::http::HeaderMap) -> Span {
    let span = tracing::info_span!(
        target: TARGET,
        "POST /api/v1/calls",
        otel.name = %format_args!("POST /api/v1/calls {server}/{tool}"),
        otel.kind = "server",
        http.request.method = "POST",
        http.route = "/api/v1/calls",
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = tool,
        mcptask.server = server,
        network.transport = "tcp",
        network.protocol.name = "http",
    );
    if !span.is_disabled() {
        set_parent(&span, from_headers(headers).as_ref());
    }
    span
}

/// The span of a call task's driver running the call `id`, on whichever
/// replica runs it; the caller sets its parent, the trace kept with the call.
pub fn driver(driver: &str, id: &str, tool: &str) -> Span {
    tracing::info_span!(
        target: TARGET,
        "driver",
        otel.name = %format_args!("driver {driver} {tool}"),
        otel.kind = "internal",
        mcptask.driver = driver,
        mcptask.call.id = id,
        gen_ai.tool.name = tool,
    )
}
