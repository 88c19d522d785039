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

/// The server span of a `tools/call` at the MCP front (`/mcp` or stdio).
pub fn front_call(request: &CallToolRequestParams, context: &RequestContext<RoleServer>) -> Span {
    let name = &*request.name;
    let span = tracing::info_span!(
        target: TARGET,
        "tools/call",
        otel.name = %format_args!("tools/call {name}"),
        otel.kind = "server",
        mcp.method.name = "tools/call",
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = name,
        jsonrpc.request.id = %context.id,
        jsonrpc.protocol.version = "2.0",
        mcp.protocol.version = Empty,
        mcp.session.id = Empty,
        network.transport = Empty,
        network.protocol.name = Empty,
    );
    if span.is_disabled() {
        return span;
    }
    if let Some(version) = context.protocol_version() {
        span.record("mcp.protocol.version", tracing::field::display(version));
    }
    match context.extensions.get::<axum::http::request::Parts>() {
        Some(parts) => {
            span.record("network.transport", "tcp");
            span.record("network.protocol.name", "http");
            if let Some(id) = parts
                .headers
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
            {
                span.record("mcp.session.id", id);
            }
        }
        None => {
            span.record("network.transport", "pipe");
        }
    }
    // rmcp hands the request's `_meta` to the handler in the context; a
    // client that put it in the params is read too.
    let cx = request
        .meta
        .as_ref()
        .and_then(|m| from_meta(&m.0.0))
        .or_else(|| from_meta(&context.meta.0.0));
    set_parent(&span, cx.as_ref());
    span
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
