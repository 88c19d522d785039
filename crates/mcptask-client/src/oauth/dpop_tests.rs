//! DPoP proofs checked the way a server checks them (RFC 9449 §4.3), with
//! `jsonwebtoken` verifying against the key the proof carries.

use std::collections::HashSet;

use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;

use super::*;

const NOW: i64 = 1_700_000_000;

/// What a server reads from a proof: its header and verified claims.
fn verify(proof: &str) -> (Header, Value) {
    let header = jsonwebtoken::decode_header(proof).expect("a JWT header");
    let jwk = header
        .jwk
        .clone()
        .expect("the public key travels in the header");
    let mut validation = Validation::new(Algorithm::ES256);
    validation.required_spec_claims = HashSet::new();
    validation.validate_exp = false;
    let key = DecodingKey::from_jwk(&jwk).expect("a usable public key");
    let claims = jsonwebtoken::decode::<Value>(proof, &key, &validation)
        .expect("the signature verifies with the key in the header")
        .claims;
    (header, claims)
}

#[test]
fn a_proof_is_a_signed_dpop_jwt_for_one_request() {
    let key = ProofKey::generate().unwrap();
    let proof = key
        .proof(
            "POST",
            "https://rs.example/mcp?q=1#frag",
            Some("the-token"),
            Some("n-1"),
            NOW,
        )
        .unwrap();
    let (header, claims) = verify(&proof);
    assert_eq!(header.typ.as_deref(), Some("dpop+jwt"));
    assert_eq!(header.alg, Algorithm::ES256);
    let jwk = serde_json::to_value(header.jwk.as_ref().unwrap()).unwrap();
    assert!(jwk.get("d").is_none(), "never the private key: {jwk}");
    assert_eq!(
        header
            .jwk
            .unwrap()
            .thumbprint(ThumbprintHash::SHA256)
            .unwrap(),
        key.thumbprint(),
        "the thumbprint a bound token names is the proof key's"
    );
    assert_eq!(claims["htm"], "POST");
    assert_eq!(
        claims["htu"], "https://rs.example/mcp",
        "no query, no fragment"
    );
    assert_eq!(claims["iat"], NOW);
    assert_eq!(claims["nonce"], "n-1");
    assert_eq!(claims["ath"], token_hash("the-token"));
    assert!(claims["jti"].as_str().is_some_and(|j| j.len() >= 32));
}

#[test]
fn the_token_hash_is_base64url_sha256() {
    // RFC 9449 §7.1's example: the access token and its `ath`.
    assert_eq!(
        token_hash("Kz~8mXK1EalYznwH-LC-1fBAo.4Ljp~zsPE_NeO.gxU"),
        "fUHyO2r2Z3DZ53EsNrWBb0xWXoaNy59IiKCAqksmQEo"
    );
}

#[test]
fn every_proof_is_fresh_and_a_token_request_proof_has_no_ath() {
    let key = ProofKey::generate().unwrap();
    let a = key
        .proof("POST", "https://as.example/token", None, None, NOW)
        .unwrap();
    let b = key
        .proof("POST", "https://as.example/token", None, None, NOW)
        .unwrap();
    let (_, a) = verify(&a);
    let (_, b) = verify(&b);
    assert_ne!(a["jti"], b["jti"], "a proof is never reused");
    assert!(a.get("ath").is_none() && a.get("nonce").is_none(), "{a}");
}

#[test]
fn a_stored_key_proves_as_the_original() {
    let key = ProofKey::generate().unwrap();
    let again = ProofKey::from_text(&key.to_text()).unwrap();
    assert_eq!(again.thumbprint(), key.thumbprint());
    assert!(ProofKey::from_text("not base64!").is_err());
    assert!(ProofKey::from_pkcs8(b"not a key").is_err());
    assert!(
        !format!("{key:?}").contains(&key.to_text()),
        "Debug never shows the private key"
    );
}

#[test]
fn a_server_keeps_one_key_and_the_nonces_per_origin() {
    let dpop = Dpop::default();
    assert!(dpop.stored().is_none(), "no key before the first token");
    let first = dpop.key().unwrap();
    assert_eq!(dpop.key().unwrap().thumbprint(), first.thumbprint());
    let mut headers = http::HeaderMap::new();
    assert!(!dpop.learn("https://as.example/token", &headers));
    headers.insert(NONCE_HEADER, "as-nonce".parse().unwrap());
    assert!(dpop.learn("https://as.example/token", &headers));
    let (_, at_as) = verify(
        &dpop
            .proof("POST", "https://as.example/other", None, NOW * 1000)
            .unwrap(),
    );
    assert_eq!(at_as["nonce"], "as-nonce", "the origin's nonce");
    let (_, at_rs) = verify(
        &dpop
            .proof("POST", "https://rs.example/mcp", Some("t"), NOW * 1000)
            .unwrap(),
    );
    assert!(
        at_rs.get("nonce").is_none(),
        "not another origin's: {at_rs}"
    );

    let other = ProofKey::generate().unwrap();
    dpop.adopt(&other.to_text()).unwrap();
    assert_eq!(dpop.key().unwrap().thumbprint(), other.thumbprint());
    assert_eq!(dpop.stored(), Some(other.to_text()));
    dpop.reset();
    assert_ne!(dpop.key().unwrap().thumbprint(), other.thumbprint());
}

#[test]
fn a_token_is_presented_as_issued_and_never_downgraded() {
    assert_eq!(scheme(false, "Bearer", false), Ok(Some(Scheme::Bearer)));
    assert_eq!(scheme(false, "bearer", true), Ok(Some(Scheme::Bearer)));
    assert_eq!(scheme(true, "DPoP", true), Ok(Some(Scheme::Dpop)));
    assert_eq!(scheme(true, "dpop", true), Ok(Some(Scheme::Dpop)));
    assert_eq!(
        scheme(false, "DPoP", true),
        Ok(None),
        "a bound token without its key is not sent"
    );
    assert_eq!(
        scheme(true, "Bearer", false),
        Ok(None),
        "a token from before DPoP was turned on is replaced, not refused"
    );
    assert_eq!(scheme(true, "DPoP", false), Ok(None));
    let e = scheme(true, "Bearer", true).unwrap_err();
    assert!(
        e.contains("does not support DPoP") && e.contains("dpop = false"),
        "{e}"
    );
}

#[test]
fn an_authorization_server_must_accept_es256_if_it_says_what_it_accepts() {
    assert!(check_algorithms(None).is_ok());
    assert!(check_algorithms(Some(&serde_json::json!(["RS256", "ES256"]))).is_ok());
    let e = check_algorithms(Some(&serde_json::json!(["RS256"]))).unwrap_err();
    assert!(
        e.contains("[\"RS256\"]") && e.contains("dpop = false"),
        "{e}"
    );
}
