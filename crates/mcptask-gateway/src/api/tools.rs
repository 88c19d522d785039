//! `GET /api/v1/servers/{name}/tools`: what a configured server offers, for
//! the CLI's `mcptask tools` and the dashboard's tool picker.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use mcptask_client::TrackerError;
use serde_json::{Value, json};

use super::error::ApiError;
use super::{AppState, Caller};

/// One tool as the API shows it.
pub fn tool_view(tool: &rmcp::model::Tool) -> Value {
    let title = tool
        .title
        .clone()
        .or_else(|| tool.annotations.as_ref().and_then(|a| a.title.clone()));
    json!({
        "name": tool.name,
        "title": title,
        "description": tool.description,
        "inputSchema": tool.input_schema.as_ref(),
        "outputSchema": tool.output_schema.as_deref(),
        "annotations": tool.annotations,
    })
}

/// Any token may list tools: whoever may call a tool may learn its name and
/// arguments (the tool policy leaves out the ones this caller may not call).
pub async fn list_tools(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let servers = state.tracker.servers();
    if servers.get(&name).is_none() {
        let known = servers.names();
        return Err(ApiError {
            details: Some(json!({"servers": known})),
            ..ApiError::new(
                StatusCode::NOT_FOUND,
                "unknown_server",
                format!(
                    "server {name:?} is not configured; configured servers: {}",
                    if known.is_empty() {
                        "none (add [[servers]] to mcptask.toml)".to_string()
                    } else {
                        known.join(", ")
                    }
                ),
            )
        });
    }
    match state.tracker.list_tools(&name).await {
        Ok(tools) => Ok(Json(json!({
            "server": name,
            "tools": tools
                .iter()
                .filter(|t| crate::route::visible(&state.calls, &caller, &name, &t.name))
                .map(tool_view)
                .collect::<Vec<_>>(),
        }))),
        Err(e @ (TrackerError::Store(_) | TrackerError::ShuttingDown)) => Err(e.into()),
        Err(e) => {
            // The cause alone ("connection refused") does not say which of
            // several servers it is about, nor what to do.
            let fix = match e {
                TrackerError::Unavailable(_) => {
                    "; check that it is running and reachable at its configured URL or command (its health: GET /api/v1/servers)"
                }
                _ => "",
            };
            let mut error = ApiError::from(crate::failure::Failure::from(e).for_caller(&caller));
            error.message = format!(
                "cannot list the tools of server {name:?}: {}{fix}",
                error.message
            );
            Err(error)
        }
    }
}
