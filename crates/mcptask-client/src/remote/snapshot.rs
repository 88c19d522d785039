//! Turning what a server sent (`CreateTaskResult`, `tasks/get`) into a validated,
//! bounded [`RemoteSnapshot`]. Anything malformed is a protocol violation of
//! that task alone.

use mcptask_core::client::RemoteSnapshot;
use mcptask_core::payload::{PayloadLimits, bound_tool_result, json_size, truncate_text};
use mcptask_core::time::parse_rfc3339;
use rmcp::model::{DetailedTask, Task, TaskPayload, TaskStatus as WireStatus};
use serde_json::Value;

use super::RemoteError;

/// Longest remote task id accepted (longer ones cannot be header-safe anyway).
pub(crate) const MAX_REMOTE_ID_LEN: usize = 512;

fn status_of(status: WireStatus) -> Result<mcptask_core::TaskStatus, RemoteError> {
    use mcptask_core::TaskStatus as S;
    Ok(match status {
        WireStatus::Working => S::Working,
        WireStatus::InputRequired => S::InputRequired,
        WireStatus::Completed => S::Completed,
        WireStatus::Failed => S::Failed,
        WireStatus::Cancelled => S::Cancelled,
        other => {
            return Err(RemoteError::Protocol(format!(
                "unknown task status {other:?}"
            )));
        }
    })
}

fn check_id(expected: Option<&str>, task: &Task) -> Result<(), RemoteError> {
    if task.task_id.is_empty() || task.task_id.len() > MAX_REMOTE_ID_LEN {
        return Err(RemoteError::Protocol(format!(
            "task id must be 1..={MAX_REMOTE_ID_LEN} characters (got {})",
            task.task_id.len()
        )));
    }
    if let Some(expected) = expected
        && task.task_id != expected
    {
        return Err(RemoteError::Protocol(format!(
            "the server answered for task {:?} when asked about {expected:?}",
            truncate_text(&task.task_id, 80)
        )));
    }
    Ok(())
}

fn base(task: &Task, limits: &PayloadLimits) -> Result<RemoteSnapshot, RemoteError> {
    let ms = |v: Option<u64>, field: &str| -> Result<Option<i64>, RemoteError> {
        v.map(|v| {
            i64::try_from(v).map_err(|_| RemoteError::Protocol(format!("{field} is out of range")))
        })
        .transpose()
    };
    Ok(RemoteSnapshot {
        status: Some(status_of(task.status)?),
        status_message: task
            .status_message
            .as_deref()
            .map(|m| truncate_text(m, limits.max_message_bytes)),
        remote_created_at: parse_rfc3339(&task.created_at),
        ttl_ms: ms(task.ttl_ms, "ttlMs")?,
        poll_interval_ms: ms(task.poll_interval_ms, "pollIntervalMs")?,
        ..Default::default()
    })
}

/// The seed state from a `CreateTaskResult`. It carries no payload, so
/// whatever status it names the task starts as `working` and the first poll
/// reads the real state (a seed may even be terminal).
pub(crate) fn from_created(
    task: &Task,
    limits: &PayloadLimits,
) -> Result<RemoteSnapshot, RemoteError> {
    check_id(None, task)?;
    Ok(RemoteSnapshot {
        status: Some(mcptask_core::TaskStatus::Working),
        ..base(task, limits)?
    })
}

/// A `tasks/get` answer for `expected_id`, validated and bounded.
pub(crate) fn from_detailed(
    expected_id: &str,
    detailed: &DetailedTask,
    limits: &PayloadLimits,
) -> Result<RemoteSnapshot, RemoteError> {
    check_id(Some(expected_id), &detailed.task)?;
    let mut snapshot = base(&detailed.task, limits)?;
    match &detailed.payload {
        TaskPayload::Working | TaskPayload::Cancelled => {}
        TaskPayload::InputRequired { input_requests } => {
            if input_requests.is_empty() {
                return Err(RemoteError::Protocol(
                    "input_required with no inputRequests".into(),
                ));
            }
            let mut total = 0;
            for (key, request) in input_requests {
                if key.is_empty() || key.len() > 256 {
                    return Err(RemoteError::Protocol(format!(
                        "input request key of {} bytes",
                        key.len()
                    )));
                }
                let value = serde_json::to_value(request).map_err(|e| {
                    RemoteError::Protocol(format!("input request {key:?} is not JSON: {e}"))
                })?;
                total += json_size(&value);
                snapshot.input_requests.push((key.clone(), value));
            }
            if total > limits.max_input_response_bytes {
                // Truncating a question would change it: refuse it instead.
                return Err(RemoteError::Protocol(format!(
                    "inputRequests are {total} bytes; the limit is {}",
                    limits.max_input_response_bytes
                )));
            }
        }
        TaskPayload::Completed { result } => {
            let bounded = bound_tool_result(Value::Object(result.clone()), limits.max_result_bytes);
            snapshot.result = Some(bounded.value);
            snapshot.result_truncated = bounded.truncated;
        }
        TaskPayload::Failed { error } => {
            snapshot.error = Some(limits.bound_error(Value::Object(error.clone())));
        }
        #[allow(unreachable_patterns)]
        _ => return Err(RemoteError::Protocol("unknown task payload".into())),
    }
    Ok(snapshot)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn detailed(v: Value) -> DetailedTask {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn mismatched_ids_are_protocol_violations() {
        let d = detailed(
            json!({"taskId": "other", "status": "working", "createdAt": "2026-01-01T00:00:00Z", "lastUpdatedAt": "2026-01-01T00:00:00Z", "ttlMs": null}),
        );
        let e = from_detailed("mine", &d, &PayloadLimits::default()).unwrap_err();
        assert!(matches!(e, RemoteError::Protocol(m) if m.contains("answered for task")));
    }

    #[test]
    fn huge_results_are_stored_truncated_and_huge_questions_refused() {
        let limits = PayloadLimits {
            max_result_bytes: 1_000,
            max_input_response_bytes: 500,
            ..Default::default()
        };
        let d = detailed(
            json!({"taskId": "t", "status": "completed", "createdAt": "2026-01-01T00:00:00Z", "lastUpdatedAt": "2026-01-01T00:00:00Z", "ttlMs": 1000,
            "result": {"content": [{"type": "text", "text": "x".repeat(5_000)}]}}),
        );
        let s = from_detailed("t", &d, &limits).unwrap();
        assert!(s.result_truncated);
        assert!(json_size(s.result.as_ref().unwrap()) < 2_000);
        let d = detailed(
            json!({"taskId": "t", "status": "input_required", "createdAt": "2026-01-01T00:00:00Z", "lastUpdatedAt": "2026-01-01T00:00:00Z", "ttlMs": 1000,
            "inputRequests": {"k": {"method": "elicitation/create", "params": {"mode": "form", "message": "y".repeat(2_000), "requestedSchema": {"type": "object", "properties": {}}}}}}),
        );
        assert!(matches!(
            from_detailed("t", &d, &limits),
            Err(RemoteError::Protocol(_))
        ));
    }

    #[test]
    fn timestamps_and_intervals_are_read() {
        let d = detailed(
            json!({"taskId": "t", "status": "working", "createdAt": "1970-01-01T00:00:01Z", "lastUpdatedAt": "1970-01-01T00:00:01Z", "ttlMs": 5000, "pollIntervalMs": 250}),
        );
        let s = from_detailed("t", &d, &PayloadLimits::default()).unwrap();
        assert_eq!(
            (s.remote_created_at, s.ttl_ms, s.poll_interval_ms),
            (Some(1000), Some(5000), Some(250))
        );
    }
}
