//! `/api/v1/admin/servers`: servers added, replaced and deleted while
//! running (`crate::admin`), operators only. Listings show every server in
//! force with its origin (`file` or `api`) and the stored servers the file
//! shadows (the file wins).

use std::sync::Arc;

use axum::Extension;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use mcptask_core::admin::AdminEntry;
use mcptask_core::time::to_rfc3339;
use serde_json::{Value, json};

use super::error::ApiError;
use super::{AppState, Caller};
use crate::admin::{Admin, ChangeError, Changed};
use crate::config::admin::{SERVERS, server_definition};
use crate::failure::Failure;

/// What the admin routes act on.
#[derive(Clone)]
pub struct AdminState {
    /// The stored objects and how they are applied.
    pub admin: Arc<Admin>,
    /// The gateway they are applied to.
    pub gateway: crate::Gateway,
}

/// The admin side, for an operator; refused (and recorded) otherwise.
fn admin_for<'s>(
    state: &'s AppState,
    caller: &Caller,
    name: &str,
    action: &str,
) -> Result<&'s AdminState, ApiError> {
    if !caller.operator {
        crate::admin::audit(
            caller,
            name,
            action,
            Some("not_operator"),
            std::time::Instant::now(),
        );
        return Err(ApiError::forbidden(
            "the admin API needs an operator token (one without a principal)",
        ));
    }
    state.admin.as_ref().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "the admin API needs a gateway started from a configuration file (mcptask serve)",
        )
    })
}

fn store_error(e: &mcptask_core::StoreError) -> ApiError {
    ApiError::from(Failure::store(e))
}

/// A stored server as listed: whether the file shadows it, and whether it
/// is in force here (not when this replica could not apply it yet).
fn stored(entry: &AdminEntry, shadowed: bool, in_force: bool) -> Value {
    json!({
        "name": entry.name,
        "origin": "api",
        "shadowed_by_file": shadowed,
        "in_force": in_force,
        "changed_by": entry.changed_by,
        "changed_at": to_rfc3339(entry.changed_at_ms),
        "definition": server_definition(&entry.body),
    })
}

/// Every server in force, by origin, and the stored ones the file shadows.
async fn listing(admin: &AdminState) -> Result<Vec<Value>, ApiError> {
    let entries = admin.admin.entries().await.map_err(|e| store_error(&e))?;
    let live = admin.gateway.live.get();
    let mut list: Vec<Value> = live
        .servers
        .iter()
        .filter(|s| !live.origins.api.contains(s.name()))
        .map(|s| json!({"name": s.name(), "origin": "file"}))
        .collect();
    for entry in entries.iter().filter(|e| e.kind == SERVERS) {
        list.push(stored(
            entry,
            live.file_defines_server(&entry.name),
            live.origins.api.contains(&entry.name),
        ));
    }
    Ok(list)
}

/// `GET /api/v1/admin/servers`.
pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<Value>, ApiError> {
    let admin = admin_for(&state, &caller, "", "list_servers")?;
    Ok(Json(json!({ "servers": listing(admin).await? })))
}

/// `GET /api/v1/admin/servers/{name}`.
pub async fn get_one(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let admin = admin_for(&state, &caller, &name, "get_server")?;
    listing(admin)
        .await?
        .into_iter()
        .filter(|s| s["name"] == name.as_str())
        .max_by_key(|s| s["origin"] == "file")
        .map(Json)
        .ok_or_else(|| ApiError::not_found("server"))
}

fn changed(name: &str, made: Changed) -> Json<Value> {
    Json(json!({
        "name": name,
        "applied": made.not_applied.is_none(),
        "not_applied": made.not_applied,
        "changes": made.changes.map(|c| c.lines()).unwrap_or_default(),
    }))
}

fn refused(e: ChangeError) -> ApiError {
    match e {
        ChangeError::DefinedInFile(_) => {
            ApiError::new(StatusCode::CONFLICT, "defined_in_file", e.to_string())
        }
        ChangeError::NotFound(_) => {
            ApiError::new(StatusCode::NOT_FOUND, "not_found", e.to_string())
        }
        ChangeError::Invalid(e) => ApiError::new(StatusCode::BAD_REQUEST, "invalid_config", e.0),
        ChangeError::HostKey(..) => {
            ApiError::new(StatusCode::BAD_REQUEST, "not_settable", e.to_string())
        }
        ChangeError::Store(e) => store_error(&e),
    }
}

/// `PUT /api/v1/admin/servers/{name}`: add or replace; the body is the
/// server's `[[servers]]` keys as a JSON object.
pub async fn put(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    body: Result<Json<Value>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let admin = admin_for(&state, &caller, &name, "put_server")?;
    let Json(definition) = body.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let made = admin
        .admin
        .put_server(&admin.gateway, &caller, &name, &definition)
        .await
        .map_err(refused)?;
    Ok(changed(&name, made))
}

/// `DELETE /api/v1/admin/servers/{name}`: a server set through the API.
pub async fn delete(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let admin = admin_for(&state, &caller, &name, "delete_server")?;
    let made = admin
        .admin
        .delete_server(&admin.gateway, &caller, &name)
        .await
        .map_err(refused)?;
    Ok(changed(&name, made))
}
