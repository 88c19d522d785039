//! OAuth 2.1 to upstream MCP servers (the MCP authorization spec,
//! 2026-07-28): a server that answers 401 is discovered (RFC 9728 protected
//! resource metadata, then RFC 8414 / OpenID authorization server metadata),
//! a token is obtained (client credentials, or an authorization code with
//! PKCE), kept sealed in the store, sent as a bearer token, refreshed before
//! it expires, and stepped up on a 403 `insufficient_scope`.
//!
//! rmcp's `auth` module does the protocol (discovery, issuer and resource
//! checks, PKCE, dynamic registration, client ID metadata documents, scope
//! selection, refresh); this module decides when, keeps the tokens in the
//! store, coordinates replicas, and reports failures in words.
//!
//! A server opts in with [`OAuthSettings`] on its
//! [`ServerDef`](crate::ServerDef); the process supplies an [`OAuthRuntime`]
//! (the token store, the sealing key, the clock, who approves an
//! authorization).

mod authorizer;
mod http;
mod jwt;
mod seal;
mod vault;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use mcptask_core::Clock;
use mcptask_core::store::OAuthTokenStore;
use serde::{Deserialize, Serialize};

pub use authorizer::ServerAuth;
pub(crate) use http::AuthorizingClient;
pub use seal::{SealError, SecretKey};
pub use vault::MemoryTokenStore;

/// How tokens are obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Grant {
    /// Machine to machine: the client's own credentials (secret or signed
    /// assertion) buy the token; no user involved.
    #[default]
    ClientCredentials,
    /// A user approves once (`mcptask login`); the refresh token keeps it going.
    AuthorizationCode,
}

/// How the client authenticates at the token endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenEndpointAuth {
    /// HTTP Basic with the client id and secret.
    ClientSecretBasic,
    /// The id and secret in the form body.
    ClientSecretPost,
    /// A JWT assertion signed with the client's private key (RFC 7523).
    PrivateKeyJwt,
    /// A public client: the client id only.
    None,
}

/// A secret value: never printed, never serialized.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(…)")
    }
}

impl Secret {
    /// The secret text.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

/// A server's OAuth settings (`[servers.oauth]`).
///
/// ```
/// use mcptask_client::oauth::{Grant, OAuthSettings};
/// let s = OAuthSettings::client_credentials("svc", "s3cret");
/// assert_eq!(s.grant, Grant::ClientCredentials);
/// assert!(!format!("{s:?}").contains("s3cret"), "secrets never show");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct OAuthSettings {
    /// How tokens are obtained.
    #[serde(default)]
    pub grant: Grant,
    /// A client id registered with the authorization server beforehand
    /// (without one, authorization-code clients use a client ID metadata
    /// document or dynamic registration).
    #[serde(default)]
    pub client_id: Option<String>,
    /// Its secret.
    #[serde(skip)]
    pub client_secret: Option<Secret>,
    /// How to authenticate at the token endpoint (default: what the
    /// authorization server supports, preferring the secret when there is one).
    #[serde(default)]
    pub token_endpoint_auth: Option<TokenEndpointAuth>,
    /// PEM private key (PKCS#8, EC or RSA) for `private_key_jwt`.
    #[serde(skip)]
    pub private_key_pem: Option<Secret>,
    /// Its JWS algorithm (default ES256).
    #[serde(default)]
    pub signing_algorithm: Option<String>,
    /// Scopes to ask for (default: what the server's challenge or metadata names).
    #[serde(default)]
    pub scopes: Vec<String>,
    /// The authorization server to use instead of the one the server's
    /// metadata names (its issuer URL).
    #[serde(default)]
    pub authorization_server: Option<String>,
    /// An https URL of this client's metadata document, used as its client
    /// id where the authorization server supports that.
    #[serde(default)]
    pub client_metadata_url: Option<String>,
    /// The name to register under (dynamic registration).
    #[serde(default)]
    pub client_name: Option<String>,
    /// Where the authorization server sends the user back (`mcptask login`
    /// listens there).
    #[serde(default)]
    pub redirect_uri: Option<String>,
    /// The process's token store and key (see [`OAuthRuntime`]); the
    /// in-memory fallback when unset.
    #[serde(skip)]
    pub runtime: RuntimeSlot,
}

/// An optional [`OAuthRuntime`] carried by settings: not configuration, so
/// it never makes two settings differ.
#[derive(Clone, Default)]
pub struct RuntimeSlot(Option<OAuthRuntime>);

impl RuntimeSlot {
    /// A slot holding `runtime`.
    pub fn new(runtime: OAuthRuntime) -> Self {
        Self(Some(runtime))
    }

    /// The runtime, if one was installed.
    pub fn get(&self) -> Option<OAuthRuntime> {
        self.0.clone()
    }
}

impl PartialEq for RuntimeSlot {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for RuntimeSlot {}

impl std::fmt::Debug for RuntimeSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "RuntimeSlot(set)"
        } else {
            "RuntimeSlot(unset)"
        })
    }
}

impl OAuthSettings {
    /// Client credentials with a secret.
    pub fn client_credentials(client_id: impl Into<String>, secret: impl Into<String>) -> Self {
        Self {
            grant: Grant::ClientCredentials,
            client_id: Some(client_id.into()),
            client_secret: Some(Secret(secret.into())),
            ..Self::default()
        }
    }

    /// Authorization code with PKCE, for a client that needs a user.
    pub fn authorization_code() -> Self {
        Self {
            grant: Grant::AuthorizationCode,
            ..Self::default()
        }
    }

    /// These settings, using `runtime`.
    pub fn with_runtime(mut self, runtime: OAuthRuntime) -> Self {
        self.runtime = RuntimeSlot::new(runtime);
        self
    }

    /// The redirect URI, or the default loopback one.
    pub fn redirect_uri(&self) -> String {
        self.redirect_uri
            .clone()
            .unwrap_or_else(|| DEFAULT_REDIRECT_URI.to_string())
    }
}

/// Where `mcptask login` listens unless told otherwise.
pub const DEFAULT_REDIRECT_URI: &str = "http://127.0.0.1:8976/callback";

/// Who approves an authorization request of the authorization-code grant.
#[async_trait]
pub trait UserAgent: Send + Sync {
    /// Take the user to `authorization_url`; return the URL the authorization
    /// server redirected back to (it carries `code`, `state` and maybe `iss`).
    async fn approve(
        &self,
        server: &str,
        authorization_url: &str,
        redirect_uri: &str,
    ) -> Result<String, String>;
}

/// The unattended default: nobody can approve, so say how to log in.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoUser;

#[async_trait]
impl UserAgent for NoUser {
    async fn approve(&self, server: &str, _: &str, _: &str) -> Result<String, String> {
        Err(format!(
            "server {server:?} needs a user to authorize it: run `mcptask login {server}` (with the same --config)"
        ))
    }
}

/// What a process brings to OAuth: where tokens are kept, the key that
/// seals them, the clock, who approves authorizations, and this replica's
/// name for refresh leases. Clones share the per-server state.
#[derive(Clone)]
pub struct OAuthRuntime {
    pub(crate) inner: Arc<RuntimeInner>,
}

pub(crate) struct RuntimeInner {
    pub(crate) store: Arc<dyn OAuthTokenStore>,
    pub(crate) key: SecretKey,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) agent: Arc<dyn UserAgent>,
    pub(crate) holder: String,
    servers: Mutex<HashMap<String, Arc<ServerAuth>>>,
}

impl std::fmt::Debug for OAuthRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthRuntime")
            .field("holder", &self.inner.holder)
            .finish_non_exhaustive()
    }
}

impl OAuthRuntime {
    /// A runtime over `store`, sealing with `key`.
    pub fn new(store: Arc<dyn OAuthTokenStore>, key: SecretKey, clock: Arc<dyn Clock>) -> Self {
        Self::with_agent(store, key, clock, Arc::new(NoUser))
    }

    /// [`OAuthRuntime::new`] with who approves authorization-code requests.
    pub fn with_agent(
        store: Arc<dyn OAuthTokenStore>,
        key: SecretKey,
        clock: Arc<dyn Clock>,
        agent: Arc<dyn UserAgent>,
    ) -> Self {
        Self {
            inner: Arc::new(RuntimeInner {
                store,
                key,
                clock,
                agent,
                holder: format!("replica-{}", uuid::Uuid::new_v4()),
                servers: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// A runtime keeping tokens in memory only (no store configured).
    pub fn in_memory() -> Self {
        Self::new(
            Arc::new(MemoryTokenStore::default()),
            SecretKey::generate().expect("randomness"),
            Arc::new(mcptask_core::SystemClock),
        )
    }

    /// The process-wide in-memory runtime used when none was installed.
    pub fn fallback() -> Self {
        static FALLBACK: std::sync::OnceLock<OAuthRuntime> = std::sync::OnceLock::new();
        FALLBACK.get_or_init(Self::in_memory).clone()
    }

    /// The shared authorization state of the server `name` at `url` with
    /// `settings` (made on first use; a changed definition starts afresh).
    pub fn server(
        &self,
        name: &str,
        url: &str,
        endpoint: &str,
        settings: &OAuthSettings,
    ) -> Arc<ServerAuth> {
        let mut servers = self.inner.servers.lock().expect("oauth servers lock");
        if let Some(existing) = servers.get(name)
            && existing.matches(url, settings)
        {
            return existing.clone();
        }
        let auth = Arc::new(ServerAuth::new(
            self.clone(),
            name.to_string(),
            url.to_string(),
            endpoint.to_string(),
            settings.clone(),
        ));
        servers.insert(name.to_string(), auth.clone());
        auth
    }

    /// What the servers view shows of `server`'s token (never the token).
    pub async fn describe(&self, server: &str) -> Result<String, String> {
        let row = self
            .inner
            .store
            .load_token(server)
            .await
            .map_err(|e| e.to_string())?;
        Ok(mcptask_core::oauth::describe(
            row.as_ref(),
            self.inner.clock.now_ms(),
        ))
    }
}
