//! OAuth 2.1 to upstream MCP servers (the MCP authorization spec,
//! 2026-07-28): a server that answers 401 is discovered (RFC 9728 protected
//! resource metadata, then RFC 8414 / OpenID authorization server metadata),
//! a token is obtained (client credentials, an authorization code with PKCE,
//! a workload's JWT (RFC 7523), or an enterprise ID token exchanged for an
//! ID-JAG (RFC 8693)), kept sealed in the store, sent as a bearer token or
//! bound to a key with DPoP (RFC 9449), refreshed before it expires, and
//! stepped up on a 403 `insufficient_scope`.
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
mod dpop;
mod exchange;
mod grant;
mod http;
mod jwt;
mod resource;
mod seal;
mod settings;
mod vault;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use mcptask_core::Clock;
use mcptask_core::store::OAuthTokenStore;

pub use authorizer::ServerAuth;
pub use dpop::ProofKey;
pub use exchange::{ACCESS_TOKEN_TYPE, ExchangeSettings, Exchanged, TOKEN_EXCHANGE};
pub(crate) use resource::AuthorizingClient;
pub use seal::{SealError, SecretKey};
pub use settings::{
    DEFAULT_REDIRECT_URI, Grant, IdentityProvider, OAuthSettings, RuntimeSlot, Secret,
    TokenEndpointAuth, TokenSource,
};
pub use vault::MemoryTokenStore;

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
