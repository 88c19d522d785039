//! Serve the demo tools over Streamable HTTP (`/mcp`) or stdio.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::Context;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use mcptask_server::{DurableTaskServer, Principal, RuntimeConfig, TaskRuntime};
use rmcp::ServiceExt;
use rmcp::model::Implementation;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use crate::handler::DemoServer;

/// How to run the demo server.
#[derive(Debug, Clone)]
pub struct DemoServerOptions {
    /// Where the tasks are kept: `sqlite:PATH` or `postgres://…`.
    pub database_url: String,
    /// The task runtime's settings.
    pub config: RuntimeConfig,
    /// `TOKEN -> subject`: when non-empty, HTTP requests need `Authorization: Bearer TOKEN`
    /// and their tasks are bound to the subject.
    pub tokens: HashMap<String, String>,
    /// Extra `Host` header values accepted (default: loopback only).
    pub allowed_hosts: Vec<String>,
    /// Largest accepted request body, in bytes.
    pub max_body_bytes: usize,
}

impl DemoServerOptions {
    /// Defaults on `database_url`: no tokens, loopback hosts, the default
    /// body limit and runtime settings.
    pub fn new(database_url: impl Into<String>) -> Self {
        Self {
            database_url: database_url.into(),
            config: RuntimeConfig::default(),
            tokens: HashMap::new(),
            allowed_hosts: Vec::new(),
            max_body_bytes: mcptask_core::payload::DEFAULT_MAX_BODY_BYTES,
        }
    }
}

/// Open the store and start the demo tools' task runtime on it.
pub async fn start_runtime(options: &DemoServerOptions) -> anyhow::Result<TaskRuntime> {
    // The error names the (redacted) URL, the cause and the fix already.
    let store = mcptask_sql::open(&options.database_url).await?;
    let config = options.config.clone();
    let runtime = TaskRuntime::builder(store.server_tasks(), crate::tools::registry())
        .config(config)
        .start()
        .await
        .context("starting the task runtime")?;
    Ok(runtime)
}

fn server(runtime: TaskRuntime) -> DemoServer {
    let durable = DurableTaskServer::new(runtime)
        .with_server_info(Implementation::new("mcptask-demo", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "Demo server of mcptask: durable MCP tasks. Try slow_compute, confirm_delete or countdown \
             with the io.modelcontextprotocol/tasks extension declared. The test_* tools, prompts \
             and test:// resources are the MCP conformance suite's fixtures.",
        );
    DemoServer::new(durable)
}

async fn authenticate(
    State(tokens): State<Arc<HashMap<String, String>>>,
    mut request: Request,
    next: Next,
) -> Response {
    if tokens.is_empty() {
        return next.run(request).await;
    }
    let bearer = request
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    match bearer.and_then(|t| tokens.get(t)) {
        Some(subject) => {
            request.extensions_mut().insert(Principal(subject.clone()));
            next.run(request).await
        }
        None => (StatusCode::UNAUTHORIZED, "missing or unknown bearer token").into_response(),
    }
}

/// Serve `runtime` on stdin/stdout until the client goes away or `stop` is
/// cancelled.
pub async fn serve_stdio(runtime: TaskRuntime, stop: CancellationToken) -> anyhow::Result<()> {
    let running = server(runtime)
        .serve(mcptask_server::mcp::stdio_with_listen())
        .await
        .context("starting the stdio transport")?;
    tokio::select! {
        _ = stop.cancelled() => {}
        r = running.waiting() => { r.context("stdio session")?; }
    }
    Ok(())
}

/// The axum router serving MCP at `/mcp` (also used by tests).
pub fn router(
    runtime: TaskRuntime,
    options: &DemoServerOptions,
    stop: CancellationToken,
) -> axum::Router {
    let mut config = StreamableHttpServerConfig::default()
        .with_json_response(true)
        .with_max_request_body_bytes(options.max_body_bytes)
        .with_cancellation_token(stop);
    if !options.allowed_hosts.is_empty() {
        config = config.with_allowed_hosts(options.allowed_hosts.clone());
    }
    let handler = server(runtime);
    let service = StreamableHttpService::new(
        move || Ok(handler.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let tokens = Arc::new(options.tokens.clone());
    // Task status notifications: rmcp cannot parse their filter (see TaskListenLayer).
    let service = mcptask_server::TaskListenLayer::new()
        .max_inspected_bytes(options.max_body_bytes)
        .wrap(service);
    axum::Router::new()
        .nest_service("/mcp", service)
        .route("/healthz", axum::routing::get(|| async { "ok" }))
        .layer(axum::middleware::from_fn_with_state(tokens, authenticate))
}
