//! `[[servers]]`: the upstream MCP servers, their checks, and what each
//! becomes at run time: the tracker's [`ServerDef`] and the calls'
//! [`Upstream`].

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use mcptask_client::identity::Identity;
use mcptask_client::oauth::{OAuthRuntime, RuntimeSlot};
use mcptask_client::{ServerDef, Transport};
use serde::Deserialize;
use toml::Spanned;

use super::url::is_http_url;
use super::{ConfigError, IdentitySection, OAuthSection, Reload, ServerSecrets, Source};

/// A remote MCP server: either `url` (Streamable HTTP) or `command` (stdio).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSection {
    /// The name calls, tool routes and stored tasks know the server by
    /// (spanned: errors point at it).
    pub name: Spanned<String>,
    /// Streamable HTTP endpoint (`https://host/mcp`).
    #[serde(default)]
    pub url: Option<String>,
    /// Extra HTTP headers on every request (e.g. a static `Authorization`).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Program to run as a stdio server.
    #[serde(default)]
    pub command: Option<String>,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Environment variables added to its environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Its working directory (default: the gateway's).
    #[serde(default)]
    pub cwd: Option<String>,
    /// Bound on one request to the server (default: the tracker's).
    #[serde(default)]
    pub call_timeout_ms: Option<u64>,
    /// Bound on connecting and the initialize handshake (default: the
    /// tracker's).
    #[serde(default)]
    pub connect_timeout_ms: Option<u64>,
    /// Front tool names are `<prefix>__<tool>`; default: the server's name;
    /// `""` keeps the upstream names (they must not clash).
    #[serde(default)]
    pub prefix: Option<String>,
    /// What the proxy does with this server's synchronous calls run as
    /// front tasks when the process running them dies.
    #[serde(default)]
    pub interrupt: InterruptPolicy,
    /// `[[servers.toolsets]]`: submit/status/cancel tool groups.
    #[serde(default)]
    pub toolsets: Vec<mcptask_client::Toolset>,
    /// Upstream tool names the proxy runs in the background for callers
    /// that do not declare tasks: they get a front task id at once and
    /// follow it with the `mcptask_*_task` tools.
    #[serde(default)]
    pub background: Vec<String>,
    /// Most tracker calls (polls, cancels, updates) to this server at once
    /// per phase and process; one slow server then never takes every slot.
    #[serde(default)]
    pub max_in_flight: Option<usize>,
    /// How long the front waits for a call it runs as a task (a synchronous
    /// or 2025-11-25 task tool, for a caller that declares tasks) before it
    /// hands out the task: a call that ends sooner is answered directly.
    /// `0`: always a task. Default [`DEFAULT_ANSWER_WITHIN_MS`].
    #[serde(default)]
    pub answer_within_ms: Option<u64>,
    /// `[servers.tool_answer_within_ms]`: `answer_within_ms` per upstream
    /// tool name, over the server's.
    #[serde(default)]
    pub tool_answer_within_ms: BTreeMap<String, u64>,
    /// `[servers.oauth]`: authorize with OAuth 2.1 (HTTP servers).
    #[serde(default)]
    pub oauth: Option<Spanned<OAuthSection>>,
    /// `[servers.identity]`: whose credential the server's calls carry
    /// (default: the gateway's own).
    #[serde(default)]
    pub identity: Option<Spanned<IdentitySection>>,
}

/// What the proxy does with a synchronous upstream call whose process died
/// (`interrupt = "fail"`, the default: the call may have had effects; or
/// `"rerun"`, for idempotent tools): core's one form of the policy.
pub use mcptask_core::server::InterruptPolicy;

/// The default `answer_within_ms`: the front's suggested `pollIntervalMs`
/// (1 s). A caller following the task would first see its result after one
/// poll interval, so a call that ends within it is answered no later than
/// a poll would have shown it, and one that does not gets its task when its
/// first poll would have been due (docs/PROXY.md, "Answered directly").
pub const DEFAULT_ANSWER_WITHIN_MS: u64 = 1_000;

/// The longest `answer_within_ms`: beyond it a caller that declares tasks
/// waits longer for its task than most clients wait for any answer.
pub const MAX_ANSWER_WITHIN_MS: u64 = 60_000;

/// A configured server as the calls front it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    /// The server's configured name.
    pub name: String,
    /// The prefix of its tools' front names (`""`: their own names).
    pub prefix: String,
    /// What a crash does to its synchronous calls (`interrupt`).
    pub interrupt: InterruptPolicy,
    /// Upstream tool names run in the background for non-declaring callers.
    pub background: Vec<String>,
    /// How long a call run as a task is waited for before its task is
    /// handed out ([`AnswerWithin::of`]).
    pub answer_within: AnswerWithin,
}

/// `answer_within_ms` of a server and its tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnswerWithin {
    /// The server's (its `answer_within_ms`, else the default).
    pub server: Duration,
    /// Per upstream tool name, over the server's.
    pub tools: BTreeMap<String, Duration>,
}

impl Default for AnswerWithin {
    fn default() -> Self {
        Self {
            server: Duration::from_millis(DEFAULT_ANSWER_WITHIN_MS),
            tools: BTreeMap::new(),
        }
    }
}

impl AnswerWithin {
    /// The wait for `tool` (zero: the task at once).
    ///
    /// ```
    /// use std::time::Duration;
    /// use mcptask_gateway::config::AnswerWithin;
    /// let mut within = AnswerWithin::default();
    /// within.tools.insert("slow".into(), Duration::ZERO);
    /// assert_eq!(within.of("slow"), Duration::ZERO);
    /// assert_eq!(within.of("echo"), Duration::from_secs(1));
    /// ```
    pub fn of(&self, tool: &str) -> Duration {
        self.tools.get(tool).copied().unwrap_or(self.server)
    }
}

impl ServerSection {
    /// Servers are added, edited and removed by a reload.
    pub const RELOAD: Reload = Reload::Live;

    /// Its name.
    pub fn name(&self) -> &str {
        self.name.get_ref()
    }

    /// The tracker's definition of this server, its OAuth settings with
    /// `secrets` (read at load time) and `runtime` (the store and key of
    /// this process, when there is one).
    pub fn def(
        &self,
        secrets: Option<&ServerSecrets>,
        runtime: Option<&OAuthRuntime>,
    ) -> ServerDef {
        ServerDef {
            name: self.name().to_string(),
            transport: match (&self.url, &self.command) {
                (Some(url), _) => Transport::Http {
                    url: url.clone(),
                    headers: self.headers.clone(),
                },
                (None, command) => Transport::Stdio {
                    command: command.clone().unwrap_or_default(),
                    args: self.args.clone(),
                    env: self.env.clone(),
                    cwd: self.cwd.clone(),
                },
            },
            call_timeout: self.call_timeout_ms.map(Duration::from_millis),
            connect_timeout: self.connect_timeout_ms.map(Duration::from_millis),
            toolsets: self.toolsets.clone(),
            max_in_flight: self.max_in_flight,
            oauth: self.oauth.as_ref().map(|o| {
                let settings = o.get_ref().settings(secrets);
                match runtime {
                    Some(r) => settings.with_runtime(r.clone()),
                    None => settings,
                }
            }),
            identity: match (secrets.map(|s| s.identity.clone()), runtime) {
                (Some(Identity::TokenExchange(mut x)), Some(r)) => {
                    x.runtime = RuntimeSlot::new(r.clone());
                    Identity::TokenExchange(x)
                }
                (identity, _) => identity.unwrap_or_default(),
            },
        }
    }

    /// This server as the calls front it.
    pub fn upstream(&self) -> Upstream {
        Upstream {
            name: self.name().to_string(),
            prefix: self
                .prefix
                .clone()
                .unwrap_or_else(|| self.name().to_string()),
            interrupt: self.interrupt,
            background: self.background.clone(),
            answer_within: AnswerWithin {
                server: Duration::from_millis(
                    self.answer_within_ms.unwrap_or(DEFAULT_ANSWER_WITHIN_MS),
                ),
                tools: self
                    .tool_answer_within_ms
                    .iter()
                    .map(|(tool, ms)| (tool.clone(), Duration::from_millis(*ms)))
                    .collect(),
            },
        }
    }

    /// What the calls make of it beyond its definition, as a reload
    /// compares it.
    pub(crate) fn front_print(&self) -> serde_json::Value {
        serde_json::json!({
            "prefix": self.prefix,
            "interrupt": self.interrupt,
            "background": self.background,
            "answer_within_ms": self.answer_within_ms,
            "tool_answer_within_ms": self.tool_answer_within_ms,
        })
    }

    /// A usable name.
    fn check_name(&self, src: &Source) -> Result<(), ConfigError> {
        let name = self.name();
        let span = self.name.span();
        if name.is_empty() || name.len() > 128 || name.contains(char::is_whitespace) {
            return Err(src.at(
                span,
                &format!("server name {name:?} is not usable"),
                "use 1-128 characters without spaces, e.g. name = \"reports\"",
            ));
        }
        Ok(())
    }

    fn check_transport(&self, src: &Source) -> Result<(), ConfigError> {
        let name = self.name();
        let fail = |problem: String, fix: &str| Err(src.at(self.name.span(), &problem, fix));
        let toolsets = ServerDef {
            toolsets: self.toolsets.clone(),
            ..ServerDef::stdio(name.to_string(), "", Vec::new())
        };
        if let Err(problem) = toolsets.validate_toolsets() {
            return fail(
                problem,
                "give each [[servers.toolsets]] a name and three distinct tools \
                 (submit_tool, status_tool, cancel_tool) no other toolset of the server uses",
            );
        }
        match (&self.url, &self.command) {
            (Some(_), Some(_)) => fail(
                format!("server {name:?} has both url and command"),
                "keep url = \"http://…/mcp\" for Streamable HTTP, or command = \"…\" for stdio",
            ),
            (None, None) => fail(
                format!("server {name:?} has neither url nor command"),
                "add url = \"http://host:port/mcp\" or command = \"path/to/server\"",
            ),
            (Some(url), None) if !is_http_url(url) => fail(
                format!("server {name:?} url {url:?} is not http(s)"),
                "use a Streamable HTTP URL such as \"http://127.0.0.1:8080/mcp\"",
            ),
            (Some(_), None)
                if !self.args.is_empty() || !self.env.is_empty() || self.cwd.is_some() =>
            {
                fail(
                    format!("server {name:?} is HTTP but sets args/env/cwd"),
                    "args, env and cwd only apply to command (stdio) servers",
                )
            }
            (None, Some(_)) if !self.headers.is_empty() => fail(
                format!("server {name:?} is stdio but sets headers"),
                "headers only apply to url (HTTP) servers",
            ),
            _ => Ok(()),
        }
    }

    fn check_background(&self, src: &Source) -> Result<(), ConfigError> {
        if self.background.iter().any(|t| t.trim().is_empty()) {
            let name = self.name();
            return Err(src.at(
                self.name.span(),
                &format!("server {name:?} lists an empty tool name in background"),
                "list upstream tool names, e.g. background = [\"export_report\"]",
            ));
        }
        Ok(())
    }

    fn check_answer_within(&self, src: &Source) -> Result<(), ConfigError> {
        let name = self.name();
        let over = self
            .answer_within_ms
            .map(|ms| ("answer_within_ms".to_string(), ms))
            .into_iter()
            .chain(
                self.tool_answer_within_ms
                    .iter()
                    .map(|(tool, ms)| (format!("tool_answer_within_ms.{tool}"), *ms)),
            )
            .find(|(_, ms)| *ms > MAX_ANSWER_WITHIN_MS);
        if let Some((key, ms)) = over {
            return Err(src.at(
                self.name.span(),
                &format!(
                    "server {name:?} sets {key} = {ms}, over {MAX_ANSWER_WITHIN_MS} ms (a caller that declares tasks would wait that long for its task)"
                ),
                "use 0 (always a task) to 60000; the default is 1000",
            ));
        }
        if self
            .tool_answer_within_ms
            .keys()
            .any(|t| t.trim().is_empty())
        {
            return Err(src.at(
                self.name.span(),
                &format!("server {name:?} names an empty tool in tool_answer_within_ms"),
                "name upstream tools, e.g. [servers.tool_answer_within_ms] export_report = 0",
            ));
        }
        Ok(())
    }

    /// Every server's checks: names and transports first, then OAuth,
    /// then background tools and answer deadlines.
    pub(crate) fn check_all(servers: &[ServerSection], src: &Source) -> Result<(), ConfigError> {
        let mut names = BTreeSet::new();
        for s in servers {
            s.check_name(src)?;
            if !names.insert(s.name()) {
                return Err(src.at(
                    s.name.span(),
                    &format!("server {:?} is defined twice", s.name()),
                    "give each [[servers]] entry a unique name",
                ));
            }
            s.check_transport(src)?;
        }
        for s in servers {
            if let Some(oauth) = &s.oauth {
                OAuthSection::check(s, oauth, src)?;
            }
            if let Some(identity) = &s.identity {
                IdentitySection::check(s, identity, src)?;
            }
        }
        for s in servers {
            s.check_background(src)?;
            s.check_answer_within(src)?;
        }
        Ok(())
    }
}
