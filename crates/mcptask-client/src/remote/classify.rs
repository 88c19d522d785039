//! Classifying what went wrong in a call to a remote server.
//!
//! DESIGN's error taxonomy in one place: a failure is either *transient*
//! (timeouts, refused connections, 5xx, a dropped transport: retried with
//! backoff within the task's budget) or *permanent* (the server does not know
//! the task, broke the protocol, or its definition no longer resolves: the task
//! is settled locally with the reason). Nothing retries forever, and nothing
//! stays stuck in `working`.

use mcptask_core::client::{FailureKind, Observation};
use rmcp::ErrorData;
use rmcp::service::ServiceError;

/// A classified failure of a remote operation.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RemoteError {
    /// Worth retrying later (timeouts, refused connections, 5xx, a dropped transport).
    #[error("{0}")]
    Transient(String),
    /// The server does not know the task (JSON-RPC -32602).
    #[error("{0}")]
    NotFound(String),
    /// The server broke the protocol (garbage, wrong shapes, mismatched ids, oversized payloads).
    #[error("{0}")]
    Protocol(String),
    /// The server definition is gone or changed: the task cannot be reached as created.
    #[error("{0}")]
    ConnectionUnavailable(String),
    /// The server answered with a JSON-RPC error for a call (not a task lookup).
    #[error("{}", .0.message)]
    Rpc(ErrorData),
    /// The call cannot be authorized at its upstream as its server's
    /// `identity` requires (no credential for its principal, a refused
    /// token exchange): permanent, and never answered with the gateway's
    /// own credential instead (`crate::identity`).
    #[error("{0}")]
    Unauthorized(String),
}

impl RemoteError {
    /// What the phase worker records for this failure.
    pub fn observation(&self) -> Observation {
        let permanent = |kind, message: &str| Observation::Permanent {
            kind,
            message: message.to_string(),
        };
        match self {
            RemoteError::Transient(m) => Observation::Transient(m.clone()),
            RemoteError::NotFound(m) => permanent(FailureKind::NotFound, m),
            RemoteError::Protocol(m) => permanent(FailureKind::ProtocolViolation, m),
            RemoteError::ConnectionUnavailable(m) | RemoteError::Unauthorized(m) => {
                permanent(FailureKind::ConnectionUnavailable, m)
            }
            RemoteError::Rpc(e) => {
                Observation::Transient(format!("server error {}: {}", e.code.0, e.message))
            }
        }
    }

    /// The class label of the `mcptask_remote_errors_total` metric.
    pub fn class(&self) -> &'static str {
        match self {
            RemoteError::Transient(_) | RemoteError::Rpc(_) => "transient",
            RemoteError::NotFound(_) => "not_found",
            RemoteError::Protocol(_) => "protocol",
            RemoteError::ConnectionUnavailable(_) => "connection_unavailable",
            RemoteError::Unauthorized(_) => "unauthorized",
        }
    }
}

/// Whether the pooled connection should be dropped (a real disconnect).
pub(crate) fn is_disconnect(e: &ServiceError) -> bool {
    matches!(e, ServiceError::TransportClosed)
}

/// Signs that a transport error was caused by what the server sent, not by the network.
const PROTOCOL_SIGNS: [&str; 5] = [
    "exceeded the maximum size",
    "Deserialize error",
    "unexpected server response",
    "Unexpected content type",
    "expected value",
];

/// Classify an rmcp error for a task operation (`tasks/get`, `tasks/update`, `tasks/cancel`).
pub(crate) fn task_error(operation: &str, e: &ServiceError) -> RemoteError {
    match e {
        ServiceError::McpError(data) => match data.code.0 {
            -32602 => RemoteError::NotFound(format!(
                "{operation}: the server does not know this task: {}",
                data.message
            )),
            -32601 => RemoteError::Protocol(format!(
                "{operation}: the server does not implement it: {}",
                data.message
            )),
            -32021 => RemoteError::Protocol(format!(
                "{operation}: the server rejected the tasks capability this client declares: {}",
                data.message
            )),
            code => RemoteError::Transient(format!(
                "{operation}: server error {code}: {}",
                data.message
            )),
        },
        ServiceError::UnexpectedResponse => RemoteError::Protocol(format!(
            "{operation}: the server's answer has the wrong shape"
        )),
        other => transport_error(operation, other),
    }
}

/// A `tasks/update` the server refused with `-32602` (invalid params): the
/// answers were not taken. Not "task not found" (which would settle the task):
/// the same code also means a bad answer, and the poll that follows tells the
/// two apart (`tasks/get` must answer `-32602` for a task it does not know).
pub(crate) fn update_refusal(e: &ServiceError) -> Option<String> {
    match e {
        ServiceError::McpError(data) if data.code.0 == -32602 => {
            Some(format!("tasks/update: invalid params: {}", data.message))
        }
        _ => None,
    }
}

/// Classify an rmcp error for `tools/call`: JSON-RPC errors are the call's own outcome.
pub(crate) fn call_error(e: &ServiceError) -> RemoteError {
    match e {
        ServiceError::McpError(data) => RemoteError::Rpc(data.clone()),
        ServiceError::UnexpectedResponse => {
            RemoteError::Protocol("tools/call: the server's answer has the wrong shape".into())
        }
        other => transport_error("tools/call", other),
    }
}

/// The status of a server's refusal of the credentials sent to it (HTTP
/// 401 or 403), when that is why `e` failed.
pub(crate) fn refusal(e: &ServiceError) -> Option<u16> {
    super::why::refusal(e)
}

/// Classify a transport failure of `operation` (the class read off rmcp's
/// text, the message in plain words).
pub(crate) fn transport_error(operation: &str, e: &ServiceError) -> RemoteError {
    // The class is read off rmcp's full text (the signs above); the message
    // is the cause in plain words, without rmcp's transport type names.
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    let said = format!("{operation}: {}", super::why::service_failure(e));
    if transient_http(&text).is_some() {
        RemoteError::Transient(said)
    } else if PROTOCOL_SIGNS.iter().any(|sign| text.contains(sign)) {
        RemoteError::Protocol(said)
    } else {
        RemoteError::Transient(said)
    }
}

/// HTTP answers that say "not now" rather than "not MCP": a request timeout
/// (408), a rate limit (429), a server error or a proxy or load balancer that
/// could not reach the server (5xx), and an HTML page where an MCP answer was
/// expected (a proxy's error or maintenance page). They come from the way to
/// the server or from a server that is temporarily unable to serve, so the
/// task is retried within its time budget instead of failed as a protocol
/// violation.
fn transient_http(text: &str) -> Option<&'static str> {
    let statuses = text.match_indices("HTTP ").filter_map(|(at, _)| {
        let digits = text.get(at + 5..at + 8)?;
        let after = text[at + 8..].chars().next();
        (digits.bytes().all(|b| b.is_ascii_digit()) && !after.is_some_and(|c| c.is_ascii_digit()))
            .then(|| digits.parse::<u16>().ok())
            .flatten()
    });
    for status in statuses {
        match status {
            408 => return Some("the request timed out on the way (HTTP 408)"),
            429 => return Some("rate limited (HTTP 429)"),
            500..=599 => return Some("the server or a proxy in front of it is unavailable"),
            _ => {}
        }
    }
    let lower = text.to_ascii_lowercase();
    if lower.contains("text/html") || lower.contains("<html") || lower.contains("<!doctype html") {
        return Some("an HTML page came back instead of an MCP answer (a proxy's error page?)");
    }
    None
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn task_errors_are_classified() {
        let e = ServiceError::McpError(ErrorData::invalid_params("Task not found", None));
        assert!(matches!(
            task_error("tasks/get", &e),
            RemoteError::NotFound(_)
        ));
        let e = ServiceError::McpError(ErrorData::internal_error("db down", None));
        assert!(matches!(
            task_error("tasks/get", &e),
            RemoteError::Transient(_)
        ));
        assert!(matches!(
            task_error("tasks/get", &ServiceError::UnexpectedResponse),
            RemoteError::Protocol(_)
        ));
        assert!(matches!(
            task_error("tasks/get", &ServiceError::TransportClosed),
            RemoteError::Transient(_)
        ));
        let timeout = ServiceError::Timeout {
            timeout: Duration::from_secs(1),
        };
        assert!(matches!(
            task_error("tasks/get", &timeout),
            RemoteError::Transient(_)
        ));
    }

    #[test]
    fn http_answers_of_the_way_are_transient() {
        for text in [
            "Transport send error: HTTP 503",
            "Transport send error: HTTP 429",
            "unexpected server response: HTTP 408 Request Timeout: upstream unavailable (408)",
            "unexpected server response: HTTP 502 Bad Gateway: <html><body>502</body></html>",
            "Unexpected content type: Some(\"text/html; charset=utf-8\")",
        ] {
            assert!(transient_http(text).is_some(), "{text}");
        }
        for text in [
            "unexpected server response: HTTP 404 Not Found: no such session",
            "Unexpected content type: Some(\"application/xml\")",
            "HTTP 5031",
            "Deserialize error: expected value at line 1 column 1",
        ] {
            assert!(transient_http(text).is_none(), "{text}");
        }
    }

    /// A call on an open session whose server went away: rmcp wraps the
    /// HTTP client's error in its transport's type name; the message says
    /// the cause in words, and the class stays transient.
    #[tokio::test]
    async fn a_failed_send_says_the_cause_without_type_names() {
        use rmcp::transport::DynamicTransportError;
        use rmcp::transport::streamable_http_client::StreamableHttpError;
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/mcp", closed.local_addr().unwrap());
        drop(closed);
        crate::tls::install_crypto_provider();
        let refused = reqwest::Client::new().post(&url).send().await.unwrap_err();
        let e = ServiceError::TransportSend(DynamicTransportError::from_parts(
            "rmcp::transport::worker::WorkerTransport<rmcp::transport::streamable_http_client::StreamableHttpClientWorker<reqwest::Client>>",
            std::any::TypeId::of::<()>(),
            Box::new(StreamableHttpError::<reqwest::Error>::Client(refused)),
        ));
        let classified = task_error("tasks/get", &e);
        assert!(
            matches!(classified, RemoteError::Transient(_)),
            "{classified:?}"
        );
        let said = classified.to_string();
        assert_eq!(
            said,
            "tasks/get: connection refused (is the server running?)"
        );
        let timeout = ServiceError::Timeout {
            timeout: Duration::from_secs(30),
        };
        let said = call_error(&timeout).to_string();
        assert!(
            said.contains("no answer within 30s") && said.contains("call_timeout_ms"),
            "{said}"
        );
    }

    #[test]
    fn only_invalid_params_refuse_an_update() {
        let e = ServiceError::McpError(ErrorData::invalid_params("answer must be a number", None));
        assert!(
            update_refusal(&e)
                .unwrap()
                .contains("answer must be a number")
        );
        let e = ServiceError::McpError(ErrorData::internal_error("db down", None));
        assert_eq!(update_refusal(&e), None, "a server fault is retried");
        assert_eq!(update_refusal(&ServiceError::TransportClosed), None);
    }

    #[test]
    fn observations_follow_the_class() {
        assert!(matches!(
            RemoteError::Transient("x".into()).observation(),
            Observation::Transient(_)
        ));
        assert!(matches!(
            RemoteError::ConnectionUnavailable("x".into()).observation(),
            Observation::Permanent {
                kind: FailureKind::ConnectionUnavailable,
                ..
            }
        ));
    }
}
