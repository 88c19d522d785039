//! OAuth 2.0 Token Exchange (RFC 8693) of a caller's token for one whose
//! audience is an upstream, and the refresh of what it gave: the token
//! requests of `identity = "token_exchange"` (see `crate::identity`). The
//! gateway authenticates to the token endpoint as its client (HTTP Basic
//! with its secret, or as a public client); the request goes through
//! [`OAuthHttp::token_request`] like every other token request.

use mcptask_core::Clock;
use serde::Deserialize;

use super::Secret;
use super::grant::is_loopback;
use super::http::OAuthHttp;
use crate::remote::RemoteError;

/// RFC 8693's grant type.
pub const TOKEN_EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
/// RFC 8693's token type of an OAuth access token.
pub const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";

/// Where and as whom a caller's token is exchanged (`[servers.identity]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExchangeSettings {
    /// The token endpoint (https, or http on a loopback address).
    pub token_endpoint: String,
    /// The gateway's client id there.
    pub client_id: String,
    /// Its secret there (HTTP Basic); `None`: a public client.
    pub client_secret: Option<Secret>,
    /// `audience`: the upstream as the issuer names it.
    pub audience: Option<String>,
    /// `resource` (RFC 8707): the upstream's URL.
    pub resource: Option<String>,
    /// `scope`, when asked for.
    pub scopes: Vec<String>,
    /// The process's token store and key: where each call's exchanged
    /// token is kept, sealed (none: in this process only).
    pub runtime: super::RuntimeSlot,
}

/// A token the exchange (or a refresh) gave.
#[derive(Clone)]
pub struct Exchanged {
    /// The access token whose audience is the upstream.
    pub access: Secret,
    /// The refresh token, if the issuer gave one.
    pub refresh: Option<Secret>,
    /// When the access token expires (epoch ms), if the issuer said.
    pub expires_at_ms: Option<i64>,
}

/// A token endpoint's successful answer (RFC 6749 §5.1, RFC 8693 §2.2.1).
#[derive(Deserialize)]
struct TokenAnswer {
    access_token: String,
    #[serde(default)]
    refresh_token: Option<String>,
    #[serde(default)]
    expires_in: Option<i64>,
}

impl ExchangeSettings {
    /// Exchange `subject` (the caller's access token) for a token of
    /// `server`.
    pub(crate) async fn exchange(
        &self,
        server: &str,
        subject: &str,
    ) -> Result<Exchanged, RemoteError> {
        let mut form = vec![
            ("grant_type", TOKEN_EXCHANGE.to_string()),
            ("subject_token", subject.to_string()),
            ("subject_token_type", ACCESS_TOKEN_TYPE.to_string()),
            ("requested_token_type", ACCESS_TOKEN_TYPE.to_string()),
        ];
        self.target(&mut form);
        self.request(server, "the token exchange", form).await
    }

    /// A fresh token for the one `refresh` refreshes.
    pub(crate) async fn refresh(
        &self,
        server: &str,
        refresh: &str,
    ) -> Result<Exchanged, RemoteError> {
        let mut form = vec![
            ("grant_type", "refresh_token".to_string()),
            ("refresh_token", refresh.to_string()),
        ];
        self.target(&mut form);
        let mut got = self
            .request(server, "the refresh of the exchanged token", form)
            .await?;
        // An issuer that does not rotate refresh tokens keeps the old one.
        got.refresh
            .get_or_insert_with(|| Secret(refresh.to_string()));
        Ok(got)
    }

    /// The audience, resource and scopes the token is asked for.
    fn target(&self, form: &mut Vec<(&'static str, String)>) {
        if let Some(audience) = &self.audience {
            form.push(("audience", audience.clone()));
        }
        if let Some(resource) = &self.resource {
            form.push(("resource", resource.clone()));
        }
        if !self.scopes.is_empty() {
            form.push(("scope", self.scopes.join(" ")));
        }
    }

    /// One token request of `form`, authenticated as the gateway's client;
    /// `what` names it in the refusal ("the token exchange for server X was
    /// refused: invalid_grant").
    async fn request(
        &self,
        server: &str,
        what: &str,
        mut form: Vec<(&'static str, String)>,
    ) -> Result<Exchanged, RemoteError> {
        let refused = |why: String| {
            RemoteError::Unauthorized(format!("{what} for server {server:?} was refused: {why}"))
        };
        let endpoint = url::Url::parse(&self.token_endpoint)
            .map_err(|e| refused(format!("the token endpoint is not a URL: {e}")))?;
        if endpoint.scheme() != "https" && !is_loopback(&endpoint) {
            return Err(refused(format!(
                "the token endpoint {endpoint} is not https; refusing to send tokens in clear"
            )));
        }
        let mut request = http::Request::post(endpoint.as_str())
            .header(
                http::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .header(http::header::ACCEPT, "application/json");
        match &self.client_secret {
            Some(secret) => {
                use base64::Engine as _;
                let encode = |s: &str| {
                    url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>()
                };
                let pair = format!("{}:{}", encode(&self.client_id), encode(secret.expose()));
                let basic = format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(pair)
                );
                let mut value = http::HeaderValue::from_str(&basic)
                    .map_err(|_| refused("the client credentials are not a header value".into()))?;
                value.set_sensitive(true);
                request = request.header(http::header::AUTHORIZATION, value);
            }
            None => form.push(("client_id", self.client_id.clone())),
        }
        let body = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form)
            .finish();
        let request = request
            .body(body.into_bytes())
            .map_err(|e| refused(e.to_string()))?;
        let http = OAuthHttp::new(None).map_err(refused)?;
        let response = http.token_request(request, None).await.map_err(|e| {
            // Unreachable now is not refused: a later attempt may pass.
            RemoteError::Transient(format!(
                "{what} for server {server:?}: cannot reach the token endpoint {endpoint}: {e}"
            ))
        })?;
        let status = response.status();
        if !status.is_success() {
            let detail = serde_json::from_slice::<serde_json::Value>(response.body())
                .ok()
                .and_then(|v| v["error"].as_str().map(str::to_string))
                .unwrap_or_else(|| format!("HTTP {status}"));
            return Err(refused(detail));
        }
        let answer: TokenAnswer = serde_json::from_slice(response.body())
            .map_err(|e| refused(format!("the answer is not an OAuth token: {e}")))?;
        let now = mcptask_core::SystemClock.now_ms();
        Ok(Exchanged {
            access: Secret(answer.access_token),
            refresh: answer.refresh_token.map(Secret),
            expires_at_ms: answer
                .expires_in
                .map(|s| now.saturating_add(s.saturating_mul(1000))),
        })
    }
}
