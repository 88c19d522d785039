//! Route handlers.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::Extension;
use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use mcptask_client::{
    CallOptions, Cursor, DeadLetterFilter, ListFilter, RemoteTaskRecord, TaskStatus, TrackerError,
};
use mcptask_core::call::{CallState, Face};
use mcptask_core::client::RemoteDriver;

use crate::calls::{CallRequest, Started};
use mcptask_core::outcome::Outcome;
use serde::Deserialize;
use serde_json::{Value, json};
use tracing::Instrument;

use super::error::{ApiError, JsonBody};
use super::{AppState, Caller, views};

/// Timeline entries included in a task's detail.
const TIMELINE_LIMIT: i64 = 200;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    status: Option<String>,
    /// How the call ended (`completed`, `tool_error`, `failed`,
    /// `cancelled`): a tool error apart from a completed call.
    outcome: Option<String>,
    server: Option<String>,
    principal: Option<String>,
    conversation: Option<String>,
    /// Only calls of this tool (its name on its server).
    tool: Option<String>,
    /// RFC 3339: calls made at or after it.
    since: Option<String>,
    /// RFC 3339: calls made before it.
    until: Option<String>,
    active: Option<bool>,
    limit: Option<i64>,
    cursor: Option<String>,
}

pub async fn list_tasks(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    for (name, value) in [
        ("status", &q.status),
        ("outcome", &q.outcome),
        ("server", &q.server),
        ("principal", &q.principal),
        ("conversation", &q.conversation),
        ("tool", &q.tool),
        ("cursor", &q.cursor),
    ] {
        plain_text(name, value.as_deref())?;
    }
    let status = q
        .status
        .as_deref()
        .map(|s| {
            TaskStatus::parse(s)
                .ok_or_else(|| ApiError::bad_request(format!("unknown status {s:?}")))
        })
        .transpose()?;
    let outcome = q
        .outcome
        .as_deref()
        .map(|o| {
            Outcome::parse(o).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "unknown outcome {o:?} (completed, tool_error, failed or cancelled)"
                ))
            })
        })
        .transpose()?;
    let principal = caller.acting_for(q.principal)?;
    let filter = ListFilter {
        status,
        outcome,
        server: q.server,
        principal,
        conversation: q.conversation,
        active_only: q.active.unwrap_or(false),
        tool: q.tool,
        created_since: time_param("since", q.since.as_deref())?,
        created_before: time_param("until", q.until.as_deref())?,
    };
    let cursor = q
        .cursor
        .as_deref()
        .map(|c| Cursor::decode(c).ok_or_else(|| ApiError::bad_request("invalid cursor")))
        .transpose()?;
    let limit = q.limit.unwrap_or(50);
    if !(1..=500).contains(&limit) {
        return Err(ApiError::bad_request("limit must be between 1 and 500"));
    }
    let (page, next) = state.tracker.list(&filter, cursor.as_ref(), limit).await?;
    Ok(Json(json!({
        "tasks": page.iter().map(|r| views::summary(r, caller.operator)).collect::<Vec<_>>(),
        "nextCursor": next.map(|c| c.encode()),
    })))
}

/// The task if it exists and the caller may see it (otherwise: not found).
async fn visible(
    state: &AppState,
    caller: &Caller,
    id: &str,
) -> Result<RemoteTaskRecord, ApiError> {
    plain_text("the task id", Some(id))?;
    if id.is_empty() || id.len() > 128 {
        return Err(ApiError::not_found("task"));
    }
    match state.tracker.get(id).await {
        Ok(r) if caller.may_see(r.principal.as_deref()) => Ok(r),
        Ok(_) | Err(TrackerError::NotFound(_)) => Err(ApiError::not_found("task")),
        Err(e) => Err(e.into()),
    }
}

async fn detail_of(
    state: &AppState,
    caller: &Caller,
    r: &RemoteTaskRecord,
) -> Result<Value, ApiError> {
    let inputs = state.tracker.inputs(&r.id).await?;
    let timeline = state.tracker.events(&r.id, 0, TIMELINE_LIMIT).await?;
    // A 2025-11-25 task's upstream id lives with the call task that drives it.
    let upstream_task = match r.driver {
        RemoteDriver::Sep1686 if caller.operator => state
            .calls
            .runtime
            .get_task_overview(&r.id, r.principal.as_deref())
            .await
            .ok()
            .and_then(|(_, overview)| overview.driver_state)
            .and_then(|json| CallState::from_json(&json, Some("sep1686")).ok())
            .and_then(|s| match s {
                CallState::Sep1686 { upstream_task, .. } => upstream_task,
                _ => None,
            }),
        _ => None,
    };
    Ok(views::detail(
        r,
        &inputs,
        &timeline,
        caller.operator,
        upstream_task.as_deref(),
    ))
}

pub async fn get_task(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let r = visible(&state, &caller, &id).await?;
    Ok(Json(detail_of(&state, &caller, &r).await?))
}

pub async fn cancel_task(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    visible(&state, &caller, &id).await?;
    let r = state.tracker.cancel(&id).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(detail_of(&state, &caller, &r).await?),
    ))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnswerBody {
    /// `key -> response` (e.g. an elicitation result `{"action": "accept", "content": {...}}`).
    answers: BTreeMap<String, Value>,
}

pub async fn answer_task(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<AnswerBody>,
) -> Result<Json<Value>, ApiError> {
    visible(&state, &caller, &id).await?;
    if body.answers.is_empty() {
        return Err(ApiError::bad_request(
            "answers must name at least one input key",
        ));
    }
    for (key, value) in &body.answers {
        plain_text("an input key", Some(key))?;
        no_nul("answers", value)?;
    }
    let result = state.tracker.answer(&id, body.answers).await?;
    Ok(Json(
        json!({"stored": result.applied, "ignored": result.ignored}),
    ))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CallBody {
    server: String,
    tool: String,
    #[serde(default)]
    arguments: Option<Value>,
    conversation: Option<String>,
    call_id: Option<String>,
    correlation: Option<Value>,
    /// Operators may act for a principal; principal tokens always act for themselves.
    principal: Option<String>,
    /// Wait up to this many milliseconds for a task to settle before answering.
    wait_ms: Option<u64>,
    /// Answers to input asked before the task exists (a 409 `input_needed`
    /// names the keys and questions), by input key.
    #[serde(default)]
    input_responses: std::collections::BTreeMap<String, Value>,
    /// The `requestState` of the 409 being answered, given back unchanged.
    request_state: Option<String>,
    /// `true`: keep the call as a task whatever the tool (a synchronous tool runs
    /// as durable work); `false`: the synchronous answer where the tool has
    /// one; absent: the server's `background` list decides.
    background: Option<bool>,
}

/// The face of a call made over REST: the CLI says so in its user agent.
fn face_of(headers: &axum::http::HeaderMap) -> Face {
    let agent = headers
        .get(axum::http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if agent.starts_with(CLI_USER_AGENT) {
        Face::Cli
    } else {
        Face::Api
    }
}

/// The start of the user agent the `mcptask` CLI sends.
pub const CLI_USER_AGENT: &str = "mcptask-cli/";

pub async fn call_tool(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: axum::http::HeaderMap,
    JsonBody(body): JsonBody<CallBody>,
) -> Result<impl IntoResponse, ApiError> {
    let face = face_of(&headers);
    for (name, value) in [
        ("server", Some(&body.server)),
        ("tool", Some(&body.tool)),
        ("conversation", body.conversation.as_ref()),
        ("callId", body.call_id.as_ref()),
        ("principal", body.principal.as_ref()),
    ] {
        plain_text(name, value.map(String::as_str))?;
    }
    for (name, value) in [
        ("arguments", body.arguments.as_ref()),
        ("correlation", body.correlation.as_ref()),
    ] {
        if let Some(value) = value {
            no_nul(name, value)?;
        }
    }
    for (key, value) in &body.input_responses {
        plain_text("an input key", Some(key))?;
        no_nul("inputResponses", value)?;
    }
    let principal = caller.acting_for(body.principal)?;
    let span = crate::spans::rest_call(&body.server, &body.tool, &headers);
    let options = CallOptions {
        principal,
        conversation: body.conversation,
        call_id: body.call_id,
        correlation: body.correlation,
        input_responses: body.input_responses,
        request_state: body.request_state,
        face: Some(face),
        subject_token: caller.token.clone(),
        ..Default::default()
    };
    let outcome = state
        .calls
        .call(CallRequest {
            server: body.server,
            tool: body.tool,
            arguments: body.arguments.unwrap_or(json!({})),
            background: body.background,
            options,
            caller: caller.clone(),
        })
        .instrument(span)
        .await
        .map_err(|e| crate::failure::Failure::from(e).for_caller(&caller))?;
    match outcome {
        Started::Completed(result) => Ok((
            StatusCode::OK,
            Json(json!({"outcome": "completed", "result": result})),
        )),
        Started::Task(task) => {
            let mut record = *task;
            if let Some(ms) = body.wait_ms.filter(|ms| *ms > 0) {
                let wait = Duration::from_millis(ms.min(300_000));
                match state.tracker.wait(&record.id, wait).await {
                    Ok(r) => record = r,
                    Err(TrackerError::Timeout(r)) => record = *r,
                    Err(e) => return Err(e.into()),
                }
            }
            Ok((
                StatusCode::ACCEPTED,
                Json(
                    json!({"outcome": "task", "task": detail_of(&state, &caller, &record).await?}),
                ),
            ))
        }
    }
}

/// The configured servers. An operator sees how each is reached (URL or
/// command), its definition hash, health with its last error, and OAuth
/// state; any other principal sees only names and health states (what the
/// dashboard's picker needs): hosts, ports, commands and upstream error
/// texts are the operator's.
pub async fn list_servers(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Json<Value> {
    let mut servers: Vec<Value> = Vec::new();
    for name in state.tracker.servers().names() {
        let Some((def, hash)) = state.tracker.servers().get(&name) else {
            continue;
        };
        let health = state.tracker.servers().health(&name);
        // Listed at least once: its tools are offered (`/readyz` counts
        // the servers that are not).
        let ready = state.calls.upstreams.has_listing(&name);
        if !caller.operator {
            let health = health.map(|h| json!({"state": h.state}));
            servers.push(json!({"name": name, "health": health, "ready": ready}));
            continue;
        }
        let mut entry = json!({
            "name": name,
            "transport": match &def.transport {
                mcptask_client::Transport::Http { url, .. } => json!({"type": "http", "url": url}),
                mcptask_client::Transport::Stdio { command, .. } => json!({"type": "stdio", "command": command}),
            },
            "definitionHash": hash,
            "health": health,
            "ready": ready,
        });
        if state.calls.upstreams.is_retired(&name) {
            // Removed by a reload: no new calls; its live tasks are
            // followed to their end.
            entry["retired"] = json!(true);
        }
        // Where the token stands, never the token.
        if let Some(oauth) = &def.oauth {
            let runtime = oauth
                .runtime
                .get()
                .unwrap_or_else(mcptask_client::oauth::OAuthRuntime::fallback);
            entry["oauth"] = json!(
                runtime
                    .describe(&name)
                    .await
                    .unwrap_or_else(|e| format!("oauth: token state unknown ({e})"))
            );
        }
        servers.push(entry);
    }
    Json(json!({"servers": servers}))
}

/// The configuration in force, as a reload compares it (secrets as short
/// hashes): `mcptask config check --gateway` diffs a file against it.
/// Operators only.
pub async fn config_in_force(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<Value>, ApiError> {
    if !caller.operator {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "the configuration in force is shown to operator tokens only",
        ));
    }
    let Some(live) = &state.config else {
        return Err(ApiError::not_found("route"));
    };
    Ok(Json(json!({
        "fingerprint": crate::live::Fingerprint::of(&live.get()),
    })))
}

/// The Prometheus metrics: operators, and the principals of
/// `[api] metrics_principals`, only (they name every server and tool).
pub async fn metrics(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<impl IntoResponse, ApiError> {
    let allowed = match &state.config {
        Some(live) => live.get().api.may_read_metrics(&caller),
        None => caller.operator,
    };
    if !allowed {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "metrics are shown to operator tokens and the principals of [api] metrics_principals only",
        ));
    }
    let Some(handle) = &state.metrics else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "metrics_disabled",
            "metrics are not enabled in this process",
        ));
    };
    crate::metrics::upstream_up(&state.calls.upstreams);
    Ok((
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        handle.render(),
    ))
}

/// Ids, keys and names are plain text: a control character is a client
/// error (400), and must not reach the store (PostgreSQL refuses NUL in text
/// with an error of its own).
pub(super) fn plain_text(what: &str, value: Option<&str>) -> Result<(), ApiError> {
    if value.is_some_and(|v| v.chars().any(char::is_control)) {
        return Err(ApiError::bad_request(format!(
            "{what} must not contain control characters"
        )));
    }
    Ok(())
}

/// A time filter of a listing (`since`, `until`): RFC 3339, as epoch ms.
pub(super) fn time_param(name: &str, value: Option<&str>) -> Result<Option<i64>, ApiError> {
    value
        .map(|t| {
            mcptask_core::time::parse_rfc3339(t).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "{name} must be an RFC 3339 time, e.g. 2026-01-31T09:00:00Z"
                ))
            })
        })
        .transpose()
}

/// JSON the store keeps: no NUL in any string or key (PostgreSQL's `jsonb`
/// cannot hold one), so refuse it up front with a 400.
fn no_nul(what: &str, value: &Value) -> Result<(), ApiError> {
    fn has_nul(v: &Value) -> bool {
        match v {
            Value::String(s) => s.contains('\0'),
            Value::Array(a) => a.iter().any(has_nul),
            Value::Object(m) => m.iter().any(|(k, v)| k.contains('\0') || has_nul(v)),
            _ => false,
        }
    }
    if has_nul(value) {
        return Err(ApiError::bad_request(format!(
            "{what} must not contain NUL characters (\\u0000)"
        )));
    }
    Ok(())
}

/// Dead letters name tasks of every principal: operators only.
fn operator_only(caller: &Caller) -> Result<(), ApiError> {
    if caller.operator {
        Ok(())
    } else {
        Err(ApiError::forbidden(
            "dead letters need an operator token (one without a principal)",
        ))
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeadLetterQuery {
    task: Option<String>,
    target: Option<String>,
    limit: Option<i64>,
}

pub async fn list_dead_letters(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<DeadLetterQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    operator_only(&caller)?;
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let limit = q.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::bad_request("limit must be between 1 and 1000"));
    }
    let filter = DeadLetterFilter {
        task_id: q.task,
        target: q.target,
    };
    let letters = state.tracker.dead_letters(&filter, limit).await?;
    let count = state.tracker.dead_letter_count().await?;
    Ok(Json(json!({
        "count": count,
        "targets": state.tracker.notify_targets(),
        "deadLetters": letters.iter().map(views::dead_letter).collect::<Vec<_>>(),
    })))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedriveBody {
    /// Only this task's dead letters.
    task: Option<String>,
    /// Only this target's dead letters.
    target: Option<String>,
    /// At most this many (task, target) pairs (default 1000).
    limit: Option<i64>,
}

pub async fn redrive_dead_letters(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    JsonBody(body): JsonBody<RedriveBody>,
) -> Result<Json<Value>, ApiError> {
    operator_only(&caller)?;
    let limit = body.limit.unwrap_or(1000);
    if !(1..=10_000).contains(&limit) {
        return Err(ApiError::bad_request("limit must be between 1 and 10000"));
    }
    let filter = DeadLetterFilter {
        task_id: body.task,
        target: body.target,
    };
    let redriven = state.tracker.redrive_dead_letters(&filter, limit).await?;
    let remaining = state.tracker.dead_letter_count().await?;
    Ok(Json(json!({"redriven": redriven, "remaining": remaining})))
}
