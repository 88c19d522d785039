//! The proxy's front tasks (the tasks MCP callers hold at `/mcp`), for the
//! dashboard and operators: which driver follows each one and, for a task
//! the tracker follows, the tracked task behind it.
//!
//! Front tasks are scoped like the MCP endpoint scopes them: a principal
//! token sees its own; an operator sees those of the principal it names
//! (`?principal=`), or the anonymous callers' when it names none.

use axum::Extension;
use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use mcptask_core::server::TaskCursor;
use mcptask_server::{TaskError, TaskOverview, TaskRuntime};
use serde::Deserialize;
use serde_json::{Value, json};

use super::error::ApiError;
use super::{AppState, Caller};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FrontListQuery {
    principal: Option<String>,
    active: Option<bool>,
    limit: Option<i64>,
    cursor: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FrontTaskQuery {
    principal: Option<String>,
}

fn runtime(state: &AppState) -> Result<&TaskRuntime, ApiError> {
    state.front.as_ref().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "the proxy is not enabled on this gateway ([proxy] enabled = true)",
        )
    })
}

fn task_error(e: TaskError) -> ApiError {
    match e {
        TaskError::NotFound => ApiError::not_found("front task"),
        TaskError::InvalidParams(m) => ApiError::bad_request(m),
        other => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            other.to_string(),
        ),
    }
}

fn principal_param(value: Option<String>) -> Result<Option<String>, ApiError> {
    super::handlers::plain_text("principal", value.as_deref())?;
    Ok(value)
}

/// The wire task with what the overview adds: the tool, the driver, and the
/// tracked task (`/api/v1/tasks/{id}`) when the tracker follows it.
fn view(task: Value, overview: &TaskOverview, operator: bool) -> Value {
    let mut v = task;
    let obj = v.as_object_mut().expect("a task is an object");
    obj.insert("tool".into(), json!(overview.tool));
    obj.insert(
        "driver".into(),
        json!(overview.driver.as_deref().unwrap_or("native")),
    );
    let state = overview.driver_state.as_ref();
    let tracked = state.and_then(|s| s.get("remote")).and_then(Value::as_str);
    obj.insert("trackedTask".into(), json!(tracked));
    if operator {
        let upstream = state
            .and_then(|s| s.get("upstreamTask"))
            .and_then(Value::as_str);
        obj.insert("upstreamTaskId".into(), json!(upstream));
    }
    v
}

pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<FrontListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let rt = runtime(&state)?;
    let principal = caller.acting_for(principal_param(q.principal)?)?;
    let cursor = q
        .cursor
        .as_deref()
        .map(|c| TaskCursor::decode(c).ok_or_else(|| ApiError::bad_request("invalid cursor")))
        .transpose()?;
    let limit = q.limit.unwrap_or(50);
    if !(1..=mcptask_server::MAX_LIST_LIMIT).contains(&limit) {
        return Err(ApiError::bad_request(format!(
            "limit must be between 1 and {}",
            mcptask_server::MAX_LIST_LIMIT
        )));
    }
    let (tasks, next) = rt
        .list_task_overviews(
            principal.as_deref(),
            q.active.unwrap_or(false),
            cursor.as_ref(),
            limit,
        )
        .await
        .map_err(task_error)?;
    let tasks: Vec<Value> = tasks
        .iter()
        .map(|(task, overview)| view(json!(task), overview, caller.operator))
        .collect();
    Ok(Json(json!({
        "principal": principal,
        "tasks": tasks,
        "nextCursor": next.as_ref().map(TaskCursor::encode),
    })))
}

pub async fn get(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    query: Result<Query<FrontTaskQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let rt = runtime(&state)?;
    let principal = caller.acting_for(principal_param(q.principal)?)?;
    let (task, overview) = rt
        .get_task_overview(&id, principal.as_deref())
        .await
        .map_err(task_error)?;
    Ok(Json(view(json!(task), &overview, caller.operator)))
}

pub async fn cancel(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    query: Result<Query<FrontTaskQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<impl IntoResponse, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let rt = runtime(&state)?;
    let principal = caller.acting_for(principal_param(q.principal)?)?;
    rt.cancel_task(&id, principal.as_deref())
        .await
        .map_err(task_error)?;
    let (task, overview) = rt
        .get_task_overview(&id, principal.as_deref())
        .await
        .map_err(task_error)?;
    Ok((
        StatusCode::ACCEPTED,
        Json(view(json!(task), &overview, caller.operator)),
    ))
}
