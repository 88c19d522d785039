//! `[servers.identity]`: whose credential a server's calls carry (see
//! docs/AUTHORIZATION.md, "The caller's identity at the upstream"): the
//! keys, their checks, and the [`Identity`] they make with what they name
//! outside the file (read at load time).
//!
//! ```toml
//! [[servers]]
//! name = "reports"
//! url = "https://reports.example.com/mcp"
//! [servers.identity]
//! mode = "per_principal"
//! [servers.identity.principals.alice]
//! token_env = "ALICE_REPORTS_TOKEN"
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use mcptask_client::identity::{ExchangeSettings, Identity};
use mcptask_client::oauth::{Secret, TokenSource};
use serde::{Deserialize, Serialize};
use toml::Spanned;

use super::url::is_http_url;
use super::{ConfigError, ServerSection, Source, upstream_auth};

/// `mode` of `[servers.identity]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IdentityMode {
    /// The gateway's own credential (the default).
    #[default]
    Gateway,
    /// Each principal's own token for the server.
    PerPrincipal,
    /// The caller's token exchanged for one of the server (RFC 8693).
    TokenExchange,
}

/// `[servers.identity.principals.<name>]`: one principal's token.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct PrincipalToken {
    /// The environment variable holding it (read at load time).
    #[serde(default)]
    pub token_env: Option<String>,
    /// A file holding it (read for every request, so it can rotate).
    #[serde(default)]
    pub token_file: Option<String>,
}

/// `[servers.identity]`.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct IdentitySection {
    /// Whose credential the server's calls carry.
    #[serde(default)]
    pub mode: IdentityMode,
    /// `per_principal`: each principal's token.
    #[serde(default)]
    pub principals: BTreeMap<String, PrincipalToken>,
    /// `token_exchange`: the token endpoint.
    #[serde(default)]
    pub token_endpoint: Option<String>,
    /// `token_exchange`: the gateway's client id there.
    #[serde(default)]
    pub client_id: Option<String>,
    /// `token_exchange`: the environment variable holding its secret
    /// (HTTP Basic); without it, a public client.
    #[serde(default)]
    pub client_secret_env: Option<String>,
    /// `token_exchange`: the `audience` asked for.
    #[serde(default)]
    pub audience: Option<String>,
    /// `token_exchange`: the `resource` asked for (default: the server's url).
    #[serde(default)]
    pub resource: Option<String>,
    /// `token_exchange`: the scopes asked for.
    #[serde(default)]
    pub scopes: Vec<String>,
}

type Problem = upstream_auth::Problem;

fn problem(problem: String, fix: &str) -> Result<(), Problem> {
    Err((problem, fix.to_string()))
}

impl IdentitySection {
    /// What `server`'s `[servers.identity]` gets wrong, at the table.
    pub(crate) fn check(
        server: &ServerSection,
        identity: &Spanned<IdentitySection>,
        src: &Source,
    ) -> Result<(), ConfigError> {
        identity
            .get_ref()
            .problem(server)
            .map_err(|(problem, fix)| src.at(identity.span(), &problem, &fix))
    }

    fn problem(&self, server: &ServerSection) -> Result<(), Problem> {
        let name = server.name();
        let exchange_keys = self.token_endpoint.is_some()
            || self.client_id.is_some()
            || self.client_secret_env.is_some()
            || self.audience.is_some()
            || self.resource.is_some()
            || !self.scopes.is_empty();
        if self.mode != IdentityMode::Gateway && server.url.is_none() {
            return problem(
                format!(
                    "server {name:?} is a stdio server: its calls cannot carry the caller's identity"
                ),
                "use mode = \"gateway\" (or remove [servers.identity]); per_principal and token_exchange apply to url (HTTP) servers only",
            );
        }
        if self.mode != IdentityMode::PerPrincipal && !self.principals.is_empty() {
            return problem(
                format!(
                    "server {name:?}: [servers.identity.principals] is for mode = \"per_principal\""
                ),
                "set mode = \"per_principal\", or remove the principals",
            );
        }
        if self.mode != IdentityMode::TokenExchange && exchange_keys {
            return problem(
                format!(
                    "server {name:?}: token_endpoint, client_id, client_secret_env, audience, resource and scopes are for mode = \"token_exchange\""
                ),
                "set mode = \"token_exchange\", or remove them",
            );
        }
        match self.mode {
            IdentityMode::Gateway => Ok(()),
            IdentityMode::PerPrincipal => self.principals_problem(name),
            IdentityMode::TokenExchange => self.exchange_problem(name),
        }
    }

    fn principals_problem(&self, name: &str) -> Result<(), Problem> {
        if self.principals.is_empty() {
            return problem(
                format!(
                    "server {name:?}: mode = \"per_principal\" names no principal's credential"
                ),
                "add [servers.identity.principals.<principal>] with token_env = \"VAR\" (or token_file = \"…\") for each principal that calls it",
            );
        }
        for (principal, token) in &self.principals {
            match (&token.token_env, &token.token_file) {
                (Some(_), Some(_)) => {
                    return problem(
                        format!(
                            "server {name:?}: principal {principal:?} sets both token_env and token_file"
                        ),
                        "keep one",
                    );
                }
                (None, None) => {
                    return problem(
                        format!("server {name:?}: principal {principal:?} has no token"),
                        "add token_env = \"VAR\" or token_file = \"path\"",
                    );
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn exchange_problem(&self, name: &str) -> Result<(), Problem> {
        match &self.token_endpoint {
            None => {
                return problem(
                    format!("server {name:?}: mode = \"token_exchange\" needs token_endpoint"),
                    "add token_endpoint = \"https://idp.example.com/oauth/token\" (where the caller's token is exchanged)",
                );
            }
            Some(url) if !is_http_url(url) => {
                return problem(
                    format!("server {name:?}: token_endpoint {url:?} is not an http(s) URL"),
                    "use the token endpoint's full URL, e.g. \"https://idp.example.com/oauth/token\"",
                );
            }
            Some(_) => {}
        }
        if self
            .client_id
            .as_deref()
            .is_none_or(|c| c.trim().is_empty())
        {
            return problem(
                format!("server {name:?}: mode = \"token_exchange\" needs client_id"),
                "add client_id = \"…\": the gateway's client at the token endpoint",
            );
        }
        if let Some(resource) = &self.resource
            && !is_http_url(resource)
        {
            return problem(
                format!("server {name:?}: resource {resource:?} is not an http(s) URL"),
                "use the upstream's URL, or remove resource (the server's url is the default)",
            );
        }
        Ok(())
    }

    /// The identity these keys make for server `name` at `url`, with what
    /// they name read now (`base`: the configuration's folder; `get`: the
    /// environment).
    pub(crate) fn resolve(
        &self,
        name: &str,
        url: Option<&str>,
        base: &Path,
        get: &impl Fn(&str) -> Option<String>,
    ) -> Result<Identity, Problem> {
        let from_env = |key: &str, var: &str| match get(var) {
            Some(value) if !value.trim().is_empty() => Ok(Secret(value.trim().to_string())),
            _ => Err((
                format!("server {name:?}: {key} {var:?} is not set"),
                format!("export {var}=… before starting mcptask"),
            )),
        };
        match self.mode {
            IdentityMode::Gateway => Ok(Identity::Gateway),
            IdentityMode::PerPrincipal => {
                let mut tokens = BTreeMap::new();
                for (principal, token) in &self.principals {
                    let source = match (&token.token_env, &token.token_file) {
                        (Some(var), _) => TokenSource::Value(from_env(
                            &format!("principal {principal:?} token_env"),
                            var,
                        )?),
                        (None, Some(file)) => {
                            let full = base.join(file);
                            let source = TokenSource::File(full.clone());
                            source.read().map_err(|e| {
                                (
                                    format!("server {name:?}: principal {principal:?} token_file: {e}"),
                                    format!(
                                        "point token_file at the file the token is kept in (relative paths start at the configuration's folder): {}",
                                        full.display()
                                    ),
                                )
                            })?;
                            source
                        }
                        (None, None) => continue,
                    };
                    tokens.insert(principal.clone(), source);
                }
                Ok(Identity::PerPrincipal(tokens))
            }
            IdentityMode::TokenExchange => {
                let client_secret = self
                    .client_secret_env
                    .as_ref()
                    .map(|var| from_env("client_secret_env", var))
                    .transpose()?;
                Ok(Identity::TokenExchange(ExchangeSettings {
                    token_endpoint: self.token_endpoint.clone().unwrap_or_default(),
                    client_id: self.client_id.clone().unwrap_or_default(),
                    client_secret,
                    audience: self.audience.clone(),
                    resource: self.resource.clone().or_else(|| url.map(str::to_string)),
                    scopes: self.scopes.clone(),
                    runtime: Default::default(),
                }))
            }
        }
    }
}
