//! Failures to reach or talk to a server, in the words an operator acts on.
//!
//! rmcp's own `Display` of a transport error starts with the transport's Rust
//! type (`Transport [rmcp::transport::worker::WorkerTransport<…>] error: …`)
//! and buries the cause at the end of a chain of wrappers. Here the chain is
//! walked down to the typed cause (an I/O error, an HTTP status, a body that
//! is not MCP) and said plainly, with what to check. These texts end up in
//! `serve`'s log, in a task's failure and in a server's health `lastError`.

use std::error::Error;
use std::io;

use rmcp::service::{ClientInitializeError, ServiceError};
use rmcp::transport::DynamicTransportError;
use rmcp::transport::streamable_http_client::StreamableHttpError;

type HttpError = StreamableHttpError<reqwest::Error>;

/// What the `server/discover` probe heard, when `initialize` followed it.
fn probe_failure(e: &ClientInitializeError) -> String {
    match e {
        ClientInitializeError::JsonRpcError(data) if status_in(&data.message).is_none() => {
            format!("answered {} {}", data.code.0, data.message)
        }
        other => init_failure(other),
    }
}

/// Why a stdio server's process could not be started.
pub(super) fn spawn_failure(command: &str, cwd: Option<&std::path::Path>, e: &io::Error) -> String {
    // A missing working directory also fails the spawn with "not found":
    // blame the directory, not the command.
    if let Some(dir) = cwd
        && !dir.is_dir()
    {
        return format!(
            "working directory {:?} does not exist (fix `cwd` of this [[servers]] entry or create the directory)",
            dir.display().to_string()
        );
    }
    let path_like = command.contains(std::path::MAIN_SEPARATOR) || command.contains('/');
    match e.kind() {
        io::ErrorKind::NotFound if path_like => {
            format!("command {command:?} not found (no such file; check the path in `command`)")
        }
        io::ErrorKind::NotFound => format!(
            "command {command:?} not found (looked in PATH; give an absolute path or install it)"
        ),
        io::ErrorKind::PermissionDenied => format!(
            "command {command:?} is not executable (permission denied; make it executable, e.g. chmod +x, or point `command` at the program)"
        ),
        _ => format!("command {command:?} could not be started: {e}"),
    }
}

/// Why opening a session failed (after the transport was created).
pub(super) fn init_failure(e: &ClientInitializeError) -> String {
    match e {
        ClientInitializeError::TransportError { error, .. } => transport_failure(error),
        ClientInitializeError::ConnectionClosed(_) => {
            "the connection closed before the server answered `initialize`".to_string()
        }
        ClientInitializeError::JsonRpcError(data) => match status_in(&data.message) {
            Some(status) => http_status(status, &data.message),
            None => format!("the server refused `initialize`: {}", data.message),
        },
        ClientInitializeError::NoCompatibleProtocolVersion {
            server_supported, ..
        } => format!(
            "no common MCP protocol version: the server speaks {}; mcptask speaks 2026-07-28, and any earlier version through `initialize`",
            server_supported
                .iter()
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        // Both attempts, each said plainly: the probe's answer alone hid
        // why `initialize` failed (often the one that matters).
        ClientInitializeError::LegacyFallbackFailed { discover, fallback } => format!(
            "`initialize` failed: {}; before it, the `server/discover` probe: {}",
            init_failure(fallback),
            probe_failure(discover)
        ),
        ClientInitializeError::ExpectedInitResponse(_)
        | ClientInitializeError::ExpectedInitResult(_)
        | ClientInitializeError::ConflictInitResponseId(..)
        | ClientInitializeError::UncorrelatedErrorResponse { .. } => {
            "the server's answer to `initialize` is not valid MCP (is this the server's MCP endpoint?)"
                .to_string()
        }
        other => other.to_string(),
    }
}

/// Why opening a session to a stdio server's process failed: a process
/// that exits at once shows up as a closed connection or a broken pipe,
/// depending on which side noticed first; both mean the same to the
/// operator.
pub(super) fn stdio_init_failure(e: &ClientInitializeError) -> String {
    let gone = match e {
        ClientInitializeError::ConnectionClosed(_) => true,
        ClientInitializeError::TransportError { error, .. } => {
            error.error.downcast_ref::<io::Error>().is_some_and(|io| {
                matches!(
                    io.kind(),
                    io::ErrorKind::BrokenPipe
                        | io::ErrorKind::UnexpectedEof
                        | io::ErrorKind::ConnectionReset
                )
            })
        }
        _ => false,
    };
    if gone {
        "the process exited (or closed its output) before it answered `initialize` (run its command by hand to see why)".to_string()
    } else {
        init_failure(e)
    }
}

/// Why a request on an open session failed, for the errors that are not the
/// server's own JSON-RPC answer.
pub(super) fn service_failure(e: &ServiceError) -> String {
    match e {
        ServiceError::TransportSend(error) => transport_failure(error),
        ServiceError::TransportClosed => {
            "the connection to the server closed (a stdio server that exited, or an HTTP session that ended); it is reopened on the next call".to_string()
        }
        ServiceError::Timeout { timeout } => format!(
            "no answer within {} (the call timeout; raise `call_timeout_ms` if the server is just slow)",
            seconds(*timeout)
        ),
        other => other.to_string(),
    }
}

/// The cause carried by a transport error, without the transport's type name.
pub(super) fn transport_failure(e: &DynamicTransportError) -> String {
    let inner: &(dyn Error + 'static) = e.error.as_ref();
    if let Some(http) = inner.downcast_ref::<HttpError>() {
        return http_failure(http);
    }
    if let Some(io) = inner.downcast_ref::<io::Error>() {
        return io_failure(io);
    }
    // Another transport: its own message, then each cause.
    chain(inner)
}

fn http_failure(e: &HttpError) -> String {
    match e {
        StreamableHttpError::Client(e) => reqwest_failure(e),
        StreamableHttpError::Io(e) => io_failure(e),
        StreamableHttpError::HttpStatus(s) => http_status(s.status, ""),
        StreamableHttpError::AuthRequired(_) => http_status(401, ""),
        StreamableHttpError::InsufficientScope(_) => http_status(403, ""),
        StreamableHttpError::UnexpectedServerResponse(text) => match status_in(text) {
            Some(status) => http_status(status, text),
            None => format!("the answer is not MCP: {}", short(text)),
        },
        // Mid-session an HTML page is most often a proxy's error page; at
        // the first connect, a URL that is not the MCP endpoint.
        StreamableHttpError::UnexpectedContentType(Some(content_type))
            if content_type.to_ascii_lowercase().contains("text/html") =>
        {
            format!(
                "an HTML page ({content_type}) came back instead of an MCP answer (a proxy's error page? or not the server's MCP endpoint, e.g. …/mcp)"
            )
        }
        StreamableHttpError::UnexpectedContentType(content_type) => format!(
            "the server answered {}, not MCP (is this URL the server's MCP endpoint, e.g. …/mcp?)",
            content_type.as_deref().unwrap_or("a body without a content type")
        ),
        StreamableHttpError::Deserialize(e) => format!(
            "the answer is not MCP JSON-RPC ({e}; is this URL the server's MCP endpoint, e.g. …/mcp?)"
        ),
        StreamableHttpError::SessionExpired => {
            "the server no longer knows the session (HTTP 404; it restarted?); a new one is opened on the next call".to_string()
        }
        StreamableHttpError::TransportChannelClosed => {
            "the connection to the server closed".to_string()
        }
        other => chain(other),
    }
}

/// An HTTP client error: a connection that could not be made, or a request
/// that could not be sent or answered.
fn reqwest_failure(e: &reqwest::Error) -> String {
    let chained: &(dyn Error + 'static) = e;
    if e.is_timeout() {
        return "no answer in time (is the host reachable? a firewall dropping packets?)"
            .to_string();
    }
    if let Some(text) = crate::tls::tls_failure(chained) {
        return text;
    }
    if let Some(text) = find::<io::Error>(chained).and_then(io_kind_failure) {
        return text;
    }
    // hyper's connector refuses https:// when no TLS is compiled in (the
    // `tls` feature off); its error has no kind, only this text.
    if chain(chained).contains("scheme is not http") {
        return "https:// needs TLS, which this build does not include (build with the `tls` feature, or use an http:// URL, e.g. through a TLS-terminating proxy on this host)".to_string();
    }
    if e.is_builder() {
        return format!("the URL cannot be used: {}", root(chained));
    }
    // Host-name resolution failures carry no typed kind (the resolver's text
    // is all there is); hyper says "dns error" on the way.
    if e.is_connect() && chain(chained).to_ascii_lowercase().contains("dns error") {
        return format!(
            "cannot resolve the host name: {} (check the host in the URL)",
            root(chained)
        );
    }
    if e.is_connect() {
        return format!("cannot connect: {}", root(chained));
    }
    root(chained).to_string()
}

fn io_failure(e: &io::Error) -> String {
    io_kind_failure(e).unwrap_or_else(|| root(e).to_string())
}

/// The I/O failures whose kind alone says what happened.
fn io_kind_failure(e: &io::Error) -> Option<String> {
    Some(match e.kind() {
        io::ErrorKind::ConnectionRefused => "connection refused (is the server running?)".into(),
        io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted => {
            "the connection was reset (the server, or a proxy in front of it, dropped it)".into()
        }
        io::ErrorKind::TimedOut => {
            "no answer in time (is the host reachable? a firewall dropping packets?)".into()
        }
        io::ErrorKind::BrokenPipe | io::ErrorKind::UnexpectedEof => {
            "the connection closed mid-way (a stdio server that exited, or a proxy that dropped it)"
                .into()
        }
        io::ErrorKind::HostUnreachable | io::ErrorKind::NetworkUnreachable => {
            format!("{} (check the host in the URL and the network)", root(e))
        }
        _ => return None,
    })
}

/// What an HTTP status at the MCP endpoint means, and what to check.
fn http_status(status: u16, detail: &str) -> String {
    let detail = detail_after_status(detail);
    let text = match status {
        401 => "HTTP 401 Unauthorized: the server wants credentials (set `headers = { Authorization = \"Bearer …\" }` on this [[servers]] entry, or check the token there)".to_string(),
        403 => "HTTP 403 Forbidden: the server refused these credentials (check the Authorization header of this [[servers]] entry and what the token may do)".to_string(),
        404 => "HTTP 404 Not Found: no MCP endpoint at this URL (check the path; MCP servers usually serve at …/mcp)".to_string(),
        405 => "HTTP 405 Method Not Allowed: this URL does not take MCP's POSTs (check the path; MCP servers usually serve at …/mcp)".to_string(),
        408 => "HTTP 408: the request timed out on the way".to_string(),
        429 => "HTTP 429: rate limited by the server".to_string(),
        500..=599 => format!("HTTP {status}: the server or a proxy in front of it is unavailable"),
        _ => format!("HTTP {status}: not an MCP answer (is this URL the server's MCP endpoint?)"),
    };
    if detail.is_empty() {
        text
    } else {
        format!("{text}; it said: {}", short(detail))
    }
}

/// The status of a server's refusal of the credentials sent to it (HTTP
/// 401 or 403), when that is why a request on an open session failed.
pub(super) fn refusal(e: &ServiceError) -> Option<u16> {
    let ServiceError::TransportSend(error) = e else {
        return None;
    };
    let status = match error.error.downcast_ref::<HttpError>()? {
        StreamableHttpError::AuthRequired(_) => 401,
        StreamableHttpError::InsufficientScope(_) => 403,
        StreamableHttpError::UnexpectedServerResponse(text) => status_in(text)?,
        _ => return None,
    };
    matches!(status, 401 | 403).then_some(status)
}

/// "HTTP 404 Not Found: no route" → 404 (rmcp keeps some statuses only in text).
fn status_in(text: &str) -> Option<u16> {
    let at = text.find("HTTP ")?;
    let digits = text.get(at + 5..at + 8)?;
    let after = text[at + 8..].chars().next();
    if !digits.bytes().all(|b| b.is_ascii_digit()) || after.is_some_and(|c| c.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The body part of "…HTTP 404 Not Found: BODY", if any.
fn detail_after_status(text: &str) -> &str {
    let Some(at) = text.find("HTTP ") else {
        return "";
    };
    match text[at..].split_once(": ") {
        Some((_, body)) => body.trim(),
        None => "",
    }
}

/// A server's text, bounded and on one line.
fn short(text: &str) -> String {
    let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    mcptask_core::payload::truncate_text(&one_line, 200)
}

fn seconds(d: std::time::Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// The first error of type `T` in `e`'s chain.
fn find<'a, T: Error + 'static>(e: &'a (dyn Error + 'static)) -> Option<&'a T> {
    let mut current = Some(e);
    while let Some(err) = current {
        if let Some(found) = err.downcast_ref::<T>() {
            return Some(found);
        }
        current = err.source();
    }
    None
}

/// The innermost cause: the one that says what happened.
fn root<'a>(e: &'a (dyn Error + 'static)) -> &'a (dyn Error + 'static) {
    let mut current = e;
    while let Some(next) = current.source() {
        current = next;
    }
    current
}

/// An error and its causes, each once (wrappers that repeat their cause in
/// their own message are skipped).
fn chain(e: &(dyn Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut current = Some(e);
    while let Some(err) = current {
        let text = err.to_string();
        let next = err.source().map(|s| s.to_string());
        let repeats_cause = next.as_deref().is_some_and(|n| text.ends_with(n));
        if !repeats_cause && !text.is_empty() {
            parts.push(text);
        }
        current = err.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_fallback_says_why_initialize_failed_and_what_the_probe_heard() {
        let probe =
            ClientInitializeError::JsonRpcError(rmcp::model::ErrorData::method_not_found::<
                rmcp::model::DiscoverRequestMethod,
            >());
        let fallback = ClientInitializeError::ConnectionClosed("eof".into());
        let said = init_failure(&ClientInitializeError::LegacyFallbackFailed {
            discover: Box::new(probe),
            fallback: Box::new(fallback),
        });
        assert!(
            said.contains("closed before the server answered `initialize`")
                && said.contains("server/discover"),
            "{said}"
        );
    }

    #[test]
    fn statuses_are_read_from_rmcp_texts() {
        assert_eq!(status_in("HTTP 404 Not Found: nope"), Some(404));
        assert_eq!(
            status_in("server/discover rejected with HTTP 401 Unauthorized: "),
            Some(401)
        );
        assert_eq!(status_in("HTTP 5031"), None);
        assert_eq!(status_in("no status"), None);
        assert_eq!(
            detail_after_status("HTTP 404 Not Found: no such route"),
            "no such route"
        );
        assert!(http_status(404, "HTTP 404 Not Found: x").contains("/mcp"));
        assert!(http_status(401, "").contains("Authorization"));
    }

    #[test]
    fn a_spawn_failure_names_the_command_and_the_fix() {
        let not_found = io::Error::from(io::ErrorKind::NotFound);
        let said = spawn_failure("nosuchcmd", None, &not_found);
        assert!(
            said.contains("\"nosuchcmd\"") && said.contains("PATH"),
            "{said}"
        );
        let said = spawn_failure("/opt/x/bin/srv", None, &not_found);
        assert!(said.contains("no such file"), "{said}");
        let denied = io::Error::from(io::ErrorKind::PermissionDenied);
        let said = spawn_failure("./srv", None, &denied);
        assert!(said.contains("not executable"), "{said}");
        let dir = std::path::Path::new("/nonexistent-mcptask-dir");
        let said = spawn_failure("srv", Some(dir), &not_found);
        assert!(said.contains("working directory"), "{said}");
    }
}
