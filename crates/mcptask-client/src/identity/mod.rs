//! Whose credential a call carries to its upstream (docs/AUTHORIZATION.md,
//! "The caller's identity at the upstream").
//!
//! A server's [`Identity`] says it: the gateway's own (its `[servers.oauth]`
//! grant or static headers, as every exchange of the server's session
//! carries them), each principal's own configured token, or a token
//! exchanged (RFC 8693) for the caller's at a token endpoint. A call of a
//! per-principal or exchanging server carries its [`CallCredential`] on
//! each of its requests (an rmcp request extension the transport reads,
//! [`CallCredential::attach`]), never the gateway's own; a call whose
//! credential cannot be had is refused (or, later, fails) with a reason
//! that says so.
//!
//! [`Identities`] is the one place that decides what a call carries: at its
//! create ([`Identities::begin`]) and on every later exchange
//! ([`Identities::for_call`]). Exchanged tokens are held per call id, so
//! one call's credential never serves another's, and kept sealed in the
//! store where the process has a key (`kept`).

mod kept;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

pub use crate::oauth::ExchangeSettings;
use crate::oauth::{Exchanged, Secret, TokenSource};
use crate::remote::RemoteError;

/// Whose credential a server's calls carry (`identity` of `[[servers]]`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Identity {
    /// The gateway's own, as the server's session carries it (the default).
    #[default]
    Gateway,
    /// Each principal's own token for this server, by principal; a
    /// principal without one is refused.
    PerPrincipal(BTreeMap<String, TokenSource>),
    /// The caller's token exchanged for one whose audience is the server.
    TokenExchange(ExchangeSettings),
}

/// The bearer token one call's requests carry to its upstream, in place of
/// the gateway's own credential.
#[derive(Clone)]
pub struct CallCredential(Arc<Secret>);

impl std::fmt::Debug for CallCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CallCredential(…)")
    }
}

impl CallCredential {
    /// A credential of bearer token `token`.
    pub fn bearer(token: impl Into<String>) -> Self {
        Self(Arc::new(Secret(token.into())))
    }

    /// The token.
    pub(crate) fn token(&self) -> &str {
        self.0.expose()
    }

    /// `request` made to carry `credential` (nothing: the session's own):
    /// the one way a call's request gets its credential. The transport
    /// ([`crate::oauth::AuthorizingClient`]) sends it as the request's
    /// `Authorization` and nothing of the gateway's.
    pub fn attach(credential: Option<&Self>, request: &mut rmcp::model::ClientRequest) {
        use rmcp::model::GetExtensions as _;
        if let Some(c) = credential {
            request.extensions_mut().insert(c.clone());
        }
    }

    /// The credential `request` carries, if any.
    pub(crate) fn of(request: &rmcp::model::ClientRequest) -> Option<&Self> {
        use rmcp::model::GetExtensions as _;
        request.extensions().get::<Self>()
    }
}

/// An exchanged token held for one call, with where it is kept.
#[derive(Clone)]
struct Held {
    token: Exchanged,
    server: String,
    runtime: Option<crate::oauth::OAuthRuntime>,
}

/// The credentials of this process's calls (see the module docs).
#[derive(Default)]
pub struct Identities {
    held: Mutex<HashMap<String, Held>>,
}

/// How long before its expiry an exchanged token is refreshed.
const REFRESH_MARGIN_MS: i64 = 30_000;

impl Identities {
    /// What call `call_id` of `principal` to server `server` (whose identity
    /// is `identity`) carries on its create; `subject` is the token the
    /// caller authenticated to the gateway with. For an exchanging server the
    /// exchange is made now and its token held for the call's later
    /// exchanges.
    pub async fn begin(
        &self,
        server: &str,
        identity: &Identity,
        call_id: &str,
        principal: Option<&str>,
        subject: Option<&Secret>,
    ) -> Result<Option<CallCredential>, RemoteError> {
        match identity {
            Identity::Gateway => Ok(None),
            Identity::PerPrincipal(tokens) => per_principal(server, tokens, principal).map(Some),
            Identity::TokenExchange(settings) => {
                let subject = subject.ok_or_else(|| {
                    refused(format!(
                        "server {server:?} takes the caller's identity by token exchange, and this call came with no token to exchange (authenticate to the gateway with a bearer token)"
                    ))
                })?;
                let got = settings.exchange(server, subject.expose()).await?;
                let credential = CallCredential::bearer(got.access.expose());
                let runtime = settings.runtime.get();
                if let Some(runtime) = &runtime {
                    kept::save(runtime, server, call_id, &got)
                        .await
                        .map_err(RemoteError::Transient)?;
                }
                self.hold(call_id, server, got, runtime);
                Ok(Some(credential))
            }
        }
    }

    /// What a later exchange of call `call_id` (a poll, a cancel, an
    /// answer) carries: the principal's token, or the call's exchanged one
    /// (refreshed when it is about to expire and the issuer gave a refresh
    /// token). A call that can no longer be authorized gets an error that
    /// ends it.
    pub async fn for_call(
        &self,
        server: &str,
        identity: &Identity,
        call_id: &str,
        principal: Option<&str>,
        now_ms: i64,
    ) -> Result<Option<CallCredential>, RemoteError> {
        match identity {
            Identity::Gateway => Ok(None),
            Identity::PerPrincipal(tokens) => per_principal(server, tokens, principal).map(Some),
            Identity::TokenExchange(settings) => {
                let held = self
                    .held
                    .lock()
                    .expect("identities lock")
                    .get(call_id)
                    .cloned();
                let runtime = settings.runtime.get();
                let held = match (held, &runtime) {
                    (Some(held), _) => Some(held.token),
                    // Made by another process (or before a restart): read
                    // back from the store.
                    (None, Some(runtime)) => {
                        let kept = kept::load(runtime, server, call_id)
                            .await
                            .map_err(RemoteError::Transient)?;
                        if let Some(token) = &kept {
                            self.hold(call_id, server, token.clone(), Some(runtime.clone()));
                        }
                        kept
                    }
                    (None, None) => None,
                };
                let Some(held) = held else {
                    return Err(refused(format!(
                        "the call's exchanged token for server {server:?} is not held by this gateway process (it was made before a restart, or on another replica, and no secret key keeps exchanged tokens in the database); the call can no longer be authorized"
                    )));
                };
                let due = held
                    .expires_at_ms
                    .is_some_and(|at| now_ms + REFRESH_MARGIN_MS >= at);
                if !due {
                    return Ok(Some(CallCredential::bearer(held.access.expose())));
                }
                let Some(refresh) = &held.refresh else {
                    if held.expires_at_ms.is_some_and(|at| now_ms >= at) {
                        return Err(refused(format!(
                            "the exchanged token for server {server:?} expired and the issuer gave no refresh token; the call can no longer be authorized"
                        )));
                    }
                    return Ok(Some(CallCredential::bearer(held.access.expose())));
                };
                let fresh = settings.refresh(server, refresh.expose()).await?;
                let credential = CallCredential::bearer(fresh.access.expose());
                if let Some(runtime) = &runtime {
                    kept::save(runtime, server, call_id, &fresh)
                        .await
                        .map_err(RemoteError::Transient)?;
                }
                self.hold(call_id, server, fresh, runtime);
                Ok(Some(credential))
            }
        }
    }

    /// Forget what is held for `call_id` (it ended).
    pub fn forget(&self, call_id: &str) {
        let held = self.held.lock().expect("identities lock").remove(call_id);
        if let Some(Held {
            server,
            runtime: Some(runtime),
            ..
        }) = held
        {
            kept::delete(&runtime, &server, call_id);
        }
    }

    fn hold(
        &self,
        call_id: &str,
        server: &str,
        token: Exchanged,
        runtime: Option<crate::oauth::OAuthRuntime>,
    ) {
        self.held.lock().expect("identities lock").insert(
            call_id.to_string(),
            Held {
                token,
                server: server.to_string(),
                runtime,
            },
        );
    }
}

/// `principal`'s token for `server`, or the refusal naming both.
fn per_principal(
    server: &str,
    tokens: &BTreeMap<String, TokenSource>,
    principal: Option<&str>,
) -> Result<CallCredential, RemoteError> {
    let Some(principal) = principal else {
        return Err(refused(format!(
            "server {server:?} takes each principal's own credential, and this call has no principal"
        )));
    };
    let Some(source) = tokens.get(principal) else {
        return Err(refused(format!(
            "server {server:?} has no credential for principal {principal:?} ([servers.identity.principals.{principal}])"
        )));
    };
    source.read().map(CallCredential::bearer).map_err(|e| {
        refused(format!(
            "the credential of principal {principal:?} for server {server:?} cannot be read: {e}"
        ))
    })
}

/// A call that cannot be authorized: permanent, it ends the call.
fn refused(message: String) -> RemoteError {
    RemoteError::Unauthorized(message)
}
