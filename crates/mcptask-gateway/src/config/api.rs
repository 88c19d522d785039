//! `[api]`: the HTTP listener and who may call it (static tokens,
//! `[[api.oauth]]` issuers, `public_url`), with its checks.

use std::collections::HashSet;
use std::net::SocketAddr;

use serde::Deserialize;
use toml::Spanned;

use super::url::is_http_url;
use super::{ConfigError, IssuerSection, Reload, Source, Spans};

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

impl AuthMode {
    /// `token` or `none`, as the file spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            AuthMode::Token => "token",
            AuthMode::None => "none",
        }
    }
}

/// `[api]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiSection {
    /// Address of the HTTP API, dashboard and metrics.
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// Whether requests need a token (`token`, the default) or not (`none`,
    /// local development only).
    #[serde(default)]
    pub auth: AuthMode,
    /// `[[api.tokens]]`: the static bearer tokens and whom each stands for.
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
    /// Principals besides operators that may read `/metrics` (a
    /// Prometheus scraper's token, say), so that a scraper needs no
    /// operator token. Every other principal is refused 403.
    #[serde(default)]
    pub metrics_principals: Vec<String>,
}

/// An API token. With a `principal`, its holder only sees and creates tasks
/// bound to that principal; without one it is an operator token that sees all.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenSection {
    /// The bearer value (at least 16 characters, not a placeholder:
    /// [`weak_token`](super::weak_token)).
    pub token: Spanned<String>,
    /// The principal its holder acts as; none: an operator token.
    #[serde(default)]
    pub principal: Option<String>,
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
            metrics_principals: Vec::new(),
        }
    }
}

fn default_listen() -> SocketAddr {
    "127.0.0.1:7777".parse().expect("valid default address")
}

fn default_max_body() -> usize {
    mcptask_core::payload::DEFAULT_MAX_BODY_BYTES
}

impl ApiSection {
    /// Whether `caller` may read `/metrics`: operators, and the principals
    /// of `metrics_principals`.
    pub fn may_read_metrics(&self, caller: &crate::auth::Caller) -> bool {
        caller.operator
            || caller
                .principal
                .as_ref()
                .is_some_and(|p| self.metrics_principals.contains(p))
    }

    /// Who may call (`auth`, `tokens`, `public_url`, `[[api.oauth]]`,
    /// `metrics_principals`): read per request, so a reload applies them.
    pub const RELOAD: Reload = Reload::Live;
    /// The listener (`listen`, `max_body_bytes`) is bound once, at start.
    pub const LISTENER_RELOAD: Reload = Reload::AtStart;

    /// The host of `public_url` (`mcptask.example.com`), if one is set.
    pub fn public_host(&self) -> Option<String> {
        let url = url::Url::parse(self.public_url.as_ref()?.get_ref()).ok()?;
        url.host_str().map(str::to_string)
    }

    /// The issuers, `public_url`, and that some credential is configured.
    pub(crate) fn check(&self, src: &Source, spans: &Spans) -> Result<(), ConfigError> {
        for issuer in &self.oauth {
            issuer.check(src)?;
        }
        // The resource identifier (the audience every OAuth token must
        // carry) is configuration, never a request's Host: without it a
        // token minted for another resource could be presented with that
        // resource's name in the Host header and be accepted.
        if let (Some(first), None) = (self.oauth.first(), &self.public_url) {
            return Err(src.at(
                first.issuer.span(),
                "[[api.oauth]] needs [api] public_url: OAuth tokens are checked against this gateway's resource identifier, public_url + \"/mcp\", which is never taken from a request",
                "add public_url = \"https://mcptask.example.com\" under [api] (the URL clients reach this gateway at, e.g. \"http://127.0.0.1:7777\" for local use), or set MCPTASK_PUBLIC_URL",
            ));
        }
        if let Some(url) = &self.public_url {
            let u = url.get_ref();
            if !is_http_url(u) || u.ends_with('/') {
                return Err(src.at(
                    url.span(),
                    &format!("public_url {u:?} is not an http(s) URL without a trailing slash"),
                    "use the URL clients reach this gateway at, e.g. public_url = \"https://mcptask.example.com\"",
                ));
            }
        }
        if self.auth == AuthMode::Token && self.tokens.is_empty() && self.oauth.is_empty() {
            return Err(src.at(
                spans.api(),
                "the API requires a token but none is configured",
                "add [[api.tokens]] with token = \"…\" (or set MCPTASK_OPERATOR_TOKEN; MCPTASK_API_TOKEN is the CLI's credential and `serve` never reads it), or an authorization server with [[api.oauth]] issuer = \"…\", or set auth = \"none\" under [api] for local development",
            ));
        }
        let mut seen = HashSet::new();
        for t in &self.tokens {
            if !seen.insert(t.token.get_ref()) {
                // Which principal would it act for? Refuse rather than pick one.
                return Err(src.at(
                    t.token.span(),
                    "this API token is listed twice",
                    "give every principal (and the operator) a token of its own",
                ));
            }
            if let Some(why) = super::weak_token(t.token.get_ref()) {
                return Err(src.at(t.token.span(), &why, super::STRONG_TOKEN_FIX));
            }
        }
        Ok(())
    }
}
