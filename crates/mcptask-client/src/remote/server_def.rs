//! How a named server is reached, and the hash that pins a task to the
//! definition it was created with.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// How to reach a server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Transport {
    /// Spawn a process speaking MCP on stdin/stdout.
    Stdio {
        /// The program to run.
        command: String,
        /// Its arguments.
        #[serde(default)]
        args: Vec<String>,
        /// Extra environment variables.
        #[serde(default)]
        env: BTreeMap<String, String>,
        /// Working directory (the tracker's when unset).
        #[serde(default)]
        cwd: Option<String>,
    },
    /// Streamable HTTP.
    Http {
        /// The MCP endpoint, e.g. `http://127.0.0.1:8080/mcp`.
        url: String,
        /// Headers sent with every request (`Authorization` becomes the bearer token).
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
    /// Registry name; tasks record it and the API addresses servers by it.
    pub name: String,
    /// How to reach the server.
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
    /// A Streamable HTTP server at `url`.
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

    /// A server the tracker spawns and talks to over stdin/stdout.
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

    /// Add an HTTP header (ignored for stdio servers).
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        if let Transport::Http { headers, .. } = &mut self.transport {
            headers.insert(name.into(), value.into());
        }
        self
    }

    /// Add an environment variable (ignored for HTTP servers).
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
