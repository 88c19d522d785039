//! Process wiring: signals, listeners, and the long-running commands
//! (`serve`, `proxy --stdio`, `demo-server`) assembled from the libraries.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use mcptask_gateway::config::Overrides;
use mcptask_gateway::{Config, Gateway};
use tokio_util::sync::CancellationToken;

/// Resolves on Ctrl-C or SIGTERM.
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

/// Bind `addr` or say which setting to change.
pub async fn bind(addr: SocketAddr, setting: &str) -> anyhow::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| bind_error(e, addr, setting))
}

/// Stop `gateway` at the first Ctrl-C or SIGTERM.
fn stop_on_signal(gateway: &Gateway) {
    let gateway = gateway.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        gateway.stop();
    });
}

/// `mcptask serve`: run until Ctrl-C / SIGTERM, then drain within a deadline.
pub async fn serve(config_path: &Path, flags: &Overrides) -> anyhow::Result<()> {
    let config = Config::load_with_env(config_path, |k| flags.lookup(k))?;
    let listen = config.api.listen;
    let gateway = Gateway::start(config).await?;
    stop_on_signal(&gateway);
    let listener = bind(listen, "[api] listen (or MCPTASK_LISTEN)").await?;
    let local = listener.local_addr()?;
    eprintln!("mcptask gateway listening on http://{local}/");
    // Health reads `ok`/`error` shortly after start rather than `unknown`
    // until the first call, and a server that is down is logged now.
    gateway.tracker.probe_servers();
    let handle = mcptask_gateway::metrics::install()?;
    gateway.spawn_metric_gauges(Duration::from_secs(5));
    let served = gateway.serve(listener, Some(handle)).await;
    gateway.shutdown().await;
    served
}

/// `mcptask proxy --stdio`: the front over stdin/stdout, with the tracker
/// workers of the configuration running alongside.
pub async fn proxy_stdio(config_path: &Path, flags: &Overrides) -> anyhow::Result<()> {
    let mut config = Config::load_with_env(config_path, |k| flags.lookup(k))?;
    // The front is what this command serves, whatever `[proxy] enabled` says.
    config.proxy.enabled = true;
    let gateway = Gateway::start(config).await?;
    stop_on_signal(&gateway);
    let served = gateway.serve_stdio().await;
    gateway.shutdown().await;
    served
}

/// `mcptask demo-server`: the demo tools over Streamable HTTP or stdio,
/// until Ctrl-C / SIGTERM, then drain.
pub async fn demo_server(
    options: mcptask_demo::DemoServerOptions,
    http: Option<SocketAddr>,
) -> anyhow::Result<()> {
    let runtime = mcptask_demo::start_runtime(&options).await?;
    let stop = CancellationToken::new();
    tokio::spawn({
        let stop = stop.clone();
        async move {
            shutdown_signal().await;
            stop.cancel();
        }
    });
    match http {
        Some(addr) => {
            let listener = bind(addr, "--http").await?;
            let local = listener.local_addr()?;
            tracing::info!(%local, "demo MCP server listening on http://{local}/mcp");
            // Tests and scripts read this line to find the port.
            eprintln!("mcptask demo-server listening on http://{local}/mcp");
            let app = mcptask_demo::router(runtime.clone(), &options, stop.clone());
            axum::serve(listener, app)
                .with_graceful_shutdown({
                    let stop = stop.clone();
                    async move { stop.cancelled().await }
                })
                .await
                .context("HTTP server")?;
        }
        None => mcptask_demo::serve_stdio(runtime.clone(), stop).await?,
    }
    runtime.shutdown(Duration::from_secs(10)).await;
    Ok(())
}
