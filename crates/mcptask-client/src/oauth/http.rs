//! The HTTP client of a server's OAuth requests (discovery, registration,
//! token requests): rmcp's OAuth machinery and this crate's own grants make
//! them through it, with this crate's rustls setup. With DPoP, every token
//! request carries a proof of the server's key, and is sent once more with
//! the nonce an authorization server asks for (RFC 9449 §5, §8).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use rmcp::transport::auth::{
    OAuthHttpClient, OAuthHttpClientError, OAuthHttpClientFuture, OAuthHttpRedirectPolicy,
    OAuthHttpRequest,
};

use super::dpop::{self, Dpop};
use mcptask_core::Clock;

/// Largest OAuth response body read (metadata, tokens, registrations).
const MAX_BODY: usize = 1024 * 1024;

/// rmcp's OAuth requests, made with this crate's TLS setup.
pub(crate) struct OAuthHttp {
    follow: reqwest::Client,
    stop: reqwest::Client,
    /// The server's DPoP state and the clock its proofs are dated by.
    dpop: Option<(Arc<Dpop>, Arc<dyn Clock>)>,
}

impl OAuthHttp {
    pub(crate) fn new(dpop: Option<(Arc<Dpop>, Arc<dyn Clock>)>) -> Result<Self, String> {
        let build = |policy: fn() -> reqwest::redirect::Policy| {
            crate::tls::build_http_client(|| {
                reqwest::Client::builder()
                    .redirect(policy())
                    .timeout(Duration::from_secs(30))
            })
            .map_err(|e| format!("cannot build the OAuth HTTP client: {e}"))
        };
        Ok(Self {
            follow: build(|| reqwest::redirect::Policy::limited(10))?,
            stop: build(reqwest::redirect::Policy::none)?,
            dpop,
        })
    }

    /// One request, its body read within [`MAX_BODY`].
    async fn send(
        &self,
        client: &reqwest::Client,
        parts: &http::request::Parts,
        body: Vec<u8>,
        timeout: Option<Duration>,
    ) -> Result<http::Response<Vec<u8>>, OAuthHttpClientError> {
        let mut builder = client
            .request(parts.method.clone(), parts.uri.to_string())
            .headers(parts.headers.clone())
            .body(body);
        if let Some(timeout) = timeout {
            builder = builder.timeout(timeout);
        }
        let response = builder.send().await?;
        let mut out = http::Response::builder().status(response.status());
        for (name, value) in response.headers() {
            out = out.header(name, value);
        }
        let mut body = Vec::new();
        let mut stream = response.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk?;
            if body.len() + chunk.len() > MAX_BODY {
                return Err(format!("OAuth response larger than {MAX_BODY} bytes").into());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(out.body(body)?)
    }

    /// A token request (RFC 6749 §3.2), never redirected. With DPoP it
    /// carries a fresh proof; an authorization server that answers
    /// `use_dpop_nonce` gets it once more with the nonce it sent.
    pub(crate) async fn token_request(
        &self,
        request: http::Request<Vec<u8>>,
        timeout: Option<Duration>,
    ) -> Result<http::Response<Vec<u8>>, OAuthHttpClientError> {
        let (mut parts, body) = request.into_parts();
        let Some((dpop, clock)) = &self.dpop else {
            return self.send(&self.stop, &parts, body, timeout).await;
        };
        let url = parts.uri.to_string();
        let mut nonce_retried = false;
        loop {
            let proof = dpop.proof(parts.method.as_str(), &url, None, clock.now_ms())?;
            parts.headers.insert(dpop::PROOF_HEADER, proof.parse()?);
            let response = self.send(&self.stop, &parts, body.clone(), timeout).await?;
            let fresh_nonce = dpop.learn(&url, response.headers());
            if !nonce_retried && fresh_nonce && asks_for_nonce(&response) {
                nonce_retried = true;
                continue;
            }
            return Ok(response);
        }
    }
}

/// An authorization server's "use a nonce" answer (RFC 9449 §8): 400 with
/// `error: use_dpop_nonce`.
fn asks_for_nonce(response: &http::Response<Vec<u8>>) -> bool {
    response.status() == http::StatusCode::BAD_REQUEST
        && serde_json::from_slice::<serde_json::Value>(response.body())
            .is_ok_and(|v| v["error"] == dpop::USE_NONCE)
}

/// Whether rmcp is asking for a token (an authorization code exchange, a
/// refresh): a form POST naming a `grant_type` (RFC 6749 §3.2), the one
/// kind of OAuth request a DPoP proof goes with.
fn is_token_request(request: &http::Request<Vec<u8>>) -> bool {
    request.method() == http::Method::POST
        && request
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"))
        && url::form_urlencoded::parse(request.body()).any(|(k, _)| k == "grant_type")
}

impl OAuthHttpClient for OAuthHttp {
    fn execute(&self, request: OAuthHttpRequest) -> OAuthHttpClientFuture<'_> {
        Box::pin(async move {
            let timeout = request.timeout;
            if self.dpop.is_some() && is_token_request(&request.request) {
                return self.token_request(request.request, timeout).await;
            }
            let client = match request.redirect_policy {
                OAuthHttpRedirectPolicy::Stop => &self.stop,
                _ => &self.follow,
            };
            let (parts, body) = request.request.into_parts();
            self.send(client, &parts, body, timeout).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: &str, content_type: &str, body: &str) -> http::Request<Vec<u8>> {
        http::Request::builder()
            .method(method)
            .uri("https://as.example/token")
            .header(http::header::CONTENT_TYPE, content_type)
            .body(body.as_bytes().to_vec())
            .unwrap()
    }

    #[test]
    fn only_token_requests_get_a_proof() {
        let form = "application/x-www-form-urlencoded";
        assert!(is_token_request(&request(
            "POST",
            form,
            "grant_type=authorization_code&code=x"
        )));
        assert!(is_token_request(&request(
            "POST",
            "application/x-www-form-urlencoded; charset=UTF-8",
            "code=x&grant_type=refresh_token"
        )));
        // Dynamic registration (JSON), metadata (GET), other forms.
        assert!(!is_token_request(&request(
            "POST",
            "application/json",
            "{\"grant_type\":\"x\"}"
        )));
        assert!(!is_token_request(&request("GET", form, "grant_type=x")));
        assert!(!is_token_request(&request("POST", form, "token=abc")));
    }

    #[test]
    fn a_nonce_request_is_a_400_use_dpop_nonce() {
        let answer = |status: u16, body: &str| {
            http::Response::builder()
                .status(status)
                .body(body.as_bytes().to_vec())
                .unwrap()
        };
        assert!(asks_for_nonce(&answer(
            400,
            r#"{"error":"use_dpop_nonce"}"#
        )));
        assert!(!asks_for_nonce(&answer(
            400,
            r#"{"error":"invalid_grant"}"#
        )));
        assert!(!asks_for_nonce(&answer(
            401,
            r#"{"error":"use_dpop_nonce"}"#
        )));
        assert!(!asks_for_nonce(&answer(400, "not json")));
    }
}
