//! DPoP (RFC 9449), sender-constrained tokens: a server's proof key, the
//! proof JWTs signed with it (by `jsonwebtoken`; the key pair comes from
//! `ring`), the nonces servers hand out, and how a stored token is presented.
//!
//! A DPoP-bound token is worthless without its key, so the key is sealed in
//! the store beside the token it is bound to (see `vault`): every replica
//! and every restart proves with the key the token names.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use jsonwebtoken::jwk::{Jwk, ThumbprintHash};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde::Serialize;
use sha2::Digest as _;

/// The header that carries a proof, and the one that carries a nonce.
pub(crate) const PROOF_HEADER: &str = "DPoP";
pub(crate) const NONCE_HEADER: &str = "DPoP-Nonce";
/// The error code of a server that wants a nonce in the proof (§8, §9).
pub(crate) const USE_NONCE: &str = "use_dpop_nonce";
/// The only proof algorithm: ES256, which RFC 9449 servers are expected
/// to support (and the suite's authorization servers advertise).
pub(crate) const ALGORITHM: &str = "ES256";

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// A P-256 key that proves possession of the tokens bound to it.
///
/// ```
/// use mcptask_client::oauth::ProofKey;
/// let key = ProofKey::generate().unwrap();
/// let proof = key
///     .proof("POST", "https://as.example/token?x=1", None, None, 1_700_000_000)
///     .unwrap();
/// assert_eq!(proof.split('.').count(), 3);
/// assert_eq!(key.thumbprint().len(), 43, "base64url SHA-256");
/// ```
pub struct ProofKey {
    pkcs8: Vec<u8>,
    key: EncodingKey,
    jwk: Jwk,
    thumbprint: String,
}

impl std::fmt::Debug for ProofKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProofKey")
            .field("jkt", &self.thumbprint)
            .finish_non_exhaustive()
    }
}

#[derive(Serialize)]
struct Claims<'a> {
    jti: String,
    htm: &'a str,
    htu: String,
    iat: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    ath: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    nonce: Option<&'a str>,
}

impl ProofKey {
    /// A fresh random key.
    pub fn generate() -> Result<Self, String> {
        let document = ring::signature::EcdsaKeyPair::generate_pkcs8(
            &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            &ring::rand::SystemRandom::new(),
        )
        .map_err(|_| "no randomness available for a DPoP key".to_string())?;
        Self::from_pkcs8(document.as_ref())
    }

    /// The key in `der` (PKCS#8, P-256).
    pub fn from_pkcs8(der: &[u8]) -> Result<Self, String> {
        let key = EncodingKey::from_ec_der(der);
        let jwk = Jwk::from_encoding_key(&key, Algorithm::ES256)
            .map_err(|e| format!("not a P-256 DPoP key: {e}"))?;
        let thumbprint = jwk
            .thumbprint(ThumbprintHash::SHA256)
            .map_err(|e| format!("DPoP key thumbprint: {e}"))?;
        Ok(Self {
            pkcs8: der.to_vec(),
            key,
            jwk,
            thumbprint,
        })
    }

    /// The key as text, for the sealed credentials.
    pub(crate) fn to_text(&self) -> String {
        B64.encode(&self.pkcs8)
    }

    /// The key [`ProofKey::to_text`] wrote.
    pub(crate) fn from_text(text: &str) -> Result<Self, String> {
        let der = B64
            .decode(text)
            .map_err(|e| format!("stored DPoP key is not base64: {e}"))?;
        Self::from_pkcs8(&der)
    }

    /// Its JWK thumbprint (RFC 7638, SHA-256): the `cnf.jkt` of the tokens
    /// bound to it.
    pub fn thumbprint(&self) -> &str {
        &self.thumbprint
    }

    /// A proof for one `method` request to `url` at `now_secs`: a fresh
    /// `jti`, `htu` without query and fragment (§4.2), `ath` binding the
    /// `access_token` it accompanies (§7.1), and the server's `nonce`.
    pub fn proof(
        &self,
        method: &str,
        url: &str,
        access_token: Option<&str>,
        nonce: Option<&str>,
        now_secs: i64,
    ) -> Result<String, String> {
        let mut htu = url::Url::parse(url).map_err(|e| format!("DPoP target {url:?}: {e}"))?;
        htu.set_query(None);
        htu.set_fragment(None);
        let mut header = Header::new(Algorithm::ES256);
        header.typ = Some("dpop+jwt".into());
        header.jwk = Some(self.jwk.clone());
        let claims = Claims {
            jti: uuid::Uuid::new_v4().to_string(),
            htm: method,
            htu: htu.to_string(),
            iat: now_secs,
            ath: access_token.map(token_hash),
            nonce,
        };
        jsonwebtoken::encode(&header, &claims, &self.key)
            .map_err(|e| format!("signing a DPoP proof: {e}"))
    }
}

/// `ath`: base64url(SHA-256(the access token)).
pub(crate) fn token_hash(token: &str) -> String {
    B64.encode(sha2::Sha256::digest(token.as_bytes()))
}

/// How a stored token goes to the resource server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scheme {
    /// `Authorization: Bearer <token>` (RFC 6750).
    Bearer,
    /// `Authorization: DPoP <token>` and a proof (RFC 9449 §7.1).
    Dpop,
}

/// The one decision of how a token the authorization server issued as
/// `token_type` is presented, given whether this configuration wants DPoP
/// and whether the token was asked for with a proof. `Ok(None)`: the token
/// is not sent (the server's 401 then gets a new one): a DPoP-bound token
/// without DPoP configured, or a bearer token obtained before DPoP was
/// turned on. An error: a bearer token the authorization server issued in
/// answer to a proof; a sender-constrained configuration is never silently
/// downgraded.
pub(crate) fn scheme(dpop: bool, token_type: &str, proved: bool) -> Result<Option<Scheme>, String> {
    let bound = token_type.eq_ignore_ascii_case("dpop");
    match (dpop, bound, proved) {
        (true, true, true) => Ok(Some(Scheme::Dpop)),
        (false, false, _) => Ok(Some(Scheme::Bearer)),
        (false, true, _) | (true, _, false) => Ok(None),
        (true, false, true) => Err(format!(
            "dpop = true asked for a DPoP-bound token, but the authorization server issued token_type {token_type:?}: it does not support DPoP (RFC 9449); set dpop = false to accept bearer tokens"
        )),
    }
}

/// Whether an authorization server that lists the proof algorithms it
/// accepts (`dpop_signing_alg_values_supported`, RFC 9449 §5.1) accepts
/// ours; one that lists none is tried (its token type then tells).
pub(crate) fn check_algorithms(supported: Option<&serde_json::Value>) -> Result<(), String> {
    let Some(list) = supported.and_then(|v| v.as_array()) else {
        return Ok(());
    };
    if list.iter().any(|a| a.as_str() == Some(ALGORITHM)) {
        return Ok(());
    }
    Err(format!(
        "the authorization server accepts DPoP proofs signed with {} only, and mcptask signs with {ALGORITHM}; set dpop = false",
        serde_json::Value::Array(list.clone())
    ))
}

/// One server's DPoP state: its key (made on first use, or adopted from the
/// store) and the nonces its authorization and resource servers asked for,
/// by origin.
#[derive(Default)]
pub(crate) struct Dpop {
    key: Mutex<Option<Arc<ProofKey>>>,
    nonces: Mutex<HashMap<String, String>>,
}

fn origin(url: &str) -> String {
    url::Url::parse(url)
        .map(|u| u.origin().ascii_serialization())
        .unwrap_or_else(|_| url.to_string())
}

impl Dpop {
    /// The key, made now if there is none yet.
    pub(crate) fn key(&self) -> Result<Arc<ProofKey>, String> {
        let mut key = self.key.lock().expect("dpop key lock");
        if let Some(k) = key.as_ref() {
            return Ok(k.clone());
        }
        let fresh = Arc::new(ProofKey::generate()?);
        *key = Some(fresh.clone());
        Ok(fresh)
    }

    /// Use the key stored with the credentials (the one their token is bound to).
    pub(crate) fn adopt(&self, text: &str) -> Result<(), String> {
        let mut key = self.key.lock().expect("dpop key lock");
        if key.as_ref().is_some_and(|k| k.to_text() == text) {
            return Ok(());
        }
        *key = Some(Arc::new(ProofKey::from_text(text)?));
        Ok(())
    }

    /// The key as stored, if one was made or adopted.
    pub(crate) fn stored(&self) -> Option<String> {
        self.key
            .lock()
            .expect("dpop key lock")
            .as_ref()
            .map(|k| k.to_text())
    }

    /// Forget the key (logout): the next token gets a new one.
    pub(crate) fn reset(&self) {
        *self.key.lock().expect("dpop key lock") = None;
    }

    /// The key stored as `text` (the current one, when it is that).
    pub(crate) fn key_for(&self, text: &str) -> Result<Arc<ProofKey>, String> {
        if let Some(key) = self.key.lock().expect("dpop key lock").as_ref()
            && key.to_text() == text
        {
            return Ok(key.clone());
        }
        ProofKey::from_text(text).map(Arc::new)
    }

    /// A proof for `method` `url` with the current key (a token request),
    /// with the nonce that origin last gave.
    pub(crate) fn proof(
        &self,
        method: &str,
        url: &str,
        access_token: Option<&str>,
        now_ms: i64,
    ) -> Result<String, String> {
        let key = self.key()?;
        self.prove(&key, method, url, access_token, now_ms)
    }

    /// A proof for `method` `url` with `key` (the one `access_token` is
    /// bound to), with the nonce that origin last gave.
    pub(crate) fn prove(
        &self,
        key: &ProofKey,
        method: &str,
        url: &str,
        access_token: Option<&str>,
        now_ms: i64,
    ) -> Result<String, String> {
        let nonce = self
            .nonces
            .lock()
            .expect("dpop nonce lock")
            .get(&origin(url))
            .cloned();
        key.proof(method, url, access_token, nonce.as_deref(), now_ms / 1000)
    }

    /// Remember the nonce a response from `url` carries (§8.2, §9), if any;
    /// whether it did.
    pub(crate) fn learn(&self, url: &str, headers: &http::HeaderMap) -> bool {
        let Some(nonce) = headers
            .get(NONCE_HEADER)
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.is_empty())
        else {
            return false;
        };
        self.nonces
            .lock()
            .expect("dpop nonce lock")
            .insert(origin(url), nonce.to_string());
        true
    }
}

#[cfg(test)]
#[path = "dpop_tests.rs"]
mod tests;
