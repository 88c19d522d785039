//! How a named server is reached, and the hash that pins a task to the
//! endpoint it was created on.

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
/// assert_ne!(a.hash(), b.hash(), "another endpoint is another server");
/// let rotated = a.clone().with_header("Authorization", "Bearer new-token");
/// assert_eq!(a.hash(), rotated.hash(), "credentials do not change the server");
/// assert!(rotated.pins(&a.hash()));
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
    /// Submit/status/cancel tool groups whose submit tool starts durable work
    /// (see [`Toolset`]). Not part of the endpoint identity.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub toolsets: Vec<Toolset>,
    /// Most calls the tracker makes to this server at once per phase and
    /// process (polls, cancels, updates); beyond it a claimed task waits a
    /// moment without counting an error. `None`: only the tracker-wide
    /// `max_in_flight`. Not part of the endpoint identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<usize>,
    /// OAuth 2.1 to this server (HTTP only; see [`crate::oauth`]). Not part
    /// of the endpoint identity: a token or a client can change without the
    /// server's live tasks losing it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth: Option<crate::oauth::OAuthSettings>,
    /// Whose credential the server's calls carry (see [`crate::identity`]).
    /// Not part of the endpoint identity.
    #[serde(skip)]
    pub identity: crate::identity::Identity,
}

/// Three plain tools of a server that together run long work: calling
/// `submit_tool` starts it and answers a task id, `status_tool {task_id}`
/// reports it, `cancel_tool {task_id}` stops it
/// (`mcptask_core::client::toolset` has the contract).
///
/// ```
/// use mcptask_client::{ServerDef, Toolset};
/// let def = ServerDef::stdio("jobs", "jobs-server", vec![]).with_toolset(Toolset::new(
///     "report", "submit_report", "report_status", "cancel_report",
/// ));
/// assert!(def.validate_toolsets().is_ok());
/// assert_eq!(def.toolset_for("submit_report").unwrap().name, "report");
/// assert!(def.toolset_for("report_status").is_none(), "only the submit tool starts work");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Toolset {
    /// A name for the group (shown in errors and logs).
    pub name: String,
    /// The tool that starts the work.
    pub submit_tool: String,
    /// The tool that reports a task's status.
    pub status_tool: String,
    /// The tool that cancels a task.
    pub cancel_tool: String,
}

impl Toolset {
    /// A toolset of these three tools.
    pub fn new(
        name: impl Into<String>,
        submit_tool: impl Into<String>,
        status_tool: impl Into<String>,
        cancel_tool: impl Into<String>,
    ) -> Self {
        Self {
            name: name.into(),
            submit_tool: submit_tool.into(),
            status_tool: status_tool.into(),
            cancel_tool: cancel_tool.into(),
        }
    }
}

/// Longest toolset name (it fits the prior gateway's task-name column).
const MAX_TOOLSET_NAME_CHARS: usize = 255;

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
    /// The bound on each call to this server: its own `call_timeout`, else
    /// `default` (the tracker's). Every path that calls the server reads it
    /// here.
    ///
    /// ```
    /// use mcptask_client::ServerDef;
    /// use std::time::Duration;
    /// let mut def = ServerDef::stdio("s", "cmd", vec![]);
    /// assert_eq!(def.call_timeout_or(Duration::from_secs(30)), Duration::from_secs(30));
    /// def.call_timeout = Some(Duration::from_secs(3));
    /// assert_eq!(def.call_timeout_or(Duration::from_secs(30)), Duration::from_secs(3));
    /// ```
    pub fn call_timeout_or(&self, default: Duration) -> Duration {
        self.call_timeout.unwrap_or(default)
    }

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
            toolsets: Vec::new(),
            max_in_flight: None,
            oauth: None,
            identity: Default::default(),
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
            toolsets: Vec::new(),
            max_in_flight: None,
            oauth: None,
            identity: Default::default(),
        }
    }

    /// Add a submit/status/cancel toolset.
    pub fn with_toolset(mut self, toolset: Toolset) -> Self {
        self.toolsets.push(toolset);
        self
    }

    /// The toolset whose submit tool is `tool`, if any.
    pub fn toolset_for(&self, tool: &str) -> Option<&Toolset> {
        self.toolsets.iter().find(|t| t.submit_tool == tool)
    }

    /// Check the toolsets: names and tools non-empty, and each tool in one
    /// role of one toolset only (a tool that both submits and reports could
    /// not be routed).
    pub fn validate_toolsets(&self) -> Result<(), String> {
        let mut roles: BTreeMap<&str, (&str, &str)> = BTreeMap::new();
        for t in &self.toolsets {
            if t.name.trim().is_empty() || t.name.chars().count() > MAX_TOOLSET_NAME_CHARS {
                return Err(format!(
                    "server {:?}: a toolset name must be 1..={MAX_TOOLSET_NAME_CHARS} characters, not blank",
                    self.name
                ));
            }
            for (role, tool) in [
                ("submit_tool", t.submit_tool.as_str()),
                ("status_tool", t.status_tool.as_str()),
                ("cancel_tool", t.cancel_tool.as_str()),
            ] {
                if tool.trim().is_empty() {
                    return Err(format!(
                        "server {:?}, toolset {:?}: {role} must not be empty",
                        self.name, t.name
                    ));
                }
                if let Some((other_set, other_role)) = roles.insert(tool, (t.name.as_str(), role)) {
                    return Err(format!(
                        "server {:?}: tool {tool:?} is {other_role} of toolset {other_set:?} and \
                         {role} of toolset {:?}; each tool must be unique across the toolsets",
                        self.name, t.name
                    ));
                }
            }
        }
        Ok(())
    }

    /// Add an HTTP header (ignored for stdio servers).
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        if let Transport::Http { headers, .. } = &mut self.transport {
            headers.insert(name.into(), value.into());
        }
        self
    }

    /// Authorize with OAuth (HTTP servers).
    pub fn with_oauth(mut self, settings: crate::oauth::OAuthSettings) -> Self {
        self.oauth = Some(settings);
        self
    }

    /// Add an environment variable (ignored for HTTP servers).
    pub fn with_env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        if let Transport::Stdio { env, .. } = &mut self.transport {
            env.insert(name.into(), value.into());
        }
        self
    }

    /// SHA-256 (hex) of the endpoint identity: the URL of an HTTP server; the
    /// command, arguments and working directory of a stdio server. A task
    /// remembers the hash it started with and is only polled where that hash
    /// still resolves: credentials, headers, environment and timeouts can be
    /// edited (a token rotated) without losing a server's live tasks, while
    /// pointing the name at another endpoint fails them with a clear reason
    /// instead of asking a server that never heard of them.
    pub fn hash(&self) -> String {
        let identity = match &self.transport {
            Transport::Http { url, .. } => serde_json::json!({"type": "http", "url": url}),
            Transport::Stdio {
                command, args, cwd, ..
            } => serde_json::json!({"type": "stdio", "command": command, "args": args, "cwd": cwd}),
        };
        sha256_hex(&serde_json::to_vec(&identity).unwrap_or_default())
    }

    /// Whether a task that recorded `task_hash` is on this definition's
    /// endpoint. Hashes recorded before the hash covered only the endpoint
    /// (the whole definition was hashed) still match an unchanged definition.
    pub fn pins(&self, task_hash: &str) -> bool {
        task_hash == self.hash() || task_hash == self.whole_definition_hash()
    }

    /// The hash of releases up to 0.1: the whole canonical definition.
    fn whole_definition_hash(&self) -> String {
        sha256_hex(&serde_json::to_vec(self).unwrap_or_default())
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_endpoint_decides_the_server() {
        let http = ServerDef::http("s", "http://h/mcp");
        let mut edited = http.clone().with_header("Authorization", "Bearer b");
        edited.call_timeout = Some(Duration::from_secs(3));
        edited.connect_timeout = Some(Duration::from_secs(4));
        assert_eq!(http.hash(), edited.hash());
        assert_ne!(http.hash(), ServerDef::http("s", "http://h/other").hash());

        let stdio = ServerDef::stdio("s", "srv", vec!["--a".into()]);
        assert_eq!(stdio.hash(), stdio.clone().with_env("TOKEN", "x").hash());
        assert_ne!(stdio.hash(), ServerDef::stdio("s", "srv", vec![]).hash());
        assert_ne!(
            stdio.hash(),
            ServerDef::stdio("s", "other", vec!["--a".into()]).hash()
        );
        let mut moved = stdio.clone();
        if let Transport::Stdio { cwd, .. } = &mut moved.transport {
            *cwd = Some("/elsewhere".into());
        }
        assert_ne!(stdio.hash(), moved.hash());
    }

    #[test]
    fn hashes_of_whole_definitions_still_pin_an_unchanged_server() {
        let def = ServerDef::http("s", "http://h/mcp").with_header("A", "1");
        let legacy = def.whole_definition_hash();
        assert!(def.pins(&legacy));
        assert!(!def.clone().with_header("A", "2").pins(&legacy));
        assert!(!def.pins("0000"));
    }

    #[test]
    fn toolsets_need_names_and_one_role_per_tool() {
        let base = ServerDef::stdio("s", "srv", vec![]);
        let ok = base
            .clone()
            .with_toolset(Toolset::new("a", "submit_a", "status_a", "cancel_a"))
            .with_toolset(Toolset::new("b", "submit_b", "status_b", "cancel_b"));
        assert!(ok.validate_toolsets().is_ok());
        assert_eq!(ok.hash(), base.hash(), "toolsets are not the endpoint");
        let bad = [
            (Toolset::new(" ", "x", "y", "z"), "name"),
            (Toolset::new("n".repeat(256), "x", "y", "z"), "name"),
            (
                Toolset::new("t", "", "y", "z"),
                "submit_tool must not be empty",
            ),
            (Toolset::new("t", "x", "x", "z"), "unique"),
            (Toolset::new("t", "x", "y", "x"), "unique"),
            (Toolset::new("t", "submit_a", "y", "z"), "unique"),
            (Toolset::new("t", "x", "cancel_a", "z"), "unique"),
        ];
        for (t, why) in bad {
            let def = ok.clone().with_toolset(t.clone());
            let e = def.validate_toolsets().unwrap_err();
            assert!(e.contains(why), "{t:?}: {e}");
        }
    }

    #[test]
    fn a_definition_without_toolsets_serializes_as_before() {
        let def = ServerDef::http("s", "http://h/mcp");
        let v = serde_json::to_value(&def).unwrap();
        assert!(v.get("toolsets").is_none(), "{v}");
        let back: ServerDef = serde_json::from_value(v).unwrap();
        assert_eq!(back, def);
    }
}
