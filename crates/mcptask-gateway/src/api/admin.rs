//! `/api/v1/admin/servers` and `/api/v1/admin/virtual_servers`: servers
//! and virtual servers added, replaced and deleted while running
//! (`crate::admin`), operators only. Listings show every object of the kind
//! in force with its origin (`file` or `api`) and the stored ones the file
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
use crate::config::admin::{Kind, definition};
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

/// A stored object as listed: whether the file shadows it, and whether it
/// is in force here (not when this replica could not apply it yet).
fn stored(kind: Kind, entry: &AdminEntry, shadowed: bool, in_force: bool) -> Value {
    json!({
        "name": entry.name,
        "origin": "api",
        "shadowed_by_file": shadowed,
        "in_force": in_force,
        "changed_by": entry.changed_by,
        "changed_at": to_rfc3339(entry.changed_at_ms),
        "definition": definition(kind, &entry.body),
    })
}

/// Every `kind` object in force, by origin, and the stored ones the file
/// shadows.
async fn listing(admin: &AdminState, kind: Kind) -> Result<Vec<Value>, ApiError> {
    let entries = admin.admin.entries().await.map_err(|e| store_error(&e))?;
    let live = admin.gateway.live.get();
    let mut list: Vec<Value> = live
        .names_of(kind)
        .into_iter()
        .filter(|name| !live.origins.from_api(kind, name))
        .map(|name| json!({"name": name, "origin": "file"}))
        .collect();
    for entry in entries.iter().filter(|e| e.kind == kind.table()) {
        list.push(stored(
            kind,
            entry,
            live.file_defines(kind, &entry.name),
            live.origins.from_api(kind, &entry.name),
        ));
    }
    Ok(list)
}

/// The audit trail's name of a read of `kind` (`list_servers`, `get_virtual_server`).
fn read_action(verb: &str, kind: Kind, plural: bool) -> String {
    let noun = kind.noun().replace(' ', "_");
    if plural {
        format!("{verb}_{noun}s")
    } else {
        format!("{verb}_{noun}")
    }
}

async fn list_of(state: AppState, caller: Caller, kind: Kind) -> Result<Json<Value>, ApiError> {
    let admin = admin_for(&state, &caller, "", &read_action("list", kind, true))?;
    Ok(Json(json!({ kind.table(): listing(admin, kind).await? })))
}

async fn get_of(
    state: AppState,
    caller: Caller,
    kind: Kind,
    name: String,
) -> Result<Json<Value>, ApiError> {
    let admin = admin_for(&state, &caller, &name, &read_action("get", kind, false))?;
    listing(admin, kind)
        .await?
        .into_iter()
        .filter(|s| s["name"] == name.as_str())
        .max_by_key(|s| s["origin"] == "file")
        .map(Json)
        .ok_or_else(|| ApiError::not_found(kind.noun()))
}

async fn put_of(
    state: AppState,
    caller: Caller,
    kind: Kind,
    name: String,
    body: Result<Json<Value>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let admin = admin_for(&state, &caller, &name, &read_action("put", kind, false))?;
    let Json(definition) = body.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let made = admin
        .admin
        .put_object(&admin.gateway, &caller, kind, &name, &definition)
        .await
        .map_err(refused)?;
    Ok(changed(&name, made))
}

async fn delete_of(
    state: AppState,
    caller: Caller,
    kind: Kind,
    name: String,
) -> Result<Json<Value>, ApiError> {
    let admin = admin_for(&state, &caller, &name, &read_action("delete", kind, false))?;
    let made = admin
        .admin
        .delete_object(&admin.gateway, &caller, kind, &name)
        .await
        .map_err(refused)?;
    Ok(changed(&name, made))
}

/// `GET /api/v1/admin/servers`.
pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<Value>, ApiError> {
    list_of(state, caller, Kind::Server).await
}

/// `GET /api/v1/admin/servers/{name}`.
pub async fn get_one(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    get_of(state, caller, Kind::Server, name).await
}

/// `PUT /api/v1/admin/servers/{name}`: add or replace; the body is the
/// server's `[[servers]]` keys as a JSON object.
pub async fn put(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    body: Result<Json<Value>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    put_of(state, caller, Kind::Server, name, body).await
}

/// `DELETE /api/v1/admin/servers/{name}`: a server set through the API.
pub async fn delete(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    delete_of(state, caller, Kind::Server, name).await
}

/// `GET /api/v1/admin/virtual_servers`.
pub async fn list_virtual(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<Value>, ApiError> {
    list_of(state, caller, Kind::VirtualServer).await
}

/// `GET /api/v1/admin/virtual_servers/{name}`.
pub async fn get_virtual(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    get_of(state, caller, Kind::VirtualServer, name).await
}

/// `PUT /api/v1/admin/virtual_servers/{name}`: add or replace; the body is
/// its `[[virtual_servers]]` keys as a JSON object.
pub async fn put_virtual(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    body: Result<Json<Value>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    put_of(state, caller, Kind::VirtualServer, name, body).await
}

/// `DELETE /api/v1/admin/virtual_servers/{name}`: one set through the API.
pub async fn delete_virtual(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    delete_of(state, caller, Kind::VirtualServer, name).await
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
        ChangeError::DefinedInFile(..) => {
            ApiError::new(StatusCode::CONFLICT, "defined_in_file", e.to_string())
        }
        ChangeError::NotFound(..) => {
            ApiError::new(StatusCode::NOT_FOUND, "not_found", e.to_string())
        }
        ChangeError::Invalid(e) => ApiError::new(StatusCode::BAD_REQUEST, "invalid_config", e.0),
        ChangeError::HostKey(..) => {
            ApiError::new(StatusCode::BAD_REQUEST, "not_settable", e.to_string())
        }
        ChangeError::Store(e) => store_error(&e),
    }
}
