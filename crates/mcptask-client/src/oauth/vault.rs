//! A server's credentials in the store: sealed before they are written,
//! opened after they are read, and handed to rmcp's OAuth machinery through
//! its `CredentialStore` hook.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use mcptask_core::StoreError;
use mcptask_core::oauth::{NewToken, StoredToken, lease_available};
use mcptask_core::store::OAuthTokenStore;
use oauth2::TokenResponse as _;
use rmcp::transport::auth::{AuthError, AuthorizationMetadata, CredentialStore, StoredCredentials};
use serde::{Deserialize, Serialize};

use super::RuntimeInner;
use super::dpop::Dpop;

/// What the sealed blob holds.
#[derive(Clone, Default, Serialize, Deserialize)]
pub(crate) struct Sealed {
    /// rmcp's credentials: client id, token response, granted scopes, issuer.
    pub(crate) credentials: Option<StoredCredentials>,
    /// A client registered dynamically: its id and secret, and the issuer
    /// it is valid with (credentials are not portable across authorization
    /// servers).
    #[serde(default)]
    pub(crate) registered: Option<RegisteredClient>,
    /// The authorization server's metadata, so a refresh needs no discovery.
    #[serde(default)]
    pub(crate) metadata: Option<AuthorizationMetadata>,
    /// The DPoP key the token is bound to (PKCS#8, base64url).
    #[serde(default)]
    pub(crate) dpop_key: Option<String>,
}

#[derive(Clone, Serialize, Deserialize)]
pub(crate) struct RegisteredClient {
    pub(crate) client_id: String,
    pub(crate) client_secret: Option<String>,
    pub(crate) issuer: Option<String>,
}

/// One server's view of the token store.
pub(crate) struct Vault {
    pub(crate) runtime: Arc<RuntimeInner>,
    pub(crate) server: String,
    pub(crate) endpoint: String,
    /// What this process last saved or read beside the credentials (the
    /// registered client, the metadata), so an rmcp save keeps them.
    extra: Mutex<Sealed>,
    /// With DPoP: the key, adopted from what is loaded and saved with what
    /// is saved, so a token and its key are never apart.
    dpop: Option<Arc<Dpop>>,
}

impl Vault {
    pub(crate) fn new(
        runtime: Arc<RuntimeInner>,
        server: String,
        endpoint: String,
        dpop: Option<Arc<Dpop>>,
    ) -> Self {
        Self {
            runtime,
            server,
            endpoint,
            extra: Mutex::new(Sealed::default()),
            dpop,
        }
    }

    /// The row and its opened contents, for this endpoint only.
    pub(crate) async fn load(&self) -> Result<Option<(StoredToken, Sealed)>, String> {
        let Some(row) = self
            .runtime
            .store
            .load_token(&self.server)
            .await
            .map_err(|e| format!("reading the OAuth token of {:?}: {e}", self.server))?
        else {
            return Ok(None);
        };
        if row.endpoint != self.endpoint {
            // Obtained for another endpoint: never sent here.
            return Ok(None);
        }
        // Credentials that do not open (another key) or do not parse are as
        // good as none: the server's next challenge gets new ones, which
        // replace them.
        let opened = self
            .runtime
            .key
            .open(&self.server, &row.sealed)
            .map_err(|e| e.to_string())
            .and_then(|plain| {
                serde_json::from_slice::<Sealed>(&plain)
                    .map_err(|e| format!("stored OAuth credentials are unreadable: {e}"))
            });
        let sealed = match opened {
            Ok(sealed) => sealed,
            Err(e) => {
                tracing::warn!(server = %self.server, "{e}");
                return Ok(None);
            }
        };
        {
            let mut extra = self.extra.lock().expect("vault lock");
            extra.registered = sealed.registered.clone();
            if sealed.metadata.is_some() {
                extra.metadata = sealed.metadata.clone();
            }
        }
        if let (Some(dpop), Some(key)) = (&self.dpop, &sealed.dpop_key)
            && let Err(e) = dpop.adopt(key)
        {
            // A token whose key is lost is as good as none, too.
            tracing::warn!(server = %self.server, "{e}");
            return Ok(None);
        }
        Ok(Some((row, sealed)))
    }

    /// Remember the metadata and registered client to store with the next save.
    pub(crate) fn set_extra(
        &self,
        metadata: Option<AuthorizationMetadata>,
        registered: Option<RegisteredClient>,
    ) {
        let mut extra = self.extra.lock().expect("vault lock");
        if metadata.is_some() {
            extra.metadata = metadata;
        }
        extra.registered = registered;
    }

    pub(crate) fn extra(&self) -> Sealed {
        self.extra.lock().expect("vault lock").clone()
    }

    /// Seal and store `credentials` (with the remembered extras).
    pub(crate) async fn save(&self, credentials: Option<StoredCredentials>) -> Result<(), String> {
        let now = self.runtime.clock.now_ms();
        let mut sealed = self.extra();
        let (expires_at_ms, refreshable, issuer, scopes) = match &credentials {
            Some(c) => {
                let token = c.token_response.as_ref();
                (
                    token
                        .and_then(|t| t.expires_in())
                        .map(|d| now + d.as_millis() as i64),
                    token.is_some_and(|t| t.refresh_token().is_some()),
                    c.issuer.clone(),
                    c.granted_scopes.join(" "),
                )
            }
            None => (None, false, None, String::new()),
        };
        sealed.credentials = credentials;
        sealed.dpop_key = self.dpop.as_ref().and_then(|d| d.stored());
        let plain = serde_json::to_vec(&sealed).map_err(|e| e.to_string())?;
        let blob = self
            .runtime
            .key
            .seal(&self.server, &plain)
            .map_err(|e| e.to_string())?;
        self.runtime
            .store
            .save_token(
                &NewToken {
                    server: self.server.clone(),
                    endpoint: self.endpoint.clone(),
                    sealed: blob,
                    expires_at_ms,
                    refreshable,
                    issuer,
                    scopes,
                },
                now,
            )
            .await
            .map_err(|e| format!("storing the OAuth token of {:?}: {e}", self.server))?;
        Ok(())
    }

    /// Forget the server's credentials (the registered client too).
    pub(crate) async fn clear(&self) -> Result<(), String> {
        *self.extra.lock().expect("vault lock") = Sealed::default();
        if let Some(dpop) = &self.dpop {
            dpop.reset();
        }
        self.runtime
            .store
            .delete_token(&self.server)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

/// rmcp's credential-store hook over a [`Vault`].
#[derive(Clone)]
pub(crate) struct VaultCredentials(pub(crate) Arc<Vault>);

fn store_error(e: String) -> AuthError {
    AuthError::CredentialStoreError(e)
}

#[async_trait]
impl CredentialStore for VaultCredentials {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        Ok(self
            .0
            .load()
            .await
            .map_err(store_error)?
            .and_then(|(_, sealed)| sealed.credentials))
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        self.0.save(Some(credentials)).await.map_err(store_error)
    }

    async fn clear(&self) -> Result<(), AuthError> {
        // Keep the registered client and metadata; drop the tokens.
        self.0.save(None).await.map_err(store_error)
    }
}

/// Tokens kept in memory only: for a client without a database (the
/// conformance client, tests, a library user who installs no store).
#[derive(Debug, Default, Clone)]
pub struct MemoryTokenStore {
    rows: Arc<Mutex<HashMap<String, StoredToken>>>,
}

#[async_trait]
impl OAuthTokenStore for MemoryTokenStore {
    async fn load_token(&self, server: &str) -> Result<Option<StoredToken>, StoreError> {
        Ok(self.rows.lock().expect("rows").get(server).cloned())
    }

    async fn save_token(&self, token: &NewToken, now: i64) -> Result<i64, StoreError> {
        let mut rows = self.rows.lock().expect("rows");
        let version = rows.get(&token.server).map_or(1, |r| r.version + 1);
        rows.insert(
            token.server.clone(),
            StoredToken {
                server: token.server.clone(),
                endpoint: token.endpoint.clone(),
                sealed: token.sealed.clone(),
                expires_at_ms: token.expires_at_ms,
                refreshable: token.refreshable,
                issuer: token.issuer.clone(),
                scopes: token.scopes.clone(),
                updated_at_ms: now,
                version,
                lease_owner: None,
                lease_until_ms: None,
                last_error: None,
                last_error_at_ms: None,
            },
        );
        Ok(version)
    }

    async fn delete_token(&self, server: &str) -> Result<bool, StoreError> {
        Ok(self.rows.lock().expect("rows").remove(server).is_some())
    }

    async fn try_lease_refresh(
        &self,
        server: &str,
        holder: &str,
        now: i64,
        until: i64,
    ) -> Result<bool, StoreError> {
        let mut rows = self.rows.lock().expect("rows");
        let Some(row) = rows.get_mut(server) else {
            return Ok(false);
        };
        if !lease_available(row, holder, now) {
            return Ok(false);
        }
        row.lease_owner = Some(holder.to_string());
        row.lease_until_ms = Some(until);
        Ok(true)
    }

    async fn release_refresh(&self, server: &str, holder: &str) -> Result<(), StoreError> {
        if let Some(row) = self.rows.lock().expect("rows").get_mut(server) {
            release_lease(row, holder);
        }
        Ok(())
    }

    async fn fail_refresh(
        &self,
        server: &str,
        holder: &str,
        error: &str,
        now: i64,
    ) -> Result<(), StoreError> {
        let mut rows = self.rows.lock().expect("rows");
        if let Some(row) = rows.get_mut(server) {
            row.last_error = Some(mcptask_core::oauth::bounded_error(error));
            row.last_error_at_ms = Some(now);
            release_lease(row, holder);
        }
        Ok(())
    }
}

/// `holder`'s refresh lease of `row` given back (another's is left alone).
fn release_lease(row: &mut StoredToken, holder: &str) {
    if row.lease_owner.as_deref() == Some(holder) {
        row.lease_owner = None;
        row.lease_until_ms = None;
    }
}
