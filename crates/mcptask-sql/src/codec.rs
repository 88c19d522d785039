//! Row decoding shared by both backends (columns are read by name).

use mcptask_core::server::ServerTaskRecord;
use mcptask_core::{StoreError, TaskStatus};
use serde_json::Value;
use sqlx::{ColumnIndex, Decode, Row, Type};

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

fn get<'r, R, T>(row: &'r R, column: &str) -> Result<T, StoreError>
where
    R: Row,
    for<'a> &'a str: ColumnIndex<R>,
    T: Decode<'r, R::Database> + Type<R::Database>,
{
    row.try_get(column)
        .map_err(|e| StoreError::Corrupt(format!("column {column}: {e}")))
}

/// Decode a `server_tasks` row (any column superset, read by name).
pub(crate) fn server_task<R>(row: &R) -> Result<ServerTaskRecord, StoreError>
where
    R: Row,
    for<'a> &'a str: ColumnIndex<R>,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> Option<String>: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> Option<i64>: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> bool: Decode<'r, R::Database> + Type<R::Database>,
{
    let arguments: String = get(row, "arguments")?;
    let status: String = get(row, "status")?;
    Ok(ServerTaskRecord {
        id: get(row, "id")?,
        principal: get(row, "principal")?,
        tool: get(row, "tool")?,
        arguments: parse_json("arguments", &arguments)?,
        call_inputs: parse_opt_json("call_inputs", get(row, "call_inputs")?)?,
        status: parse_status(&status)?,
        status_message: get(row, "status_message")?,
        result: parse_opt_json("result", get(row, "result")?)?,
        error: parse_opt_json("error", get(row, "error")?)?,
        created_at: get(row, "created_at")?,
        updated_at: get(row, "updated_at")?,
        ttl_ms: get(row, "ttl_ms")?,
        poll_interval_ms: get(row, "poll_interval_ms")?,
        attempt: get(row, "attempt")?,
        cancel_requested: get(row, "cancel_requested")?,
        owner: get(row, "owner")?,
        claim_token: get(row, "claim_token")?,
        purge_at: get(row, "purge_at")?,
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

use mcptask_core::client::{ClaimedTask, Fence, Phase, RemoteTaskRecord};

/// Decode a `remote_tasks` row (any column superset, read by name).
/// `principal = ''` is the anonymous caller and decodes to `None`.
pub(crate) fn remote_task<R>(row: &R) -> Result<RemoteTaskRecord, StoreError>
where
    R: Row,
    for<'a> &'a str: ColumnIndex<R>,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> Option<String>: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> Option<i64>: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> bool: Decode<'r, R::Database> + Type<R::Database>,
{
    let principal: String = get(row, "principal")?;
    let status: String = get(row, "status")?;
    let input_requests: String = get(row, "input_requests")?;
    Ok(RemoteTaskRecord {
        id: get(row, "id")?,
        server: get(row, "server")?,
        server_hash: get(row, "server_hash")?,
        remote_task_id: get(row, "remote_task_id")?,
        principal: principal_from_column(principal),
        conversation: get(row, "conversation")?,
        call_id: get(row, "call_id")?,
        correlation: parse_opt_json("correlation", get(row, "correlation")?)?,
        tool: get(row, "tool")?,
        arguments: parse_opt_json("arguments", get(row, "arguments")?)?,
        status: parse_status(&status)?,
        status_message: get(row, "status_message")?,
        input_requests: parse_input_requests(&input_requests)?,
        result: parse_opt_json("result", get(row, "result")?)?,
        result_truncated: get(row, "result_truncated")?,
        error: parse_opt_json("error", get(row, "error")?)?,
        remote_created_at: get(row, "remote_created_at")?,
        ttl_ms: get(row, "ttl_ms")?,
        poll_interval_ms: get(row, "poll_interval_ms")?,
        created_at: get(row, "created_at")?,
        updated_at: get(row, "updated_at")?,
        completed_at: get(row, "completed_at")?,
        next_poll_at: get(row, "next_poll_at")?,
        last_polled_at: get(row, "last_polled_at")?,
        poll_count: get(row, "poll_count")?,
        consecutive_errors: get(row, "consecutive_errors")?,
        last_error: get(row, "last_error")?,
        cancel_requested_at: get(row, "cancel_requested_at")?,
        cancel_sent_at: get(row, "cancel_sent_at")?,
        next_cancel_at: get(row, "next_cancel_at")?,
        cancel_attempts: get(row, "cancel_attempts")?,
        next_update_at: get(row, "next_update_at")?,
        claim_owner: get(row, "claim_owner")?,
        claim_token: get(row, "claim_token")?,
        claim_expires_at: get(row, "claim_expires_at")?,
        claim_phase: get(row, "claim_phase")?,
        event_version: get(row, "event_version")?,
        delivered_version: get(row, "delivered_version")?,
        next_notify_at: get(row, "next_notify_at")?,
        notify_attempts: get(row, "notify_attempts")?,
        last_notify_error: get(row, "last_notify_error")?,
        dead_letters: get(row, "dead_letters")?,
    })
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
pub(crate) fn remote_input<R>(row: &R) -> Result<mcptask_core::client::RemoteInput, StoreError>
where
    R: Row,
    for<'a> &'a str: ColumnIndex<R>,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> Option<String>: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> Option<i64>: Decode<'r, R::Database> + Type<R::Database>,
{
    let request: String = get(row, "request")?;
    Ok(mcptask_core::client::RemoteInput {
        key: get(row, "key")?,
        request: parse_json("request", &request)?,
        response: parse_opt_json("response", get(row, "response")?)?,
        first_seen_at: get(row, "first_seen_at")?,
        answered_at: get(row, "answered_at")?,
        sent_at: get(row, "sent_at")?,
    })
}

/// Decode a `remote_task_events` row.
pub(crate) fn task_event<R>(row: &R) -> Result<mcptask_core::client::TaskEvent, StoreError>
where
    R: Row,
    for<'a> &'a str: ColumnIndex<R>,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
{
    let kind: String = get(row, "kind")?;
    let status: String = get(row, "status")?;
    let data: String = get(row, "data")?;
    Ok(mcptask_core::client::TaskEvent {
        task_id: get(row, "task_id")?,
        version: get(row, "version")?,
        kind: mcptask_core::client::EventKind::parse(&kind)
            .ok_or_else(|| StoreError::Corrupt(format!("unknown event kind {kind:?}")))?,
        status: parse_status(&status)?,
        occurred_at: get(row, "occurred_at")?,
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
pub(crate) fn answer_pair<R>(row: &R) -> Result<(String, (String, Value)), StoreError>
where
    R: Row,
    for<'a> &'a str: ColumnIndex<R>,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
{
    let response: String = get(row, "response")?;
    Ok((
        get(row, "task_id")?,
        (get(row, "key")?, parse_json("response", &response)?),
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

/// Whether the row's work claim is the one `fence` proves.
pub(crate) fn fence_matches(r: &RemoteTaskRecord, fence: &Fence) -> bool {
    r.claim_owner.as_deref() == Some(fence.owner.as_str())
        && r.claim_token.as_deref() == Some(fence.token.as_str())
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
