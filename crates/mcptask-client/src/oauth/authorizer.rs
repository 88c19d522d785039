//! One server's authorization: which token to send and how (bearer, or
//! DPoP-bound), when to refresh it (once across replicas), and what to do
//! when the server challenges.

use std::sync::Arc;
use std::time::Duration;

use mcptask_core::oauth::{REFRESH_LEASE_MS, TokenFreshness, freshness};
use oauth2::TokenResponse as _;
use rmcp::transport::auth::{
    AuthError, AuthorizationManager, AuthorizationMetadata, AuthorizationMetadataSource,
    AuthorizationRequest, AuthorizationSession, OAuthClientConfig, OAuthTokenResponse,
    StoredCredentials, WWWAuthenticateParams,
};

use super::dpop::{self, Dpop};
use super::grant::{Unattended, grant_name};
use super::http::OAuthHttp;
use super::vault::{RegisteredClient, Sealed, Vault, VaultCredentials};
use super::{Grant, OAuthRuntime, OAuthSettings};

mod present;

pub(crate) use present::Credential;

/// Authorizations in a row without a request getting through, before the
/// server is given up on for [`GIVE_UP_MS`].
const MAX_CONSECUTIVE_AUTHORIZATIONS: u32 = 3;
/// How long calls fail with the last reason after the budget is spent.
const GIVE_UP_MS: i64 = 60_000;
/// How long a failed refresh is not retried (calls fail with its reason).
const RETRY_REFRESH_AFTER_MS: i64 = 5_000;
/// How long to wait for another replica's refresh.
const WAIT_FOR_PEER: Duration = Duration::from_secs(15);

#[derive(Default)]
struct Failure {
    /// Authorizations since a request last got through.
    consecutive: u32,
    /// When the last of them started.
    last_attempt_ms: i64,
    /// The last failure (of an authorization or a refresh), and when.
    last: Option<(String, i64)>,
}

/// The authorization state of one server, shared by all its connections.
pub struct ServerAuth {
    runtime: OAuthRuntime,
    name: String,
    url: String,
    settings: OAuthSettings,
    vault: Arc<Vault>,
    http: Result<Arc<OAuthHttp>, String>,
    /// With `dpop = true`: the key the tokens are bound to, and the nonces.
    dpop: Option<Arc<Dpop>>,
    /// One authorization or refresh at a time in this process; keeps the
    /// rmcp manager of the last authorization for its refreshes.
    flow: tokio::sync::Mutex<Option<AuthorizationManager>>,
    failure: std::sync::Mutex<Failure>,
    /// The last token read from the store while it is fresh, so a request
    /// costs no store read until the token is due (or refused).
    cached: std::sync::Mutex<Option<Cached>>,
}

#[derive(Clone)]
struct Cached {
    credential: Credential,
    expires_at_ms: Option<i64>,
    obtained_at_ms: i64,
}

impl std::fmt::Debug for ServerAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerAuth")
            .field("name", &self.name)
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

fn words(e: AuthError) -> String {
    match e {
        AuthError::AuthorizationServerMismatch { .. }
        | AuthError::AuthorizationServerMissingIssuer { .. } => format!(
            "{e} (RFC 9207: the authorization response does not come from the authorization server that was asked; refusing it)"
        ),
        other => other.to_string(),
    }
}

fn split_scopes(s: Option<&str>) -> Vec<String> {
    s.map(|s| s.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}

fn union(a: &[String], b: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in a.iter().chain(b) {
        if !out.contains(s) {
            out.push(s.clone());
        }
    }
    out
}

impl ServerAuth {
    pub(super) fn new(
        runtime: OAuthRuntime,
        name: String,
        url: String,
        endpoint: String,
        settings: OAuthSettings,
    ) -> Self {
        let dpop = settings.dpop.then(|| Arc::new(Dpop::default()));
        let vault = Arc::new(Vault::new(
            runtime.inner.clone(),
            name.clone(),
            endpoint,
            dpop.clone(),
        ));
        let http =
            OAuthHttp::new(dpop.clone().map(|d| (d, runtime.inner.clock.clone()))).map(Arc::new);
        Self {
            runtime,
            name,
            url,
            settings,
            vault,
            http,
            dpop,
            flow: tokio::sync::Mutex::new(None),
            failure: Default::default(),
            cached: Default::default(),
        }
    }

    pub(super) fn matches(&self, url: &str, settings: &OAuthSettings) -> bool {
        self.url == url && &self.settings == settings
    }

    /// The server's registry name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn now(&self) -> i64 {
        self.runtime.inner.clock.now_ms()
    }

    fn http(&self) -> Result<Arc<OAuthHttp>, String> {
        self.http.clone()
    }

    fn record_failure(&self, message: &str) {
        let mut f = self.failure.lock().expect("failure lock");
        f.last = Some((message.to_string(), self.now()));
    }

    /// A request got through: the authorization budget starts afresh.
    pub(crate) fn succeeded(&self) {
        let mut f = self.failure.lock().expect("failure lock");
        f.consecutive = 0;
        f.last = None;
    }

    fn forget_cached(&self) {
        *self.cached.lock().expect("cache lock") = None;
    }

    /// The failure calls should report instead of trying again, if any.
    fn standing_failure(&self, within_ms: i64) -> Option<String> {
        let f = self.failure.lock().expect("failure lock");
        let (message, at) = f.last.as_ref()?;
        (self.now() - at < within_ms).then(|| message.clone())
    }

    /// The access token to send now: `None` when there is none yet (the
    /// server's 401 then starts an authorization). A token due for refresh
    /// is refreshed first, once across replicas; an expired token whose
    /// refresh fails fails the call with the reason.
    pub async fn bearer(&self) -> Result<Option<String>, String> {
        Ok(self.credential().await?.map(Credential::into_token))
    }

    /// [`ServerAuth::bearer`], with how it is presented.
    pub(crate) async fn credential(&self) -> Result<Option<Credential>, String> {
        if let Some(c) = self.cached.lock().expect("cache lock").clone()
            && freshness(c.expires_at_ms, c.obtained_at_ms, self.now()) == TokenFreshness::Fresh
        {
            return Ok(Some(c.credential));
        }
        self.forget_cached();
        let Some((row, sealed)) = self.vault.load().await? else {
            return Ok(None);
        };
        let Some(credential) = self.presentable(&sealed)? else {
            return Ok(None);
        };
        match freshness(row.expires_at_ms, row.updated_at_ms, self.now()) {
            TokenFreshness::Fresh => {
                *self.cached.lock().expect("cache lock") = Some(Cached {
                    credential: credential.clone(),
                    expires_at_ms: row.expires_at_ms,
                    obtained_at_ms: row.updated_at_ms,
                });
                Ok(Some(credential))
            }
            TokenFreshness::RefreshDue => match self.refresh_credential().await {
                Ok(fresh) => Ok(Some(fresh)),
                Err(e) => {
                    tracing::warn!(server = %self.name, error = %e, "OAuth token refresh failed; the current token is still valid");
                    Ok(Some(credential))
                }
            },
            TokenFreshness::Expired => self.refresh_credential().await.map(Some),
        }
    }

    /// Refresh the stored token (or get a new one, for the grants without a
    /// user), unless another task or replica just did; the new access token.
    pub async fn refresh(&self) -> Result<String, String> {
        self.refresh_credential().await.map(Credential::into_token)
    }

    async fn refresh_credential(&self) -> Result<Credential, String> {
        if let Some(reason) = self.standing_failure(RETRY_REFRESH_AFTER_MS) {
            return Err(reason);
        }
        let mut flow = self.flow.lock().await;
        self.renew_under_lease(&mut flow, None).await
    }

    /// Renew the token while holding the row's refresh lease, so that one
    /// replica refreshes and the others use what it saved. A token the
    /// server `refused` is not taken as fresh.
    async fn renew_under_lease(
        &self,
        flow: &mut Option<AuthorizationManager>,
        refused: Option<&str>,
    ) -> Result<Credential, String> {
        let store = &self.runtime.inner.store;
        let holder = &self.runtime.inner.holder;
        let started = std::time::Instant::now();
        // Once the lease is ours the row is read once more: a peer may have
        // refreshed and saved (which frees the lease) since our last read,
        // and a second token must not be bought with what was read before.
        let mut leased = false;
        let sealed = loop {
            let (row, sealed) =
                self.vault.load().await?.ok_or_else(|| {
                    format!("server {:?} has no OAuth token to refresh", self.name)
                })?;
            let now = self.now();
            if freshness(row.expires_at_ms, row.updated_at_ms, now) == TokenFreshness::Fresh
                && let Ok(Some(current)) = self.presentable(&sealed)
                && Some(current.token()) != refused
            {
                if leased {
                    // Not kept: a replica whose token the server refuses
                    // later must not wait for a lease nobody uses.
                    let _ = store.release_refresh(&self.name, holder).await;
                }
                return Ok(current);
            }
            if leased {
                break sealed;
            }
            leased = store
                .try_lease_refresh(&self.name, holder, now, now + REFRESH_LEASE_MS)
                .await
                .map_err(|e| e.to_string())?;
            if leased {
                continue;
            }
            if started.elapsed() > WAIT_FOR_PEER {
                return Err(format!(
                    "another replica is refreshing the OAuth token of {:?} and has not finished",
                    self.name
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        match self.renew(flow, &sealed).await {
            Ok(token) => {
                self.succeeded();
                tracing::info!(server = %self.name, "OAuth token refreshed");
                Ok(token)
            }
            Err(e) => {
                let e = format!("refreshing the OAuth token of {:?} failed: {e}", self.name);
                let _ = store.fail_refresh(&self.name, holder, &e, self.now()).await;
                self.record_failure(&e);
                Err(e)
            }
        }
    }

    /// Get a new access token from what is stored, without a user.
    async fn renew(
        &self,
        flow: &mut Option<AuthorizationManager>,
        sealed: &Sealed,
    ) -> Result<Credential, String> {
        match self.settings.grant {
            Grant::ClientCredentials | Grant::JwtBearer | Grant::EnterpriseManaged => {
                let metadata = match &sealed.metadata {
                    Some(m) => m.clone(),
                    None => {
                        let manager = self.manager().await?;
                        self.discover(&manager, None).await?
                    }
                };
                let scopes = split_scopes(Some(
                    &sealed
                        .credentials
                        .as_ref()
                        .map(|c| c.granted_scopes.join(" "))
                        .unwrap_or_default(),
                ));
                let token = self.unattended(&metadata, &scopes).await?;
                self.obtained(&token)
            }
            Grant::AuthorizationCode => {
                let refreshable = sealed
                    .credentials
                    .as_ref()
                    .and_then(|c| c.token_response.as_ref())
                    .is_some_and(|t| t.refresh_token().is_some());
                if !refreshable {
                    return Err(format!(
                        "the token expired and there is no refresh token; run `mcptask login {}`",
                        self.name
                    ));
                }
                if flow.is_none() {
                    *flow = Some(self.refresh_manager(sealed).await?);
                }
                let manager = flow.as_ref().expect("manager set");
                let fresh = manager.refresh_token().await.map_err(|e| match e {
                    AuthError::TokenRefreshRejected(_) | AuthError::AuthorizationRequired => {
                        format!(
                            "{e}; the authorization server no longer accepts the refresh token: run `mcptask login {}`",
                            self.name
                        )
                    }
                    other => words(other),
                })?;
                self.obtained(&fresh)
            }
        }
    }

    async fn manager(&self) -> Result<AuthorizationManager, String> {
        let mut manager =
            AuthorizationManager::new_with_oauth_http_client(self.url.as_str(), self.http()?)
                .await
                .map_err(words)?;
        manager.set_credential_store(VaultCredentials(self.vault.clone()));
        Ok(manager)
    }

    /// A manager able to refresh what was stored by an earlier process.
    async fn refresh_manager(&self, sealed: &Sealed) -> Result<AuthorizationManager, String> {
        let mut manager = self.manager().await?;
        let metadata = match &sealed.metadata {
            Some(m) => m.clone(),
            None => self.discover(&manager, None).await?,
        };
        manager.set_metadata(metadata);
        let credentials = sealed.credentials.as_ref().ok_or("no stored credentials")?;
        let secret = match (&self.settings.client_id, &sealed.registered) {
            (Some(id), _) if *id == credentials.client_id => self
                .settings
                .client_secret
                .as_ref()
                .map(|s| s.expose().to_string()),
            (_, Some(r)) if r.client_id == credentials.client_id => r.client_secret.clone(),
            _ => None,
        };
        let mut config =
            OAuthClientConfig::new(credentials.client_id.clone(), self.settings.redirect_uri());
        if let Some(secret) = secret {
            config = config.with_client_secret(secret);
        }
        manager.configure_client(config).map_err(words)?;
        Ok(manager)
    }

    /// Discover the authorization server of this resource (from the
    /// challenge when there is one, else from the well-known locations), or
    /// the configured one.
    async fn discover(
        &self,
        manager: &AuthorizationManager,
        challenge: Option<&str>,
    ) -> Result<AuthorizationMetadata, String> {
        let resolution = match &self.settings.authorization_server {
            Some(issuer) => {
                let direct =
                    AuthorizationManager::new_with_oauth_http_client(issuer.as_str(), self.http()?)
                        .await
                        .map_err(words)?;
                direct.resolve_metadata().await.map_err(words)?
            }
            None => manager
                .resolve_metadata_from_challenge(challenge)
                .await
                .map_err(words)?,
        };
        if resolution.source == AuthorizationMetadataSource::LegacyEndpointFallback {
            return Err(format!(
                "server {:?} asks for authorization but publishes no usable OAuth metadata (RFC 9728 protected resource metadata, RFC 8414 authorization server metadata); set authorization_server under [servers.oauth]",
                self.name
            ));
        }
        if self.dpop.is_some() {
            dpop::check_algorithms(
                resolution
                    .metadata
                    .additional_fields
                    .get("dpop_signing_alg_values_supported"),
            )
            .map_err(|e| format!("server {:?}: {e}", self.name))?;
        }
        Ok(resolution.metadata)
    }

    /// The server refused `sent` (401) or wants more scope (403
    /// `insufficient_scope`): authorize again, within the budget.
    pub async fn on_challenge(
        &self,
        sent: Option<&str>,
        challenge: &str,
        insufficient_scope: bool,
    ) -> Result<(), String> {
        self.forget_cached();
        let mut flow = self.flow.lock().await;
        // Another task may have authorized while this one waited.
        if let Some((row, sealed)) = self.vault.load().await?
            && let Ok(Some(current)) = self.presentable(&sealed)
            && Some(current.token()) != sent
            && freshness(row.expires_at_ms, row.updated_at_ms, self.now())
                != TokenFreshness::Expired
        {
            return Ok(());
        }
        {
            let mut f = self.failure.lock().expect("failure lock");
            let now = self.now();
            if f.consecutive >= MAX_CONSECUTIVE_AUTHORIZATIONS {
                if now - f.last_attempt_ms < GIVE_UP_MS {
                    return Err(match &f.last {
                        Some((m, _)) => m.clone(),
                        None => format!(
                            "server {:?} keeps refusing its OAuth token after {} authorizations; not trying again for {} s",
                            self.name,
                            f.consecutive,
                            GIVE_UP_MS / 1000
                        ),
                    });
                }
                f.consecutive = 0;
            }
            f.consecutive += 1;
            f.last_attempt_ms = now;
        }
        // A refused token with a refresh token behind it: a refresh may do
        // (a revoked or rotated access token) without asking a user again.
        if !insufficient_scope && sent.is_some() && self.settings.grant == Grant::AuthorizationCode
        {
            let refreshable = self
                .vault
                .load()
                .await?
                .is_some_and(|(row, _)| row.refreshable);
            if refreshable && self.renew_under_lease(&mut flow, sent).await.is_ok() {
                return Ok(());
            }
        }
        let result = self
            .authorize(&mut flow, Some(challenge), insufficient_scope)
            .await;
        match result {
            Ok(()) => {
                tracing::info!(server = %self.name, "OAuth authorization obtained");
                Ok(())
            }
            Err(e) => {
                let e = format!("authorizing with server {:?} failed: {e}", self.name);
                self.record_failure(&e);
                Err(e)
            }
        }
    }

    /// Authorize now, without waiting for a challenge (`mcptask login`).
    pub async fn login(&self) -> Result<(), String> {
        let mut flow = self.flow.lock().await;
        self.authorize(&mut flow, None, false).await
    }

    async fn authorize(
        &self,
        flow: &mut Option<AuthorizationManager>,
        challenge: Option<&str>,
        insufficient_scope: bool,
    ) -> Result<(), String> {
        let mut manager = self.manager().await?;
        let metadata = self.discover(&manager, challenge).await?;
        manager.set_metadata(metadata.clone());
        let issuer = metadata.issuer.clone();
        let previous = self.vault.load().await?.map(|(_, s)| s);
        // SEP-2352: what another authorization server issued is not reused.
        let same_issuer = |i: &Option<String>| i == &issuer;
        let registered = previous
            .as_ref()
            .and_then(|s| s.registered.clone())
            .filter(|r| same_issuer(&r.issuer));
        let prior_scopes = previous
            .as_ref()
            .and_then(|s| s.credentials.as_ref())
            .filter(|c| same_issuer(&c.issuer))
            .map(|c| c.granted_scopes.clone())
            .unwrap_or_default();
        let challenged = challenge
            .map(|c| {
                let base = url::Url::parse(&self.url).map_err(|e| e.to_string())?;
                Ok::<_, String>(split_scopes(
                    WWWAuthenticateParams::parse(c, &base).scope.as_deref(),
                ))
            })
            .transpose()?
            .unwrap_or_default();
        let scopes = if !self.settings.scopes.is_empty() {
            if insufficient_scope {
                union(&self.settings.scopes, &challenged)
            } else {
                self.settings.scopes.clone()
            }
        } else if insufficient_scope {
            // SEP-2350: keep what was granted, add what is challenged.
            union(&prior_scopes, &challenged)
        } else {
            Vec::new()
        };
        self.vault
            .set_extra(Some(metadata.clone()), registered.clone());
        match self.settings.grant {
            Grant::ClientCredentials | Grant::JwtBearer | Grant::EnterpriseManaged => {
                let scopes = if scopes.is_empty() {
                    manager.select_scopes(None, &[])
                } else {
                    scopes
                };
                let token = self.unattended(&metadata, &scopes).await?;
                self.obtained(&token)?;
                *flow = None;
                Ok(())
            }
            Grant::AuthorizationCode => {
                let manager = self
                    .authorization_code(manager, &metadata, scopes, registered)
                    .await?;
                *flow = Some(manager);
                Ok(())
            }
        }
    }

    async fn authorization_code(
        &self,
        mut manager: AuthorizationManager,
        metadata: &AuthorizationMetadata,
        scopes: Vec<String>,
        registered: Option<RegisteredClient>,
    ) -> Result<AuthorizationManager, String> {
        let redirect = self.settings.redirect_uri();
        let client_name = self
            .settings
            .client_name
            .clone()
            .unwrap_or_else(|| "mcptask".to_string());
        let mut request = AuthorizationRequest::new(redirect.clone())
            .with_client_name(client_name.clone())
            .with_application_type("native");
        if !scopes.is_empty() {
            request = request.with_scopes(scopes.clone());
        }
        let supports_cimd = metadata
            .additional_fields
            .get("client_id_metadata_document_supported")
            .and_then(|v| v.as_bool())
            .unwrap_or(false);
        if let Some(id) = &self.settings.client_id {
            request = request.with_preregistered_client(id.clone());
            if let Some(secret) = &self.settings.client_secret {
                request = request.with_client_secret(secret.expose().to_string());
            }
        } else if let (Some(url), true) = (&self.settings.client_metadata_url, supports_cimd) {
            request = request.with_client_metadata_url(url.clone());
        } else if let Some(client) = registered {
            request = request.with_preregistered_client(client.client_id.clone());
            if let Some(secret) = client.client_secret {
                request = request.with_client_secret(secret);
            }
        } else if metadata.registration_endpoint.is_some() {
            let register_scopes = if scopes.is_empty() {
                manager.select_scopes(None, &[])
            } else {
                scopes.clone()
            };
            let refs: Vec<&str> = register_scopes.iter().map(String::as_str).collect();
            let config = manager
                .register_client(&client_name, &redirect, &refs)
                .await
                .map_err(|e| format!("dynamic client registration failed: {}", words(e)))?;
            self.vault.set_extra(
                None,
                Some(RegisteredClient {
                    client_id: config.client_id.clone(),
                    client_secret: config.client_secret.clone(),
                    issuer: metadata.issuer.clone(),
                }),
            );
            request = request.with_preregistered_client(config.client_id);
            if let Some(secret) = config.client_secret {
                request = request.with_client_secret(secret);
            }
        } else {
            return Err(format!(
                "the authorization server of {:?} offers no dynamic registration and no client ID metadata documents; register a client there and set client_id (and client_secret) under [servers.oauth]",
                self.name
            ));
        }
        let session = AuthorizationSession::new(manager, request)
            .await
            .map_err(|(_, e)| words(e))?;
        let callback = self
            .runtime
            .inner
            .agent
            .approve(&self.name, session.get_authorization_url(), &redirect)
            .await?;
        session
            .handle_callback_url(&callback)
            .await
            .map_err(words)?;
        Ok(session.auth_manager)
    }

    /// A token obtained without a user (see [`super::grant`]), stored.
    async fn unattended(
        &self,
        metadata: &AuthorizationMetadata,
        scopes: &[String],
    ) -> Result<OAuthTokenResponse, String> {
        let mut resource = url::Url::parse(&self.url).map_err(|e| e.to_string())?;
        resource.set_fragment(None);
        let http = self.http()?;
        let (token, granted) = Unattended {
            server: &self.name,
            settings: &self.settings,
            metadata,
            resource: resource.as_str(),
            scopes,
            now_secs: self.now() / 1000,
        }
        .obtain(&http)
        .await?;
        let credentials = StoredCredentials::new(
            self.settings.client_id.clone().unwrap_or_default(),
            Some(token.clone()),
            granted,
            Some((self.now() / 1000) as u64),
        )
        .with_issuer(metadata.issuer.clone());
        self.vault.set_extra(Some(metadata.clone()), None);
        self.vault.save(Some(credentials)).await?;
        tracing::debug!(server = %self.name, grant = grant_name(self.settings.grant), "OAuth token obtained");
        Ok(token)
    }

    /// Forget the stored credentials of this server.
    pub async fn logout(&self) -> Result<(), String> {
        let _flow = self.flow.lock().await;
        self.forget_cached();
        self.vault.clear().await
    }
}

#[cfg(test)]
#[path = "authorizer_tests.rs"]
mod tests;
