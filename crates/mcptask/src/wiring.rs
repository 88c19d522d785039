//! Process wiring: signals, listeners, and the long-running commands
//! (`serve`, `proxy --stdio`, `demo-server`) assembled from the libraries.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use mcptask_gateway::admin::ConfigFile;
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

/// Drain `gateway`'s HTTP server at the first Ctrl-C or SIGTERM
/// (`mcptask_gateway::drain`: a replica leaves its load balancer without
/// failing a call), and stop it at once at the second.
fn drain_on_signal(gateway: &Gateway) {
    let gateway = gateway.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        gateway.begin_drain();
        shutdown_signal().await;
        tracing::warn!("second stop signal: stopping without waiting for open connections");
        gateway.stop();
    });
}

/// Stop `gateway` at the first Ctrl-C or SIGTERM, from now on: SIGTERM's
/// handler is installed before this returns (a signal before the task
/// first ran would otherwise kill the process without its shutdown).
fn stop_on_signal(gateway: &Gateway) {
    let gateway = gateway.clone();
    #[cfg(unix)]
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("install SIGTERM handler");
    tokio::spawn(async move {
        #[cfg(unix)]
        tokio::select! {
            _ = shutdown_signal() => {}
            _ = term.recv() => {}
        }
        #[cfg(not(unix))]
        shutdown_signal().await;
        gateway.stop();
    });
}

/// Read the file again (with the same overrides as at start) and what the
/// admin API stored, and put the configuration they make in force. An
/// invalid file is refused with the error a start would give, logged at
/// error level; the configuration in force stays. Either way the outcome is
/// counted (`mcptask_config_reloads_total{outcome}`) and
/// `mcptask_config_last_reload_successful` says how the last one went.
pub async fn reload(gateway: &Gateway) -> bool {
    let outcome = gateway.reload_file().await;
    let ok = outcome.is_ok();
    match outcome {
        Ok(changes) if changes.is_empty() => {
            tracing::info!("configuration reloaded: nothing changed");
        }
        Ok(changes) => {
            tracing::info!("configuration reloaded: {}", changes.lines().join("; "));
            if !changes.need_restart.is_empty() {
                tracing::warn!(
                    settings = %changes.need_restart.join(", "),
                    "configuration reloaded, but these settings are read at start only: they apply after a restart"
                );
            }
        }
        Err(e) => {
            tracing::error!(
                "configuration reload refused; the configuration in force stays: {e:#}"
            );
        }
    }
    let outcome = if ok { "ok" } else { "refused" };
    metrics::counter!("mcptask_config_reloads_total", "outcome" => outcome).increment(1);
    metrics::gauge!("mcptask_config_last_reload_successful").set(if ok { 1.0 } else { 0.0 });
    ok
}

/// Reload the configuration at each SIGHUP, until the gateway stops.
fn reload_on_sighup(gateway: &Gateway, path: &Path) {
    #[cfg(unix)]
    {
        let mut hup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
            Ok(hup) => hup,
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGHUP: the configuration is not reloadable");
                return;
            }
        };
        let gateway = gateway.clone();
        let path = path.to_path_buf();
        tokio::spawn(async move {
            while hup.recv().await.is_some() {
                tracing::info!(config = %path.display(), "SIGHUP: reloading the configuration");
                reload(&gateway).await;
            }
        });
    }
    #[cfg(not(unix))]
    let _ = (gateway, path);
}

/// The configuration file as every (re)load reads it: with the overrides
/// of the command line and the environment.
fn config_file(path: &Path, flags: &Overrides, stdio: bool) -> ConfigFile {
    let flags = flags.clone();
    ConfigFile::new(path, move |k| flags.lookup(k), stdio)
}

/// Logs, and trace export if `[telemetry]` or the `OTEL_*` environment
/// asks for it (read once, at start).
fn init_telemetry(config: &Config, flags: &Overrides) -> anyhow::Result<()> {
    let export = config
        .telemetry
        .resolve(|k| flags.lookup(k))
        .map_err(anyhow::Error::msg)?;
    crate::telemetry::init(export.as_ref())
}

/// `mcptask serve`: run until Ctrl-C / SIGTERM, then drain (the HTTP
/// server first, then the calls) within a deadline; SIGHUP reloads the
/// configuration.
pub async fn serve(config_path: &Path, flags: &Overrides) -> anyhow::Result<()> {
    let config = Config::load_with_env(config_path, |k| flags.lookup(k))?;
    init_telemetry(&config, flags)?;
    let listen = config.api.listen;
    let gateway = Gateway::start_from_file(config_file(config_path, flags, false)).await?;
    drain_on_signal(&gateway);
    reload_on_sighup(&gateway, config_path);
    let listener = bind(listen, "[api] listen (or MCPTASK_LISTEN)").await?;
    let local = listener.local_addr()?;
    eprintln!("mcptask gateway listening on http://{local}/");
    // Health reads `ok`/`error` shortly after start rather than `unknown`
    // until the first call, and a server that is down is logged now.
    gateway.tracker.probe_servers();
    let handle = mcptask_gateway::metrics::install()?;
    // The configuration in force loaded; a refused reload sets it to 0.
    metrics::gauge!("mcptask_config_last_reload_successful").set(1.0);
    gateway.spawn_metric_gauges(Duration::from_secs(5));
    let served = gateway.serve(listener, Some(handle)).await;
    gateway.shutdown().await;
    served
}

/// `mcptask proxy --stdio`: the front over stdin/stdout, with the tracker
/// workers of the configuration running alongside; SIGHUP reloads the
/// configuration. With `virtual_server`, the front is that virtual server.
pub async fn proxy_stdio(
    config_path: &Path,
    flags: &Overrides,
    virtual_server: Option<&str>,
) -> anyhow::Result<()> {
    let config = Config::load_with_env(config_path, |k| flags.lookup(k))?;
    init_telemetry(&config, flags)?;
    // The front is what this command serves, whatever `[proxy] enabled` says.
    let gateway = Gateway::start_from_file(config_file(config_path, flags, true)).await?;
    stop_on_signal(&gateway);
    reload_on_sighup(&gateway, config_path);
    // On stderr (stdout carries only MCP): a host's log shows it started;
    // tests read it to know SIGTERM is answered from now on.
    eprintln!("mcptask proxy serving MCP on stdin/stdout");
    let served = gateway.serve_stdio(virtual_server).await;
    // Background work outlives the host that started it.
    gateway.finish_calls_of_a_gone_host().await;
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
            // With the gateway's bounds on reading requests.
            mcptask_gateway::serve::serve(listener, app, stop.cancelled()).await;
        }
        None => mcptask_demo::serve_stdio(runtime.clone(), stop).await?,
    }
    runtime.shutdown(Duration::from_secs(10)).await;
    Ok(())
}
