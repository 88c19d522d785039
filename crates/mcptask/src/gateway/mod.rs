//! `mcptask serve`: the gateway daemon (tracker workers + HTTP API).

pub mod api;
pub mod config;
mod dashboard;
pub mod metrics;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use mcptask_client::{Notifier, Tracker, WebhookNotifier};
use tokio_util::sync::CancellationToken;

use config::Config;

/// A running gateway.
pub struct Gateway {
    pub tracker: Tracker,
    pub config: Config,
    pub store: mcptask_sql::Store,
}

/// Open the store and start the tracker workers described by `config`.
pub async fn start(config: Config) -> anyhow::Result<Gateway> {
    // The error names the (redacted) URL, the cause and the fix already.
    let store = mcptask_sql::open(&config.database.url).await?;
    start_with_store(config, store).await
}

/// Start the tracker on an already opened store.
pub async fn start_with_store(
    config: Config,
    store: mcptask_sql::Store,
) -> anyhow::Result<Gateway> {
    let mut builder = Tracker::builder(store.remote_tasks()).config(config.tracker.clone());
    for def in config.server_defs() {
        builder = builder.server(def);
    }
    for hook in &config.webhooks {
        let timeout = Duration::from_millis(hook.timeout_ms.unwrap_or(10_000));
        let notifier = WebhookNotifier::new(
            hook.url.get_ref().clone(),
            hook.secret.clone().into_bytes(),
            timeout,
        )
        .map_err(anyhow::Error::msg)?;
        builder = builder.notifier(Arc::new(notifier) as Arc<dyn Notifier>);
    }
    let tracker = builder.start().await.context("starting the tracker")?;
    Ok(Gateway {
        tracker,
        config,
        store,
    })
}

/// Run until Ctrl-C / SIGTERM, then drain within a deadline.
pub async fn run(config_path: &Path, flags: &config::Overrides) -> anyhow::Result<()> {
    let config = Config::load_with_env(config_path, |k| flags.lookup(k))?;
    let gateway = start(config).await?;
    let stop = CancellationToken::new();
    tokio::spawn({
        let stop = stop.clone();
        async move {
            crate::demo::server::shutdown_signal().await;
            stop.cancel();
        }
    });
    let listen = gateway.config.api.listen;
    let listener = tokio::net::TcpListener::bind(listen).await.map_err(|e| {
        crate::demo::server::bind_error(e, listen, "[api] listen (or MCPTASK_LISTEN)")
    })?;
    let local = listener.local_addr()?;
    eprintln!("mcptask gateway listening on http://{local}/");
    // Health reads `ok`/`error` shortly after start rather than `unknown`
    // until the first call, and a server that is down is logged now.
    gateway.tracker.probe_servers();
    let handle = metrics::install()?;
    metrics::spawn_gauges(
        gateway.tracker.clone(),
        Duration::from_secs(5),
        stop.clone(),
    );
    let mut state = api::AppState::new(gateway.tracker.clone(), &gateway.config, Some(handle));
    let proxy = if gateway.config.proxy.enabled {
        Some(
            crate::proxy::Proxy::start(
                gateway.tracker.clone(),
                &gateway.config,
                &gateway.store,
                stop.clone(),
            )
            .await?,
        )
    } else {
        None
    };
    state.front = proxy.as_ref().map(|p| p.runtime.clone());
    let mcp = proxy
        .as_ref()
        .map(|p| p.http_service(gateway.config.api.max_body_bytes, stop.clone()));
    let app = api::router_with_mcp(state, gateway.config.api.max_body_bytes, mcp);
    let server = axum::serve(listener, app).with_graceful_shutdown({
        let stop = stop.clone();
        async move { stop.cancelled().await }
    });
    server.await.context("HTTP server")?;
    if let Some(proxy) = &proxy {
        proxy.shutdown(Duration::from_secs(10)).await;
    }
    gateway.tracker.shutdown(Duration::from_secs(10)).await;
    gateway.store.close().await;
    Ok(())
}
