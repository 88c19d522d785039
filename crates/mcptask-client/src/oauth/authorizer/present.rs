//! How a server's token goes out: as a bearer token, or DPoP-bound with a
//! fresh proof on every request; decided once per stored token (see
//! [`dpop::scheme`]).

use http::{HeaderName, HeaderValue};
use oauth2::TokenResponse as _;
use rmcp::transport::auth::OAuthTokenResponse;

use super::ServerAuth;
use std::sync::Arc;

use crate::oauth::dpop::{self, ProofKey, Scheme};
use crate::oauth::vault::Sealed;

/// A token as the server gets it, with the key it is bound to (read with
/// it, so the two are never apart, whatever key this process holds now).
#[derive(Clone)]
pub(crate) struct Credential {
    token: String,
    scheme: Scheme,
    key: Option<Arc<ProofKey>>,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("scheme", &self.scheme)
            .finish_non_exhaustive()
    }
}

impl Credential {
    /// The access token.
    pub(crate) fn token(&self) -> &str {
        &self.token
    }

    /// The access token, taken.
    pub(crate) fn into_token(self) -> String {
        self.token
    }

    /// Whether it is DPoP-bound.
    pub(crate) fn is_dpop(&self) -> bool {
        self.scheme == Scheme::Dpop
    }
}

/// A header value that is never logged nor indexed (HTTP/2 HPACK).
fn sensitive(text: String) -> Result<HeaderValue, String> {
    let mut value = HeaderValue::from_str(&text)
        .map_err(|_| "the OAuth token is not a header value".to_string())?;
    value.set_sensitive(true);
    Ok(value)
}

impl ServerAuth {
    /// The headers presenting `credential` on a `method` request to `url`:
    /// `Authorization: Bearer …`, or `Authorization: DPoP …` with a fresh
    /// proof of the server's key (RFC 9449 §7.1).
    pub(crate) fn authorization(
        &self,
        credential: &Credential,
        method: &str,
        url: &str,
    ) -> Result<Vec<(HeaderName, HeaderValue)>, String> {
        let token = &credential.token;
        match (credential.scheme, &credential.key, &self.dpop) {
            (Scheme::Bearer, _, _) => Ok(vec![(
                http::header::AUTHORIZATION,
                sensitive(format!("Bearer {token}"))?,
            )]),
            (Scheme::Dpop, Some(key), Some(dpop)) => {
                let proof = dpop.prove(key, method, url, Some(token), self.now())?;
                Ok(vec![
                    (
                        http::header::AUTHORIZATION,
                        sensitive(format!("DPoP {token}"))?,
                    ),
                    (HeaderName::from_static("dpop"), sensitive(proof)?),
                ])
            }
            (Scheme::Dpop, _, _) => Err(format!(
                "server {:?}: a DPoP-bound token without a DPoP key",
                self.name
            )),
        }
    }

    /// Remember the DPoP nonce a response from `url` carries; whether it did.
    pub(crate) fn learn_nonce(&self, url: &str, headers: &http::HeaderMap) -> bool {
        self.dpop.as_ref().is_some_and(|d| d.learn(url, headers))
    }

    /// How the token in `sealed` is presented, if it can be (see
    /// [`dpop::scheme`]).
    pub(super) fn presentable(&self, sealed: &Sealed) -> Result<Option<Credential>, String> {
        let Some(response) = sealed
            .credentials
            .as_ref()
            .and_then(|c| c.token_response.as_ref())
        else {
            return Ok(None);
        };
        let key = match (&self.dpop, &sealed.dpop_key) {
            (Some(dpop), Some(text)) => Some(dpop.key_for(text)?),
            _ => None,
        };
        self.present(response, key)
    }

    /// `response` as presented, `key` being what its request proved with.
    fn present(
        &self,
        response: &OAuthTokenResponse,
        key: Option<Arc<ProofKey>>,
    ) -> Result<Option<Credential>, String> {
        let scheme = dpop::scheme(
            self.settings.dpop,
            response.token_type().as_ref(),
            key.is_some(),
        )
        .map_err(|e| format!("server {:?}: {e}", self.name))?;
        Ok(scheme.map(|scheme| Credential {
            token: response.access_token().secret().to_string(),
            scheme,
            key: key.filter(|_| scheme == Scheme::Dpop),
        }))
    }

    /// A token just obtained, as it is presented (its request proved with
    /// the current key whenever DPoP is on).
    pub(super) fn obtained(&self, response: &OAuthTokenResponse) -> Result<Credential, String> {
        let key = self.dpop.as_ref().map(|d| d.key()).transpose()?;
        self.present(response, key)?
            .ok_or_else(|| format!("server {:?}: the new token cannot be presented", self.name))
    }
}
