//! Readers of the 2025-11-25 tasks protocol (SEP-1686), as TypeScript-SDK
//! servers speak it: the nested `{task:{…}}` creation answer, the flat task
//! object of `tasks/get` and `tasks/cancel`, the `-32602` refusals, and the
//! `related-task` marker on the requests such a server sends for a task.
//!
//! They read leniently: a SEP-1686 server is not ours, so unknown fields are
//! ignored and only what a proxy needs (id, status, message, timings) must
//! be present.

use serde_json::Value;

use super::RemoteSnapshot;
use crate::status::TaskStatus;
use crate::time::parse_rfc3339;

/// The `_meta` key a SEP-1686 server puts on requests and results that
/// belong to a task.
pub const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// One SEP-1686 task as the server last described it.
#[derive(Debug, Clone, PartialEq)]
pub struct Sep1686Task {
    /// The server's task id.
    pub task_id: String,
    /// Status, message and timings in the tracker's terms (`ttl` and
    /// `pollInterval` are milliseconds in SEP-1686 too).
    pub snapshot: RemoteSnapshot,
}

impl Sep1686Task {
    /// The status (always set: a task object without one is refused).
    pub fn status(&self) -> TaskStatus {
        self.snapshot.status.unwrap_or(TaskStatus::Working)
    }
}

/// Read a task-augmented `tools/call` answer: `{"task":{…}}`.
///
/// ```
/// use mcptask_core::client::sep1686::created;
/// let t = created(&serde_json::json!({"task":{"taskId":"9c","status":"working","ttl":300000,"pollInterval":1000}})).unwrap();
/// assert_eq!(t.task_id, "9c");
/// assert_eq!(t.snapshot.poll_interval_ms, Some(1000));
/// ```
pub fn created(result: &Value) -> Result<Sep1686Task, String> {
    match result.get("task") {
        Some(task) if task.is_object() => snapshot(task),
        _ => Err(format!(
            "not a SEP-1686 task creation answer (no `task` object): {}",
            excerpt(result)
        )),
    }
}

/// Read a flat task object (`tasks/get`, `tasks/cancel`, `notifications/tasks/status`).
pub fn snapshot(task: &Value) -> Result<Sep1686Task, String> {
    let task_id = task
        .get("taskId")
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty())
        .ok_or_else(|| format!("task object without a taskId: {}", excerpt(task)))?;
    let status = task
        .get("status")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("task {task_id} has no status"))?;
    let status = TaskStatus::parse(status)
        .ok_or_else(|| format!("task {task_id} has an unknown status {status:?}"))?;
    let ms = |key: &str| task.get(key).and_then(Value::as_i64);
    Ok(Sep1686Task {
        task_id: task_id.to_string(),
        snapshot: RemoteSnapshot {
            status: Some(status),
            status_message: task
                .get("statusMessage")
                .and_then(Value::as_str)
                .map(str::to_string),
            remote_created_at: task
                .get("createdAt")
                .and_then(Value::as_str)
                .and_then(parse_rfc3339),
            // `ttl: null` means unlimited, as in SEP-2663. The SEP-2663
            // names are read too: rmcp may have decoded a SEP-1686 answer into
            // its own task type (losing these two) and re-encoded it.
            ttl_ms: ms("ttl").or_else(|| ms("ttlMs")),
            poll_interval_ms: ms("pollInterval").or_else(|| ms("pollIntervalMs")),
            ..RemoteSnapshot::default()
        },
    })
}

/// What a JSON-RPC error answer to a SEP-1686 `tasks/cancel` means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelRefusal {
    /// The task had already ended (SEP-1686 refuses instead of acknowledging):
    /// read its status with `tasks/get`.
    AlreadyTerminal,
    /// The server does not know the task (expired, or the session that owned it is gone).
    NotFound,
    /// Anything else.
    Other,
}

/// Classify a `tasks/cancel` error. `-32602` means three things on a
/// TypeScript-SDK server, so the message decides.
///
/// ```
/// use mcptask_core::client::sep1686::{cancel_refusal, CancelRefusal};
/// assert_eq!(
///     cancel_refusal(-32602, "MCP error -32602: Cannot cancel task in terminal status: completed"),
///     CancelRefusal::AlreadyTerminal
/// );
/// ```
pub fn cancel_refusal(code: i32, message: &str) -> CancelRefusal {
    let lower = message.to_ascii_lowercase();
    if code == -32602 && lower.contains("terminal status") {
        CancelRefusal::AlreadyTerminal
    } else if code == -32602 && lower.contains("not found") {
        CancelRefusal::NotFound
    } else {
        CancelRefusal::Other
    }
}

/// The task id in `_meta["io.modelcontextprotocol/related-task"].taskId`,
/// given either the `_meta` object itself or params/results that carry one.
pub fn related_task(value: &Value) -> Option<String> {
    let meta = value.get("_meta").unwrap_or(value);
    meta.get(RELATED_TASK)?
        .get("taskId")?
        .as_str()
        .map(str::to_string)
}

fn excerpt(v: &Value) -> String {
    let s = v.to_string();
    match s.char_indices().nth(200) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // Taken from docs/interop/probe/out-2.txt (everything server 2026.8.31).
    const CREATED: &str = r#"{"task":{"taskId":"9ccc92238c55dd4b8f411b54a4549ab7","status":"working","ttl":300000,"createdAt":"2026-11-30T22:00:46.744Z","lastUpdatedAt":"2026-11-30T22:00:46.752Z","pollInterval":1000,"statusMessage":"Gathering sources..."}}"#;

    #[test]
    fn reads_the_nested_creation_answer() {
        let t = created(&serde_json::from_str(CREATED).unwrap()).unwrap();
        assert_eq!(t.task_id, "9ccc92238c55dd4b8f411b54a4549ab7");
        assert_eq!(t.status(), TaskStatus::Working);
        assert_eq!(t.snapshot.ttl_ms, Some(300_000));
        assert_eq!(t.snapshot.poll_interval_ms, Some(1000));
        assert_eq!(
            t.snapshot.status_message.as_deref(),
            Some("Gathering sources...")
        );
        assert_eq!(
            t.snapshot.remote_created_at,
            parse_rfc3339("2026-11-30T22:00:46.744Z")
        );
        // A flat SEP-2663 answer is not a SEP-1686 one.
        assert!(created(&json!({"resultType":"task","taskId":"x","status":"working"})).is_err());
    }

    #[test]
    fn reads_flat_task_objects_and_refuses_junk() {
        let cancelled = json!({"_meta":{},"taskId":"ab","status":"cancelled","ttl":300000,
            "createdAt":"2026-11-30T22:00:46.744Z","lastUpdatedAt":"2026-11-30T22:00:48.000Z",
            "pollInterval":1000,"statusMessage":"Client cancelled task execution."});
        let t = snapshot(&cancelled).unwrap();
        assert_eq!(t.status(), TaskStatus::Cancelled);
        let input = snapshot(&json!({"taskId":"ab","status":"input_required","ttl":null})).unwrap();
        assert_eq!(input.status(), TaskStatus::InputRequired);
        assert_eq!(input.snapshot.ttl_ms, None);
        assert!(snapshot(&json!({"status":"working"})).is_err());
        assert!(snapshot(&json!({"taskId":"ab","status":"paused"})).is_err());
        assert!(snapshot(&json!({"taskId":"ab"})).is_err());
    }

    #[test]
    fn classifies_cancel_refusals_by_message() {
        assert_eq!(
            cancel_refusal(-32602, "MCP error -32602: Task not found: no-such-task"),
            CancelRefusal::NotFound
        );
        assert_eq!(
            cancel_refusal(
                -32602,
                "MCP error -32602: Cannot cancel task in terminal status: cancelled"
            ),
            CancelRefusal::AlreadyTerminal
        );
        assert_eq!(
            cancel_refusal(-32603, "terminal status"),
            CancelRefusal::Other
        );
    }

    #[test]
    fn finds_the_related_task_in_params_or_meta() {
        let params = json!({"message":"clarify","_meta":{RELATED_TASK:{"taskId":"0366"}}});
        assert_eq!(related_task(&params).as_deref(), Some("0366"));
        assert_eq!(related_task(&params["_meta"]).as_deref(), Some("0366"));
        assert_eq!(related_task(&json!({"message":"no task"})), None);
    }
}
