//! `mcptask.toml`: the gateway's configuration, with environment overrides and
//! errors that name the file, the line and the fix.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use mcptask_client::{ServerDef, TrackerConfig, Transport};
use serde::Deserialize;
use toml::Spanned;

mod upstream_auth;

pub use upstream_auth::IdentityProviderSection;

/// The whole configuration file.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub database: DatabaseSection,
    #[serde(default)]
    pub api: ApiSection,
    /// `[tracker]`: the client's own settings type; its keys and checks are
    /// defined once, in `mcptask_client::TrackerConfig`.
    #[serde(default)]
    pub tracker: TrackerConfig,
    #[serde(default)]
    pub servers: Vec<ServerSection>,
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
    /// `[telemetry]` (or `[otel]`): trace export, off by default.
    #[serde(default, alias = "otel")]
    pub telemetry: crate::telemetry::TelemetrySection,
}

/// `[limits]`: what one principal (anonymous callers together count as
/// one) may ask of this gateway process, at every face.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct LimitsSection {
    /// Tool calls per second, sustained (none: no rate limit).
    #[serde(default)]
    pub per_principal_rate: Option<f64>,
    /// Tool calls at once after a quiet spell (default: twice the rate,
    /// at least 1).
    #[serde(default)]
    pub per_principal_burst: Option<u32>,
    /// Tool calls in flight at once (none: no cap).
    #[serde(default)]
    pub per_principal_in_flight: Option<usize>,
}

/// A tool policy rule (see `mcptask_core::access`): to whom it applies, and
/// the `"server/tool"` globs it allows or denies.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct PolicySection {
    /// Applies to principals matching this glob (`*`, `?`).
    #[serde(default)]
    pub principal: Option<String>,
    /// Applies to callers whose OAuth token grants this scope.
    #[serde(default)]
    pub scope: Option<String>,
    /// Applies to callers whose OAuth token holds this claim value.
    #[serde(default)]
    pub claim: Option<ClaimMatch>,
    /// `"server/tool"` globs these callers may call; others are refused.
    #[serde(default)]
    pub allow: Vec<String>,
    /// `"server/tool"` globs these callers may not call.
    #[serde(default)]
    pub deny: Vec<String>,
}

/// `[oauth]`: the key that seals the OAuth tokens of `[servers.oauth]`
/// servers in the database. `MCPTASK_SECRET_KEY` (32 random bytes, base64)
/// wins over the file.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct OAuthGlobalSection {
    /// A file holding the key (base64 or hex), e.g. written by `mcptask config init`.
    #[serde(default)]
    pub secret_key_file: Option<Spanned<String>>,
}

/// `[servers.oauth]`: OAuth 2.1 to an HTTP server (see docs/AUTHORIZATION.md).
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct OAuthSection {
    /// `client_credentials` (default) or `authorization_code`.
    #[serde(default)]
    pub grant: mcptask_client::oauth::Grant,
    #[serde(default)]
    pub client_id: Option<String>,
    /// The client secret, inline (prefer `client_secret_env`).
    #[serde(default)]
    pub client_secret: Option<String>,
    /// The environment variable holding the client secret.
    #[serde(default)]
    pub client_secret_env: Option<String>,
    /// `client_secret_basic`, `client_secret_post`, `private_key_jwt` or `none`.
    #[serde(default)]
    pub token_endpoint_auth: Option<mcptask_client::oauth::TokenEndpointAuth>,
    /// A PEM private key file (PKCS#8) for `private_key_jwt`.
    #[serde(default)]
    pub private_key_file: Option<String>,
    /// Its algorithm (default ES256).
    #[serde(default)]
    pub signing_algorithm: Option<String>,
    #[serde(default)]
    pub scopes: Vec<String>,
    /// The authorization server's issuer URL, instead of the one the
    /// server's metadata names.
    #[serde(default)]
    pub authorization_server: Option<String>,
    /// An https URL of this client's metadata document (used as client id
    /// where the authorization server supports it).
    #[serde(default)]
    pub client_metadata_url: Option<String>,
    #[serde(default)]
    pub client_name: Option<String>,
    /// Where `mcptask login` receives the authorization (default
    /// http://127.0.0.1:8976/callback).
    #[serde(default)]
    pub redirect_uri: Option<String>,
    /// Bind tokens to a key of this gateway (DPoP, RFC 9449).
    #[serde(default)]
    pub dpop: bool,
    /// `jwt_bearer`: the file the platform keeps the workload's JWT in
    /// (read for every token request), or the variable holding it.
    #[serde(default)]
    pub assertion_file: Option<String>,
    #[serde(default)]
    pub assertion_env: Option<String>,
    /// `enterprise_managed`: `[servers.oauth.identity_provider]`.
    #[serde(default)]
    pub identity_provider: Option<IdentityProviderSection>,
    /// The secret and key read at load time.
    #[serde(skip)]
    pub resolved_secret: Option<String>,
    #[serde(skip)]
    pub resolved_private_key: Option<String>,
    #[serde(skip)]
    pub resolved_assertion: Option<mcptask_client::oauth::TokenSource>,
}

/// `[proxy]`: serve the configured servers' tools as one MCP server (`/mcp`
/// on the API listener, or `mcptask proxy --stdio`).
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ProxySection {
    /// Serve MCP at `/mcp` on the API listener (`mcptask proxy --stdio`
    /// serves it whatever this says).
    #[serde(default)]
    pub enabled: bool,
    /// The principal front tasks of `proxy --stdio` are bound to (HTTP
    /// callers get the principal of their API token).
    #[serde(default)]
    pub principal: Option<String>,
    /// How long the proxy's claim on its running front tasks lasts without
    /// a heartbeat (default 30 000): after a crash, another process
    /// (or the restarted one) recovers them once it lapses.
    #[serde(default)]
    pub owner_lease_ms: Option<i64>,
    /// Live call tasks this process runs at once (front tasks, and
    /// 2025-11-25 or synchronous calls from any face; default 10 000): a
    /// call beyond it is refused "server busy", and a task the upstream
    /// already created for it is cancelled there.
    #[serde(default)]
    pub max_live_tasks: Option<usize>,
    /// How long a question an upstream asks through the proxy (an
    /// elicitation, sampling or roots request; a task's `input_required`)
    /// waits for its answer (default [`DEFAULT_QUESTION_TIMEOUT_MS`]): then
    /// the upstream call or task is cancelled and the front task fails
    /// saying so.
    #[serde(default)]
    pub question_timeout_ms: Option<u64>,
}

/// `[proxy] question_timeout_ms` unset: half an hour, for a person to
/// come back to a question, and below the front tasks' default hour of TTL.
pub const DEFAULT_QUESTION_TIMEOUT_MS: u64 = 1_800_000;

impl ProxySection {
    /// How long a relayed question waits for its answer.
    pub fn question_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(
            self.question_timeout_ms
                .unwrap_or(DEFAULT_QUESTION_TIMEOUT_MS)
                .max(1),
        )
    }
}

/// What the proxy does with a synchronous upstream call whose process died.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Interrupt {
    /// Fail the front task "interrupted" (default: the call may have had effects).
    #[default]
    Fail,
    /// Call the upstream again (for idempotent tools).
    Rerun,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseSection {
    /// `sqlite:PATH` (default `sqlite:mcptask.db`) or `postgres://USER@HOST/DB`.
    #[serde(default = "default_database_url")]
    pub url: String,
}

impl Default for DatabaseSection {
    fn default() -> Self {
        Self {
            url: default_database_url(),
        }
    }
}

fn default_database_url() -> String {
    mcptask_sql::DEFAULT_DATABASE_URL.to_string()
}

/// How API requests are authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum AuthMode {
    /// `Authorization: Bearer TOKEN` required (default).
    #[default]
    Token,
    /// No authentication: only for local development.
    None,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiSection {
    /// Address of the HTTP API, dashboard and metrics.
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    #[serde(default)]
    pub auth: AuthMode,
    #[serde(default)]
    pub tokens: Vec<TokenSection>,
    /// Largest accepted request body, in bytes.
    #[serde(default = "default_max_body")]
    pub max_body_bytes: usize,
    /// The URL clients reach this gateway at (behind a proxy: its public
    /// one), e.g. `https://mcptask.example.com`: the base of the OAuth
    /// resource identifier and metadata URLs. Required with `[[api.oauth]]`
    /// (the audience is never taken from a request's `Host`).
    #[serde(default)]
    pub public_url: Option<Spanned<String>>,
    /// `[[api.oauth]]`: authorization servers whose access tokens (JWTs)
    /// this gateway accepts, beside the static tokens.
    #[serde(default)]
    pub oauth: Vec<IssuerSection>,
}

impl ApiSection {
    /// The host of `public_url` (`mcptask.example.com`), if one is set.
    pub fn public_host(&self) -> Option<String> {
        let url = url::Url::parse(self.public_url.as_ref()?.get_ref()).ok()?;
        url.host_str().map(str::to_string)
    }
}

impl Default for ApiSection {
    fn default() -> Self {
        Self {
            listen: default_listen(),
            auth: AuthMode::default(),
            tokens: Vec::new(),
            max_body_bytes: default_max_body(),
            public_url: None,
            oauth: Vec::new(),
        }
    }
}

/// An authorization server whose JWT access tokens give a principal
/// (MCP authorization: this gateway is an OAuth 2.1 resource server).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IssuerSection {
    /// The issuer (`iss`), e.g. `https://login.example.com/realms/main`;
    /// named in the protected resource metadata.
    pub issuer: Spanned<String>,
    /// The audience a token must carry (`aud`). Default: this resource's
    /// identifier, `public_url` + `/mcp`.
    #[serde(default)]
    pub audience: Option<String>,
    /// Where the issuer's keys are. Default: `jwks_uri` of its metadata
    /// (`/.well-known/oauth-authorization-server`, else OpenID discovery).
    #[serde(default)]
    pub jwks_url: Option<String>,
    /// The claim that names the principal (default `sub`).
    #[serde(default = "default_principal_claim")]
    pub principal_claim: String,
    /// Scopes every token must grant (advertised as `scopes_supported`).
    #[serde(default)]
    pub scopes: Vec<String>,
    /// A scope that makes its token an operator's (sees every principal).
    #[serde(default)]
    pub operator_scope: Option<String>,
    /// A claim value that makes its token an operator's: `{ claim = "roles",
    /// value = "mcptask-admin" }` (an array claim counts if it holds it).
    #[serde(default)]
    pub operator_claim: Option<ClaimMatch>,
    /// Clock skew allowed on `exp` and `nbf`, in seconds (default 60).
    #[serde(default = "default_leeway")]
    pub leeway_s: u64,
}

/// A claim and the value that must be in it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimMatch {
    pub claim: String,
    pub value: String,
}

fn default_principal_claim() -> String {
    "sub".into()
}

fn default_leeway() -> u64 {
    60
}

fn default_listen() -> SocketAddr {
    "127.0.0.1:7777".parse().expect("valid default address")
}

fn default_max_body() -> usize {
    mcptask_core::payload::DEFAULT_MAX_BODY_BYTES
}

/// An API token. With a `principal`, its holder only sees and creates tasks
/// bound to that principal; without one it is an operator token that sees all.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenSection {
    pub token: Spanned<String>,
    #[serde(default)]
    pub principal: Option<String>,
}

/// A remote MCP server: either `url` (Streamable HTTP) or `command` (stdio).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSection {
    pub name: Spanned<String>,
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(default)]
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub call_timeout_ms: Option<u64>,
    #[serde(default)]
    pub connect_timeout_ms: Option<u64>,
    /// Front tool names are `<prefix>__<tool>`; default: the server's name;
    /// `""` keeps the upstream names (they must not clash).
    #[serde(default)]
    pub prefix: Option<String>,
    /// What the proxy does with this server's synchronous calls run as
    /// front tasks when the process running them dies.
    #[serde(default)]
    pub interrupt: Interrupt,
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
    /// `[servers.oauth]`: authorize with OAuth 2.1 (HTTP servers).
    #[serde(default)]
    pub oauth: Option<Spanned<OAuthSection>>,
}

/// A webhook receiving every task event (JSON POST, HMAC-SHA256 signed).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookSection {
    pub url: Spanned<String>,
    pub secret: String,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

/// A configuration error, already phrased for humans.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

fn line_of(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before
        .rfind('\n')
        .map_or(before.len(), |i| before.len() - i - 1)
        + 1;
    (line, col)
}

fn at(
    path: &str,
    text: &str,
    span: std::ops::Range<usize>,
    problem: &str,
    fix: &str,
) -> ConfigError {
    let (line, col) = line_of(text, span.start);
    ConfigError(format!("{path}:{line}:{col}: {problem}\n  fix: {fix}"))
}

/// Command-line overrides of `serve`: they win over the environment, which
/// wins over the file, and are validated with the rest.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--listen`.
    pub listen: Option<String>,
    /// `--database-url`.
    pub database_url: Option<String>,
}

impl Overrides {
    /// The environment as `serve` sees it: a flag given on the command line
    /// stands in for its environment variable.
    pub fn lookup(&self, key: &str) -> Option<String> {
        let flag = match key {
            "MCPTASK_LISTEN" => self.listen.clone(),
            "MCPTASK_DATABASE_URL" => self.database_url.clone(),
            _ => None,
        };
        flag.or_else(|| std::env::var(key).ok())
    }
}

impl Config {
    /// Read a file, apply environment overrides, then validate the result
    /// (so an override can supply what the file leaves out, and an override
    /// is checked like the file is).
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Self::load_with_env(path, |k| std::env::var(k).ok())
    }

    /// [`Config::load`] with the environment given as a lookup function.
    pub fn load_with_env(
        path: &Path,
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigError(format!(
                "{}: cannot read the configuration: {e}\n  fix: create it (see `mcptask serve --help` and the README) or pass --config PATH",
                path.display()
            ))
        })?;
        let path = path.display().to_string();
        let mut config = Config::parse_unvalidated(&path, &text)?;
        config.apply_env(&get)?;
        config.validate(&path, &text)?;
        let base = Path::new(&path).parent().unwrap_or(Path::new("."));
        config.resolve_oauth(&path, &text, base, &get)?;
        Ok(config)
    }

    /// Parse and validate TOML text (`path` is used in messages).
    pub fn parse(path: &str, text: &str) -> Result<Config, ConfigError> {
        let config = Self::parse_unvalidated(path, text)?;
        config.validate(path, text)?;
        Ok(config)
    }

    fn parse_unvalidated(path: &str, text: &str) -> Result<Config, ConfigError> {
        toml::from_str(text).map_err(|e| {
            let span = e.span().unwrap_or(0..0);
            let (line, col) = line_of(text, span.start);
            ConfigError(format!(
                "{path}:{line}:{col}: {}\n  fix: correct this entry; every key is documented in the README (Configuration)",
                e.message().trim()
            ))
        })
    }

    fn validate(&self, path: &str, text: &str) -> Result<(), ConfigError> {
        let mut names = BTreeMap::new();
        for s in &self.servers {
            let name = s.name.get_ref();
            let span = s.name.span();
            if name.is_empty() || name.len() > 128 || name.contains(char::is_whitespace) {
                return Err(at(
                    path,
                    text,
                    span,
                    &format!("server name {name:?} is not usable"),
                    "use 1-128 characters without spaces, e.g. name = \"reports\"",
                ));
            }
            if names.insert(name.clone(), ()).is_some() {
                return Err(at(
                    path,
                    text,
                    span,
                    &format!("server {name:?} is defined twice"),
                    "give each [[servers]] entry a unique name",
                ));
            }
            let toolsets = ServerDef {
                toolsets: s.toolsets.clone(),
                ..ServerDef::stdio(name.clone(), "", Vec::new())
            };
            if let Err(problem) = toolsets.validate_toolsets() {
                return Err(at(
                    path,
                    text,
                    span,
                    &problem,
                    "give each [[servers.toolsets]] a name and three distinct tools \
                     (submit_tool, status_tool, cancel_tool) no other toolset of the server uses",
                ));
            }
            match (&s.url, &s.command) {
                (Some(_), Some(_)) => {
                    return Err(at(
                        path,
                        text,
                        span,
                        &format!("server {name:?} has both url and command"),
                        "keep url = \"http://…/mcp\" for Streamable HTTP, or command = \"…\" for stdio",
                    ));
                }
                (None, None) => {
                    return Err(at(
                        path,
                        text,
                        span,
                        &format!("server {name:?} has neither url nor command"),
                        "add url = \"http://host:port/mcp\" or command = \"path/to/server\"",
                    ));
                }
                (Some(url), None) => {
                    if !(url.starts_with("http://") || url.starts_with("https://")) {
                        return Err(at(
                            path,
                            text,
                            span,
                            &format!("server {name:?} url {url:?} is not http(s)"),
                            "use a Streamable HTTP URL such as \"http://127.0.0.1:8080/mcp\"",
                        ));
                    }
                    if !s.args.is_empty() || !s.env.is_empty() || s.cwd.is_some() {
                        return Err(at(
                            path,
                            text,
                            span,
                            &format!("server {name:?} is HTTP but sets args/env/cwd"),
                            "args, env and cwd only apply to command (stdio) servers",
                        ));
                    }
                }
                (None, Some(_)) => {
                    if !s.headers.is_empty() {
                        return Err(at(
                            path,
                            text,
                            span,
                            &format!("server {name:?} is stdio but sets headers"),
                            "headers only apply to url (HTTP) servers",
                        ));
                    }
                }
            }
        }
        for s in &self.servers {
            if let Some(oauth) = &s.oauth {
                validate_oauth(path, text, s, oauth)?;
            }
        }
        for s in &self.servers {
            if s.background.iter().any(|t| t.trim().is_empty()) {
                let name = s.name.get_ref();
                return Err(at(
                    path,
                    text,
                    s.name.span(),
                    &format!("server {name:?} lists an empty tool name in background"),
                    "list upstream tool names, e.g. background = [\"export_report\"]",
                ));
            }
        }
        for o in &self.api.oauth {
            let issuer = o.issuer.get_ref();
            if !(issuer.starts_with("https://") || issuer.starts_with("http://")) {
                return Err(at(
                    path,
                    text,
                    o.issuer.span(),
                    &format!("oauth issuer {issuer:?} is not an http(s) URL"),
                    "use the authorization server's issuer URL, e.g. issuer = \"https://login.example.com/realms/main\"",
                ));
            }
            if let Some(url) = &o.jwks_url
                && !(url.starts_with("https://") || url.starts_with("http://"))
            {
                return Err(at(
                    path,
                    text,
                    o.issuer.span(),
                    &format!("oauth jwks_url {url:?} is not an http(s) URL"),
                    "use the URL of the issuer's JSON Web Key Set, or leave jwks_url out to discover it",
                ));
            }
        }
        // The resource identifier (the audience every OAuth token must
        // carry) is configuration, never a request's Host: without it a
        // token minted for another resource could be presented with that
        // resource's name in the Host header and be accepted.
        if let (Some(first), None) = (self.api.oauth.first(), &self.api.public_url) {
            return Err(at(
                path,
                text,
                first.issuer.span(),
                "[[api.oauth]] needs [api] public_url: OAuth tokens are checked against this gateway's resource identifier, public_url + \"/mcp\", which is never taken from a request",
                "add public_url = \"https://mcptask.example.com\" under [api] (the URL clients reach this gateway at, e.g. \"http://127.0.0.1:7777\" for local use), or set MCPTASK_PUBLIC_URL",
            ));
        }
        if let Some(url) = &self.api.public_url {
            let u = url.get_ref();
            if !(u.starts_with("https://") || u.starts_with("http://")) || u.ends_with('/') {
                return Err(at(
                    path,
                    text,
                    url.span(),
                    &format!("public_url {u:?} is not an http(s) URL without a trailing slash"),
                    "use the URL clients reach this gateway at, e.g. public_url = \"https://mcptask.example.com\"",
                ));
            }
        }
        if self.api.auth == AuthMode::Token
            && self.api.tokens.is_empty()
            && self.api.oauth.is_empty()
        {
            let span = text.find("[api]").map_or(0..0, |i| i..i + 5);
            return Err(at(
                path,
                text,
                span,
                "the API requires a token but none is configured",
                "add [[api.tokens]] with token = \"…\" (or set MCPTASK_OPERATOR_TOKEN; MCPTASK_API_TOKEN is the CLI's credential and `serve` never reads it), or an authorization server with [[api.oauth]] issuer = \"…\", or set auth = \"none\" under [api] for local development",
            ));
        }
        let mut seen_tokens = std::collections::HashSet::new();
        for t in &self.api.tokens {
            if !seen_tokens.insert(t.token.get_ref()) {
                // Which principal would it act for? Refuse rather than pick one.
                return Err(at(
                    path,
                    text,
                    t.token.span(),
                    "this API token is listed twice",
                    "give every principal (and the operator) a token of its own",
                ));
            }
            if t.token.get_ref().len() < 8 {
                return Err(at(
                    path,
                    text,
                    t.token.span(),
                    "API tokens must be at least 8 characters",
                    "use a long random value, e.g. from `openssl rand -hex 24`",
                ));
            }
        }
        for w in &self.webhooks {
            let url = w.url.get_ref();
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(at(
                    path,
                    text,
                    w.url.span(),
                    &format!("webhook url {url:?} is not http(s)"),
                    "use a full URL such as \"https://example.com/hooks/mcptask\"",
                ));
            }
        }
        let limits = &self.limits;
        let bad_limit = limits
            .per_principal_rate
            .is_some_and(|r| !(r > 0.0 && r.is_finite()))
            || limits.per_principal_burst == Some(0)
            || limits.per_principal_in_flight == Some(0);
        if bad_limit {
            let span = text.find("[limits]").map_or(0..0, |i| i..i + 8);
            return Err(at(
                path,
                text,
                span,
                "a limit under [limits] is zero or not a number",
                "give positive values (leave a key out for no limit), e.g. per_principal_rate = 20",
            ));
        }
        for (i, rule) in self.policy.iter().enumerate() {
            if rule.allow.is_empty() && rule.deny.is_empty() {
                let span = text
                    .match_indices("[[policy]]")
                    .nth(i)
                    .map_or(0..0, |(at, m)| at..at + m.len());
                return Err(at(
                    path,
                    text,
                    span,
                    "this [[policy]] rule neither allows nor denies anything",
                    "add allow = [\"server/tool\", …] or deny = [\"server/*\", …] (\"server/tool\" globs)",
                ));
            }
        }
        if let Some((span, problem, fix)) = self.telemetry.invalid() {
            return Err(at(path, text, span, &problem, fix));
        }
        if let Err(invalid) = self.tracker.validate() {
            let key = invalid.key;
            let span = text.find(key).map_or(0..0, |i| i..i + key.len());
            return Err(at(
                path,
                text,
                span,
                &format!("tracker.{invalid}"),
                invalid.fix,
            ));
        }
        Ok(())
    }

    /// Environment overrides: `MCPTASK_DATABASE_URL`, `MCPTASK_LISTEN`,
    /// `MCPTASK_PUBLIC_URL`, `MCPTASK_AUTH` (`token`|`none`), `MCPTASK_OPERATOR_TOKEN` (an operator
    /// token). `MCPTASK_API_TOKEN` is deliberately not read: it is the CLI's
    /// credential, often a principal's token, and a `serve` started in a
    /// shell that exports it must not turn that token into an operator's.
    pub fn apply_env(&mut self, get: impl Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
        if let Some(url) = get("MCPTASK_DATABASE_URL") {
            self.database.url = url;
        }
        if let Some(listen) = get("MCPTASK_LISTEN") {
            self.api.listen = listen.parse().map_err(|_| {
                ConfigError(format!("MCPTASK_LISTEN={listen:?} is not an address\n  fix: use HOST:PORT, e.g. 127.0.0.1:7777"))
            })?;
        }
        if let Some(url) = get("MCPTASK_PUBLIC_URL") {
            self.api.public_url = Some(Spanned::new(0..0, url));
        }
        if let Some(auth) = get("MCPTASK_AUTH") {
            self.api.auth = match auth.as_str() {
                "token" => AuthMode::Token,
                "none" => AuthMode::None,
                other => {
                    return Err(ConfigError(format!(
                        "MCPTASK_AUTH={other:?} is not a mode\n  fix: use token or none"
                    )));
                }
            };
        }
        if let Some(token) = get("MCPTASK_OPERATOR_TOKEN") {
            if token.len() < 8 {
                return Err(ConfigError("MCPTASK_OPERATOR_TOKEN must be at least 8 characters\n  fix: use a long random value, e.g. from `openssl rand -hex 24`".into()));
            }
            if self.api.tokens.iter().any(|t| t.token.get_ref() == &token) {
                return Err(ConfigError("MCPTASK_OPERATOR_TOKEN is also a token in [[api.tokens]]\n  fix: give the operator a token of its own".into()));
            }
            self.api.tokens.push(TokenSection {
                token: Spanned::new(0..0, token),
                principal: None,
            });
        }
        Ok(())
    }

    /// The tool policy of `[[policy]]`.
    pub fn policy(&self) -> mcptask_core::access::Policy {
        mcptask_core::access::Policy::new(
            self.policy
                .iter()
                .map(|p| mcptask_core::access::Rule {
                    principal: p.principal.clone(),
                    scope: p.scope.clone(),
                    claim: p.claim.as_ref().map(|c| (c.claim.clone(), c.value.clone())),
                    allow: p.allow.clone(),
                    deny: p.deny.clone(),
                })
                .collect(),
        )
    }

    /// Server definitions for the tracker.
    pub fn server_defs(&self) -> Vec<ServerDef> {
        self.server_defs_with(None)
    }

    /// Whether any server authorizes with OAuth.
    pub fn uses_oauth(&self) -> bool {
        self.servers.iter().any(|s| s.oauth.is_some())
    }

    /// The key sealing stored OAuth tokens: `MCPTASK_SECRET_KEY`, else
    /// `[oauth] secret_key_file`; `None` when neither is set.
    pub fn secret_key(
        &self,
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<mcptask_client::oauth::SecretKey>, ConfigError> {
        use mcptask_client::oauth::SecretKey;
        if let Some(text) = get("MCPTASK_SECRET_KEY") {
            return SecretKey::parse(&text)
                .map(Some)
                .map_err(|e| ConfigError(format!("MCPTASK_SECRET_KEY: {e}")));
        }
        let Some(file) = &self.oauth.secret_key_file else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(file.get_ref()).map_err(|e| {
            ConfigError(format!(
                "[oauth] secret_key_file {:?}: cannot read it: {e}\n  fix: point it at the key file (`mcptask config init` writes one) or set MCPTASK_SECRET_KEY",
                file.get_ref()
            ))
        })?;
        SecretKey::parse(&text)
            .map(Some)
            .map_err(|e| ConfigError(format!("[oauth] secret_key_file {:?}: {e}", file.get_ref())))
    }

    /// Server definitions whose OAuth settings use `runtime` (the store and
    /// key of this process).
    pub fn server_defs_with(
        &self,
        runtime: Option<&mcptask_client::oauth::OAuthRuntime>,
    ) -> Vec<ServerDef> {
        self.servers
            .iter()
            .map(|s| ServerDef {
                name: s.name.get_ref().clone(),
                transport: match (&s.url, &s.command) {
                    (Some(url), _) => Transport::Http {
                        url: url.clone(),
                        headers: s.headers.clone(),
                    },
                    (None, command) => Transport::Stdio {
                        command: command.clone().unwrap_or_default(),
                        args: s.args.clone(),
                        env: s.env.clone(),
                        cwd: s.cwd.clone(),
                    },
                },
                call_timeout: s.call_timeout_ms.map(Duration::from_millis),
                connect_timeout: s.connect_timeout_ms.map(Duration::from_millis),
                toolsets: s.toolsets.clone(),
                max_in_flight: s.max_in_flight,
                oauth: s.oauth.as_ref().map(|o| {
                    let settings = o.get_ref().settings();
                    match runtime {
                        Some(r) => settings.with_runtime(r.clone()),
                        None => settings,
                    }
                }),
            })
            .collect()
    }
}

impl OAuthSection {
    /// The client's settings (secrets as resolved at load time).
    pub fn settings(&self) -> mcptask_client::oauth::OAuthSettings {
        use mcptask_client::oauth::{OAuthSettings, Secret};
        let mut settings = OAuthSettings {
            grant: self.grant,
            client_id: self.client_id.clone(),
            client_secret: self
                .resolved_secret
                .clone()
                .or_else(|| self.client_secret.clone())
                .map(Secret),
            token_endpoint_auth: self.token_endpoint_auth,
            private_key_pem: self.resolved_private_key.clone().map(Secret),
            signing_algorithm: self.signing_algorithm.clone(),
            scopes: self.scopes.clone(),
            authorization_server: self.authorization_server.clone(),
            client_metadata_url: self.client_metadata_url.clone(),
            client_name: self.client_name.clone(),
            redirect_uri: self.redirect_uri.clone(),
            ..OAuthSettings::default()
        };
        upstream_auth::apply(self, &mut settings);
        settings
    }
}

fn validate_oauth(
    path: &str,
    text: &str,
    server: &ServerSection,
    oauth: &Spanned<OAuthSection>,
) -> Result<(), ConfigError> {
    use mcptask_client::oauth::{Grant, TokenEndpointAuth};
    let name = server.name.get_ref();
    let span = oauth.span();
    let o = oauth.get_ref();
    let fail = |problem: String, fix: &str| Err(at(path, text, span.clone(), &problem, fix));
    if server.url.is_none() {
        return fail(
            format!("server {name:?} has [servers.oauth] but is not an HTTP server"),
            "OAuth applies to url (Streamable HTTP) servers only; remove [servers.oauth]",
        );
    }
    if server
        .headers
        .keys()
        .any(|k| k.eq_ignore_ascii_case("authorization"))
    {
        return fail(
            format!("server {name:?} sets both an Authorization header and [servers.oauth]"),
            "remove the Authorization header: OAuth sends the bearer token",
        );
    }
    if o.client_secret.is_some() && o.client_secret_env.is_some() {
        return fail(
            format!(
                "server {name:?}: [servers.oauth] sets both client_secret and client_secret_env"
            ),
            "keep one; client_secret_env = \"VAR\" keeps the secret out of the file",
        );
    }
    let has_secret = o.client_secret.is_some() || o.client_secret_env.is_some();
    if o.grant == Grant::ClientCredentials && o.client_id.is_none() {
        return fail(
            format!("server {name:?}: the client_credentials grant needs client_id"),
            "add client_id = \"…\" (the client registered at the authorization server), or use grant = \"authorization_code\"",
        );
    }
    if has_secret && o.client_id.is_none() {
        return fail(
            format!("server {name:?}: [servers.oauth] has a client secret but no client_id"),
            "add the client_id the secret belongs to",
        );
    }
    match o.token_endpoint_auth {
        Some(TokenEndpointAuth::PrivateKeyJwt) if o.private_key_file.is_none() => {
            return fail(
                format!(
                    "server {name:?}: token_endpoint_auth = \"private_key_jwt\" needs private_key_file"
                ),
                "add private_key_file = \"client-key.pem\" (a PKCS#8 PEM private key)",
            );
        }
        Some(TokenEndpointAuth::ClientSecretBasic | TokenEndpointAuth::ClientSecretPost)
            if !has_secret =>
        {
            return fail(
                format!("server {name:?}: this token_endpoint_auth needs a client secret"),
                "add client_secret_env = \"VAR\" (or client_secret = \"…\")",
            );
        }
        _ => {}
    }
    if o.grant == Grant::ClientCredentials
        && !has_secret
        && o.private_key_file.is_none()
        && o.token_endpoint_auth != Some(TokenEndpointAuth::None)
    {
        return fail(
            format!("server {name:?}: the client_credentials grant needs a credential"),
            "add client_secret_env = \"VAR\" (or client_secret), or private_key_file for private_key_jwt",
        );
    }
    if let Err((problem, fix)) = upstream_auth::check(name, o) {
        return fail(problem, &fix);
    }
    if let Some(alg) = &o.signing_algorithm
        && !matches!(
            alg.as_str(),
            "ES256" | "ES384" | "RS256" | "RS384" | "RS512" | "PS256" | "PS384" | "PS512" | "EdDSA"
        )
    {
        return fail(
            format!("server {name:?}: signing_algorithm {alg:?} is not supported"),
            "use ES256 (default), ES384, RS256, RS384, RS512, PS256, PS384, PS512 or EdDSA",
        );
    }
    for (key, value) in [
        ("authorization_server", &o.authorization_server),
        ("redirect_uri", &o.redirect_uri),
    ] {
        if let Some(v) = value
            && !(v.starts_with("http://") || v.starts_with("https://"))
        {
            return fail(
                format!("server {name:?}: {key} {v:?} is not an http(s) URL"),
                "use a full URL, e.g. \"https://auth.example.com\"",
            );
        }
    }
    if let Some(v) = &o.client_metadata_url
        && !v.starts_with("https://")
    {
        return fail(
            format!("server {name:?}: client_metadata_url {v:?} is not https"),
            "a client ID metadata document is an https URL with a path, e.g. \"https://app.example.com/client.json\"",
        );
    }
    Ok(())
}

impl Config {
    /// Read what `[servers.oauth]` points at: the secret's environment
    /// variable, the private key file (relative to the configuration's folder).
    fn resolve_oauth(
        &mut self,
        path: &str,
        text: &str,
        base: &Path,
        get: &impl Fn(&str) -> Option<String>,
    ) -> Result<(), ConfigError> {
        if let Some(file) = &mut self.oauth.secret_key_file {
            let full = base.join(file.get_ref());
            *file.get_mut() = full.display().to_string();
        }
        for s in &mut self.servers {
            let name = s.name.get_ref().clone();
            let Some(oauth) = &mut s.oauth else { continue };
            let span = oauth.span();
            let o = oauth.get_mut();
            if let Err((problem, fix)) = upstream_auth::resolve(&name, o, base, get) {
                return Err(at(path, text, span, &problem, &fix));
            }
            if let Some(var) = &o.client_secret_env {
                match get(var) {
                    Some(secret) if !secret.is_empty() => o.resolved_secret = Some(secret),
                    _ => {
                        return Err(at(
                            path,
                            text,
                            span,
                            &format!("server {name:?}: client_secret_env {var:?} is not set"),
                            &format!("export {var}=… before starting mcptask"),
                        ));
                    }
                }
            }
            if let Some(file) = &o.private_key_file {
                let full = base.join(file);
                match std::fs::read_to_string(&full) {
                    Ok(pem) => o.resolved_private_key = Some(pem),
                    Err(e) => {
                        return Err(at(
                            path,
                            text,
                            span,
                            &format!(
                                "server {name:?}: cannot read private_key_file {}: {e}",
                                full.display()
                            ),
                            "point private_key_file at a PEM private key (relative paths start at the configuration's folder)",
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[database]
url = "sqlite:x.db"

[api]
listen = "127.0.0.1:0"
[[api.tokens]]
token = "0123456789abcdef"
principal = "alice"

[tracker]
poll_min_ms = 100
idle_tick_ms = 50

[[servers]]
name = "demo"
url = "http://127.0.0.1:8080/mcp"
headers = { Authorization = "Bearer t" }

[[servers]]
name = "local"
command = "mcptask"
args = ["demo-server", "--stdio"]

[[webhooks]]
url = "http://127.0.0.1:9/hook"
secret = "s3cret"
"#;

    #[test]
    fn a_full_file_parses() {
        let c = Config::parse("mcptask.toml", GOOD).unwrap();
        assert_eq!(c.database.url, "sqlite:x.db");
        assert_eq!(c.server_defs().len(), 2);
        assert_eq!(c.tracker.policy.poll.min_ms, 100);
        assert_eq!(c.tracker.idle_tick, Duration::from_millis(50));
        assert_eq!(c.api.tokens[0].principal.as_deref(), Some("alice"));
    }

    /// The audience of OAuth tokens is configuration: an issuer without a
    /// `public_url` is refused, at the issuer's line, with the fix; the
    /// environment can supply it.
    #[test]
    fn oauth_needs_a_public_url() {
        let text = "[api]\n[[api.oauth]]\nissuer = \"https://login.example.com\"\n";
        let e = Config::parse("gw.toml", text).unwrap_err().0;
        assert!(e.starts_with("gw.toml:3:"), "{e}");
        assert!(
            e.contains("public_url")
                && e.contains("never taken from a request")
                && e.contains("fix:"),
            "{e}"
        );
        let with = text.replace(
            "[api]\n",
            "[api]\npublic_url = \"https://gw.example.com\"\n",
        );
        assert!(Config::parse("gw.toml", &with).is_ok());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gw.toml");
        std::fs::write(&path, text).unwrap();
        let c = Config::load_with_env(&path, |k| {
            (k == "MCPTASK_PUBLIC_URL").then(|| "https://gw.example.com".to_string())
        })
        .unwrap();
        assert_eq!(
            c.api.public_url.as_ref().map(|u| u.get_ref().as_str()),
            Some("https://gw.example.com")
        );
    }

    #[test]
    fn errors_name_the_file_the_line_and_the_fix() {
        let bad = GOOD.replace("listen =", "liste =");
        let e = Config::parse("mcptask.toml", &bad).unwrap_err().0;
        assert!(e.starts_with("mcptask.toml:6:"), "{e}");
        assert!(e.contains("unknown field") && e.contains("fix:"), "{e}");

        let both = GOOD.replace(
            "command = \"mcptask\"",
            "command = \"mcptask\"\nurl = \"http://x/mcp\"",
        );
        let e = Config::parse("mcptask.toml", &both).unwrap_err().0;
        assert!(e.starts_with("mcptask.toml:21:"), "{e}");
        assert!(e.contains("both url and command"), "{e}");

        let no_token = "[api]\nauth = \"token\"\n";
        let e = Config::parse("gw.toml", no_token).unwrap_err().0;
        assert!(
            e.starts_with("gw.toml:1:") && e.contains("MCPTASK_API_TOKEN"),
            "{e}"
        );

        let twice = GOOD.replace("name = \"local\"", "name = \"demo\"");
        let e = Config::parse("mcptask.toml", &twice).unwrap_err().0;
        assert!(
            e.contains("defined twice") && e.starts_with("mcptask.toml:21:"),
            "{e}"
        );

        let ftp = GOOD.replace("http://127.0.0.1:8080/mcp", "ftp://x/mcp");
        let e = Config::parse("mcptask.toml", &ftp).unwrap_err().0;
        assert!(e.contains("is not http(s)"), "{e}");

        let zero = GOOD.replace("poll_min_ms = 100", "poll_min_ms = 0");
        let e = Config::parse("mcptask.toml", &zero).unwrap_err().0;
        assert!(e.contains("tracker.poll_min_ms must be positive"), "{e}");
    }

    fn with_toolsets(toolsets: &str) -> String {
        GOOD.replace(
            "args = [\"demo-server\", \"--stdio\"]\n",
            &format!("args = [\"demo-server\", \"--stdio\"]\n{toolsets}"),
        )
    }

    #[test]
    fn toolsets_reach_the_server_definition() {
        let text = with_toolsets(
            "[[servers.toolsets]]\nname = \"jobs\"\nsubmit_tool = \"submit_job\"\n\
             status_tool = \"job_status\"\ncancel_tool = \"cancel_job\"\n",
        );
        let c = Config::parse("mcptask.toml", &text).unwrap();
        let defs = c.server_defs();
        let local = defs.iter().find(|d| d.name == "local").unwrap();
        let t = local.toolset_for("submit_job").unwrap();
        assert_eq!(
            (t.status_tool.as_str(), t.cancel_tool.as_str()),
            ("job_status", "cancel_job")
        );
        assert!(
            defs.iter()
                .find(|d| d.name == "demo")
                .unwrap()
                .toolsets
                .is_empty()
        );
    }

    #[test]
    fn bad_toolsets_are_config_errors() {
        let reused = with_toolsets(
            "[[servers.toolsets]]\nname = \"jobs\"\nsubmit_tool = \"submit_job\"\n\
             status_tool = \"submit_job\"\ncancel_tool = \"cancel_job\"\n",
        );
        let e = Config::parse("mcptask.toml", &reused).unwrap_err().0;
        assert!(
            e.starts_with("mcptask.toml:21:") && e.contains("unique") && e.contains("fix:"),
            "{e}"
        );
        let missing = with_toolsets("[[servers.toolsets]]\nname = \"jobs\"\nsubmit_tool = \"s\"\n");
        let e = Config::parse("mcptask.toml", &missing).unwrap_err().0;
        assert!(e.contains("status_tool"), "{e}");
        let unknown = with_toolsets(
            "[[servers.toolsets]]\nname = \"j\"\nsubmit_tool = \"a\"\nstatus_tool = \"b\"\n\
             cancel_tool = \"c\"\nanswer_tool = \"d\"\n",
        );
        let e = Config::parse("mcptask.toml", &unknown).unwrap_err().0;
        assert!(e.contains("answer_tool"), "{e}");
    }

    #[test]
    fn environment_overrides_apply_before_validation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.toml");
        // No token in the file: the operator token from the environment
        // makes it valid (overrides are validated with the file).
        std::fs::write(&path, "[api]\nauth = \"token\"\n").unwrap();
        let c = Config::load_with_env(&path, |k| match k {
            "MCPTASK_DATABASE_URL" => Some("postgres://u@h/db".into()),
            "MCPTASK_LISTEN" => Some("0.0.0.0:9000".into()),
            "MCPTASK_OPERATOR_TOKEN" => Some("abcdefghijkl".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(c.database.url, "postgres://u@h/db");
        assert_eq!(c.api.listen.port(), 9000);
        assert_eq!(c.api.auth, AuthMode::Token);
        assert_eq!(c.api.tokens.len(), 1);
        assert_eq!(c.api.tokens[0].principal, None);
        let e = Config::load_with_env(&path, |k| (k == "MCPTASK_LISTEN").then(|| "nope".into()))
            .unwrap_err()
            .0;
        assert!(e.contains("MCPTASK_LISTEN"), "{e}");
        // MCPTASK_AUTH=none from the environment relaxes a file that asks for tokens.
        Config::load_with_env(&path, |k| (k == "MCPTASK_AUTH").then(|| "none".into())).unwrap();
    }

    /// The token trap: `serve` started in a shell that exports a
    /// principal's CLI credential must not make it an operator token.
    #[test]
    fn the_cli_credential_never_becomes_an_operator_token() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.toml");
        let alice = "[api]\nauth = \"token\"\n[[api.tokens]]\ntoken = \"alice-token-123\"\nprincipal = \"alice\"\n";
        std::fs::write(&path, alice).unwrap();
        let c = Config::load_with_env(&path, |k| {
            (k == "MCPTASK_API_TOKEN").then(|| "alice-token-123".into())
        })
        .unwrap();
        assert_eq!(
            c.api.tokens.len(),
            1,
            "MCPTASK_API_TOKEN is not read by serve"
        );
        assert_eq!(c.api.tokens[0].principal.as_deref(), Some("alice"));
        // Without any token, the error says which variable serve does read.
        std::fs::write(&path, "[api]\nauth = \"token\"\n").unwrap();
        let e = Config::load_with_env(&path, |k| {
            (k == "MCPTASK_API_TOKEN").then(|| "alice-token-123".into())
        })
        .unwrap_err()
        .0;
        assert!(
            e.contains("MCPTASK_OPERATOR_TOKEN") && e.contains("never reads"),
            "{e}"
        );
        // The operator variable may not reuse a principal's token.
        std::fs::write(&path, alice).unwrap();
        let e = Config::load_with_env(&path, |k| {
            (k == "MCPTASK_OPERATOR_TOKEN").then(|| "alice-token-123".into())
        })
        .unwrap_err()
        .0;
        assert!(e.contains("also a token"), "{e}");
        // Nor may the file list one token twice.
        let twice = format!("{alice}[[api.tokens]]\ntoken = \"alice-token-123\"\n");
        let e = Config::parse("m.toml", &twice).unwrap_err().0;
        assert!(
            e.contains("listed twice") && e.starts_with("m.toml:7:"),
            "{e}"
        );
    }
}
