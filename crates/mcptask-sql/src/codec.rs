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
