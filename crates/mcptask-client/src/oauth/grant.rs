//! The token requests made without a user: client credentials (RFC 6749
//! §4.4), a workload's JWT as the grant (RFC 7523 §2.1, workload identity
//! federation), and enterprise-managed authorization (the user's ID token
//! exchanged at the identity provider for an ID-JAG, RFC 8693, redeemed at
//! the server's authorization server as a JWT bearer grant; rmcp's
//! `enterprise` module does both exchanges and checks the ID-JAG).
//!
//! Each request is authenticated as configured or as the authorization
//! server supports, and goes through [`OAuthHttp::token_request`], which
//! adds a DPoP proof when the server's tokens are bound to a key.

use std::sync::Arc;

use base64::Engine as _;
use oauth2::TokenResponse as _;
use rmcp::transport::auth::enterprise::{
    EmaAuthorizationServer, EmaClientAssertion, EmaClientAssertionProvider,
    EmaClientAuthentication, EmaError, EmaExchangeRequest, EmaExchangeStage,
};
use rmcp::transport::auth::{AuthorizationMetadata, OAuthTokenResponse, VendorExtraTokenFields};

use super::http::OAuthHttp;
use super::{Grant, OAuthSettings, TokenEndpointAuth, jwt};

/// The grant type of RFC 7523 §2.1 (a JWT as the authorization grant).
pub(crate) const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";

/// One token request without a user.
pub(super) struct Unattended<'a> {
    /// The server's name, for messages.
    pub(super) server: &'a str,
    pub(super) settings: &'a OAuthSettings,
    pub(super) metadata: &'a AuthorizationMetadata,
    /// The resource indicator (RFC 8707): the server's canonical URI.
    pub(super) resource: &'a str,
    pub(super) scopes: &'a [String],
    pub(super) now_secs: i64,
}

/// A token request's form and its `Authorization: Basic` header, if any.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct TokenForm {
    pub(super) fields: Vec<(&'static str, String)>,
    pub(super) basic: Option<String>,
}

/// How the client authenticates: as configured, else by its private key,
/// else its secret (HTTP Basic unless the server supports only the form),
/// else as a public client.
pub(super) fn client_auth(settings: &OAuthSettings, supported: &[String]) -> TokenEndpointAuth {
    settings.token_endpoint_auth.unwrap_or_else(|| {
        if settings.private_key_pem.is_some() {
            TokenEndpointAuth::PrivateKeyJwt
        } else if settings.client_secret.is_some() {
            if supported.is_empty() || supported.iter().any(|m| m == "client_secret_basic") {
                TokenEndpointAuth::ClientSecretBasic
            } else {
                TokenEndpointAuth::ClientSecretPost
            }
        } else {
            TokenEndpointAuth::None
        }
    })
}

fn supported_auth(metadata: &AuthorizationMetadata) -> Vec<String> {
    metadata
        .additional_fields
        .get("token_endpoint_auth_methods_supported")
        .and_then(|v| v.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|m| m.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The audience of a client assertion: the authorization server's issuer.
fn assertion_audience(metadata: &AuthorizationMetadata) -> String {
    metadata
        .issuer
        .clone()
        .unwrap_or_else(|| metadata.token_endpoint.clone())
}

impl Unattended<'_> {
    fn needs(&self, what: &str) -> String {
        format!(
            "server {:?}: the {} grant needs {what} under [servers.oauth]",
            self.server,
            grant_name(self.settings.grant)
        )
    }

    fn secret(&self, method: TokenEndpointAuth) -> Result<String, String> {
        self.settings
            .client_secret
            .as_ref()
            .map(|s| s.expose().to_string())
            .ok_or_else(|| {
                format!(
                    "server {:?}: {method:?} needs client_secret (or client_secret_env) under [servers.oauth]",
                    self.server
                )
            })
    }

    /// The form of a client-credentials or JWT-bearer token request.
    pub(super) fn form(&self) -> Result<TokenForm, String> {
        let settings = self.settings;
        let mut fields: Vec<(&'static str, String)> = match settings.grant {
            Grant::ClientCredentials => vec![("grant_type", "client_credentials".into())],
            Grant::JwtBearer => {
                let source = settings
                    .assertion
                    .as_ref()
                    .ok_or_else(|| self.needs("assertion_file or assertion_env"))?;
                vec![
                    ("grant_type", JWT_BEARER.into()),
                    ("assertion", source.read()?),
                ]
            }
            other => return Err(format!("{other:?} is not a single token request")),
        };
        if !self.scopes.is_empty() {
            fields.push(("scope", self.scopes.join(" ")));
        }
        fields.push(("resource", self.resource.to_string()));
        // The client credentials grant authenticates the client; a JWT
        // bearer grant may come from a workload with no client id at all.
        let client_id = match (&settings.client_id, settings.grant) {
            (Some(id), _) => Some(id.clone()),
            (None, Grant::ClientCredentials) => return Err(self.needs("client_id")),
            (None, _) => None,
        };
        let method = client_auth(settings, &supported_auth(self.metadata));
        let mut basic = None;
        match (method, client_id) {
            (TokenEndpointAuth::ClientSecretBasic, Some(id)) => {
                let enc = |s: &str| {
                    url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>()
                };
                let pair = format!("{}:{}", enc(&id), enc(&self.secret(method)?));
                basic = Some(format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(pair)
                ));
            }
            (TokenEndpointAuth::ClientSecretPost, Some(id)) => {
                fields.push(("client_id", id));
                fields.push(("client_secret", self.secret(method)?));
            }
            (TokenEndpointAuth::PrivateKeyJwt, Some(id)) => {
                let pem = settings
                    .private_key_pem
                    .as_ref()
                    .ok_or_else(|| self.needs("private_key_file (for private_key_jwt)"))?;
                let assertion = jwt::client_assertion(
                    &id,
                    &assertion_audience(self.metadata),
                    pem.expose(),
                    settings.signing_algorithm.as_deref(),
                    self.now_secs,
                )?;
                fields.push(("client_assertion_type", jwt::ASSERTION_TYPE.into()));
                fields.push(("client_assertion", assertion));
            }
            (TokenEndpointAuth::None, Some(id)) => fields.push(("client_id", id)),
            (TokenEndpointAuth::None, None) => {}
            (_, None) => return Err(self.needs("client_id (to authenticate with)")),
        }
        Ok(TokenForm { fields, basic })
    }

    /// Obtain a token, with the scopes it was granted.
    pub(super) async fn obtain(
        &self,
        http: &OAuthHttp,
    ) -> Result<(OAuthTokenResponse, Vec<String>), String> {
        let token_endpoint = url::Url::parse(&self.metadata.token_endpoint)
            .map_err(|e| format!("the token endpoint is not a URL: {e}"))?;
        if token_endpoint.scheme() != "https" && !is_loopback(&token_endpoint) {
            return Err(format!(
                "the token endpoint {token_endpoint} is not https; refusing to send credentials in clear"
            ));
        }
        let token = match self.settings.grant {
            Grant::EnterpriseManaged => self.enterprise(http).await?,
            _ => self.request(http, &token_endpoint).await?,
        };
        let granted = token
            .scopes()
            .map(|s| s.iter().map(|s| s.to_string()).collect())
            .unwrap_or_else(|| self.scopes.to_vec());
        Ok((token, granted))
    }

    async fn request(
        &self,
        http: &OAuthHttp,
        token_endpoint: &url::Url,
    ) -> Result<OAuthTokenResponse, String> {
        let form = self.form()?;
        let mut request = http::Request::post(token_endpoint.as_str())
            .header(
                http::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .header(http::header::ACCEPT, "application/json");
        if let Some(basic) = form.basic {
            let mut value = http::HeaderValue::from_str(&basic)
                .map_err(|_| "the client credentials are not a header value".to_string())?;
            value.set_sensitive(true);
            request = request.header(http::header::AUTHORIZATION, value);
        }
        let body = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form.fields)
            .finish();
        let request = request.body(body.into_bytes()).map_err(|e| e.to_string())?;
        let response = http
            .token_request(request, None)
            .await
            .map_err(|e| format!("cannot reach the token endpoint {token_endpoint}: {e}"))?;
        let status = response.status();
        if !status.is_success() {
            let detail = serde_json::from_slice::<serde_json::Value>(response.body())
                .ok()
                .map(|v| {
                    format!(
                        "{}: {}",
                        v["error"].as_str().unwrap_or("error"),
                        v["error_description"].as_str().unwrap_or("")
                    )
                })
                .unwrap_or_else(|| format!("HTTP {status}"));
            let what = match self.settings.grant {
                Grant::JwtBearer => "the JWT assertion",
                _ => "the client credentials",
            };
            return Err(format!(
                "the authorization server refused {what} ({detail})"
            ));
        }
        serde_json::from_slice(response.body())
            .map_err(|e| format!("the token response is not an OAuth token: {e}"))
    }

    /// Enterprise-managed authorization: rmcp's two exchanges, with this
    /// crate's HTTP client and the configured client authentications.
    async fn enterprise(&self, http: &OAuthHttp) -> Result<OAuthTokenResponse, String> {
        let settings = self.settings;
        if settings.dpop {
            return Err(format!(
                "server {:?}: enterprise-managed authorization yields bearer tokens only; set dpop = false",
                self.server
            ));
        }
        let idp = settings
            .identity_provider
            .as_ref()
            .ok_or_else(|| self.needs("[servers.oauth.identity_provider]"))?;
        let client_id = settings.client_id.clone().ok_or_else(|| {
            self.needs("client_id (the client registered at the server's authorization server)")
        })?;
        let issuer = self.metadata.issuer.clone().ok_or_else(|| {
            "the authorization server's metadata names no issuer, which an ID-JAG must name as its audience".to_string()
        })?;
        let id_token = idp.id_token.read()?;
        let idp_server =
            EmaAuthorizationServer::new(&idp.issuer, &idp.token_endpoint, &idp.client_id)
                .with_client_authentication(match &idp.client_secret {
                    Some(s) => EmaClientAuthentication::ClientSecretBasic(
                        oauth2::ClientSecret::new(s.expose().to_string()),
                    ),
                    None => EmaClientAuthentication::None,
                });
        let authentication = match client_auth(settings, &supported_auth(self.metadata)) {
            TokenEndpointAuth::None => EmaClientAuthentication::None,
            method @ (TokenEndpointAuth::ClientSecretBasic
            | TokenEndpointAuth::ClientSecretPost) => {
                let secret = oauth2::ClientSecret::new(self.secret(method)?);
                if method == TokenEndpointAuth::ClientSecretBasic {
                    EmaClientAuthentication::ClientSecretBasic(secret)
                } else {
                    EmaClientAuthentication::ClientSecretPost(secret)
                }
            }
            TokenEndpointAuth::PrivateKeyJwt => {
                let pem = settings
                    .private_key_pem
                    .clone()
                    .ok_or_else(|| self.needs("private_key_file (for private_key_jwt)"))?;
                EmaClientAuthentication::JwtAssertion(Arc::new(SignedAssertion {
                    pem: pem.expose().to_string(),
                    algorithm: settings.signing_algorithm.clone(),
                }))
            }
        };
        let resource_as =
            EmaAuthorizationServer::new(issuer, self.metadata.token_endpoint.clone(), client_id)
                .with_client_authentication(authentication);
        let token = EmaExchangeRequest::new_with_id_token(
            idp_server,
            resource_as,
            self.resource,
            &id_token,
        )
        .with_scopes(self.scopes.iter().cloned())
        .exchange(http, http)
        .await
        .map_err(|e| ema_words(self.server, &e))?;
        let mut response = OAuthTokenResponse::new(
            token.access_token,
            oauth2::basic::BasicTokenType::Bearer,
            VendorExtraTokenFields::default(),
        );
        response.set_expires_in(token.expires_in.as_ref());
        if !token.scopes.is_empty() {
            let mut scopes: Vec<String> = token.scopes.into_iter().collect();
            scopes.sort();
            response.set_scopes(Some(scopes.into_iter().map(oauth2::Scope::new).collect()));
        }
        Ok(response)
    }
}

/// A `private_key_jwt` assertion for rmcp's exchanges, signed when asked.
struct SignedAssertion {
    pem: String,
    algorithm: Option<String>,
}

#[async_trait::async_trait]
impl EmaClientAssertionProvider for SignedAssertion {
    async fn create_assertion(
        &self,
        server: &EmaAuthorizationServer,
    ) -> Result<EmaClientAssertion, Box<dyn std::error::Error + Send + Sync>> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)?;
        let assertion = jwt::client_assertion(
            &server.client_id,
            &server.issuer,
            &self.pem,
            self.algorithm.as_deref(),
            now,
        )?;
        Ok(EmaClientAssertion::new(assertion))
    }
}

/// rmcp's sanitized exchange errors, with where it failed and what to do.
fn ema_words(server: &str, e: &EmaError) -> String {
    let hint = match e {
        EmaError::InvalidGrant(EmaExchangeStage::IdentityProvider) => {
            ": the identity provider refused the ID token (expired, or not issued to this client); renew the ID token"
        }
        EmaError::InvalidGrant(EmaExchangeStage::ResourceAuthorizationServer) => {
            ": the authorization server refused the ID-JAG (is it set up to trust the identity provider?)"
        }
        _ => "",
    };
    format!("server {server:?}: enterprise-managed authorization failed: {e}{hint}")
}

/// The grant's name in `[servers.oauth]`.
pub(super) fn grant_name(grant: Grant) -> &'static str {
    match grant {
        Grant::ClientCredentials => "client_credentials",
        Grant::AuthorizationCode => "authorization_code",
        Grant::JwtBearer => "jwt_bearer",
        Grant::EnterpriseManaged => "enterprise_managed",
    }
}

pub(super) fn is_loopback(url: &url::Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(d)) => d == "localhost" || d.ends_with(".localhost"),
        Some(url::Host::Ipv4(a)) => a.is_loopback(),
        Some(url::Host::Ipv6(a)) => a.is_loopback(),
        None => false,
    }
}

#[cfg(test)]
#[path = "grant_tests.rs"]
mod tests;
