//! `GET /api/v1/audit`: the audit trail, newest first, filtered and paged
//! by a cursor. An operator sees every entry; a principal only its own
//! (the rule of the task list, [`Caller::acting_for`]).

use axum::Extension;
use axum::Json;
use axum::extract::{Query, State};
use mcptask_core::audit::{AuditCursor, AuditFilter, AuditRecord};
use mcptask_core::outcome::Outcome;
use mcptask_core::time::to_rfc3339;
use serde::Deserialize;
use serde_json::{Value, json};

use super::error::ApiError;
use super::handlers::{plain_text, time_param};
use super::{AppState, Caller};

/// The query of `GET /api/v1/audit`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    principal: Option<String>,
    server: Option<String>,
    tool: Option<String>,
    outcome: Option<String>,
    /// RFC 3339: entries at or after it.
    since: Option<String>,
    /// RFC 3339: entries before it.
    until: Option<String>,
    limit: Option<i64>,
    cursor: Option<String>,
}

/// One page of the trail.
pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<AuditQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    for (name, value) in [
        ("principal", &q.principal),
        ("server", &q.server),
        ("tool", &q.tool),
        ("outcome", &q.outcome),
        ("cursor", &q.cursor),
    ] {
        plain_text(name, value.as_deref())?;
    }
    let outcome = q
        .outcome
        .as_deref()
        .map(|o| {
            Outcome::parse(o).ok_or_else(|| {
                let names: Vec<&str> = Outcome::ALL.iter().map(|o| o.as_str()).collect();
                ApiError::bad_request(format!("unknown outcome {o:?} ({})", names.join(", ")))
            })
        })
        .transpose()?;
    let filter = AuditFilter {
        principal: caller.acting_for(q.principal)?,
        server: q.server,
        tool: q.tool,
        outcome,
        since_ms: time_param("since", q.since.as_deref())?,
        until_ms: time_param("until", q.until.as_deref())?,
    };
    let cursor = q
        .cursor
        .as_deref()
        .map(|c| AuditCursor::decode(c).ok_or_else(|| ApiError::bad_request("invalid cursor")))
        .transpose()?;
    let limit = q.limit.unwrap_or(50);
    if !(1..=500).contains(&limit) {
        return Err(ApiError::bad_request("limit must be between 1 and 500"));
    }
    let page = state
        .calls
        .store()
        .audit()
        .list_audit(&filter, cursor.as_ref(), limit)
        .await
        .map_err(|e| crate::failure::Failure::store(&e))?;
    let next = (page.len() as i64 == limit)
        .then(|| page.last().map(|r| r.cursor().encode()))
        .flatten();
    Ok(Json(json!({
        "events": page.iter().map(view).collect::<Vec<_>>(),
        "nextCursor": next,
    })))
}

/// An entry as the API shows it.
fn view(r: &AuditRecord) -> Value {
    let e = &r.event;
    json!({
        "at": to_rfc3339(e.at_ms),
        "callId": e.call_id,
        "principal": e.principal,
        "face": e.face.as_str(),
        "server": e.server,
        "tool": e.tool,
        "driver": e.driver,
        "outcome": e.outcome.as_str(),
        "errorClass": e.error_class,
        "durationMs": e.duration_ms,
        "via": e.via,
    })
}
