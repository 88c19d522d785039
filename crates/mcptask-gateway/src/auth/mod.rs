//! Who is calling: the caller every face (REST, dashboard, MCP front) acts
//! for, decided once by the HTTP layer and read by the faces.
//!
//! A request is authenticated by a static token of `[[api.tokens]]`, or by
//! a JWT access token of an `[[api.oauth]]` issuer (MCP authorization: the
//! gateway is an OAuth 2.1 resource server and describes itself at
//! `/.well-known/oauth-protected-resource`, RFC 9728). A refused request
//! learns where to get a token (`WWW-Authenticate`), never why its token was
//! refused: that is logged.

mod jwt;
mod keys;

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use serde_json::{Value, json};

use crate::config::{AuthMode, Config};
use jwt::Issuer;

/// A request for another principal than the caller's own, made without an
/// operator's token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NotAllowed(pub String);

/// Who is calling.
#[derive(Debug, Clone, Default)]
pub struct Caller {
    /// Tasks are scoped to this principal (a principal token).
    pub principal: Option<String>,
    /// An operator token (or no auth): sees every task.
    pub operator: bool,
    /// The scopes its OAuth access token grants (none for a static token).
    pub scopes: Vec<String>,
    /// Its OAuth access token's claims (none for a static token).
    pub claims: Option<Arc<Value>>,
    /// The virtual server it came through (`/mcp/<name>`): it sees only
    /// that server's selection (`crate::route::access`).
    pub through: Option<Arc<crate::virtual_server::Through>>,
    /// A static operator token's short hash (as `GET /api/v1/config` shows
    /// tokens): how an admin change names the operator who made it.
    pub token_print: Option<String>,
    /// The bearer token it authenticated with: what a server taking the
    /// caller's identity by token exchange exchanges (never sent upstream
    /// itself; `mcptask_client::identity`).
    pub token: Option<mcptask_client::oauth::Secret>,
}

impl Caller {
    /// The name of the virtual server it came through, if any.
    pub fn via(&self) -> Option<&str> {
        self.through
            .as_deref()
            .map(crate::virtual_server::Through::name)
    }

    /// What tool policy selects this caller by.
    pub fn access(&self) -> mcptask_core::access::Caller<'_> {
        mcptask_core::access::Caller {
            principal: self.principal.as_deref(),
            scopes: &self.scopes,
            claims: self.claims.as_deref(),
        }
    }

    /// Whether this caller may see a task bound to `principal`.
    pub fn may_see(&self, principal: Option<&str>) -> bool {
        self.operator || self.principal.as_deref() == principal
    }

    /// The principal a request acts for. An operator may name any principal
    /// (or none); a principal token acts for itself, and naming anyone else
    /// is refused rather than silently ignored, so a caller never mistakes
    /// its own tasks for someone else's.
    pub fn acting_for(&self, requested: Option<String>) -> Result<Option<String>, NotAllowed> {
        if self.operator {
            return Ok(requested);
        }
        match requested {
            Some(other) if Some(&other) != self.principal.as_ref() => Err(NotAllowed(format!(
                "this token acts for principal {:?} only; {other:?} needs an operator token",
                self.principal.as_deref().unwrap_or_default()
            ))),
            _ => Ok(self.principal.clone()),
        }
    }
}

/// Why a request was not authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No credentials.
    Missing,
    /// Credentials that do not authenticate (unknown static token, or a JWT
    /// that fails a check); the reason is for the log only.
    Invalid(String),
    /// A valid token without these (space-separated) scopes.
    InsufficientScope(String),
}

impl Refusal {
    fn invalid(why: impl Into<String>) -> Self {
        Refusal::Invalid(why.into())
    }
}

/// How requests are authenticated, from `[api]`. Cheap to clone; every
/// clone reads the settings in force now ([`Authenticator::set`] replaces
/// them for requests authenticated from then on, as a configuration reload
/// does).
#[derive(Clone)]
pub struct Authenticator {
    live: Arc<RwLock<Arc<Settings>>>,
    http: reqwest::Client,
}

/// The `[api]` settings authentication reads, replaced whole.
struct Settings {
    mode: AuthMode,
    tokens: HashMap<String, Option<String>>,
    issuers: Vec<Arc<Issuer>>,
    public_url: Option<String>,
}

impl Settings {
    /// From `config`; an issuer configured exactly as one of `previous`
    /// keeps it (and the keys it fetched).
    fn new(config: &Config, http: &reqwest::Client, previous: Option<&Settings>) -> Self {
        let tokens = config
            .api
            .tokens
            .iter()
            .map(|t| (t.token.get_ref().clone(), t.principal.clone()))
            .collect();
        let issuers = config
            .api
            .oauth
            .iter()
            .map(|o| {
                previous
                    .and_then(|p| p.issuers.iter().find(|i| i.configured_as(o)))
                    .cloned()
                    .unwrap_or_else(|| Arc::new(Issuer::new(o.clone(), http.clone())))
            })
            .collect();
        Self {
            mode: config.api.auth,
            tokens,
            issuers,
            public_url: config.api.public_url.as_ref().map(|u| u.get_ref().clone()),
        }
    }

    /// The resource identifier of the MCP endpoint: `public_url` + `/mcp`.
    /// Configuration only (a configuration with `[[api.oauth]]` and no
    /// `public_url` is refused), never a request's `Host` or forwarded
    /// headers: the audience check, the metadata and the challenge all read
    /// this one value.
    fn resource(&self) -> Option<String> {
        self.public_url.as_ref().map(|base| format!("{base}/mcp"))
    }

    /// RFC 9728's well-known URL of the resource's metadata.
    fn metadata_url(&self) -> Option<String> {
        self.public_url
            .as_ref()
            .map(|base| format!("{base}/.well-known/oauth-protected-resource/mcp"))
    }
}

impl Authenticator {
    /// From the configuration; `http` fetches the issuers' keys.
    pub fn new(config: &Config, http: reqwest::Client) -> Self {
        let settings = Settings::new(config, &http, None);
        Self {
            live: Arc::new(RwLock::new(Arc::new(settings))),
            http,
        }
    }

    /// Put `config`'s `[api]` authentication in force for the requests
    /// authenticated from now on (tokens, `[[api.oauth]]` issuers, `auth`,
    /// `public_url`). An issuer whose settings did not change keeps its
    /// fetched keys.
    pub fn set(&self, config: &Config) {
        let previous = self.settings();
        let next = Settings::new(config, &self.http, Some(&previous));
        *self.live.write().expect("auth settings lock") = Arc::new(next);
    }

    fn settings(&self) -> Arc<Settings> {
        self.live.read().expect("auth settings lock").clone()
    }

    /// Whether OAuth access tokens are accepted.
    pub fn oauth(&self) -> bool {
        !self.settings().issuers.is_empty()
    }

    /// The resource identifier of the MCP endpoint (the default audience):
    /// `public_url` + `/mcp`, when one is configured.
    pub fn resource(&self) -> Option<String> {
        self.settings().resource()
    }

    /// The caller `bearer` speaks for.
    pub async fn authenticate(&self, bearer: Option<&str>) -> Result<Caller, Refusal> {
        let settings = self.settings();
        if settings.mode == AuthMode::None {
            return Ok(Caller {
                operator: true,
                ..Caller::default()
            });
        }
        let token = bearer.filter(|t| !t.is_empty()).ok_or(Refusal::Missing)?;
        let own = Some(mcptask_client::oauth::Secret(token.to_string()));
        if let Some(principal) = settings.tokens.get(token) {
            return Ok(Caller {
                token: own,
                operator: principal.is_none(),
                principal: principal.clone(),
                token_print: principal
                    .is_none()
                    .then(|| crate::config::reload::short_hash(&token)),
                ..Caller::default()
            });
        }
        if settings.issuers.is_empty() {
            return Err(Refusal::invalid("not a configured token"));
        }
        // Which issuer's keys to check it with: the one it names (checked
        // again, with the signature, by the issuer's validation).
        let named: Option<String> = jsonwebtoken::dangerous::insecure_decode_claims::<Value>(token)
            .ok()
            .and_then(|c| c.get("iss").and_then(Value::as_str).map(str::to_string));
        let issuer = settings
            .issuers
            .iter()
            .find(|i| Some(i.issuer()) == named.as_deref())
            .ok_or_else(|| Refusal::invalid(format!("issuer {named:?} is not configured")))?;
        // Checked at start: OAuth is configured only with a public_url.
        let resource = settings
            .resource()
            .ok_or_else(|| Refusal::invalid("no public_url is configured"))?;
        let mut caller = issuer.verify(token, &resource).await?;
        caller.token = own;
        Ok(caller)
    }

    /// The protected resource metadata (RFC 9728), when OAuth is
    /// configured.
    pub fn resource_metadata(&self) -> Option<Value> {
        let settings = self.settings();
        if settings.issuers.is_empty() {
            return None;
        }
        let mut scopes: Vec<&str> = settings
            .issuers
            .iter()
            .flat_map(|i| i.scopes().iter().map(String::as_str))
            .collect();
        scopes.sort_unstable();
        scopes.dedup();
        Some(json!({
            "resource": settings.resource()?,
            "authorization_servers": settings.issuers.iter().map(|i| i.issuer()).collect::<Vec<_>>(),
            "scopes_supported": scopes,
            "bearer_methods_supported": ["header"],
            "resource_name": "mcptask",
        }))
    }

    /// The `WWW-Authenticate` value of a refusal (RFC 6750): a token that
    /// was refused says `error="invalid_token"`, so a host tells its user
    /// the token is wrong instead of starting a login; where to get a token
    /// (`resource_metadata`, RFC 9728) only when OAuth is configured.
    pub fn challenge(&self, refusal: &Refusal) -> String {
        let settings = self.settings();
        let metadata = match settings.metadata_url() {
            Some(url) if !settings.issuers.is_empty() => url,
            _ => {
                return match refusal {
                    Refusal::Missing => "Bearer".into(),
                    Refusal::Invalid(_) | Refusal::InsufficientScope(_) => {
                        "Bearer error=\"invalid_token\", error_description=\"the token is not one this gateway accepts\"".into()
                    }
                };
            }
        };
        let scopes: Vec<&str> = settings
            .issuers
            .iter()
            .flat_map(|i| i.scopes().iter().map(String::as_str))
            .collect();
        match refusal {
            Refusal::InsufficientScope(missing) => format!(
                "Bearer error=\"insufficient_scope\", scope=\"{missing}\", resource_metadata=\"{metadata}\""
            ),
            Refusal::Invalid(_) => {
                format!("Bearer error=\"invalid_token\", resource_metadata=\"{metadata}\"")
            }
            Refusal::Missing if scopes.is_empty() => {
                format!("Bearer resource_metadata=\"{metadata}\"")
            }
            Refusal::Missing => format!(
                "Bearer resource_metadata=\"{metadata}\", scope=\"{}\"",
                scopes.join(" ")
            ),
        }
    }
}
