//! mcptask as an MCP server in front of the configured servers: at `/mcp`
//! on the gateway's listener (`[proxy] enabled = true`) or over stdio
//! (`mcptask proxy --stdio`). See docs/PROXY.md.

pub mod agent_tools;
pub mod catalog;
pub mod drivers;
pub mod front;
pub mod passthrough;
pub mod source;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use mcptask_server::{RuntimeConfig, TaskRuntime};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use crate::gateway::config::{Config, ConfigError, Interrupt};
use front::{FrontServer, PrincipalFn};
use source::{Source, Upstream, Upstreams};

/// How often the catalog is listed again when no upstream says it changed.
const REFRESH_EVERY: Duration = Duration::from_secs(300);

/// The front's MCP endpoint over Streamable HTTP, with task notifications.
pub type FrontService =
    mcptask_server::TaskListenService<StreamableHttpService<FrontServer, LocalSessionManager>>;

/// A running front: the upstreams and the runtime of front tasks.
#[derive(Clone)]
pub struct Proxy {
    pub upstreams: Arc<Upstreams>,
    pub runtime: TaskRuntime,
}

/// Wait before listing a server again after it said its tools changed: a
/// server registering several tools says so once per tool.
const SETTLE: Duration = Duration::from_millis(200);

/// List `server`'s tools again each time one of its sessions sends
/// `notifications/tools/list_changed` (a session the proxy holds at that
/// moment: lanes of calls in flight or idle; a stateless server's changes
/// are caught by the timer).
fn follow_list_changes(upstreams: Arc<Upstreams>, server: String, stop: CancellationToken) {
    let Ok(pool) = upstreams.lanes(&server) else {
        return;
    };
    let mut changed = pool.tools_changed();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                r = changed.changed() => if r.is_err() { return },
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(SETTLE) => {}
            }
            changed.borrow_and_update();
            match upstreams.refresh_server(&server).await {
                Ok(clashes) => {
                    for clash in clashes {
                        tracing::warn!(%clash, "an upstream tool was left out of the proxy");
                    }
                }
                Err(why) => tracing::warn!(%server, error = %why, "cannot list the changed tools"),
            }
        }
    });
}

impl Proxy {
    /// List every upstream, refuse a configuration whose names clash, and
    /// start the front task runtime on `store` (front tasks interrupted by a
    /// crash are recovered here or on any replica sharing the store).
    pub async fn start(
        tracker: mcptask_client::Tracker,
        config: &Config,
        store: &mcptask_sql::Store,
        stop: CancellationToken,
    ) -> anyhow::Result<Proxy> {
        let servers = config
            .servers
            .iter()
            .map(|s| Upstream {
                name: s.name.get_ref().clone(),
                prefix: s.prefix.clone().unwrap_or_else(|| s.name.get_ref().clone()),
                rerun: s.interrupt == Interrupt::Rerun,
                background: s.background.clone(),
            })
            .collect();
        let upstreams = Upstreams::new(tracker, servers);
        let (clashes, _unreachable) = upstreams.refresh().await;
        if !clashes.is_empty() {
            let lines: Vec<String> = clashes.iter().map(|c| format!("  {c}")).collect();
            return Err(ConfigError(format!(
                "the proxy cannot name every upstream tool uniquely:\n{}\n  fix: set prefix = \"…\" on the [[servers]] entries above (prefix = \"\" keeps upstream names and needs names that do not clash)",
                lines.join("\n")
            ))
            .into());
        }
        let mut runtime_config = RuntimeConfig::default();
        if let Some(lease_ms) = config.proxy.owner_lease_ms {
            runtime_config.lease_ms = lease_ms.max(300);
            runtime_config.recovery_every_ms = (lease_ms / 3).max(100);
        }
        let runtime = TaskRuntime::builder_with_source(
            store.server_tasks(),
            Arc::new(Source(upstreams.clone())),
        )
        .config(runtime_config)
        .start()
        .await
        .context("starting the proxy's task runtime")?;
        for server in upstreams.server_names() {
            follow_list_changes(upstreams.clone(), server, stop.clone());
        }
        tokio::spawn({
            let upstreams = upstreams.clone();
            async move {
                loop {
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(REFRESH_EVERY) => {}
                    }
                    let (clashes, _) = upstreams.refresh().await;
                    for clash in clashes {
                        tracing::warn!(%clash, "an upstream tool was left out of the proxy");
                    }
                }
            }
        });
        Ok(Proxy { upstreams, runtime })
    }

    /// The front server, with callers identified by `principal`.
    pub fn server(&self, principal: PrincipalFn) -> FrontServer {
        FrontServer::new(self.upstreams.clone(), self.runtime.clone(), principal)
    }

    /// The Streamable HTTP service for `/mcp` (2026-07-28 stateless, older
    /// clients in sessions). Callers are the gateway's API tokens.
    pub fn http_service(&self, max_body_bytes: usize, stop: CancellationToken) -> FrontService {
        let config = StreamableHttpServerConfig::default()
            .with_json_response(true)
            .with_max_request_body_bytes(max_body_bytes)
            .with_cancellation_token(stop);
        let server = self.server(Arc::new(|context| {
            context
                .extensions
                .get::<axum::http::request::Parts>()
                .and_then(|parts| parts.extensions.get::<crate::gateway::api::Caller>())
                .and_then(|caller| caller.principal.clone())
        }));
        let service = StreamableHttpService::new(
            move || Ok(server.clone()),
            Arc::new(LocalSessionManager::default()),
            config,
        );
        // Front task notifications on `subscriptions/listen` (rmcp cannot
        // parse their filter; see TaskListenLayer).
        mcptask_server::TaskListenLayer::new()
            .max_inspected_bytes(max_body_bytes)
            .wrap(service)
    }

    /// Drain the front tasks running here (the rest is left to recovery).
    pub async fn shutdown(&self, deadline: Duration) {
        self.runtime.shutdown(deadline).await;
    }
}

/// `mcptask proxy --stdio`: the front over stdin/stdout, with the tracker
/// workers of the configuration running alongside.
pub async fn run_stdio(
    config_path: &std::path::Path,
    flags: &crate::gateway::config::Overrides,
) -> anyhow::Result<()> {
    use rmcp::ServiceExt;
    let config = Config::load_with_env(config_path, |k| flags.lookup(k))?;
    let principal = config.proxy.principal.clone();
    let gateway = crate::gateway::start(config).await?;
    let stop = CancellationToken::new();
    let proxy = Proxy::start(
        gateway.tracker.clone(),
        &gateway.config,
        &gateway.store,
        stop.clone(),
    )
    .await?;
    let running = proxy
        .server(Arc::new(move |_| principal.clone()))
        .serve(rmcp::transport::stdio())
        .await
        .context("starting the stdio transport")?;
    tokio::select! {
        _ = crate::demo::server::shutdown_signal() => {}
        r = running.waiting() => { r.context("stdio session")?; }
    }
    stop.cancel();
    proxy.shutdown(Duration::from_secs(10)).await;
    gateway.tracker.shutdown(Duration::from_secs(10)).await;
    gateway.store.close().await;
    Ok(())
}
