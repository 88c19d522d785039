//! JWT access tokens of an `[[api.oauth]]` issuer: which tokens are
//! accepted and what they give.
//!
//! A token is accepted only if its signature verifies with one of the
//! issuer's public keys (RSA, ECDSA or EdDSA: `none` and the HMAC family are
//! refused, so a public key can never be used as a shared secret), its `iss`
//! is the issuer, its `aud` names this resource, it is within `nbf`..`exp`
//! (with the configured skew), and it grants every required scope. The key
//! is the one its `kid` names, and the key's own `alg`, when it has one,
//! must be the token's.

use std::collections::HashSet;

use jsonwebtoken::{Algorithm, Validation, decode, decode_header};
use serde_json::Value;

use super::keys::KeySet;
use super::{Caller, Refusal};
use crate::config::IssuerSection;

/// One authorization server whose tokens this gateway accepts.
pub struct Issuer {
    config: IssuerSection,
    keys: KeySet,
}

/// The signature algorithms accepted: public-key ones only.
fn acceptable(alg: Algorithm) -> bool {
    !matches!(alg, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512)
}

/// The scopes a token grants: `scope` (space-separated) or `scp` (a list or
/// a string), as issuers write them.
fn scopes_of(claims: &Value) -> HashSet<String> {
    let mut scopes = HashSet::new();
    for name in ["scope", "scp"] {
        match claims.get(name) {
            Some(Value::String(s)) => scopes.extend(s.split_whitespace().map(str::to_string)),
            Some(Value::Array(list)) => {
                scopes.extend(list.iter().filter_map(Value::as_str).map(str::to_string))
            }
            _ => {}
        }
    }
    scopes
}

impl Issuer {
    pub fn new(config: IssuerSection, http: reqwest::Client) -> Self {
        let keys = KeySet::new(config.issuer.get_ref(), config.jwks_url.clone(), http);
        Self { config, keys }
    }

    /// Whether this issuer was made from settings equal to `config` (the
    /// position in the file aside).
    pub fn configured_as(&self, config: &IssuerSection) -> bool {
        let key = |c: &IssuerSection| {
            format!(
                "{:?}",
                (
                    c.issuer.get_ref(),
                    &c.audience,
                    &c.jwks_url,
                    &c.principal_claim,
                    &c.scopes,
                    &c.operator_scope,
                    c.operator_claim.as_ref().map(|m| (&m.claim, &m.value)),
                    c.leeway_s,
                )
            )
        };
        key(&self.config) == key(config)
    }

    /// The issuer identifier, as tokens name it.
    pub fn issuer(&self) -> &str {
        self.config.issuer.get_ref()
    }

    /// The scopes every token must grant.
    pub fn scopes(&self) -> &[String] {
        &self.config.scopes
    }

    /// The caller `token` speaks for, with `resource` the audience expected
    /// when none is configured.
    pub async fn verify(&self, token: &str, resource: &str) -> Result<Caller, Refusal> {
        let header = decode_header(token).map_err(|e| Refusal::invalid(why_undecodable(&e)))?;
        if !acceptable(header.alg) {
            return Err(Refusal::invalid(format!(
                "it is signed with {:?}, which this gateway does not accept",
                header.alg
            )));
        }
        let kid = key_name(header.kid.as_deref());
        let jwk = self.keys.key(header.kid.as_deref()).await.ok_or_else(|| {
            Refusal::invalid(match header.kid.as_deref() {
                Some(kid) => format!("the issuer publishes no key {kid:?}"),
                None => {
                    "the token names no key (`kid`) and the issuer has more than one".to_string()
                }
            })
        })?;
        if let Some(alg) = jwk.common.key_algorithm
            && alg.to_string() != format!("{:?}", header.alg)
        {
            return Err(Refusal::invalid(format!(
                "the issuer's {kid} is for {alg}, and the token is signed with {:?}",
                header.alg
            )));
        }
        let key = jsonwebtoken::DecodingKey::from_jwk(&jwk)
            .map_err(|_| Refusal::invalid(format!("the issuer's {kid} cannot be used")))?;
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[self.issuer()]);
        let audience = self.config.audience.as_deref().unwrap_or(resource);
        validation.set_audience(&[audience]);
        validation.leeway = self.config.leeway_s;
        validation.validate_nbf = true;
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        let claims = decode::<Value>(token, &key, &validation)
            .map_err(|e| Refusal::invalid(why_invalid(&e, self.issuer(), audience)))?
            .claims;
        let granted = scopes_of(&claims);
        let missing: Vec<&String> = self
            .config
            .scopes
            .iter()
            .filter(|s| !granted.contains(*s))
            .collect();
        if !missing.is_empty() {
            return Err(Refusal::InsufficientScope(
                missing.into_iter().cloned().collect::<Vec<_>>().join(" "),
            ));
        }
        let principal = match claims.get(&self.config.principal_claim) {
            Some(Value::String(p)) if !p.is_empty() => p.clone(),
            _ => {
                return Err(Refusal::invalid(format!(
                    "no {:?} claim names the principal",
                    self.config.principal_claim
                )));
            }
        };
        let by_scope = self
            .config
            .operator_scope
            .as_ref()
            .is_some_and(|s| granted.contains(s));
        let by_claim =
            self.config
                .operator_claim
                .as_ref()
                .is_some_and(|m| match claims.get(&m.claim) {
                    Some(Value::String(v)) => *v == m.value,
                    Some(Value::Array(list)) => list.iter().any(|v| v.as_str() == Some(&m.value)),
                    _ => false,
                });
        let mut scopes: Vec<String> = granted.into_iter().collect();
        scopes.sort_unstable();
        Ok(Caller {
            principal: Some(principal),
            operator: by_scope || by_claim,
            scopes,
            claims: Some(std::sync::Arc::new(claims)),
            ..Caller::default()
        })
    }
}

/// The key a token names, for a refusal's reason: `key "abc"`, or that it
/// names none.
fn key_name(kid: Option<&str>) -> String {
    match kid {
        Some(kid) => format!("key {kid:?}"),
        None => "key".to_string(),
    }
}

/// Why a token's header could not be read, for the log (jsonwebtoken's
/// own text is its error's debug name).
fn why_undecodable(e: &jsonwebtoken::errors::Error) -> String {
    use jsonwebtoken::errors::ErrorKind;
    match e.kind() {
        ErrorKind::InvalidAlgorithmName | ErrorKind::UnsupportedAlgorithm => {
            "its header names an algorithm this gateway does not know".to_string()
        }
        _ => "it is not a JWT (its header cannot be read)".to_string(),
    }
}

/// Why a token failed verification, for the log and for people: which
/// check it failed, never a debug name.
fn why_invalid(e: &jsonwebtoken::errors::Error, issuer: &str, audience: &str) -> String {
    use jsonwebtoken::errors::ErrorKind;
    match e.kind() {
        ErrorKind::InvalidSignature => "its signature does not verify".to_string(),
        ErrorKind::ExpiredSignature => "it has expired (`exp`)".to_string(),
        ErrorKind::ImmatureSignature => "it is not valid yet (`nbf`)".to_string(),
        ErrorKind::InvalidIssuer => format!("it was not issued by {issuer:?} (`iss`)"),
        ErrorKind::InvalidAudience => format!("it is not meant for {audience:?} (`aud`)"),
        ErrorKind::InvalidSubject => "its subject (`sub`) is not accepted".to_string(),
        ErrorKind::MissingRequiredClaim(claim) => format!("it has no `{claim}` claim"),
        ErrorKind::InvalidClaimFormat(claim) => format!("its `{claim}` claim is malformed"),
        ErrorKind::InvalidAlgorithm | ErrorKind::MissingAlgorithm => {
            "its algorithm does not match the issuer's key".to_string()
        }
        _ => "it is not a well-formed JWT".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn scopes_are_read_from_scope_and_scp() {
        let s = scopes_of(&json!({"scope": "a b", "scp": ["c"]}));
        assert_eq!(s, HashSet::from(["a".into(), "b".into(), "c".into()]));
        assert!(scopes_of(&json!({"scope": 3})).is_empty());
    }

    /// A refusal's reason is read by people in the log: it names the
    /// check, never jsonwebtoken's debug name or an `Option`.
    #[test]
    fn refusal_reasons_are_written_for_people() {
        use jsonwebtoken::errors::{Error, ErrorKind};
        let kinds = [
            ErrorKind::InvalidToken,
            ErrorKind::InvalidSignature,
            ErrorKind::ExpiredSignature,
            ErrorKind::ImmatureSignature,
            ErrorKind::InvalidIssuer,
            ErrorKind::InvalidAudience,
            ErrorKind::InvalidSubject,
            ErrorKind::MissingRequiredClaim("exp".into()),
            ErrorKind::InvalidClaimFormat("aud".into()),
            ErrorKind::InvalidAlgorithm,
            ErrorKind::MissingAlgorithm,
            ErrorKind::InvalidAlgorithmName,
        ];
        for kind in kinds {
            let debug = format!("{kind:?}");
            let debug = debug.split('(').next().unwrap().to_string();
            let e = Error::from(kind);
            for why in [
                why_invalid(&e, "https://sso.example", "https://gw.example/mcp"),
                why_undecodable(&e),
            ] {
                assert!(!why.contains(&debug), "{why:?} shows {debug}");
                assert!(!why.contains("Some(") && !why.contains("None"), "{why:?}");
            }
        }
        let expired = why_invalid(&ErrorKind::ExpiredSignature.into(), "i", "a");
        assert!(expired.contains("expired"), "{expired}");
        let audience = why_invalid(&ErrorKind::InvalidAudience.into(), "i", "https://gw/mcp");
        assert!(audience.contains("https://gw/mcp"), "{audience}");
        assert_eq!(key_name(Some("zzz")), "key \"zzz\"");
    }

    #[test]
    fn hmac_is_never_accepted() {
        for alg in [Algorithm::HS256, Algorithm::HS384, Algorithm::HS512] {
            assert!(!acceptable(alg));
        }
        for alg in [Algorithm::RS256, Algorithm::ES256, Algorithm::EdDSA] {
            assert!(acceptable(alg));
        }
    }
}
