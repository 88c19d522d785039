//! Traces across the hop: the W3C trace context read from a caller (request
//! `_meta`, SEP-414, or HTTP headers), passed on in the upstream request's
//! `_meta`, and kept with a call so its later work joins the same trace.
//!
//! Every span mcptask emits for OpenTelemetry has the target [`TARGET`]: the
//! process's log output leaves it out, and with telemetry off no subscriber
//! enables it, so these spans cost what a disabled `tracing` span costs and
//! nothing here runs (each helper checks the span first).

use std::collections::HashMap;

use mcptask_core::trace::TraceContext;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use serde_json::{Map, Value};
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The `tracing` target of the spans exported to OpenTelemetry.
pub const TARGET: &str = "mcptask_trace";

const TRACEPARENT: &str = "traceparent";
const TRACESTATE: &str = "tracestate";

/// The trace context in a request's `_meta` (`traceparent`, `tracestate`).
pub fn from_meta(meta: &Map<String, Value>) -> Option<TraceContext> {
    let text = |key: &str| meta.get(key).and_then(Value::as_str).map(str::to_string);
    Some(TraceContext {
        traceparent: text(TRACEPARENT)?,
        tracestate: text(TRACESTATE),
    })
}

/// The trace context in HTTP request headers.
pub fn from_headers(headers: &http::HeaderMap) -> Option<TraceContext> {
    let text = |key: &str| {
        headers
            .get(key)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    Some(TraceContext {
        traceparent: text(TRACEPARENT)?,
        tracestate: text(TRACESTATE),
    })
}

/// Make `cx` the parent of `span` (before it is entered). A malformed
/// context, a disabled span or telemetry off leave the span as it was.
pub fn set_parent(span: &Span, cx: Option<&TraceContext>) {
    let Some(cx) = cx else { return };
    if span.is_disabled() {
        return;
    }
    let mut carrier = HashMap::with_capacity(2);
    carrier.insert(TRACEPARENT.to_string(), cx.traceparent.clone());
    if let Some(state) = &cx.tracestate {
        carrier.insert(TRACESTATE.to_string(), state.clone());
    }
    let parent = TraceContextPropagator::new().extract(&carrier);
    if opentelemetry::trace::TraceContextExt::span(&parent)
        .span_context()
        .is_valid()
    {
        let _ = span.set_parent(parent);
    }
}

/// The trace context of `span`, to pass on or keep; `None` when the span is
/// disabled (telemetry off).
pub fn of(span: &Span) -> Option<TraceContext> {
    if span.is_disabled() {
        return None;
    }
    let mut carrier = HashMap::with_capacity(2);
    TraceContextPropagator::new().inject_context(&span.context(), &mut carrier);
    Some(TraceContext {
        traceparent: carrier.remove(TRACEPARENT)?,
        tracestate: carrier.remove(TRACESTATE).filter(|s| !s.is_empty()),
    })
}

/// [`of`] the current span.
pub fn current() -> Option<TraceContext> {
    of(&Span::current())
}

/// Put `cx` in a request's `_meta`, replacing the caller's entries (the
/// upstream's parent is mcptask's request span, in the same trace).
pub fn to_meta(meta: &mut Map<String, Value>, cx: &TraceContext) {
    meta.insert(TRACEPARENT.into(), Value::String(cx.traceparent.clone()));
    match &cx.tracestate {
        Some(state) => {
            meta.insert(TRACESTATE.into(), Value::String(state.clone()));
        }
        None => {
            meta.remove(TRACESTATE);
        }
    }
}

/// The span of a `tools/call` mcptask sends to `server` (an OpenTelemetry
/// client span, named as the MCP conventions name it: `tools/call {tool}`).
pub fn tool_call_span(server: Option<&str>, tool: &str) -> Span {
    tracing::info_span!(
        target: TARGET,
        "tools/call",
        otel.name = %format_args!("tools/call {tool}"),
        otel.kind = "client",
        mcp.method.name = "tools/call",
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = tool,
        mcptask.server = server,
    )
}

/// The span of a task request (`tasks/get`, `tasks/cancel`, …) mcptask
/// sends to `server` about its task `task`, in the trace of the call it
/// serves (`parent`, as kept with the call): a poll made by any replica, at
/// any time, joins the call's trace. Without `parent`, the current span
/// is the parent.
pub fn task_request_span(
    method: &'static str,
    server: Option<&str>,
    task: &str,
    parent: Option<&TraceContext>,
) -> Span {
    let span = tracing::info_span!(
        target: TARGET,
        "tasks",
        otel.name = method,
        otel.kind = "client",
        mcp.method.name = method,
        mcp.task.id = task,
        mcptask.server = server,
    );
    set_parent(&span, parent);
    span
}

/// Put the trace context of `span` (the span of the request about to be
/// sent) in the request's `_meta`, so the upstream continues the trace.
pub fn stamp(meta: &mut Option<rmcp::model::RequestMetaObject>, span: &Span) {
    if let Some(cx) = of(span) {
        to_meta(&mut meta.get_or_insert_with(Default::default).0.0, &cx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_and_headers_carry_the_context() {
        let meta = serde_json::json!({
            "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "tracestate": "a=1",
        });
        let cx = from_meta(meta.as_object().unwrap()).unwrap();
        assert_eq!(cx.tracestate.as_deref(), Some("a=1"));
        let mut headers = http::HeaderMap::new();
        headers.insert("traceparent", cx.traceparent.parse().unwrap());
        assert_eq!(from_headers(&headers).unwrap().traceparent, cx.traceparent);
        let mut out = Map::new();
        to_meta(&mut out, &cx);
        assert_eq!(from_meta(&out), Some(cx));
        assert_eq!(from_meta(&Map::new()), None);
    }

    #[test]
    fn without_telemetry_nothing_is_made() {
        // No OpenTelemetry subscriber: the span is disabled, so no context.
        let span = tracing::info_span!(target: TARGET, "tools/call");
        assert!(of(&span).is_none());
    }
}
