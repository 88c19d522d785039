//! Named MCP servers, their definition hashes, and one pooled connection each.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rmcp::model::{ClientCapabilities, ClientConfig, Implementation, ProtocolVersion};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RunningService};
use rmcp::{Peer, RoleClient};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::sync::Mutex;

use crate::remote::RemoteError;

/// How to reach a server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Transport {
    /// Spawn a process speaking MCP on stdin/stdout.
    Stdio {
        command: String,
        #[serde(default)]
        args: Vec<String>,
        #[serde(default)]
        env: BTreeMap<String, String>,
        #[serde(default)]
        cwd: Option<String>,
    },
    /// Streamable HTTP.
    Http {
        url: String,
        #[serde(default)]
        headers: BTreeMap<String, String>,
    },
}

/// A named server definition.
///
/// ```
/// use mcptask_client::ServerDef;
/// let a = ServerDef::http("reports", "http://127.0.0.1:8080/mcp");
/// let b = ServerDef::http("reports", "http://127.0.0.1:9090/mcp");
/// assert_ne!(a.hash(), b.hash(), "editing a definition changes its hash");
/// assert_eq!(a.hash(), a.clone().hash());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerDef {
    pub name: String,
    pub transport: Transport,
    /// Bound on each remote call; the tracker default applies when unset.
    #[serde(default, with = "opt_ms")]
    pub call_timeout: Option<Duration>,
    /// Bound on connecting; the tracker default applies when unset.
    #[serde(default, with = "opt_ms")]
    pub connect_timeout: Option<Duration>,
}

mod opt_ms {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        d.map(|d| d.as_millis() as u64).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(Duration::from_millis))
    }
}

impl ServerDef {
    pub fn http(name: impl Into<String>, url: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            transport: Transport::Http {
                url: url.into(),
                headers: BTreeMap::new(),
            },
            call_timeout: None,
            connect_timeout: None,
        }
    }

    pub fn stdio(name: impl Into<String>, command: impl Into<String>, args: Vec<String>) -> Self {
        Self {
            name: name.into(),
            transport: Transport::Stdio {
                command: command.into(),
                args,
                env: BTreeMap::new(),
                cwd: None,
            },
            call_timeout: None,
            connect_timeout: None,
        }
    }

    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        if let Transport::Http { headers, .. } = &mut self.transport {
            headers.insert(name.into(), value.into());
        }
        self
    }

    pub fn with_env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        if let Transport::Stdio { env, .. } = &mut self.transport {
            env.insert(name.into(), value.into());
        }
        self
    }

    /// SHA-256 (hex) of the canonical definition. A task remembers the hash it
    /// started with; if the definition changes, that task can no longer be
    /// reached the way it was created and is failed instead of retried forever.
    pub fn hash(&self) -> String {
        let canonical = serde_json::to_vec(self).unwrap_or_default();
        let digest = Sha256::digest(&canonical);
        digest.iter().map(|b| format!("{b:02x}")).collect()
    }
}

type Session = RunningService<RoleClient, ClientConfig>;

struct Entry {
    def: ServerDef,
    hash: String,
    session: Arc<Mutex<Option<Arc<Session>>>>,
    health: std::sync::Mutex<Health>,
}

/// What the tracker last saw of a server.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Health {
    /// `ok`, `error` or `unknown` (not contacted yet).
    pub state: &'static str,
    pub last_ok_at: Option<String>,
    pub last_error: Option<String>,
    pub last_error_at: Option<String>,
}

/// The servers a tracker knows, each with one pooled connection.
///
/// Definitions can be replaced or removed at run time; tasks created against
/// an older definition then fail with a "connection unavailable" reason.
#[derive(Clone, Default)]
pub struct ServerRegistry {
    entries: Arc<RwLock<HashMap<String, Arc<Entry>>>>,
}

/// A usable connection: the peer, and the bound for calls on it.
#[derive(Clone)]
pub struct Connection {
    pub peer: Peer<RoleClient>,
    pub call_timeout: Duration,
    session: Arc<Session>,
    slot: Arc<Mutex<Option<Arc<Session>>>>,
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

impl ServerRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Add or replace a definition. Replacing drops the pooled connection.
    pub fn upsert(&self, def: ServerDef) {
        let hash = def.hash();
        let entry = Arc::new(Entry {
            def: def.clone(),
            hash,
            session: Arc::new(Mutex::new(None)),
            health: std::sync::Mutex::new(Health {
                state: "unknown",
                ..Default::default()
            }),
        });
        let mut map = self.entries.write().expect("server registry lock");
        if map.get(&def.name).is_some_and(|e| e.hash == entry.hash) {
            return;
        }
        map.insert(def.name.clone(), entry);
    }

    pub fn remove(&self, name: &str) -> bool {
        self.entries
            .write()
            .expect("server registry lock")
            .remove(name)
            .is_some()
    }

    pub fn get(&self, name: &str) -> Option<(ServerDef, String)> {
        let map = self.entries.read().expect("server registry lock");
        map.get(name).map(|e| (e.def.clone(), e.hash.clone()))
    }

    /// What the tracker last saw of `name` (`None` if not configured).
    pub fn health(&self, name: &str) -> Option<Health> {
        let map = self.entries.read().expect("server registry lock");
        map.get(name)
            .map(|e| e.health.lock().expect("health lock").clone())
    }

    /// Record the outcome of a call to `name` (for health reporting).
    pub fn report(&self, name: &str, outcome: Result<(), &str>) {
        let map = self.entries.read().expect("server registry lock");
        let Some(entry) = map.get(name) else { return };
        let mut h = entry.health.lock().expect("health lock");
        let now = mcptask_core::time::to_rfc3339(now_ms());
        match outcome {
            Ok(()) => {
                h.state = "ok";
                h.last_ok_at = Some(now);
            }
            Err(e) => {
                h.state = "error";
                h.last_error = Some(mcptask_core::payload::truncate_text(e, 500));
                h.last_error_at = Some(now);
            }
        }
    }

    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .entries
            .read()
            .expect("server registry lock")
            .keys()
            .cloned()
            .collect();
        names.sort();
        names
    }

    /// The pooled connection to `name`, (re)connecting if there is none or the
    /// transport closed. `expected_hash` pins the definition a task started with.
    pub async fn connect(
        &self,
        name: &str,
        expected_hash: Option<&str>,
        defaults: (Duration, Duration),
    ) -> Result<Connection, RemoteError> {
        let entry = {
            let map = self.entries.read().expect("server registry lock");
            map.get(name).cloned()
        };
        let Some(entry) = entry else {
            return Err(RemoteError::ConnectionUnavailable(format!(
                "server {name:?} is no longer configured"
            )));
        };
        if let Some(hash) = expected_hash
            && hash != entry.hash
        {
            return Err(RemoteError::ConnectionUnavailable(format!(
                "server {name:?} was redefined since this task started; the task cannot be reached as created"
            )));
        }
        let (default_connect, default_call) = defaults;
        let call_timeout = entry.def.call_timeout.unwrap_or(default_call);
        let mut slot = entry.session.lock().await;
        if let Some(session) = slot.as_ref()
            && !session.peer().is_transport_closed()
        {
            return Ok(Connection {
                peer: session.peer().clone(),
                call_timeout,
                session: session.clone(),
                slot: entry.session.clone(),
            });
        }
        let connect_timeout = entry.def.connect_timeout.unwrap_or(default_connect);
        let opened = match tokio::time::timeout(connect_timeout, open(&entry.def)).await {
            Ok(result) => result,
            Err(_) => Err(RemoteError::Transient(format!(
                "connecting to {name:?} timed out after {connect_timeout:?}"
            ))),
        };
        let session = match opened {
            Ok(session) => {
                self.report(name, Ok(()));
                Arc::new(session)
            }
            Err(e) => {
                self.report(name, Err(&e.to_string()));
                return Err(e);
            }
        };
        *slot = Some(session.clone());
        Ok(Connection {
            peer: session.peer().clone(),
            call_timeout,
            session,
            slot: entry.session.clone(),
        })
    }
}

fn now_ms() -> i64 {
    use mcptask_core::Clock;
    mcptask_core::SystemClock.now_ms()
}

fn client_config() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::builder().enable_tasks().build(),
        Implementation::new("mcptask", env!("CARGO_PKG_VERSION")),
    )
}

async fn open(def: &ServerDef) -> Result<Session, RemoteError> {
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
