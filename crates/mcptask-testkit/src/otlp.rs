//! An OTLP/HTTP trace receiver in the test process: a collector stand-in
//! that accepts `POST /v1/traces` (protobuf), decodes every span and keeps
//! it for the test to read.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, any_value};
use prost::Message;

/// One span as received, ids in lowercase hex (`parent` empty for a root).
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    pub trace_id: String,
    pub span_id: String,
    pub parent: String,
    pub name: String,
    /// `SpanKind` as OTLP numbers it (1 internal, 2 server, 3 client).
    pub kind: i32,
    /// Attributes, each value as text.
    pub attributes: BTreeMap<String, String>,
    /// The resource's `service.name`.
    pub service: String,
}

impl ReceivedSpan {
    /// An attribute's value, if the span has it.
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

/// A running receiver. Stops when dropped.
pub struct OtlpReceiver {
    /// `http://127.0.0.1:PORT`: what `OTEL_EXPORTER_OTLP_ENDPOINT` or a
    /// `[telemetry] endpoint` takes.
    pub endpoint: String,
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
    server: tokio::task::JoinHandle<()>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn text(value: Option<&AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn decode(request: ExportTraceServiceRequest) -> Vec<ReceivedSpan> {
    let mut out = Vec::new();
    for resource in request.resource_spans {
        let service = resource
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|kv| kv.key == "service.name")
            .map(|kv| text(kv.value.as_ref()))
            .unwrap_or_default();
        for scope in resource.scope_spans {
            for span in scope.spans {
                out.push(ReceivedSpan {
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent: hex(&span.parent_span_id),
                    name: span.name,
                    kind: span.kind,
                    attributes: span
                        .attributes
                        .iter()
                        .map(|kv| (kv.key.clone(), text(kv.value.as_ref())))
                        .collect(),
                    service: service.clone(),
                });
            }
        }
    }
    out
}

impl OtlpReceiver {
    /// Listen on an ephemeral loopback port.
    pub async fn start() -> Self {
        use axum::http::{StatusCode, header};
        let spans = Arc::new(Mutex::new(Vec::new()));
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post({
                let spans = spans.clone();
                move |body: axum::body::Bytes| {
                    let spans = spans.clone();
                    async move {
                        match ExportTraceServiceRequest::decode(body) {
                            Ok(request) => {
                                spans.lock().unwrap().extend(decode(request));
                                let reply = ExportTraceServiceResponse::default().encode_to_vec();
                                (
                                    StatusCode::OK,
                                    [(header::CONTENT_TYPE, "application/x-protobuf")],
                                    reply,
                                )
                            }
                            Err(e) => (
                                StatusCode::BAD_REQUEST,
                                [(header::CONTENT_TYPE, "text/plain")],
                                e.to_string().into_bytes(),
                            ),
                        }
                    }
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the OTLP receiver");
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        OtlpReceiver {
            endpoint,
            spans,
            server,
        }
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.spans.lock().unwrap().clone()
    }

    /// The spans received so far in trace `trace_id`.
    pub fn trace(&self, trace_id: &str) -> Vec<ReceivedSpan> {
        self.spans()
            .into_iter()
            .filter(|s| s.trace_id == trace_id)
            .collect()
    }

    /// Wait (up to `timeout`) until `done` holds for the spans of trace
    /// `trace_id`; returns them either way (the caller asserts).
    pub async fn wait_trace(
        &self,
        trace_id: &str,
        timeout: Duration,
        done: impl Fn(&[ReceivedSpan]) -> bool,
    ) -> Vec<ReceivedSpan> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let spans = self.trace(trace_id);
            if done(&spans) || tokio::time::Instant::now() >= deadline {
                return spans;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}
