//! The gateway's HTTP API (`/api/v1`), live event stream, health, metrics,
//! OpenAPI document and dashboard.

pub mod admin;
mod audit;
mod dashboard;
pub mod error;
mod handlers;

pub use handlers::CLI_USER_AGENT;
pub mod openapi;
mod policy;
mod sse;
pub mod stats;
mod tools;
pub mod views;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use mcptask_client::Tracker;

use crate::calls::Calls;
use crate::failure::Failure;

use crate::auth::Authenticator;
pub use crate::auth::Caller;
use crate::config::Config;
use crate::guard::{Door, Guard};
use error::ApiError;

/// Shared state of the API handlers.
#[derive(Clone)]
pub struct AppState {
    /// The calls every route acts on.
    pub calls: Calls,
    /// The tracker of the calls (their rows, events and intents).
    pub tracker: Tracker,
    /// What `GET /metrics` renders (none: the route answers 404).
    pub metrics: Option<metrics_exporter_prometheus::PrometheusHandle>,
    /// How requests are authenticated.
    pub auth: Authenticator,
    /// The configuration in force, for `GET /api/v1/config` (none: 404).
    pub config: Option<crate::live::LiveConfig>,
    /// The admin API's side (none: its routes answer 404).
    pub admin: Option<admin::AdminState>,
}

impl AppState {
    /// The state of the routes of `calls`, authenticating as `config` says.
    pub fn new(
        calls: Calls,
        config: &Config,
        metrics: Option<metrics_exporter_prometheus::PrometheusHandle>,
    ) -> Self {
        let http =
            mcptask_client::tls::build_http_client(reqwest::Client::builder).unwrap_or_default();
        Self::with_auth(calls, Authenticator::new(config, http), metrics)
    }

    /// With an authenticator of the caller's (one a reload updates).
    pub fn with_auth(
        calls: Calls,
        auth: Authenticator,
        metrics: Option<metrics_exporter_prometheus::PrometheusHandle>,
    ) -> Self {
        Self {
            tracker: calls.upstreams.tracker.clone(),
            calls,
            metrics,
            auth,
            config: None,
            admin: None,
        }
    }

    /// Show `config` (its fingerprint: secrets as short hashes) to
    /// operators at `GET /api/v1/config`.
    pub fn with_config(mut self, config: crate::live::LiveConfig) -> Self {
        self.config = Some(config);
        self
    }

    /// Serve the admin API (`/api/v1/admin/…`) on `admin`, applied to
    /// `gateway`.
    pub fn with_admin(
        mut self,
        admin: std::sync::Arc<crate::admin::Admin>,
        gateway: crate::Gateway,
    ) -> Self {
        self.admin = Some(admin::AdminState { admin, gateway });
        self
    }
}

/// Readiness for load balancers: 503 while the store is unreachable or
/// migrations are pending (`/healthz` says only that the process lives).
/// A draining gateway answers 503 `draining` before this is reached
/// ([`crate::drain`]). A ready gateway says how many of its upstream
/// servers answer and how many are not ready (never listed): a server that
/// is down fails only its own calls, so it never makes the gateway unready;
/// which one it is, is told to those who may see the servers
/// (`GET /api/v1/servers`), not here.
async fn ready(State(state): State<AppState>) -> Response {
    match state
        .calls
        .store()
        .readiness(std::time::Duration::from_secs(2))
        .await
    {
        Ok(()) => format!("ready ({})", state.calls.upstreams.readiness()).into_response(),
        Err(why @ mcptask_sql::NotReady::MigrationsPending { .. }) => ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "not_ready",
            why.to_string(),
        )
        .into_response(),
        // Unauthenticated: the driver's text is for the log only.
        Err(why) => {
            let failure = crate::failure::Failure::store(&why);
            let mut error = ApiError::new(
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                "not_ready",
                failure.message(),
            );
            error.details = failure
                .incident()
                .map(|i| serde_json::json!({"incident": i}));
            error.into_response()
        }
    }
}

/// The protected resource metadata (RFC 9728), when OAuth is configured.
async fn resource_metadata(State(state): State<AppState>) -> Response {
    match state.auth.resource_metadata() {
        Some(metadata) => axum::Json(metadata).into_response(),
        None => ApiError::not_found("route").into_response(),
    }
}

/// A call of a caller over its fair limits, refused from its headers
/// before its body is read, the refusal held a while (`calls::tarpit`).
/// A call that passes is admitted when made, as before.
async fn refuse_over_limits(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let principal = request
        .extensions()
        .get::<Caller>()
        .and_then(|c| c.principal.clone());
    let limiter = &state.calls.limiter;
    match limiter.check(principal.as_deref()) {
        Ok(()) => next.run(request).await,
        Err(busy) => {
            // Refused before the body named a tool: counted unnamed.
            let face = crate::metrics::CallLabels::unnamed(mcptask_core::call::Face::Api)
                .by(principal.as_deref());
            crate::metrics::call_ended(
                &face,
                mcptask_core::outcome::Outcome::RefusedLimit,
                std::time::Duration::ZERO,
            );
            drop(request);
            let busy = limiter.hold(principal.as_deref(), busy).await;
            ApiError::from(Failure::RateLimited(busy)).into_response()
        }
    }
}

async fn count_requests(request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "unmatched".into());
    let method = request.method().to_string();
    let response = next.run(request).await;
    metrics::counter!("mcptask_api_requests_total", "route" => route, "method" => method, "status" => response.status().as_u16().to_string())
        .increment(1);
    response
}

/// The full HTTP surface.
pub fn router(state: AppState, max_body_bytes: usize) -> axum::Router {
    router_with_mcp(state, max_body_bytes, None)
}

/// The HTTP surface, with the proxy's MCP endpoint at `/mcp` when given.
/// Both sit behind the same guards ([`crate::guard`]: `Host`, body size,
/// tokens); the dashboard page, health, OpenAPI document and OAuth metadata
/// are open to all.
pub fn router_with_mcp(
    state: AppState,
    max_body_bytes: usize,
    mcp: Option<crate::front::FrontService>,
) -> axum::Router {
    let guard = |door| Guard::new(state.auth.clone(), door, max_body_bytes);
    let api = axum::Router::new()
        .route("/api/v1/tasks", get(handlers::list_tasks))
        .route("/api/v1/tasks/{id}", get(handlers::get_task))
        .route("/api/v1/tasks/{id}/cancel", post(handlers::cancel_task))
        .route("/api/v1/tasks/{id}/answers", post(handlers::answer_task))
        .route(
            "/api/v1/calls",
            post(handlers::call_tool).layer(axum::middleware::from_fn_with_state(
                state.clone(),
                refuse_over_limits,
            )),
        )
        .route("/api/v1/audit", get(audit::list))
        .route("/api/v1/servers", get(handlers::list_servers))
        .route("/api/v1/servers/stats", get(stats::servers))
        .route("/api/v1/policy", get(policy::in_force))
        .route("/api/v1/config", get(handlers::config_in_force))
        .route("/api/v1/admin/servers", get(admin::list))
        .route(
            "/api/v1/admin/servers/{name}",
            get(admin::get_one).put(admin::put).delete(admin::delete),
        )
        .route("/api/v1/admin/virtual_servers", get(admin::list_virtual))
        .route(
            "/api/v1/admin/virtual_servers/{name}",
            get(admin::get_virtual)
                .put(admin::put_virtual)
                .delete(admin::delete_virtual),
        )
        .route("/api/v1/servers/{name}/tools", get(tools::list_tools))
        .route("/api/v1/dead-letters", get(handlers::list_dead_letters))
        .route(
            "/api/v1/dead-letters/redrive",
            post(handlers::redrive_dead_letters),
        )
        .route("/api/v1/events", get(sse::events))
        .route("/metrics", get(handlers::metrics));
    let mut protected = guard(Door::Api).around(api);
    if let Some(service) = mcp {
        let mcp = axum::Router::new().nest_service("/mcp", service);
        protected = protected.merge(guard(Door::Mcp).around(mcp));
    }
    axum::Router::new()
        .route("/", get(dashboard::page))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready))
        .route(
            "/.well-known/oauth-protected-resource",
            get(resource_metadata),
        )
        .route(
            "/.well-known/oauth-protected-resource/mcp",
            get(resource_metadata),
        )
        .route("/openapi.json", get(openapi::document))
        .merge(protected)
        .fallback(|| async { ApiError::not_found("route") })
        .layer(axum::middleware::from_fn(count_requests))
        .layer(axum::extract::DefaultBodyLimit::max(max_body_bytes))
        .with_state(state)
}
