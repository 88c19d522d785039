//! Conversions between stored records and the SEP-2663 wire types of `rmcp::model`.

use mcptask_core::server::{ServerTaskRecord, ServerTaskState, reading};
use mcptask_core::time::to_rfc3339;
use rmcp::model::{
    DetailedTask, InputRequests, JsonObject, Task, TaskPayload, TaskStatus as WireStatus,
};
use serde_json::Value;

use crate::TaskError;

/// How much of a malformed stored value an error message quotes.
const QUOTED_VALUE_BYTES: usize = 200;

/// The wire spelling of a stored status.
pub fn wire_status(status: mcptask_core::TaskStatus) -> WireStatus {
    use mcptask_core::TaskStatus as S;
    match status {
        S::Working => WireStatus::Working,
        S::InputRequired => WireStatus::InputRequired,
        S::Completed => WireStatus::Completed,
        S::Failed => WireStatus::Failed,
        S::Cancelled => WireStatus::Cancelled,
    }
}

fn base_task(
    id: &str,
    created_at: i64,
    ttl_ms: Option<i64>,
    poll_interval_ms: Option<i64>,
    status: WireStatus,
    updated_at: i64,
    message: Option<&str>,
) -> Task {
    let mut task = Task::new(
        id.to_string(),
        status,
        to_rfc3339(created_at),
        to_rfc3339(updated_at),
    );
    task.status_message = message.map(str::to_string);
    task.ttl_ms = ttl_ms.map(|t| t.max(0) as u64);
    task.poll_interval_ms = poll_interval_ms.map(|p| p.max(1) as u64);
    task
}

/// [`base_task`] of a stored record.
fn record_task(
    record: &ServerTaskRecord,
    status: WireStatus,
    updated_at: i64,
    message: Option<&str>,
) -> Task {
    base_task(
        &record.id,
        record.created_at,
        record.ttl_ms,
        record.poll_interval_ms,
        status,
        updated_at,
        message,
    )
}

fn object(column: &str, value: Option<Value>) -> Result<JsonObject, TaskError> {
    match value.unwrap_or(Value::Null) {
        Value::Object(map) => Ok(map),
        other => Err(TaskError::Internal(format!(
            "stored {column} is not a JSON object: {}",
            mcptask_core::payload::truncate_text(&other.to_string(), QUOTED_VALUE_BYTES)
        ))),
    }
}

/// The `DetailedTask` that `tasks/get` returns for a stored task at `now`.
///
/// A live task past its TTL reads as `failed` (expired) even before the sweep
/// has written that ([`reading::seen_at`]), so what clients see never depends
/// on sweep timing.
pub fn detailed_task(state: ServerTaskState, now: i64) -> Result<DetailedTask, TaskError> {
    let r = reading::state_seen_at(state, now);
    let task = base_task(
        &r.id,
        r.created_at,
        r.ttl_ms,
        r.poll_interval_ms,
        wire_status(r.status),
        r.updated_at,
        r.status_message.as_deref(),
    );
    use mcptask_core::TaskStatus as S;
    let payload = match r.status {
        S::Working => TaskPayload::Working,
        S::InputRequired => {
            let mut input_requests = InputRequests::new();
            for (key, request) in r.input_requests {
                let parsed = serde_json::from_value(request).map_err(|e| {
                    TaskError::Internal(format!("stored input request {key:?} is invalid: {e}"))
                })?;
                input_requests.insert(key, parsed);
            }
            if input_requests.is_empty() {
                // Only possible mid-transition on a backend without snapshot reads.
                TaskPayload::Working
            } else {
                TaskPayload::InputRequired { input_requests }
            }
        }
        S::Completed => TaskPayload::Completed {
            result: object("result", r.result)?,
        },
        S::Failed => TaskPayload::Failed {
            error: object("error", r.error)?,
        },
        S::Cancelled => TaskPayload::Cancelled,
    };
    Ok(DetailedTask::new(task, payload))
}

/// A stored task as a listing shows it at `now` (status, message and
/// times; no result or input requests). A live task past its TTL reads as
/// `failed`, as in [`detailed_task`].
pub fn listed_task(record: &ServerTaskRecord, now: i64) -> Task {
    let seen = reading::seen_at(record, now);
    let r = &*seen;
    record_task(
        r,
        wire_status(r.status),
        r.updated_at,
        r.status_message.as_deref(),
    )
}

/// The seed `Task` of a just-created task, for `CreateTaskResult`.
pub fn created_task(record: &ServerTaskRecord) -> Task {
    record_task(
        record,
        WireStatus::Working,
        record.created_at,
        record.status_message.as_deref(),
    )
}
