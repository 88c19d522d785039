//! A gateway assembled from its configuration: the store, the tracker and
//! its webhooks, the calls (upstream catalog and call runtime), and the HTTP
//! surface (REST API, dashboard, metrics and, with `[proxy] enabled`, the MCP
//! front at `/mcp`).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use mcptask_client::{Notifier, Tracker};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio_util::sync::CancellationToken;

use crate::api::{self, AppState};
use crate::auth::Authenticator;
use crate::calls::Calls;
use crate::config::Config;
use crate::drain::Drain;
use crate::front;
use crate::incarnation::Incarnation;
use crate::live::{Changes, Fingerprint, LiveConfig};

/// What the call runtime's task store is seen through
/// ([`Gateway::start_layered`]): it gets the store's task flows and returns
/// the flows the runtime uses.
pub type StoreLayer = Box<
    dyn FnOnce(
            Arc<dyn mcptask_core::store::ServerTaskStore>,
        ) -> Arc<dyn mcptask_core::store::ServerTaskStore>
        + Send,
>;

/// How long shutdown lets running work drain before leaving it to recovery.
const DRAIN: Duration = Duration::from_secs(10);

/// A running gateway. Cheap to clone.
#[derive(Clone)]
pub struct Gateway {
    /// The tracker of remote tasks (SEP-2663 and toolsets).
    pub tracker: Tracker,
    /// The configuration it was started with: what is read once at start
    /// (the sections whose [`Reload`](crate::config::Reload) is `AtStart`)
    /// is read here.
    pub config: Config,
    /// The configuration in force (replaced by [`Gateway::reload`]).
    pub live: LiveConfig,
    /// How requests are authenticated (reloadable).
    pub auth: Authenticator,
    /// The store every part shares.
    pub store: mcptask_sql::Store,
    /// The calls: upstream catalog and call runtime.
    pub calls: Calls,
    /// This process's slot on the store, which its tracker's and call
    /// runtime's owner ids are named after.
    pub incarnation: Incarnation,
    /// The OAuth tokens of `[servers.oauth]` servers (when any server has one).
    pub oauth: Option<mcptask_client::oauth::OAuthRuntime>,
    stop: CancellationToken,
    /// The HTTP server's drain ([`Gateway::begin_drain`]).
    drain: Drain,
    /// One reload at a time; holds the OAuth runtime a reload made (the
    /// configuration at start had no OAuth server).
    reloading: Arc<tokio::sync::Mutex<Option<mcptask_client::oauth::OAuthRuntime>>>,
    /// The audit trail's writer (`[audit] enabled`), finished at shutdown.
    audit: Arc<std::sync::Mutex<Option<crate::audit::Audit>>>,
    /// The admin API's side, for a gateway started from its file
    /// ([`Gateway::start_from_file`]).
    admin: Arc<std::sync::OnceLock<Arc<crate::admin::Admin>>>,
}

/// The webhooks of `config` as notifiers.
fn webhooks_of(config: &Config) -> anyhow::Result<Vec<Arc<dyn Notifier>>> {
    config
        .webhooks
        .iter()
        .map(|hook| hook.notifier().map_err(anyhow::Error::msg))
        .collect()
}

/// How often servers removed by a reload are checked for live tasks (the
/// last one ended: the tracker forgets the server).
const RETIRED_CHECK: Duration = Duration::from_secs(30);

/// The OAuth runtime of `config`'s servers: their tokens in `store`, sealed
/// with the configured key. `None` when no server uses OAuth.
pub fn oauth_runtime(
    config: &Config,
    store: &mcptask_sql::Store,
) -> anyhow::Result<Option<mcptask_client::oauth::OAuthRuntime>> {
    if !config.uses_oauth() {
        // Exchanged tokens are kept sealed where a key is configured; without
        // one they live in this process only (docs/AUTHORIZATION.md).
        if config.exchanges_tokens()
            && let Some(key) = config.secret_key(|k| std::env::var(k).ok())?
        {
            return Ok(Some(mcptask_client::oauth::OAuthRuntime::new(
                store.oauth_tokens(),
                key,
                Arc::new(mcptask_client::SystemClock),
            )));
        }
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
        Self::start_layered(config, store, Box::new(|tasks| tasks)).await
    }

    /// [`start_with_store`](Self::start_with_store), with the call
    /// runtime's task store seen through `layer`: instrumentation, or a
    /// test's hook between the runtime and its writes (how the fault tests
    /// open crash windows, `mcptask_testkit::interposed`; the product has
    /// no crash points of its own).
    ///
    /// ```no_run
    /// # async fn start(config: mcptask_gateway::config::Config) -> anyhow::Result<()> {
    /// let store = mcptask_sql::open(&config.database.url).await?;
    /// // The identity layer: what `start_with_store` does.
    /// let gateway =
    ///     mcptask_gateway::Gateway::start_layered(config, store, Box::new(|tasks| tasks)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn start_layered(
        config: Config,
        store: mcptask_sql::Store,
        layer: StoreLayer,
    ) -> anyhow::Result<Gateway> {
        // First: the previous incarnation's leases and claims lapse before
        // the tracker and the call runtime start claiming.
        let incarnation =
            Incarnation::take(&*store.server_tasks(), &mcptask_core::SystemClock).await;
        let mut builder = Tracker::builder(store.remote_tasks()).config(config.tracker.clone());
        if let Some(owner) = incarnation.owner_id("tracker") {
            builder = builder.owner_id(owner);
        }
        let oauth = oauth_runtime(&config, &store)?;
        for def in config.server_defs_with(oauth.as_ref()) {
            builder = builder.server(def);
        }
        for notifier in webhooks_of(&config)? {
            builder = builder.notifier(notifier);
        }
        let tracker = builder.start().await.context("starting the tracker")?;
        let stop = CancellationToken::new();
        let call_tasks = layer(store.server_tasks());
        let calls = Calls::start(
            tracker.clone(),
            &config,
            &store,
            call_tasks,
            incarnation.clone(),
            stop.clone(),
        )
        .await?;
        let http =
            mcptask_client::tls::build_http_client(reqwest::Client::builder).unwrap_or_default();
        let audit = config.audit.enabled.then(|| {
            crate::audit::Audit::start(
                store.audit(),
                Arc::new(mcptask_core::SystemClock),
                crate::audit::AuditSettings {
                    retention_ms: config.audit.retention_ms(),
                    sweep_every: config.tracker.purge_interval,
                },
            )
        });
        let gateway = Gateway {
            tracker,
            live: LiveConfig::new(config.clone()),
            auth: Authenticator::new(&config, http),
            config,
            store,
            calls,
            incarnation,
            oauth,
            stop,
            drain: Drain::new(),
            reloading: Arc::default(),
            audit: Arc::new(std::sync::Mutex::new(audit)),
            admin: Arc::default(),
        };
        gateway.spawn_retired_sweep();
        crate::drivers::spawn_tracked_ends(gateway.calls.upstreams.clone(), gateway.stop.clone());
        Ok(gateway)
    }

    /// Start from a configuration file and what the admin API stored
    /// (`crate::admin`): the file names the store; the objects stored there
    /// are merged in (the file wins) and checked with the file, and from
    /// then on every change stored by any replica is applied here.
    ///
    /// When the stored objects no longer make a valid configuration with
    /// the file (it was edited since), the gateway starts on the file alone
    /// and says why, rather than not at all; the admin API still lists them.
    pub async fn start_from_file(file: crate::admin::ConfigFile) -> anyhow::Result<Gateway> {
        let own = file.load(&[])?;
        let store = mcptask_sql::open(&own.database.url).await?;
        let stored = store.admin_config();
        let entries = stored
            .list_admin_entries()
            .await
            .context("reading the configuration stored by the admin API")?;
        let (config, applied) = match file.load(&entries) {
            Ok(config) => (config, Some(entries)),
            Err(e) => {
                tracing::error!(
                    "the servers stored by the admin API do not make a valid configuration with the file; starting on the file alone: {e}\n  fix: correct the file, or delete the stored server (mcptask servers remove NAME)"
                );
                (own, None)
            }
        };
        let gateway = Self::start_with_store(config, store).await?;
        let admin = Arc::new(crate::admin::Admin::new(file, stored, applied));
        admin.spawn_watch(gateway.clone(), gateway.stop.clone());
        let _ = gateway.admin.set(admin);
        Ok(gateway)
    }

    /// The admin API's side (a gateway started from its file).
    pub fn admin(&self) -> Option<Arc<crate::admin::Admin>> {
        self.admin.get().cloned()
    }

    /// Read the file (and what the admin API stored) again and put the
    /// configuration they make in force: what SIGHUP runs. A gateway not
    /// started from a file has nothing to read.
    pub async fn reload_file(&self) -> anyhow::Result<Changes> {
        let Some(admin) = self.admin() else {
            anyhow::bail!("this gateway was not started from a configuration file");
        };
        let changes = admin.sync(self, true).await?;
        Ok(changes.unwrap_or_default())
    }

    /// Put `next` in force without a restart: `[api]` tokens, `auth`,
    /// `public_url` and `[[api.oauth]]` for the requests authenticated from
    /// now on; `[[policy]]` and `[limits]` for new calls (calls already made
    /// run to their end); `[[servers]]` added, edited (headers, credentials,
    /// timeouts: from the next request; live tasks carry on) and removed
    /// (no new calls; the tracker follows its live tasks to their end, then
    /// forgets it); `[[webhooks]]` for the events delivered from now on.
    /// Settings read only at start ([`Config::at_start`]) are left as they
    /// are (the changes say which). `next` must have been loaded and checked like a configuration
    /// at start ([`Config::load`]); what cannot be put in force (OAuth
    /// servers without a key, a webhook URL the client refuses) is refused
    /// before anything changes, and the configuration in force stays.
    pub async fn reload(&self, next: Config) -> anyhow::Result<Changes> {
        let mut made = self.reloading.lock().await;
        let current = self.live.get();
        let changes = Changes::between(&Fingerprint::of(&current), &Fingerprint::of(&next));
        // Everything that can fail, first.
        let webhooks = webhooks_of(&next)?;
        let oauth = match (&self.oauth, &*made) {
            (Some(runtime), _) | (None, Some(runtime)) => Some(runtime.clone()),
            (None, None) => oauth_runtime(&next, &self.store)?,
        };
        if self.oauth.is_none() && made.is_none() {
            made.clone_from(&oauth);
        }
        // Servers: the registry first (new definitions; removed servers stay
        // while they have live tasks), then what the calls front.
        let registry = self.tracker.servers();
        for def in next.server_defs_with(oauth.as_ref()) {
            registry.upsert(def);
        }
        for name in &changes.servers_removed {
            self.calls.upstreams.retire(name);
        }
        let (clashes, unreachable) = self
            .calls
            .set_servers(next.upstreams(), &changes.servers_to_list())
            .await;
        for clash in clashes {
            tracing::warn!(%clash, "an upstream tool was left out of the catalog");
        }
        for (server, why) in unreachable {
            tracing::warn!(%server, error = %why, "cannot list the tools of a reloaded server; its calls fail until it answers");
        }
        self.auth.set(&next);
        self.calls.set_policy(next.policy());
        self.calls.limiter.set(next.limits.limits());
        self.tracker.set_notifiers(webhooks);
        self.live.set(next);
        self.sweep_retired().await;
        Ok(changes)
    }

    /// Forget the retired servers (removed by a reload) whose last live
    /// task ended. Called with the reload lock held, so that no reload
    /// configures a server again between the check and the removal.
    async fn sweep_retired(&self) {
        for name in self.calls.upstreams.retired() {
            let filter = mcptask_client::ListFilter {
                server: Some(name.clone()),
                active_only: true,
                ..Default::default()
            };
            match self.tracker.list(&filter, None, 1).await {
                Ok((live, _)) if live.is_empty() => {
                    if !self.calls.upstreams.is_configured(&name) {
                        self.tracker.servers().remove(&name);
                        self.calls.upstreams.unretire(&name);
                        tracing::info!(server = %name, "a removed server's last live task ended: the server is forgotten");
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(server = %name, error = %e, "cannot read the live tasks of a removed server")
                }
            }
        }
    }

    fn spawn_retired_sweep(&self) {
        let gateway = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = gateway.stop.cancelled() => return,
                    _ = tokio::time::sleep(RETIRED_CHECK) => {}
                }
                let _one = gateway.reloading.lock().await;
                gateway.sweep_retired().await;
            }
        });
    }

    /// The HTTP surface: REST API, event stream, dashboard, health, metrics
    /// (when `metrics` is given) and, with `[proxy] enabled`, MCP at `/mcp`.
    pub fn router(&self, metrics: Option<PrometheusHandle>) -> axum::Router {
        let mut state = AppState::with_auth(self.calls.clone(), self.auth.clone(), metrics)
            .with_config(self.live.clone());
        if let Some(admin) = self.admin() {
            state = state.with_admin(admin, self.clone());
        }
        let max_body = self.config.api.max_body_bytes;
        let mcp = self
            .config
            .proxy
            .enabled
            .then(|| front::http_service(&self.calls, &self.live, max_body, self.stop.clone()));
        api::router_with_mcp(state, max_body, mcp)
    }

    /// Serve the HTTP surface on `listener` until its drain
    /// ([`Gateway::begin_drain`]) has run its course, or [`Gateway::stop`]
    /// is called; then call [`Gateway::shutdown`].
    pub async fn serve(
        &self,
        listener: tokio::net::TcpListener,
        metrics: Option<PrometheusHandle>,
    ) -> anyhow::Result<()> {
        let app = self.router(metrics);
        self.drain
            .serve(listener, app, self.stop.clone())
            .await
            .context("HTTP server")
    }

    /// Leave the load balancer: `/readyz` answers 503, no new connection
    /// is accepted, the open ones close after their next answer; then
    /// [`Gateway::serve`] returns (the sequence: [`crate::drain`]). The
    /// calls and the tracker run on meanwhile, until
    /// [`Gateway::shutdown`].
    pub fn begin_drain(&self) {
        self.drain.begin();
    }

    /// Serve the MCP front on stdin/stdout, every call bound to the
    /// configured `[proxy] principal`, until the host goes away or
    /// [`Gateway::stop`] is called (then call [`Gateway::shutdown`]). A
    /// message (a line) is at most `[api] max_body_bytes`, as over HTTP.
    /// With `virtual_server`, the front is that `[[virtual_servers]]`
    /// entry (as defined at start), refused at once if it does not exist or
    /// does not admit that principal.
    pub async fn serve_stdio(&self, virtual_server: Option<&str>) -> anyhow::Result<()> {
        let principal = self.config.proxy.principal.clone();
        let max_line = self.config.api.max_body_bytes;
        let through = match virtual_server {
            None => None,
            Some(name) => {
                let Some(defined) = self.config.virtual_server(name) else {
                    anyhow::bail!(
                        "no [[virtual_servers]] entry is named {name:?}\n  fix: name one the configuration defines, or add it"
                    );
                };
                let through = defined.through();
                if !through.admits(principal.as_deref()) {
                    anyhow::bail!(
                        "the virtual server {name:?} does not admit the principal of [proxy] principal ({principal:?})\n  fix: set [proxy] principal to one of its principals, or add it to them"
                    );
                }
                Some(through)
            }
        };
        front::serve_stdio(&self.calls, principal, through, max_line, self.stop.clone()).await
    }

    /// After the host of `proxy --stdio` went away: the calls it started
    /// (a background tool, a task) are the front's, not the host's, and
    /// die with this process; wait until none runs here any more (each is
    /// bounded by its TTL), or until [`Gateway::stop`] (a signal: then
    /// they drain and are left to recovery as at any shutdown).
    pub async fn finish_calls_of_a_gone_host(&self) {
        let mut told = false;
        while self.calls.runtime.running_count() > 0 {
            if !told {
                told = true;
                tracing::info!(
                    running = self.calls.runtime.running_count(),
                    "the host went away; its calls still running here are finished before exiting (stop with SIGTERM to leave them to recovery)"
                );
            }
            // Polled: a count that only falls, read a few times a second.
            tokio::select! {
                _ = self.stop.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
        }
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
        // The ends of the calls drained above are in the trail before the
        // store closes.
        let audit = self.audit.lock().expect("audit lock").take();
        if let Some(audit) = audit {
            audit.finish().await;
        }
        self.store.close().await;
    }
}
