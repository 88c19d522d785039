//! Row decoding and column encoding, written once for every backend
//! (columns are read by name).

use mcptask_core::server::{ServerTaskRecord, ServerTaskState};
use mcptask_core::{StoreError, TaskStatus};
use serde_json::Value;

use crate::flows::Backend;

pub(crate) fn parse_json(column: &str, text: &str) -> Result<Value, StoreError> {
    serde_json::from_str(text)
        .map_err(|e| StoreError::Corrupt(format!("column {column} is not valid JSON: {e}")))
}

pub(crate) fn parse_opt_json(
    column: &str,
    text: Option<String>,
) -> Result<Option<Value>, StoreError> {
    text.map(|t| parse_json(column, &t)).transpose()
}

pub(crate) fn to_json_text(value: &Value) -> String {
    // Serializing a Value cannot fail.
    serde_json::to_string(value).unwrap_or_else(|_| "null".to_string())
}

pub(crate) fn parse_status(text: &str) -> Result<TaskStatus, StoreError> {
    TaskStatus::parse(text).ok_or_else(|| StoreError::Corrupt(format!("unknown status {text:?}")))
}

/// Decode a `server_tasks` row (any column superset, read by name).
pub(crate) fn server_task<B: Backend>(row: &B::Row) -> Result<ServerTaskRecord, StoreError> {
    let arguments: String = B::column(row, "arguments")?;
    let status: String = B::column(row, "status")?;
    Ok(ServerTaskRecord {
        id: B::column(row, "id")?,
        principal: B::column(row, "principal")?,
        tool: B::column(row, "tool")?,
        arguments: parse_json("arguments", &arguments)?,
        call_inputs: parse_opt_json("call_inputs", B::column(row, "call_inputs")?)?,
        status: parse_status(&status)?,
        status_message: B::column(row, "status_message")?,
        result: parse_opt_json("result", B::column(row, "result")?)?,
        error: parse_opt_json("error", B::column(row, "error")?)?,
        created_at: B::column(row, "created_at")?,
        updated_at: B::column(row, "updated_at")?,
        ttl_ms: B::column(row, "ttl_ms")?,
        poll_interval_ms: B::column(row, "poll_interval_ms")?,
        attempt: B::column(row, "attempt")?,
        cancel_requested: B::column(row, "cancel_requested")?,
        owner: B::column(row, "owner")?,
        claim_token: B::column(row, "claim_token")?,
        purge_at: B::column(row, "purge_at")?,
        driver: B::column(row, "driver")?,
        driver_state: parse_opt_json("driver_state", B::column(row, "driver_state")?)?,
    })
}

/// Decode the state columns of task `id`'s row (input requests are the
/// caller's: they come from the join's rows).
pub(crate) fn server_task_state<B: Backend>(
    id: &str,
    row: &B::Row,
) -> Result<ServerTaskState, StoreError> {
    let status: String = B::column(row, "status")?;
    Ok(ServerTaskState {
        id: id.to_string(),
        principal: B::column(row, "principal")?,
        status: parse_status(&status)?,
        status_message: B::column(row, "status_message")?,
        result: parse_opt_json("result", B::column(row, "result")?)?,
        error: parse_opt_json("error", B::column(row, "error")?)?,
        created_at: B::column(row, "created_at")?,
        updated_at: B::column(row, "updated_at")?,
        ttl_ms: B::column(row, "ttl_ms")?,
        poll_interval_ms: B::column(row, "poll_interval_ms")?,
        purge_at: B::column(row, "purge_at")?,
        input_requests: Vec::new(),
        attempt: B::column(row, "attempt")?,
        owner: B::column(row, "owner")?,
    })
}

/// Split an outcome into the columns `finish` writes.
pub(crate) struct OutcomeColumns {
    pub status: &'static str,
    pub result: Option<String>,
    pub error: Option<String>,
    pub message: Option<String>,
}

impl OutcomeColumns {
    pub(crate) fn of(outcome: &mcptask_core::server::Outcome) -> Self {
        use mcptask_core::server::Outcome;
        match outcome {
            Outcome::Completed { result } => Self {
                status: "completed",
                result: Some(to_json_text(result)),
                error: None,
                message: None,
            },
            Outcome::Failed { error, message } => Self {
                status: "failed",
                result: None,
                error: Some(to_json_text(error)),
                message: Some(message.clone()),
            },
            Outcome::Cancelled { message } => Self {
                status: "cancelled",
                result: None,
                error: None,
                message: message.clone(),
            },
        }
    }
}

// ---------------------------------------------------------------------------
// Client side: remote tasks, their input keys and events.

use std::collections::HashMap;

use mcptask_core::client::{ClaimedTask, Fence, Phase, RemoteDriver, RemoteTaskRecord};
use mcptask_core::trace::TraceContext;

/// Decode a `remote_tasks` row (any column superset, read by name).
/// `principal = ''` is the anonymous caller and decodes to `None`.
pub(crate) fn remote_task<B: Backend>(row: &B::Row) -> Result<RemoteTaskRecord, StoreError> {
    let principal: String = B::column(row, "principal")?;
    let status: String = B::column(row, "status")?;
    let input_requests: String = B::column(row, "input_requests")?;
    Ok(RemoteTaskRecord {
        id: B::column(row, "id")?,
        server: B::column(row, "server")?,
        server_hash: B::column(row, "server_hash")?,
        remote_task_id: B::column(row, "remote_task_id")?,
        driver: driver_of::<B>(row)?,
        face: face_of::<B>(row)?,
        principal: principal_from_column(principal),
        conversation: B::column(row, "conversation")?,
        call_id: B::column(row, "call_id")?,
        correlation: parse_opt_json("correlation", B::column(row, "correlation")?)?,
        tool: B::column(row, "tool")?,
        arguments: parse_opt_json("arguments", B::column(row, "arguments")?)?,
        trace: trace_of::<B>(row)?,
        status: parse_status(&status)?,
        status_message: B::column(row, "status_message")?,
        input_requests: parse_input_requests(&input_requests)?,
        result: parse_opt_json("result", B::column(row, "result")?)?,
        result_truncated: B::column(row, "result_truncated")?,
        error: parse_opt_json("error", B::column(row, "error")?)?,
        remote_created_at: B::column(row, "remote_created_at")?,
        ttl_ms: B::column(row, "ttl_ms")?,
        poll_interval_ms: B::column(row, "poll_interval_ms")?,
        created_at: B::column(row, "created_at")?,
        updated_at: B::column(row, "updated_at")?,
        completed_at: B::column(row, "completed_at")?,
        next_poll_at: B::column(row, "next_poll_at")?,
        last_polled_at: B::column(row, "last_polled_at")?,
        poll_count: B::column(row, "poll_count")?,
        consecutive_errors: B::column(row, "consecutive_errors")?,
        last_error: B::column(row, "last_error")?,
        cancel_requested_at: B::column(row, "cancel_requested_at")?,
        cancel_sent_at: B::column(row, "cancel_sent_at")?,
        next_cancel_at: B::column(row, "next_cancel_at")?,
        cancel_attempts: B::column(row, "cancel_attempts")?,
        next_update_at: B::column(row, "next_update_at")?,
        claim_owner: B::column(row, "claim_owner")?,
        claim_token: B::column(row, "claim_token")?,
        claim_expires_at: B::column(row, "claim_expires_at")?,
        event_version: B::column(row, "event_version")?,
        delivered_version: B::column(row, "delivered_version")?,
        next_notify_at: B::column(row, "next_notify_at")?,
        notify_attempts: B::column(row, "notify_attempts")?,
        last_notify_error: B::column(row, "last_notify_error")?,
        dead_letters: B::column(row, "dead_letters")?,
        attempt: B::column(row, "attempt")?,
    })
}

/// `face`: the face a call was made through (NULL for rows written before
/// faces were recorded).
fn face_of<B: Backend>(row: &B::Row) -> Result<Option<mcptask_core::call::Face>, StoreError> {
    let face: Option<String> = B::column(row, "face")?;
    face.map(|f| {
        mcptask_core::call::Face::parse(&f)
            .ok_or_else(|| StoreError::Corrupt(format!("unknown face {f:?}")))
    })
    .transpose()
}

/// `driver` and `driver_data`: how the task is polled and cancelled.
fn driver_of<B: Backend>(row: &B::Row) -> Result<RemoteDriver, StoreError> {
    let name: String = B::column(row, "driver")?;
    let data = parse_opt_json("driver_data", B::column(row, "driver_data")?)?;
    RemoteDriver::from_parts(&name, data.as_ref())
        .map_err(|e| StoreError::Corrupt(format!("remote_tasks.driver: {e}")))
}

/// The stored spelling of a principal: `''` for anonymous callers, so the
/// `(server, principal, remote_task_id)` uniqueness holds for them too.
pub(crate) fn principal_column(principal: Option<&str>) -> &str {
    principal.unwrap_or("")
}

fn principal_from_column(principal: String) -> Option<String> {
    (!principal.is_empty()).then_some(principal)
}

/// `[[key, request], …]` as stored in `remote_tasks.input_requests`.
pub(crate) fn input_requests_text(requests: &[(String, Value)]) -> String {
    let list: Vec<Value> = requests
        .iter()
        .map(|(k, v)| Value::Array(vec![Value::String(k.clone()), v.clone()]))
        .collect();
    to_json_text(&Value::Array(list))
}

fn parse_input_requests(text: &str) -> Result<Vec<(String, Value)>, StoreError> {
    let corrupt = || {
        StoreError::Corrupt("column input_requests is not a list of [key, request] pairs".into())
    };
    let Value::Array(items) = parse_json("input_requests", text)? else {
        return Err(corrupt());
    };
    items
        .into_iter()
        .map(|item| match item {
            Value::Array(mut pair) if pair.len() == 2 => {
                let request = pair.pop().unwrap_or(Value::Null);
                match pair.pop() {
                    Some(Value::String(key)) => Ok((key, request)),
                    _ => Err(corrupt()),
                }
            }
            _ => Err(corrupt()),
        })
        .collect()
}

/// Decode a `remote_task_inputs` row.
pub(crate) fn remote_input<B: Backend>(
    row: &B::Row,
) -> Result<mcptask_core::client::RemoteInput, StoreError> {
    let request: String = B::column(row, "request")?;
    Ok(mcptask_core::client::RemoteInput {
        key: B::column(row, "key")?,
        request: parse_json("request", &request)?,
        response: parse_opt_json("response", B::column(row, "response")?)?,
        first_seen_at: B::column(row, "first_seen_at")?,
        answered_at: B::column(row, "answered_at")?,
        sent_at: B::column(row, "sent_at")?,
    })
}

/// Decode a `remote_task_events` row.
pub(crate) fn task_event<B: Backend>(
    row: &B::Row,
) -> Result<mcptask_core::client::TaskEvent, StoreError> {
    let kind: String = B::column(row, "kind")?;
    let status: String = B::column(row, "status")?;
    let data: String = B::column(row, "data")?;
    Ok(mcptask_core::client::TaskEvent {
        task_id: B::column(row, "task_id")?,
        version: B::column(row, "version")?,
        kind: mcptask_core::client::EventKind::parse(&kind)
            .ok_or_else(|| StoreError::Corrupt(format!("unknown event kind {kind:?}")))?,
        status: parse_status(&status)?,
        occurred_at: B::column(row, "occurred_at")?,
        data: parse_json("data", &data)?,
    })
}

/// The status an event row records: the one in its data (the task as of the
/// event), else the task's status after the change.
pub(crate) fn event_status(data: &Value, fallback: TaskStatus) -> &'static str {
    data.get("status")
        .and_then(Value::as_str)
        .and_then(TaskStatus::parse)
        .unwrap_or(fallback)
        .as_str()
}

/// `(task_id, (key, response))` from an answered `remote_task_inputs` row.
pub(crate) fn answer_pair<B: Backend>(
    row: &B::Row,
) -> Result<(String, (String, Value)), StoreError> {
    let response: String = B::column(row, "response")?;
    Ok((
        B::column(row, "task_id")?,
        (B::column(row, "key")?, parse_json("response", &response)?),
    ))
}

/// The due-time column a phase claims on.
pub(crate) fn due_of(phase: Phase, r: &RemoteTaskRecord) -> Option<i64> {
    match phase {
        Phase::Poll => r.next_poll_at,
        Phase::Cancel => r.next_cancel_at,
        Phase::Update => r.next_update_at,
    }
}

/// Claimed rows in due order, with their fences. A row that cannot be decoded
/// is logged and left claimed (so it is retried only after the lease), rather
/// than failing every claim behind it.
pub(crate) fn claimed_records(
    phase: Phase,
    records: impl Iterator<Item = Result<RemoteTaskRecord, StoreError>>,
) -> Vec<ClaimedTask> {
    let mut out: Vec<ClaimedTask> = records
        .filter_map(|r| match r {
            Ok(record) => {
                let fence = Fence {
                    task_id: record.id.clone(),
                    owner: record.claim_owner.clone().unwrap_or_default(),
                    token: record.claim_token.clone().unwrap_or_default(),
                };
                Some(ClaimedTask {
                    record,
                    fence,
                    answers: Vec::new(),
                })
            }
            Err(e) => {
                tracing::error!(phase = phase.as_str(), "claimed a corrupt remote task: {e}");
                None
            }
        })
        .collect();
    out.sort_by(|a, b| {
        (due_of(phase, &a.record), &a.record.id).cmp(&(due_of(phase, &b.record), &b.record.id))
    });
    out
}

/// `(status, count)` rows as counts of every status, in lifecycle order
/// (absent statuses count 0, so metrics gauges fall back to zero).
pub(crate) fn status_counts(
    rows: impl Iterator<Item = Result<(String, i64), StoreError>>,
) -> Result<Vec<(TaskStatus, i64)>, StoreError> {
    let mut counts: HashMap<TaskStatus, i64> = HashMap::new();
    for row in rows {
        let (status, n) = row?;
        *counts.entry(parse_status(&status)?).or_default() += n;
    }
    Ok(TaskStatus::ALL
        .into_iter()
        .map(|s| (s, counts.get(&s).copied().unwrap_or(0)))
        .collect())
}

/// The call's trace context: both columns, or none when `traceparent` is
/// NULL (telemetry off, or a row older than traces).
fn trace_of<B: Backend>(row: &B::Row) -> Result<Option<TraceContext>, StoreError> {
    let traceparent: Option<String> = B::column(row, "traceparent")?;
    let tracestate: Option<String> = B::column(row, "tracestate")?;
    Ok(traceparent.map(|traceparent| TraceContext {
        traceparent,
        tracestate,
    }))
}
