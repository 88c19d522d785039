//! How a stored token is presented, across replicas sharing one store (no
//! network): a DPoP-bound token always with the key it is bound to, a
//! token from before DPoP was turned on not at all, and a bearer token
//! issued in answer to a proof never.

use std::sync::Arc;

use http::{HeaderName, HeaderValue};
use mcptask_core::ManualClock;
use oauth2::basic::BasicTokenType;
use oauth2::{AccessToken, StandardTokenResponse};
use rmcp::transport::auth::VendorExtraTokenFields;

use super::*;
use crate::oauth::{MemoryTokenStore, SecretKey};

const URL: &str = "https://files.example.com/mcp";
const T0: i64 = 1_700_000_000_000;

/// Two replicas: their own runtimes over one store and one sealing key.
fn replicas() -> (OAuthRuntime, OAuthRuntime, Arc<ManualClock>) {
    let store = Arc::new(MemoryTokenStore::default());
    let key = SecretKey::generate().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let runtime = || OAuthRuntime::new(store.clone(), key.clone(), clock.clone());
    (runtime(), runtime(), clock)
}

fn dpop_settings() -> OAuthSettings {
    OAuthSettings {
        dpop: true,
        ..OAuthSettings::authorization_code()
    }
}

/// What an authorization by `runtime` left in the store: a token of
/// `token_type`, obtained with a proof of `dpop`'s key when there is one.
async fn stored_token(runtime: &OAuthRuntime, token_type: BasicTokenType, dpop: Option<Arc<Dpop>>) {
    let vault = Vault::new(runtime.inner.clone(), "files".into(), "e1".into(), dpop);
    let mut response = StandardTokenResponse::new(
        AccessToken::new("the-access-token".into()),
        token_type,
        VendorExtraTokenFields::default(),
    );
    response.set_expires_in(Some(&Duration::from_secs(3600)));
    vault
        .save(Some(StoredCredentials::new(
            "client".into(),
            Some(response),
            Vec::new(),
            None,
        )))
        .await
        .unwrap();
}

/// The `jkt` of the key that signed the proof in `headers`.
fn proof_key(headers: &[(HeaderName, HeaderValue)]) -> String {
    let proof = headers
        .iter()
        .find(|(n, _)| n.as_str() == "dpop")
        .map(|(_, v)| v.to_str().unwrap().to_string())
        .expect("a DPoP proof");
    jsonwebtoken::decode_header(&proof)
        .unwrap()
        .jwk
        .unwrap()
        .thumbprint(jsonwebtoken::jwk::ThumbprintHash::SHA256)
        .unwrap()
}

#[tokio::test]
async fn a_bound_token_is_presented_with_its_own_key_by_every_replica() {
    let (first, second, _clock) = replicas();
    let key = Arc::new(Dpop::default());
    let jkt = key.key().unwrap().thumbprint().to_string();
    stored_token(&first, BasicTokenType::Extension("dpop".into()), Some(key)).await;

    let auth = second.server("files", URL, "e1", &dpop_settings());
    let credential = auth.credential().await.unwrap().expect("the stored token");
    assert!(credential.is_dpop());
    let headers = auth.authorization(&credential, "POST", URL).unwrap();
    assert_eq!(
        headers[0].1.to_str().unwrap(),
        "DPoP the-access-token",
        "the DPoP scheme, not Bearer"
    );
    assert!(headers[0].1.is_sensitive());
    assert_eq!(
        proof_key(&headers),
        jkt,
        "the other replica proves with the key the token is bound to"
    );
    let again = auth.authorization(&credential, "POST", URL).unwrap();
    assert_ne!(headers[1].1, again[1].1, "a fresh proof per request");
}

#[tokio::test]
async fn a_token_from_before_dpop_is_replaced_and_a_downgrade_refused() {
    let (first, second, _clock) = replicas();
    stored_token(&first, BasicTokenType::Bearer, None).await;
    let auth = second.server("files", URL, "e1", &dpop_settings());
    assert!(
        auth.credential().await.unwrap().is_none(),
        "a bearer token obtained without a proof is not sent to a dpop server"
    );
    let plain = second.server("files", URL, "e1", &OAuthSettings::authorization_code());
    let credential = plain.credential().await.unwrap().expect("the bearer token");
    assert_eq!(
        plain.authorization(&credential, "POST", URL).unwrap()[0]
            .1
            .to_str()
            .unwrap(),
        "Bearer the-access-token"
    );

    // A bearer token the authorization server issued in answer to a proof.
    let (first, second, _clock) = replicas();
    let proved = Arc::new(Dpop::default());
    proved.key().unwrap();
    stored_token(&first, BasicTokenType::Bearer, Some(proved)).await;
    let e = second
        .server("files", URL, "e1", &dpop_settings())
        .credential()
        .await
        .unwrap_err();
    assert!(e.contains("does not support DPoP"), "{e}");
}

#[tokio::test]
async fn a_token_in_hand_keeps_its_key_when_a_replica_stores_another() {
    let (first, second, _clock) = replicas();
    let key_a = Arc::new(Dpop::default());
    let jkt_a = key_a.key().unwrap().thumbprint().to_string();
    stored_token(
        &first,
        BasicTokenType::Extension("dpop".into()),
        Some(key_a),
    )
    .await;
    let auth = second.server("files", URL, "e1", &dpop_settings());
    let in_hand = auth.credential().await.unwrap().expect("the stored token");

    // Another replica authorizes meanwhile with a key of its own, and this
    // replica reads its row (and takes its key for later token requests).
    let key_b = Arc::new(Dpop::default());
    let jkt_b = key_b.key().unwrap().thumbprint().to_string();
    stored_token(
        &first,
        BasicTokenType::Extension("dpop".into()),
        Some(key_b),
    )
    .await;
    auth.vault.load().await.unwrap();
    assert_eq!(
        auth.dpop.as_ref().unwrap().key().unwrap().thumbprint(),
        jkt_b
    );

    let headers = auth.authorization(&in_hand, "POST", URL).unwrap();
    assert_eq!(
        proof_key(&headers),
        jkt_a,
        "the token read before is still proved with the key it is bound to"
    );
}
