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
        let header = decode_header(token).map_err(|e| Refusal::invalid(format!("header: {e}")))?;
        if !acceptable(header.alg) {
            return Err(Refusal::invalid(format!(
                "algorithm {:?} is not accepted",
                header.alg
            )));
        }
        let jwk =
            self.keys.key(header.kid.as_deref()).await.ok_or_else(|| {
                Refusal::invalid(format!("no key {:?} at the issuer", header.kid))
            })?;
        if let Some(alg) = jwk.common.key_algorithm
            && alg.to_string() != format!("{:?}", header.alg)
        {
            return Err(Refusal::invalid(format!(
                "key {:?} is for {alg}, the token says {:?}",
                header.kid, header.alg
            )));
        }
        let key = jsonwebtoken::DecodingKey::from_jwk(&jwk)
            .map_err(|e| Refusal::invalid(format!("key {:?}: {e}", header.kid)))?;
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[self.issuer()]);
        let audience = self.config.audience.as_deref().unwrap_or(resource);
        validation.set_audience(&[audience]);
        validation.leeway = self.config.leeway_s;
        validation.validate_nbf = true;
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        let claims = decode::<Value>(token, &key, &validation)
            .map_err(|e| Refusal::invalid(e.to_string()))?
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
        })
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
