//! Serve the demo tools over Streamable HTTP (`/mcp`) or stdio.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

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

/// How to run the demo server.
#[derive(Debug, Clone)]
pub struct DemoServerOptions {
    pub database_url: String,
    pub http: Option<SocketAddr>,
    pub config: RuntimeConfig,
    /// `TOKEN -> subject`: when non-empty, HTTP requests need `Authorization: Bearer TOKEN`
    /// and their tasks are bound to the subject.
    pub tokens: HashMap<String, String>,
    pub allowed_hosts: Vec<String>,
    pub max_body_bytes: usize,
    pub shutdown_grace: Duration,
}

pub async fn start_runtime(options: &DemoServerOptions) -> anyhow::Result<TaskRuntime> {
    // The error names the (redacted) URL, the cause and the fix already.
    let store = mcptask_sql::open(&options.database_url).await?;
    let config = options.config.clone();
    let runtime = TaskRuntime::builder(store.server_tasks(), super::tools::registry())
        .config(config)
        .start()
        .await
        .context("starting the task runtime")?;
    Ok(runtime)
}

fn server(runtime: TaskRuntime) -> DurableTaskServer {
    DurableTaskServer::new(runtime)
        .with_server_info(Implementation::new("mcptask-demo", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "Demo server of mcptask: durable MCP tasks. Try slow_compute, confirm_delete or countdown \
             with the io.modelcontextprotocol/tasks extension declared.",
        )
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

/// Run until Ctrl-C / SIGTERM, then drain.
pub async fn run(options: DemoServerOptions) -> anyhow::Result<()> {
    let runtime = start_runtime(&options).await?;
    let stop = CancellationToken::new();
    tokio::spawn({
        let stop = stop.clone();
        async move {
            shutdown_signal().await;
            stop.cancel();
        }
    });
    match options.http {
        Some(addr) => serve_http(runtime.clone(), addr, &options, stop.clone()).await?,
        None => {
            let running = server(runtime.clone())
                .serve(rmcp::transport::stdio())
                .await
                .context("starting the stdio transport")?;
            tokio::select! {
                _ = stop.cancelled() => {}
                r = running.waiting() => { r.context("stdio session")?; }
            }
        }
    }
    runtime.shutdown(options.shutdown_grace).await;
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

async fn serve_http(
    runtime: TaskRuntime,
    addr: SocketAddr,
    options: &DemoServerOptions,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| bind_error(e, addr, "--http"))?;
    let local = listener.local_addr()?;
    tracing::info!(%local, "demo MCP server listening on http://{local}/mcp");
    // Tests and scripts read this line to find the port.
    eprintln!("mcptask demo-server listening on http://{local}/mcp");
    let app = router(runtime, options, stop.clone());
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { stop.cancelled().await })
        .await
        .context("HTTP server")?;
    Ok(())
}

pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("install SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

/// A listen address that cannot be bound, with the setting to change
/// (`setting`: where the address comes from).
pub fn bind_error(e: std::io::Error, addr: SocketAddr, setting: &str) -> anyhow::Error {
    match e.kind() {
        std::io::ErrorKind::AddrInUse => anyhow::anyhow!(
            "cannot listen on {addr}: the address is already in use (another mcptask, or another program)\n  fix: stop that process, or choose another address with {setting}"
        ),
        std::io::ErrorKind::AddrNotAvailable => anyhow::anyhow!(
            "cannot listen on {addr}: no network interface of this host has that address\n  fix: use one of this host's addresses (e.g. 127.0.0.1 or 0.0.0.0) with {setting}"
        ),
        std::io::ErrorKind::PermissionDenied => anyhow::anyhow!(
            "cannot listen on {addr}: permission denied (ports below 1024 need privileges)\n  fix: choose a port above 1024 with {setting}"
        ),
        _ => anyhow::Error::new(e).context(format!("cannot listen on {addr} ({setting})")),
    }
}
