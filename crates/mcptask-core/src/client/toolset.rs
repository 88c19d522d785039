//! The submit/status/cancel toolset contract: servers that do
//! not speak SEP-2663 but expose long work as three plain tools. Each tool
//! answers in `structuredContent`:
//!
//! - submit: `{task_id, status: "running", poll_after_seconds?}`;
//! - status and cancel: `{task_id, status, poll_after_seconds?, result?,
//!   result_artifact?, error?, error_code?, input_required?}` with `status`
//!   one of `running`, `input_required`, `completed`, `failed`, `cancelled`.
//!
//! This module turns those answers into what the tracker's state machine
//! consumes ([`Observation`]s); it makes no calls. Text-only answers are never
//! parsed: guessing an id out of prose would track the wrong task.

use serde_json::{Map, Value, json};

use super::{FailureKind, Observation, RemoteSnapshot};
use crate::TaskStatus;
use crate::payload::{PayloadLimits, bound_tool_result, json_size, truncate_text};

/// Longest remote task id the contract allows.
pub const MAX_TASK_ID_CHARS: usize = 255;
/// Longest poll hint honoured (24 h); longer hints are cut to it.
pub const MAX_POLL_AFTER_SECONDS: f64 = 86_400.0;
/// An `input_required` task is polled no faster than this: nobody can answer
/// it through this contract, so fast polls only cost the server.
pub const INPUT_REQUIRED_MIN_POLL_MS: i64 = 60_000;
/// Largest accepted `input_required` payload or `result_artifact` (JSON bytes).
pub const MAX_SIDE_PAYLOAD_BYTES: usize = 65_536;
/// How much of an `isError` tool result's first text block is kept.
pub const MAX_TOOL_ERROR_CHARS: usize = 500;

/// `error_code` a status or cancel answer uses for a task the server forgot.
const TASK_NOT_FOUND: &str = "task_not_found";

/// A submitted task, as the submit tool reported it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolsetHandle {
    /// The server's id of the task (1–255 characters).
    pub task_id: String,
    /// The server's poll hint, if it gave one (ms, capped at 24 h).
    pub poll_interval_ms: Option<i64>,
}

/// A toolset answer that breaks the contract (permanent: retrying the same
/// call cannot fix it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ContractError(pub String);

/// Why a tool call's result cannot be read as the contract's payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unreadable {
    /// The tool reported an error (`isError`): transient, the server may
    /// answer properly next time. Holds the bounded first text block.
    ToolError(String),
    /// The answer breaks the contract.
    Contract(ContractError),
}

/// Read a submit tool's `CallToolResult` (as JSON).
///
/// ```
/// use mcptask_core::client::toolset::submitted;
/// use serde_json::json;
/// let ok = json!({"content": [], "structuredContent": {"task_id": "j1", "status": "running", "poll_after_seconds": 2}});
/// let handle = submitted(&ok).unwrap();
/// assert_eq!(handle.task_id, "j1");
/// assert_eq!(handle.poll_interval_ms, Some(2_000));
/// let text_only = json!({"content": [{"type": "text", "text": "{\"task_id\": \"j1\"}"}]});
/// assert!(submitted(&text_only).is_err());
/// ```
pub fn submitted(call_result: &Value) -> Result<ToolsetHandle, Unreadable> {
    let body = structured(call_result, "submit")?;
    let task_id = task_id(body)?;
    let status = body.get("status").and_then(Value::as_str);
    if status != Some("running") {
        return Err(contract(format!(
            "the submit tool must answer status \"running\", not {}",
            shown(body.get("status"))
        )));
    }
    Ok(ToolsetHandle {
        task_id,
        poll_interval_ms: poll_after(body)?,
    })
}

/// Read a status tool's `CallToolResult` for the task `expected_id` into what
/// a poll observed.
///
/// `running` is `working`; `input_required` stays `working` with the question
/// as the status message (the contract has no way to answer it, and a task
/// that reports `input_required` to a caller who cannot answer would never
/// move) and a slow poll; `completed`, `failed` and `cancelled` are terminal.
/// `error_code: "task_not_found"` fails the task whatever the status says. A
/// tool error is transient; any other contract breach is permanent.
///
/// ```
/// use mcptask_core::client::{Observation, toolset::status};
/// use mcptask_core::payload::PayloadLimits;
/// use mcptask_core::TaskStatus;
/// use serde_json::json;
/// let done = json!({"structuredContent": {"task_id": "j1", "status": "completed", "result": {"n": 1}}});
/// match status("j1", &done, &PayloadLimits::default()) {
///     Observation::Snapshot(s) => assert_eq!(s.status, Some(TaskStatus::Completed)),
///     other => panic!("{other:?}"),
/// }
/// ```
pub fn status(expected_id: &str, call_result: &Value, limits: &PayloadLimits) -> Observation {
    match read_status(expected_id, call_result, limits, "status") {
        Ok(snapshot) => Observation::Snapshot(snapshot),
        Err(Observed::NotFound(message)) => not_found(message),
        Err(Observed::Unreadable(Unreadable::ToolError(text))) => Observation::Transient(text),
        Err(Observed::Unreadable(Unreadable::Contract(e))) => Observation::Permanent {
            kind: FailureKind::ProtocolViolation,
            message: e.0,
        },
    }
}

/// Read a cancel tool's `CallToolResult` for the task `expected_id`.
///
/// A terminal answer is applied like a poll (the status the server reports
/// wins, even `completed`); a forgotten task fails it. Anything else —
/// a non-terminal status, a tool error, a contract breach — is transient: the
/// cancel is retried within the tracker's cancel attempt bound.
///
/// ```
/// use mcptask_core::client::{Observation, toolset::cancelled};
/// use mcptask_core::payload::PayloadLimits;
/// use serde_json::json;
/// let still = json!({"structuredContent": {"task_id": "j1", "status": "running"}});
/// assert!(matches!(cancelled("j1", &still, &PayloadLimits::default()), Observation::Transient(_)));
/// ```
pub fn cancelled(expected_id: &str, call_result: &Value, limits: &PayloadLimits) -> Observation {
    match read_status(expected_id, call_result, limits, "cancel") {
        Ok(s) if s.status.is_some_and(TaskStatus::is_terminal) => Observation::Snapshot(s),
        Ok(s) => Observation::Transient(format!(
            "the cancel tool answered a non-terminal status ({})",
            s.status.map_or("none", TaskStatus::as_str)
        )),
        Err(Observed::NotFound(message)) => not_found(message),
        Err(Observed::Unreadable(Unreadable::ToolError(text))) => Observation::Transient(text),
        Err(Observed::Unreadable(Unreadable::Contract(e))) => Observation::Transient(e.0),
    }
}

/// Short of a snapshot: the server forgot the task, or the answer is unreadable.
enum Observed {
    NotFound(String),
    Unreadable(Unreadable),
}

fn not_found(message: String) -> Observation {
    Observation::Permanent {
        kind: FailureKind::NotFound,
        message,
    }
}

impl From<Unreadable> for Observed {
    fn from(u: Unreadable) -> Self {
        Observed::Unreadable(u)
    }
}

fn read_status(
    expected_id: &str,
    call_result: &Value,
    limits: &PayloadLimits,
    role: &str,
) -> Result<RemoteSnapshot, Observed> {
    let body = structured(call_result, role)?;
    let id = task_id(body)?;
    if id != expected_id {
        return Err(contract(format!(
            "the {role} tool's task_id does not match: asked about {expected_id:?}, answered for {:?}",
            truncate_text(&id, 80)
        ))
        .into());
    }
    let error_text = body.get("error").and_then(Value::as_str);
    if body.get("error_code").and_then(Value::as_str) == Some(TASK_NOT_FOUND) {
        let message = error_text
            .filter(|e| !e.trim().is_empty())
            .unwrap_or("the remote task was not found");
        return Err(Observed::NotFound(truncate_text(
            message,
            limits.max_message_bytes,
        )));
    }
    let poll_interval_ms = poll_after(body)?;
    let mut snapshot = RemoteSnapshot {
        poll_interval_ms,
        ..Default::default()
    };
    match body.get("status").and_then(Value::as_str) {
        Some("running") => snapshot.status = Some(TaskStatus::Working),
        Some("input_required") => {
            let payload = side_payload(body, "input_required")?.ok_or_else(|| {
                contract("status input_required without an input_required object".into())
            })?;
            snapshot.status = Some(TaskStatus::Working);
            snapshot.status_message = Some(needs_input(&payload, limits));
            snapshot.poll_interval_ms = Some(
                poll_interval_ms
                    .unwrap_or(0)
                    .max(INPUT_REQUIRED_MIN_POLL_MS),
            );
        }
        Some("completed") => {
            snapshot.status = Some(TaskStatus::Completed);
            let artifact = artifact(body)?;
            let result = tool_result(body.get("result"), artifact);
            let bounded = bound_tool_result(result, limits.max_result_bytes);
            snapshot.result = Some(bounded.value);
            snapshot.result_truncated = bounded.truncated;
        }
        Some("failed") => {
            snapshot.status = Some(TaskStatus::Failed);
            let message = error_text.unwrap_or("the remote task failed");
            let mut error = json!({"code": -32603, "message": message});
            if let Some(code) = body.get("error_code").filter(|c| !c.is_null()) {
                error["data"] = json!({"error_code": code});
            }
            snapshot.error = Some(limits.bound_error(error));
        }
        Some("cancelled") => snapshot.status = Some(TaskStatus::Cancelled),
        _ => {
            return Err(contract(format!(
                "the {role} tool answered an unknown status {}",
                shown(body.get("status"))
            ))
            .into());
        }
    }
    Ok(snapshot)
}

/// The status message of a task waiting for input it cannot get here.
fn needs_input(payload: &Value, limits: &PayloadLimits) -> String {
    let question = match payload.get("message").and_then(Value::as_str) {
        Some(m) => m.to_string(),
        None => payload.to_string(),
    };
    truncate_text(
        &format!("Needs input: {question}"),
        limits.max_message_bytes,
    )
}

/// `structuredContent` of a tool result, after the `isError` check.
fn structured<'a>(
    call_result: &'a Value,
    role: &str,
) -> Result<&'a Map<String, Value>, Unreadable> {
    if call_result.get("isError").and_then(Value::as_bool) == Some(true) {
        let text = call_result
            .get("content")
            .and_then(Value::as_array)
            .and_then(|blocks| {
                blocks
                    .iter()
                    .find(|b| b.get("type").and_then(Value::as_str) == Some("text"))
            })
            .and_then(|b| b.get("text"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let detail: String = text.chars().take(MAX_TOOL_ERROR_CHARS).collect();
        return Err(Unreadable::ToolError(format!(
            "the {role} tool returned an error: {detail}"
        )));
    }
    call_result
        .get("structuredContent")
        .and_then(Value::as_object)
        .ok_or_else(|| {
            contract(format!(
                "the {role} tool answered without structuredContent (text content is not parsed)"
            ))
        })
}

fn task_id(body: &Map<String, Value>) -> Result<String, Unreadable> {
    match body.get("task_id").and_then(Value::as_str) {
        Some(id) if !id.trim().is_empty() && id.chars().count() <= MAX_TASK_ID_CHARS => {
            Ok(id.to_string())
        }
        Some(id) if !id.trim().is_empty() => Err(contract(format!(
            "task_id is longer than {MAX_TASK_ID_CHARS} characters"
        ))),
        _ => Err(contract(format!(
            "task_id must be a non-empty string, not {}",
            shown(body.get("task_id"))
        ))),
    }
}

/// `poll_after_seconds` as ms: finite and positive, capped at 24 h.
fn poll_after(body: &Map<String, Value>) -> Result<Option<i64>, Unreadable> {
    match body.get("poll_after_seconds") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_f64() {
            Some(s) if s.is_finite() && s > 0.0 => {
                Ok(Some((s.min(MAX_POLL_AFTER_SECONDS) * 1000.0).ceil() as i64))
            }
            _ => Err(contract(format!(
                "poll_after_seconds must be a finite positive number, not {}",
                shown(Some(v))
            ))),
        },
    }
}

/// An optional JSON object field within [`MAX_SIDE_PAYLOAD_BYTES`]: never
/// truncated, because a cut question or reference would mean something else.
fn side_payload(body: &Map<String, Value>, field: &str) -> Result<Option<Value>, Unreadable> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v @ Value::Object(_)) => {
            let size = json_size(v);
            if size > MAX_SIDE_PAYLOAD_BYTES {
                return Err(contract(format!(
                    "{field} payload exceeds the {MAX_SIDE_PAYLOAD_BYTES}-byte limit ({size} bytes)"
                )));
            }
            Ok(Some(v.clone()))
        }
        Some(other) => Err(contract(format!(
            "{field} must be an object, not {}",
            shown(Some(other))
        ))),
    }
}

/// `result_artifact`, which must name a `uri` and a `mime_type`.
fn artifact(body: &Map<String, Value>) -> Result<Option<Value>, Unreadable> {
    let Some(a) = side_payload(body, "result_artifact")? else {
        return Ok(None);
    };
    let named = |k: &str| {
        a.get(k)
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty())
    };
    if !named("uri") || !named("mime_type") {
        return Err(contract(
            "result_artifact must carry a uri and a mime_type".into(),
        ));
    }
    Ok(Some(a))
}

/// The task's result as a `CallToolResult`, like a SEP-2663 task's: the
/// result as text (a string as is, anything else as JSON), an object result
/// also as `structuredContent`, and the artifact as a resource link.
fn tool_result(result: Option<&Value>, artifact: Option<Value>) -> Value {
    let mut content = Vec::new();
    match result {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => content.push(json!({"type": "text", "text": s})),
        Some(v) => content.push(json!({"type": "text", "text": v.to_string()})),
    }
    if let Some(a) = artifact {
        content.push(json!({
            "type": "resource_link",
            "uri": a["uri"],
            "name": a["uri"],
            "mimeType": a["mime_type"],
        }));
    }
    let mut out = json!({"content": content, "isError": false});
    if let Some(v @ Value::Object(_)) = result {
        out["structuredContent"] = v.clone();
    }
    out
}

fn contract(message: String) -> Unreadable {
    Unreadable::Contract(ContractError(message))
}

/// A field value for an error message, bounded.
fn shown(v: Option<&Value>) -> String {
    match v {
        None => "nothing".into(),
        Some(v) => truncate_text(&v.to_string(), 80),
    }
}

#[cfg(test)]
mod tests;
