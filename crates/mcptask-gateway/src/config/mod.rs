//! `mcptask.toml`: the gateway's configuration, from the file's text to the
//! settings each part of the gateway runs with, with errors that name the
//! file, the line and the fix.
//!
//! Three steps, each section in its own module (`api`, `servers`, `proxy`,
//! `limits`, …):
//!
//! - **the file**: serde types that say what the file may hold, keeping the
//!   parser's span (`toml::Spanned`) wherever a check points; the tables
//!   whose types are not this crate's are located by `spans`;
//! - **the checks**: each section's `check`, run in file order by
//!   [`Config::load`] and [`Config::parse`] after the environment
//!   overrides, every error positioned by those spans; then the secrets the
//!   file names are read, once ([`ServerSecrets`]). A [`Config`] is a file
//!   that passed them;
//! - **the runtime settings**: each section's one conversion into what the
//!   gateway runs with ([`ServerSection::def`], [`ServerSection::upstream`],
//!   [`LimitsSection::limits`], [`PolicySection::rule`],
//!   [`ProxySection::runtime_config`], [`WebhookSection::notifier`]), and
//!   whether a reload applies it live or at the next start ([`Reload`]).
//!
//! ```
//! let config = mcptask_gateway::Config::parse("mcptask.toml", r#"
//!     [api]
//!     auth = "none"
//!     [[servers]]
//!     name = "reports"
//!     url = "http://127.0.0.1:8080/mcp"
//! "#)?;
//! assert_eq!(config.server_defs()[0].name, "reports");
//! let text = "[api]\nauth = \"none\"\n[limits]\nper_principal_rate = 0\n";
//! let e = mcptask_gateway::Config::parse("mcptask.toml", text).unwrap_err();
//! assert!(e.0.starts_with("mcptask.toml:3:1: a limit under [limits]"));
//! # Ok::<(), mcptask_gateway::ConfigError>(())
//! ```

pub mod admin;
mod api;
mod audit;
mod check;
mod database;
mod env;
mod error;
mod identity;
mod issuers;
mod limits;
mod oauth_key;
mod policy;
mod proxy;
pub mod reload;
mod secrets;
mod server_oauth;
mod servers;
mod spans;
pub mod telemetry;
mod token_strength;
mod upstream_auth;
mod url;
mod virtual_servers;
mod webhooks;

use std::path::Path;

use mcptask_client::oauth::OAuthRuntime;
use mcptask_client::{ServerDef, TrackerConfig};
use serde::Deserialize;

pub use api::{ApiSection, AuthMode, TokenSection};
pub use audit::{AuditSection, DEFAULT_AUDIT_RETENTION_DAYS};
pub use database::DatabaseSection;
pub use env::Overrides;
pub use error::ConfigError;
pub(crate) use error::Source;
pub use identity::{IdentityMode, IdentitySection, PrincipalToken};
pub use issuers::{ClaimMatch, IssuerSection};
pub use limits::{DEFAULT_LIVE_CALLS_PER_PRINCIPAL, Limits, LimitsSection, LiveLimits};
pub use oauth_key::OAuthGlobalSection;
pub use policy::PolicySection;
pub use proxy::{DEFAULT_QUESTION_TIMEOUT_MS, ProxySection};
pub use reload::Reload;
pub use secrets::{Secrets, ServerSecrets};
pub use server_oauth::OAuthSection;
pub use servers::{
    AnswerWithin, DEFAULT_ANSWER_WITHIN_MS, InterruptPolicy, MAX_ANSWER_WITHIN_MS, ServerSection,
    Upstream,
};
pub(crate) use spans::Spans;
pub use telemetry::TelemetrySection;
pub use token_strength::{MIN_TOKEN_CHARS, STRONG_TOKEN_FIX, weak_token};
pub use upstream_auth::IdentityProviderSection;
pub use virtual_servers::VirtualServerSection;
pub use webhooks::WebhookSection;

/// The whole configuration: the file's sections, checked, and the secrets
/// they name, read.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `[database]`: where calls and tasks are kept.
    #[serde(default)]
    pub database: DatabaseSection,
    /// `[api]`: the HTTP listener and who may use it.
    #[serde(default)]
    pub api: ApiSection,
    /// `[tracker]`: the client's own settings type; its keys and checks are
    /// defined once, in `mcptask_client::TrackerConfig`.
    #[serde(default)]
    pub tracker: TrackerConfig,
    /// `[[servers]]`: the upstream MCP servers.
    #[serde(default)]
    pub servers: Vec<ServerSection>,
    /// `[[virtual_servers]]`: named selections of the servers' tools,
    /// prompts and resources, each at `/mcp/<name>`.
    #[serde(default)]
    pub virtual_servers: Vec<VirtualServerSection>,
    /// `[[webhooks]]`: where every task event is POSTed.
    #[serde(default)]
    pub webhooks: Vec<WebhookSection>,
    /// `[proxy]`: mcptask as an MCP server in front of `[[servers]]`.
    #[serde(default)]
    pub proxy: ProxySection,
    /// `[[policy]]`: which callers may call which tools.
    #[serde(default)]
    pub policy: Vec<PolicySection>,
    /// `[limits]`: fair limits per principal.
    #[serde(default)]
    pub limits: LimitsSection,
    /// `[oauth]`: how stored OAuth tokens of upstream servers are sealed.
    #[serde(default)]
    pub oauth: OAuthGlobalSection,
    /// `[audit]`: the audit trail of calls and refusals, and its retention.
    #[serde(default)]
    pub audit: AuditSection,
    /// `[telemetry]` (or `[otel]`): trace export, off by default.
    #[serde(default, alias = "otel")]
    pub telemetry: TelemetrySection,
    /// The secrets of `[servers.oauth]`, read by [`Config::load`].
    #[serde(skip)]
    pub secrets: Secrets,
    /// Which servers the admin API set (see [`admin`]).
    #[serde(skip)]
    pub origins: admin::Origins,
    /// Where the tables without spans of their own are, and the
    /// `[tracker]` keys as written.
    #[serde(skip)]
    pub(crate) spans: Spans,
}

impl Config {
    /// Read a file, apply environment overrides, check the result (so an
    /// override can supply what the file leaves out, and an override is
    /// checked like the file is), then read the secrets it names.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Self::load_with_env(path, |k| std::env::var(k).ok())
    }

    /// [`Config::load`] with the environment given as a lookup function.
    pub fn load_with_env(
        path: &Path,
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let text = Self::read_file(path)?;
        let path = path.display().to_string();
        let src = Source {
            path: &path,
            text: &text,
            appended: &[],
        };
        Self::finish(src, get)
    }

    /// The file's text, or an error that says how to make it.
    fn read_file(path: &Path) -> Result<String, ConfigError> {
        std::fs::read_to_string(path).map_err(|e| {
            ConfigError(format!(
                "{}: cannot read the configuration: {e}\n  fix: create it (see `mcptask serve --help` and the README) or pass --config PATH",
                path.display()
            ))
        })
    }

    /// Read `src`, apply the environment overrides, check, and read the
    /// secrets (relative to the file's directory): the steps of
    /// [`Config::load`] after the file was read.
    fn finish(src: Source, get: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let mut config = Config::read(&src)?;
        config.apply_env(&get)?;
        config.check(&src)?;
        let base = Path::new(src.path).parent().unwrap_or(Path::new("."));
        config.resolve_secrets(&src, base, &get)?;
        Ok(config)
    }

    /// Parse and check TOML text (`path` is used in messages). Nothing
    /// outside the text is read: no environment, no secrets.
    pub fn parse(path: &str, text: &str) -> Result<Config, ConfigError> {
        let src = Source {
            path,
            text,
            appended: &[],
        };
        let config = Self::read(&src)?;
        config.check(&src)?;
        Ok(config)
    }

    /// The file's sections, unchecked, with the spans the checks need.
    fn read(src: &Source) -> Result<Config, ConfigError> {
        let document = toml::de::DeTable::parse(src.text).map_err(|e| src.invalid(&e))?;
        // The sections first: their types say what is wrong with a value.
        let mut config = Config::deserialize(toml::de::Deserializer::from(document.clone()))
            .map_err(|e| src.invalid(&e))?;
        config.spans = Spans::deserialize(toml::de::Deserializer::from(document))
            .map_err(|e| src.invalid(&e))?;
        Ok(config)
    }

    /// The tool policy of `[[policy]]`.
    pub fn policy(&self) -> mcptask_core::access::Policy {
        PolicySection::policy(&self.policy)
    }

    /// The virtual server named `name`, if the file defines one.
    pub fn virtual_server(&self, name: &str) -> Option<crate::virtual_server::VirtualServer> {
        self.virtual_servers
            .iter()
            .find(|v| v.name.get_ref() == name)
            .map(VirtualServerSection::definition)
    }

    /// Server definitions for the tracker.
    pub fn server_defs(&self) -> Vec<ServerDef> {
        self.server_defs_with(None)
    }

    /// Server definitions whose OAuth settings use `runtime` (the store and
    /// key of this process).
    pub fn server_defs_with(&self, runtime: Option<&OAuthRuntime>) -> Vec<ServerDef> {
        self.servers
            .iter()
            .map(|s| s.def(self.secrets.get(s.name()), runtime))
            .collect()
    }

    /// The servers as the calls front them.
    pub fn upstreams(&self) -> Vec<Upstream> {
        self.servers.iter().map(ServerSection::upstream).collect()
    }

    /// Whether any server authorizes with OAuth.
    pub fn uses_oauth(&self) -> bool {
        self.servers.iter().any(|s| s.oauth.is_some())
    }

    /// Whether a server takes the caller's identity by token exchange (its
    /// calls' tokens are kept sealed when a key is configured).
    pub fn exchanges_tokens(&self) -> bool {
        self.servers.iter().any(|s| {
            s.identity
                .as_ref()
                .is_some_and(|i| i.get_ref().mode == IdentityMode::TokenExchange)
        })
    }

    /// The key sealing stored OAuth tokens: `MCPTASK_SECRET_KEY`, else
    /// `[oauth] secret_key_file`; `None` when neither is set.
    pub fn secret_key(
        &self,
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<mcptask_client::oauth::SecretKey>, ConfigError> {
        self.oauth.secret_key(get)
    }
}

#[cfg(test)]
mod tests;
