//! A gateway assembled from its configuration: the store, the tracker and
//! its webhooks, the calls (upstream catalog and call runtime), and the HTTP
//! surface (REST API, dashboard, metrics and, with `[proxy] enabled`, the MCP
//! front at `/mcp`).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use mcptask_client::{Notifier, Tracker, WebhookNotifier};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio_util::sync::CancellationToken;

use crate::api::{self, AppState};
use crate::calls::Calls;
use crate::config::Config;
use crate::front;

/// How long shutdown lets running work drain before leaving it to recovery.
const DRAIN: Duration = Duration::from_secs(10);

/// A running gateway. Cheap to clone.
#[derive(Clone)]
pub struct Gateway {
    /// The tracker of remote tasks (SEP-2663 and toolsets).
    pub tracker: Tracker,
    /// The configuration it was started with.
    pub config: Config,
    /// The store every part shares.
    pub store: mcptask_sql::Store,
    /// The calls: upstream catalog and call runtime.
    pub calls: Calls,
    /// The OAuth tokens of `[servers.oauth]` servers (when any server has one).
    pub oauth: Option<mcptask_client::oauth::OAuthRuntime>,
    stop: CancellationToken,
}

/// The OAuth runtime of `config`'s servers: their tokens in `store`, sealed
/// with the configured key. `None` when no server uses OAuth.
pub fn oauth_runtime(
    config: &Config,
    store: &mcptask_sql::Store,
) -> anyhow::Result<Option<mcptask_client::oauth::OAuthRuntime>> {
    if !config.uses_oauth() {
        return Ok(None);
    }
    let key = config
        .secret_key(|k| std::env::var(k).ok())?
        .ok_or_else(|| {
            anyhow::anyhow!(
                "servers with [servers.oauth] keep their tokens sealed in the database, and no key is set\n  fix: set MCPTASK_SECRET_KEY (32 random bytes, base64: `openssl rand -base64 32`) or [oauth] secret_key_file (`mcptask config init` writes one)"
            )
        })?;
    Ok(Some(mcptask_client::oauth::OAuthRuntime::new(
        store.oauth_tokens(),
        key,
        Arc::new(mcptask_client::SystemClock),
    )))
}

impl Gateway {
    /// Open the store named by `config` and start everything on it.
    ///
    /// ```no_run
    /// # async fn demo() -> anyhow::Result<()> {
    /// let config = mcptask_gateway::Config::parse("mcptask.toml", r#"
    ///     [database]
    ///     url = "sqlite:mcptask.db"
    ///     [api]
    ///     auth = "none"
    ///     [[servers]]
    ///     name = "reports"
    ///     url = "http://127.0.0.1:8080/mcp"
    /// "#)?;
    /// let gateway = mcptask_gateway::Gateway::start(config).await?;
    /// let listener = tokio::net::TcpListener::bind("127.0.0.1:7777").await?;
    /// gateway.serve(listener, None).await?;
    /// gateway.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub async fn start(config: Config) -> anyhow::Result<Gateway> {
        // The error names the (redacted) URL, the cause and the fix already.
        let store = mcptask_sql::open(&config.database.url).await?;
        Self::start_with_store(config, store).await
    }

    /// Start everything on an already opened store.
    pub async fn start_with_store(
        config: Config,
        store: mcptask_sql::Store,
    ) -> anyhow::Result<Gateway> {
        let mut builder = Tracker::builder(store.remote_tasks()).config(config.tracker.clone());
        let oauth = oauth_runtime(&config, &store)?;
        for def in config.server_defs_with(oauth.as_ref()) {
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
        let stop = CancellationToken::new();
        let calls = Calls::start(tracker.clone(), &config, &store, stop.clone()).await?;
        Ok(Gateway {
            tracker,
            config,
            store,
            calls,
            oauth,
            stop,
        })
    }

    /// The HTTP surface: REST API, event stream, dashboard, health, metrics
    /// (when `metrics` is given) and, with `[proxy] enabled`, MCP at `/mcp`.
    pub fn router(&self, metrics: Option<PrometheusHandle>) -> axum::Router {
        let state = AppState::new(self.calls.clone(), &self.config, metrics);
        let max_body = self.config.api.max_body_bytes;
        let mcp = self
            .config
            .proxy
            .enabled
            .then(|| front::http_service(&self.calls, max_body, self.stop.clone()));
        api::router_with_mcp(state, max_body, mcp)
    }

    /// Serve the HTTP surface on `listener` until [`Gateway::stop`] is
    /// called (then call [`Gateway::shutdown`]).
    pub async fn serve(
        &self,
        listener: tokio::net::TcpListener,
        metrics: Option<PrometheusHandle>,
    ) -> anyhow::Result<()> {
        let app = self.router(metrics);
        let stop = self.stop.clone();
        axum::serve(listener, app)
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await
            .context("HTTP server")
    }

    /// Serve the MCP front on stdin/stdout, every call bound to the
    /// configured `[proxy] principal`, until the host goes away or
    /// [`Gateway::stop`] is called (then call [`Gateway::shutdown`]).
    pub async fn serve_stdio(&self) -> anyhow::Result<()> {
        let principal = self.config.proxy.principal.clone();
        front::serve_stdio(&self.calls, principal, self.stop.clone()).await
    }

    /// Refresh the task gauges of `/metrics` from the store every `every`,
    /// until the gateway stops.
    pub fn spawn_metric_gauges(&self, every: Duration) {
        crate::metrics::spawn_gauges(self.tracker.clone(), every, self.stop.clone());
    }

    /// Ask [`Gateway::serve`] (or [`Gateway::serve_stdio`]) to return.
    pub fn stop(&self) {
        self.stop.cancel();
    }

    /// Stop the background work: running calls drain for a while, then are
    /// left to recovery; the tracker gives its claims back; the store closes.
    pub async fn shutdown(&self) {
        self.stop.cancel();
        self.calls.shutdown(DRAIN).await;
        self.tracker.shutdown(DRAIN).await;
        self.store.close().await;
    }
}
