//! RFC 7523 client assertions (`private_key_jwt`), signed by `jsonwebtoken`.

use serde::Serialize;

/// The assertion type of a JWT client assertion.
pub(crate) const ASSERTION_TYPE: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

#[derive(Serialize)]
struct Claims<'a> {
    iss: &'a str,
    sub: &'a str,
    aud: &'a str,
    iat: i64,
    exp: i64,
    jti: String,
}

/// The algorithms a key may sign with.
pub(crate) fn algorithm(name: Option<&str>) -> Result<jsonwebtoken::Algorithm, String> {
    use jsonwebtoken::Algorithm::*;
    Ok(match name.unwrap_or("ES256") {
        "ES256" => ES256,
        "ES384" => ES384,
        "RS256" => RS256,
        "RS384" => RS384,
        "RS512" => RS512,
        "PS256" => PS256,
        "PS384" => PS384,
        "PS512" => PS512,
        "EdDSA" => EdDSA,
        other => {
            return Err(format!(
                "signing algorithm {other:?} is not supported; use ES256, ES384, RS256, RS384, RS512, PS256, PS384, PS512 or EdDSA"
            ));
        }
    })
}

/// A signed assertion that `client_id` is calling `audience`, valid five
/// minutes from `now_secs`.
pub(crate) fn client_assertion(
    client_id: &str,
    audience: &str,
    pem: &str,
    algorithm_name: Option<&str>,
    now_secs: i64,
) -> Result<String, String> {
    let alg = algorithm(algorithm_name)?;
    let key = match alg {
        jsonwebtoken::Algorithm::ES256 | jsonwebtoken::Algorithm::ES384 => {
            jsonwebtoken::EncodingKey::from_ec_pem(pem.as_bytes())
        }
        jsonwebtoken::Algorithm::EdDSA => jsonwebtoken::EncodingKey::from_ed_pem(pem.as_bytes()),
        _ => jsonwebtoken::EncodingKey::from_rsa_pem(pem.as_bytes()),
    }
    .map_err(|e| format!("the private key does not suit {alg:?}: {e}"))?;
    let mut header = jsonwebtoken::Header::new(alg);
    header.typ = Some("JWT".into());
    let claims = Claims {
        iss: client_id,
        sub: client_id,
        aud: audience,
        iat: now_secs,
        exp: now_secs + 300,
        jti: uuid::Uuid::new_v4().to_string(),
    };
    jsonwebtoken::encode(&header, &claims, &key).map_err(|e| format!("signing the assertion: {e}"))
}
