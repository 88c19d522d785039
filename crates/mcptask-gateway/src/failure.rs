//! What a caller is told when its request fails: one mapping from every
//! error of the gateway's layers (the tracker, the call runtime, the
//! upstream layer, the calls) to a [`Failure`], rendered by each face
//! without deciding anything again: as a REST error (`api::error`) or a
//! JSON-RPC error (`From<Failure> for ErrorData`, for the MCP front and the
//! agent tools).
//!
//! The redaction is decided here, once: a store's, a driver's or an
//! upstream transport's own text goes to the log under an incident id
//! ([`mcptask_server::redact`], the rule of [`mcptask_core::redact`]); the
//! caller gets a stable code and a message written for it. An upstream's
//! own JSON-RPC error is the upstream's answer and passes as it is.

use mcptask_client::TrackerError;
use mcptask_client::remote::RemoteError;
use mcptask_client::upstream::UpstreamError;
use mcptask_core::protocol::Era;
use mcptask_core::redact::{Internal, Redacted};
use mcptask_server::{SERVER_BUSY, TASK_NOT_FOUND, TaskError, redact, redacted_error};
use rmcp::ErrorData;
use rmcp::model::{CallToolResult, ContentBlock, ErrorCode};
use serde_json::json;

use crate::calls::{Busy, CallError};

/// Why a request failed, as every face tells its caller.
#[derive(Debug, Clone)]
pub enum Failure {
    /// The request itself is unusable (arguments, ids, sizes).
    BadRequest(String),
    /// An answer does not fit its question.
    InvalidAnswer {
        /// The input key.
        key: String,
        /// The form field at fault, when one is.
        field: Option<String>,
        /// What was expected and what was given.
        reason: String,
        /// The whole message.
        message: String,
    },
    /// No such task for this caller (unknown, purged or another's).
    TaskNotFound,
    /// No such task for this caller, in the tracker's words (the same for
    /// unknown and foreign ids).
    NotFound(String),
    /// No server of this name is configured.
    UnknownServer(String),
    /// The server that may serve the tool has not answered since the
    /// gateway started (its tools are not listed yet); it is listed again
    /// every few seconds.
    NotReady(String),
    /// The server offers no such tool, or not to this caller (the two read
    /// the same). `server`: the caller named one (REST, CLI).
    UnknownTool {
        /// The server the caller named, if it named one.
        server: Option<String>,
        /// The tool, as the caller named it.
        tool: String,
    },
    /// The caller may not act for another principal.
    Forbidden(String),
    /// The upstream answered with this JSON-RPC error.
    Remote(ErrorData),
    /// The upstream broke the protocol (what it sent, in words).
    Protocol(String),
    /// The upstream refused the gateway's request with HTTP 401 or 403:
    /// the credentials the gateway sends it are missing, wrong or not
    /// enough. An upstream error, never the gateway's own challenge: the
    /// caller's own credentials were accepted, and another token of the
    /// caller's would change nothing.
    UpstreamRefused {
        /// The request refused (`tools/call`, …).
        operation: String,
        /// 401 or 403.
        status: u16,
    },
    /// The upstream could not be reached: its text (hosts, ports,
    /// commands, in mcptask's words) is logged, and told only to an
    /// operator ([`Failure::for_caller`]), who may read the configuration
    /// anyway.
    Unreachable {
        /// The caller's message and incident.
        redacted: Redacted,
        /// Why, in the words an operator acts on.
        detail: String,
        /// Tell `detail` (an operator is calling).
        reveal: bool,
    },
    /// The tool asks for input before it starts.
    InputNeeded {
        /// The upstream's `inputRequests`.
        requests: rmcp::model::InputRequests,
        /// Its `requestState` of that round.
        request_state: Option<String>,
        /// The message.
        message: String,
    },
    /// A wait gave up while the task is still live.
    Timeout(String),
    /// Admission control refused to keep the call; nothing was kept.
    Busy(String),
    /// The caller is over its fair limits; nothing was done.
    RateLimited(Busy),
    /// A task-only tool was called without declaring tasks.
    MissingCapability,
    /// The call was withdrawn before it answered (its caller went away).
    Cancelled,
    /// The gateway is shutting down.
    ShuttingDown,
    /// The task store failed (its text is logged).
    Store(Redacted),
    /// Anything else (its text is logged).
    Internal(Redacted),
}

impl Failure {
    /// A failure of the store, logged with its text.
    pub fn store(detail: &dyn std::fmt::Display) -> Self {
        Failure::Store(redact(Internal::Store, detail))
    }

    /// An upstream that could not be reached, logged with its text.
    pub fn unreachable(detail: &dyn std::fmt::Display) -> Self {
        Failure::Unreachable {
            redacted: redact(Internal::Upstream, detail),
            detail: detail.to_string(),
            reveal: false,
        }
    }

    /// This failure as `caller` may hear it: an operator is told why an
    /// upstream could not be reached (as `GET /api/v1/config` would tell
    /// it); anyone else only that it could not, with the incident.
    pub fn for_caller(self, caller: &crate::auth::Caller) -> Self {
        match self {
            Failure::Unreachable {
                redacted, detail, ..
            } => Failure::Unreachable {
                redacted,
                detail,
                reveal: caller.operator,
            },
            other => other,
        }
    }

    /// The upstream did not answer `operation` within `after`: its own
    /// words, the same on every path (they name no host).
    pub fn no_answer(operation: &str, after: std::time::Duration) -> Self {
        Failure::Timeout(format!(
            "{operation}: the upstream did not answer within {after:?}"
        ))
    }

    /// The upstream answered `operation` with HTTP `status` instead of an
    /// MCP message: the one rule for every transport (the byte relay reads
    /// the status itself; the full way gets it from the upstream layer,
    /// [`UpstreamError::Refused`]). A refusal (401, 403) is the upstream's
    /// refusal of the gateway's credentials; any other status is an
    /// upstream that could not serve, told as one that could not be
    /// reached (the status is logged under the incident).
    pub fn upstream_http(operation: &str, status: u16) -> Self {
        match status {
            401 | 403 => Failure::UpstreamRefused {
                operation: operation.to_string(),
                status,
            },
            _ => Failure::unreachable(&format!(
                "{operation}: the upstream answered HTTP {status} without an MCP message"
            )),
        }
    }

    /// Anything that should not have happened, logged with its text.
    pub fn internal(detail: &dyn std::fmt::Display) -> Self {
        Failure::Internal(redact(Internal::Bug, detail))
    }

    /// The stable machine code (REST's `error.code`).
    pub fn code(&self) -> &'static str {
        match self {
            Failure::BadRequest(_) => "bad_request",
            Failure::InvalidAnswer { .. } => "invalid_answer",
            Failure::TaskNotFound | Failure::NotFound(_) => "not_found",
            Failure::UnknownServer(_) => "unknown_server",
            Failure::NotReady(_) => "not_ready",
            Failure::UnknownTool { .. } => "unknown_tool",
            Failure::Forbidden(_) => "forbidden",
            Failure::Remote(_) => "remote_error",
            Failure::Protocol(_) => "protocol_error",
            Failure::UpstreamRefused { .. } => "upstream_refused",
            Failure::Unreachable { .. } => "unavailable",
            Failure::InputNeeded { .. } => "input_needed",
            Failure::Timeout(_) => "timeout",
            Failure::Busy(_) => "busy",
            Failure::RateLimited(_) => "rate_limited",
            Failure::MissingCapability => "missing_capability",
            Failure::Cancelled => "cancelled",
            Failure::ShuttingDown => "shutting_down",
            Failure::Store(_) => "store_unavailable",
            Failure::Internal(_) => "internal",
        }
    }

    /// The caller's message.
    pub fn message(&self) -> String {
        match self {
            Failure::BadRequest(m)
            | Failure::Forbidden(m)
            | Failure::Timeout(m)
            | Failure::InvalidAnswer { message: m, .. }
            | Failure::InputNeeded { message: m, .. } => m.clone(),
            Failure::TaskNotFound => TASK_NOT_FOUND.to_string(),
            Failure::NotFound(m) => m.clone(),
            Failure::UnknownServer(name) => TrackerError::UnknownServer(name.clone()).to_string(),
            Failure::NotReady(server) => format!(
                "server {server:?} is not ready yet (it has not answered since the gateway started, so its tools are not listed); retry shortly"
            ),
            Failure::UnknownTool {
                server: Some(server),
                tool,
            } => format!("server {server:?} offers no tool {tool:?}"),
            Failure::UnknownTool { server: None, tool } => format!("unknown tool: {tool}"),
            Failure::Remote(data) => format!(
                "the server returned an error: {} ({})",
                data.message, data.code.0
            ),
            Failure::Protocol(m) => format!("the server broke the protocol: {m}"),
            Failure::UpstreamRefused { operation, status } => {
                let said = if *status == 401 {
                    "HTTP 401 Unauthorized"
                } else {
                    "HTTP 403 Forbidden"
                };
                format!(
                    "{operation}: the upstream server refused the credentials the gateway sent it ({said}); the gateway accepted yours, so another token of yours will not help"
                )
            }
            Failure::Busy(why) => format!("busy: {why}; retry later"),
            Failure::RateLimited(busy) => busy.to_string(),
            Failure::MissingCapability => TaskError::MissingCapability.to_string(),
            Failure::Cancelled => "the call was cancelled".to_string(),
            Failure::ShuttingDown => "the gateway is shutting down".to_string(),
            Failure::Unreachable {
                detail,
                reveal: true,
                ..
            } => format!("the server could not be reached: {detail}"),
            Failure::Unreachable { redacted: r, .. } | Failure::Store(r) | Failure::Internal(r) => {
                r.message()
            }
        }
    }

    /// The incident id of a redacted failure (its log line).
    pub fn incident(&self) -> Option<&str> {
        match self {
            Failure::Unreachable { redacted: r, .. } | Failure::Store(r) | Failure::Internal(r) => {
                Some(&r.incident)
            }
            _ => None,
        }
    }
}

/// How the front answers a `tools/call` it refuses itself — a tool it does
/// not list (or not to this caller), a server not ready yet — in the shape
/// an upstream of the caller's era gives the same answer, so a caller never
/// tells a gateway's refusal from a server's by its shape. Servers before
/// 2026-07-28 (the TypeScript SDK v1's `McpServer`, which the npm servers
/// run on, and Python's FastMCP) answer an unknown tool with a tool result
/// marked `isError`, and so does the front to a caller of that era; servers
/// of 2026-07-28 (rmcp's tool router, the TypeScript SDK v2) answer it with
/// the JSON-RPC error `-32602`, as the front does to a caller of that era.
/// Every other failure is a JSON-RPC error in either era.
pub fn tool_call_refusal(failure: Failure, era: Era) -> Result<CallToolResult, ErrorData> {
    match (era, &failure) {
        (Era::Session, Failure::UnknownTool { .. } | Failure::NotReady(_)) => Ok(
            CallToolResult::error(vec![ContentBlock::text(failure.message())]),
        ),
        _ => Err(failure.into()),
    }
}

impl From<TrackerError> for Failure {
    fn from(e: TrackerError) -> Self {
        let message = e.to_string();
        match e {
            TrackerError::NotFound(_) => Failure::NotFound(message),
            TrackerError::InvalidInput(m) => Failure::BadRequest(m),
            TrackerError::AnswerRejected { key, field, reason } => Failure::InvalidAnswer {
                key,
                field,
                reason,
                message,
            },
            TrackerError::UnknownServer(name) => Failure::UnknownServer(name),
            TrackerError::Remote(data) => Failure::Remote(data),
            TrackerError::Unavailable(detail) => Failure::unreachable(&detail),
            // Its words name the server and the principal (or the issuer's
            // error code), written by mcptask: nothing internal.
            TrackerError::Unauthorized(m) => Failure::Forbidden(m),
            TrackerError::NoAnswer { operation, after } => Failure::no_answer(&operation, after),
            TrackerError::Protocol(m) => Failure::Protocol(m),
            TrackerError::AlreadyTracked(_) => Failure::Protocol(message),
            TrackerError::InputNeeded {
                requests,
                request_state,
                ..
            } => Failure::InputNeeded {
                requests,
                request_state,
                message,
            },
            TrackerError::Timeout(_) => Failure::Timeout(message),
            TrackerError::ShuttingDown => Failure::ShuttingDown,
            TrackerError::Busy(why) => Failure::Busy(why),
            TrackerError::Store(e) => Failure::store(&e),
            // `TrackerError` is non-exhaustive: a kind added later is an
            // internal error until it is given its own place here.
            other => Failure::internal(&other),
        }
    }
}

/// The class of a tracker error in the audit trail: the [`Failure::code`]
/// its [`Failure`] has, read without making one (making one logs the
/// error's text under an incident, which its face does once already).
/// `every_tracker_error_class_is_its_failure_code` keeps the two together.
pub fn class_of(e: &TrackerError) -> &'static str {
    match e {
        TrackerError::NotFound(_) => "not_found",
        TrackerError::InvalidInput(_) => "bad_request",
        TrackerError::AnswerRejected { .. } => "invalid_answer",
        TrackerError::UnknownServer(_) => "unknown_server",
        TrackerError::Remote(_) => "remote_error",
        TrackerError::Unavailable(_) => "unavailable",
        TrackerError::Unauthorized(_) => "unauthorized",
        TrackerError::NoAnswer { .. } | TrackerError::Timeout(_) => "timeout",
        TrackerError::Protocol(_) | TrackerError::AlreadyTracked(_) => "protocol_error",
        TrackerError::InputNeeded { .. } => "input_needed",
        TrackerError::ShuttingDown => "shutting_down",
        TrackerError::Busy(_) => "busy",
        TrackerError::Store(_) => "store_unavailable",
        _ => "internal",
    }
}

/// The class of a JSON-RPC error a call ended with (a kept call that
/// failed, an answer relayed), in the words of [`Failure::code`]: the
/// reason the gateway's own errors carry, else the upstream's error.
pub fn class_of_rpc(e: &ErrorData) -> &'static str {
    let reason = e
        .data
        .as_ref()
        .and_then(|d| d.get("reason"))
        .and_then(|r| r.as_str());
    match reason {
        Some("rate_limited") => "rate_limited",
        Some("server_busy") => "busy",
        Some("not_ready") => "not_ready",
        Some("upstream_refused") => "upstream_refused",
        _ if e.data.as_ref().and_then(|d| d.get("incident")).is_some() => "unavailable",
        _ => "remote_error",
    }
}

/// The class a call's end gets when nothing more precise is known: what
/// its caller was told ([`Failure::code`]) for a refusal, the outcome's
/// own name for a failure, none for a call that completed or was
/// cancelled.
pub fn class_of_outcome(outcome: mcptask_core::outcome::Outcome) -> Option<&'static str> {
    use mcptask_core::outcome::Outcome;
    match outcome {
        Outcome::Completed | Outcome::Cancelled => None,
        Outcome::ToolError => Some("tool_error"),
        Outcome::Failed => Some("failed"),
        // A tool the policy hides reads as one that does not exist.
        Outcome::RefusedPolicy => Some("unknown_tool"),
        Outcome::RefusedLimit => Some("rate_limited"),
    }
}

impl From<TaskError> for Failure {
    fn from(e: TaskError) -> Self {
        match e {
            TaskError::NotFound => Failure::TaskNotFound,
            TaskError::InvalidParams(m) => Failure::BadRequest(m),
            TaskError::UnknownTool(tool) => Failure::UnknownTool { server: None, tool },
            TaskError::MissingCapability => Failure::MissingCapability,
            TaskError::Overloaded(why) => Failure::Busy(why),
            TaskError::ShuttingDown => Failure::ShuttingDown,
            TaskError::Store(e) => Failure::store(&e),
            TaskError::Internal(e) => Failure::internal(&e),
            other => Failure::internal(&other),
        }
    }
}

impl From<CallError> for Failure {
    fn from(e: CallError) -> Self {
        match e {
            CallError::Tracker(e) => e.into(),
            CallError::Runtime(e) => e.into(),
            CallError::Refused(f) => f,
        }
    }
}

impl From<UpstreamError> for Failure {
    fn from(e: UpstreamError) -> Self {
        match e {
            UpstreamError::Rpc(data) => Failure::Remote(data),
            // What the upstream sent, in words (no host, no transport type).
            UpstreamError::Remote(RemoteError::Protocol(m)) => Failure::Protocol(m),
            UpstreamError::Remote(e) => Failure::unreachable(&e),
            UpstreamError::Refused { operation, status } => {
                Failure::upstream_http(&operation, status)
            }
            // Its own words: how long the front waited names no host.
            UpstreamError::Timeout { operation, after } => Failure::no_answer(&operation, after),
            UpstreamError::Cancelled => Failure::Cancelled,
        }
    }
}

impl From<crate::auth::NotAllowed> for Failure {
    fn from(e: crate::auth::NotAllowed) -> Self {
        Failure::Forbidden(e.0)
    }
}

/// The JSON-RPC error of a failure: the MCP front's and the agent tools'.
impl From<Failure> for ErrorData {
    fn from(f: Failure) -> Self {
        match f {
            // The upstream's own answer, untouched.
            Failure::Remote(data) => data,
            Failure::MissingCapability => TaskError::MissingCapability.into(),
            Failure::RateLimited(busy) => ErrorData::new(
                ErrorCode(SERVER_BUSY),
                busy.to_string(),
                Some(json!({
                    "reason": "rate_limited",
                    "limit": busy.limit.key(),
                    "retryAfterMs": busy.retry_after_ms,
                })),
            ),
            Failure::Busy(why) => ErrorData::new(
                ErrorCode(SERVER_BUSY),
                format!("server busy: {why}; retry later"),
                Some(json!({"reason": "server_busy"})),
            ),
            ref f @ Failure::NotReady(ref server) => ErrorData::new(
                ErrorCode(SERVER_BUSY),
                f.message(),
                Some(json!({"reason": "not_ready", "server": server})),
            ),
            Failure::InvalidAnswer {
                key,
                field,
                reason,
                message,
            } => ErrorData::invalid_params(
                message,
                Some(json!({"key": key, "field": field, "reason": reason})),
            ),
            // One answer for every "no such task" at the MCP faces.
            Failure::TaskNotFound | Failure::NotFound(_) => {
                ErrorData::invalid_params(TASK_NOT_FOUND, None)
            }
            ref f @ (Failure::BadRequest(_)
            | Failure::UnknownServer(_)
            | Failure::UnknownTool { .. }
            | Failure::Forbidden(_)) => ErrorData::invalid_params(f.message(), None),
            ref f @ Failure::Unreachable {
                redacted: ref r,
                reveal: true,
                ..
            } => ErrorData::internal_error(f.message(), Some(json!({"incident": r.incident}))),
            Failure::Unreachable { redacted: r, .. } | Failure::Store(r) | Failure::Internal(r) => {
                redacted_error(&r)
            }
            ref f @ Failure::UpstreamRefused { status, .. } => ErrorData::internal_error(
                f.message(),
                Some(json!({"reason": "upstream_refused", "status": status})),
            ),
            ref f @ (Failure::Protocol(_)
            | Failure::InputNeeded { .. }
            | Failure::Timeout(_)
            | Failure::Cancelled
            | Failure::ShuttingDown) => ErrorData::internal_error(f.message(), None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcptask_core::StoreError;

    #[test]
    fn every_tracker_error_class_is_its_failure_code() {
        use std::time::Duration;
        let errors = || {
            vec![
                TrackerError::NotFound("x".into()),
                TrackerError::InvalidInput("x".into()),
                TrackerError::UnknownServer("x".into()),
                TrackerError::Remote(ErrorData::invalid_params("x", None)),
                TrackerError::Unavailable("x".into()),
                TrackerError::NoAnswer {
                    operation: "tools/call".into(),
                    after: Duration::from_secs(1),
                },
                TrackerError::Protocol("x".into()),
                TrackerError::AlreadyTracked("x".into()),
                TrackerError::ShuttingDown,
                TrackerError::Busy("x".into()),
                TrackerError::Store(StoreError::Database("x".into())),
            ]
        };
        for (e, again) in errors().into_iter().zip(errors()) {
            let class = class_of(&e);
            assert_eq!(class, Failure::from(again).code(), "{e:?}");
        }
        use mcptask_core::outcome::Outcome;
        assert_eq!(
            class_of_outcome(Outcome::RefusedPolicy),
            Some(
                Failure::UnknownTool {
                    server: None,
                    tool: "t".into()
                }
                .code()
            )
        );
        let busy = Busy::at(crate::calls::Limit::PerPrincipalRate, 1, "x".into(), 1);
        assert_eq!(
            class_of_outcome(Outcome::RefusedLimit),
            Some(Failure::RateLimited(busy.clone()).code())
        );
        let rpc = ErrorData::from(Failure::RateLimited(busy));
        assert_eq!(class_of_rpc(&rpc), "rate_limited");
        let unreachable = ErrorData::from(Failure::unreachable(&"127.0.0.1:9 refused"));
        assert_eq!(class_of_rpc(&unreachable), "unavailable");
    }

    #[test]
    fn store_text_never_reaches_the_caller_at_any_face() {
        let secret = "terminating connection due to administrator command at line 3211";
        let from_tracker = Failure::from(TrackerError::Store(StoreError::Database(secret.into())));
        let from_runtime = Failure::from(TaskError::Store(StoreError::Rejected(secret.into())));
        for f in [from_tracker, from_runtime] {
            assert_eq!(f.code(), "store_unavailable");
            assert!(!f.message().contains("administrator"), "{}", f.message());
            let incident = f.incident().unwrap().to_string();
            assert!(f.message().contains(&incident));
            let rpc = ErrorData::from(f);
            assert!(!rpc.message.contains("administrator"), "{rpc:?}");
            assert_eq!(rpc.data, Some(json!({"incident": incident})));
        }
    }

    #[test]
    fn an_unreachable_upstream_names_no_host() {
        let f = Failure::from(TrackerError::Unavailable(
            "connection refused (is http://10.0.0.7:9000/mcp up?)".into(),
        ));
        assert_eq!(f.code(), "unavailable");
        assert!(!f.message().contains("10.0.0.7"), "{}", f.message());
        let principal = crate::auth::Caller {
            principal: Some("alice".into()),
            ..Default::default()
        };
        let f = f.for_caller(&principal);
        assert!(!ErrorData::from(f.clone()).message.contains("10.0.0.7"));
        // An operator, who may read the configuration, is told why.
        let operator = crate::auth::Caller {
            operator: true,
            ..Default::default()
        };
        let f = f.for_caller(&operator);
        assert!(f.message().contains("10.0.0.7"), "{}", f.message());
    }

    #[test]
    fn the_upstreams_own_error_passes_as_it_is() {
        let data = ErrorData::invalid_params("no such city", Some(json!({"city": "X"})));
        assert_eq!(
            ErrorData::from(Failure::from(TrackerError::Remote(data.clone()))),
            data
        );
    }

    #[test]
    fn unknown_and_foreign_tasks_read_the_same() {
        let a = ErrorData::from(Failure::from(TrackerError::NotFound("rt_1".into())));
        let b = ErrorData::from(Failure::from(TaskError::NotFound));
        assert_eq!(a, b);
    }
}
