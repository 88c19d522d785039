//! One MCP session to a server: opening it (declaring the tasks extension),
//! and bounding every call made on it in time.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{ClientCapabilities, ClientConfig, Implementation, ProtocolVersion};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RunningService, ServiceError};
use rmcp::{Peer, RoleClient};
use tokio::sync::Mutex;

use super::RemoteError;
use super::server_def::{ServerDef, Transport};

pub(super) type Session = RunningService<RoleClient, ClientConfig>;

/// The pool slot of one server: its open session, if any.
pub(super) type Slot = Arc<Mutex<Option<Arc<Session>>>>;

/// Time bounds the tracker applies when a [`ServerDef`] sets none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// Bound on opening a session.
    pub connect: Duration,
    /// Bound on each remote call.
    pub call: Duration,
}

/// A usable connection: the peer, and the bound for calls on it.
#[derive(Clone)]
pub struct Connection {
    /// The rmcp peer to call.
    pub peer: Peer<RoleClient>,
    /// Bound on each call (the server's own, or the tracker default).
    pub call_timeout: Duration,
    pub(super) session: Arc<Session>,
    pub(super) slot: Slot,
}

impl Connection {
    /// Forget this connection if it is still the pooled one (after a real disconnect).
    pub async fn discard(&self) {
        let mut slot = self.slot.lock().await;
        if slot.as_ref().is_some_and(|s| Arc::ptr_eq(s, &self.session)) {
            *slot = None;
        }
    }
}

/// Run a remote call with a time bound; a timeout is transient.
pub(crate) async fn bounded<T, F>(
    operation: &str,
    timeout: Duration,
    call: F,
) -> Result<T, ServiceError>
where
    F: Future<Output = Result<T, ServiceError>>,
{
    match tokio::time::timeout(timeout, call).await {
        Ok(r) => r,
        Err(_) => {
            tracing::debug!(operation, ?timeout, "remote call timed out");
            Err(ServiceError::Timeout { timeout })
        }
    }
}

fn client_config() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::builder().enable_tasks().build(),
        Implementation::new("mcptask", env!("CARGO_PKG_VERSION")),
    )
}

/// Open a session to `def`, negotiating the protocol version that carries tasks.
pub(super) async fn open(def: &ServerDef) -> Result<Session, RemoteError> {
    let lifecycle = ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        legacy_version: None,
    };
    let name = &def.name;
    let fail = |e: String| RemoteError::Transient(format!("cannot connect to {name:?}: {e}"));
    match &def.transport {
        Transport::Http { url, headers } => {
            use rmcp::transport::StreamableHttpClientTransport;
            use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
            let mut config = StreamableHttpClientTransportConfig::with_uri(url.clone());
            let mut custom = HashMap::new();
            for (k, v) in headers {
                if k.eq_ignore_ascii_case("authorization") {
                    config = config.auth_header(v.trim_start_matches("Bearer ").to_string());
                    continue;
                }
                let name = http_header_name(k).map_err(RemoteError::ConnectionUnavailable)?;
                let value = v.parse().map_err(|_| {
                    RemoteError::ConnectionUnavailable(format!("header {k:?} has an invalid value"))
                })?;
                custom.insert(name, value);
            }
            if !custom.is_empty() {
                config = config.custom_headers(custom);
            }
            let transport = StreamableHttpClientTransport::from_config(config);
            client_config()
                .serve_with_lifecycle(transport, lifecycle)
                .await
                .map_err(|e| fail(e.to_string()))
        }
        Transport::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            let mut cmd = tokio::process::Command::new(command);
            cmd.args(args).envs(env).kill_on_drop(true);
            if let Some(dir) = cwd {
                cmd.current_dir(dir);
            }
            let transport =
                rmcp::transport::TokioChildProcess::new(cmd).map_err(|e| fail(e.to_string()))?;
            client_config()
                .serve_with_lifecycle(transport, lifecycle)
                .await
                .map_err(|e| fail(e.to_string()))
        }
    }
}

fn http_header_name(name: &str) -> Result<http::HeaderName, String> {
    name.parse()
        .map_err(|_| format!("header name {name:?} is invalid"))
}
