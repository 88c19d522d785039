//! The HTTP side: the client rmcp's OAuth machinery makes its requests with
//! (this crate's rustls client), and the Streamable HTTP client that puts
//! the bearer token on every MCP request and answers the server's
//! challenges (401, 403 `insufficient_scope`) by authorizing and retrying.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use futures::stream::BoxStream;
use http::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::auth::{
    AuthError, OAuthHttpClient, OAuthHttpClientFuture, OAuthHttpRedirectPolicy, OAuthHttpRequest,
};
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};

use super::ServerAuth;

/// Largest OAuth response body read (metadata, tokens, registrations).
const MAX_BODY: usize = 1024 * 1024;

/// How many times one request authorizes before the challenge is reported.
const ROUNDS_PER_REQUEST: usize = 3;

/// rmcp's OAuth requests, made with this crate's TLS setup.
pub(crate) struct OAuthHttp {
    follow: reqwest::Client,
    stop: reqwest::Client,
}

impl OAuthHttp {
    pub(crate) fn new() -> Result<Self, String> {
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
        })
    }
}

impl OAuthHttp {
    /// The client that does not follow redirects (token requests).
    pub(crate) fn stop_client(&self) -> &reqwest::Client {
        &self.stop
    }
}

impl OAuthHttpClient for OAuthHttp {
    fn execute(&self, request: OAuthHttpRequest) -> OAuthHttpClientFuture<'_> {
        Box::pin(async move {
            let client = match request.redirect_policy {
                OAuthHttpRedirectPolicy::Stop => &self.stop,
                _ => &self.follow,
            };
            let (parts, body) = request.request.into_parts();
            let mut builder = client
                .request(parts.method, parts.uri.to_string())
                .headers(parts.headers)
                .body(body);
            if let Some(timeout) = request.timeout {
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
        })
    }
}

/// The Streamable HTTP client of every upstream session: with OAuth it
/// authorizes (see the module docs); without, it sends the configured
/// `Authorization` header, if any, as it is.
#[derive(Clone)]
pub(crate) struct AuthorizingClient {
    inner: reqwest::Client,
    auth: Option<Arc<ServerAuth>>,
}

impl AuthorizingClient {
    pub(crate) fn new(inner: reqwest::Client, auth: Option<Arc<ServerAuth>>) -> Self {
        Self { inner, auth }
    }

    async fn run<T, F, Fut>(
        &self,
        static_header: Option<String>,
        call: F,
    ) -> Result<T, StreamableHttpError<reqwest::Error>>
    where
        F: Fn(Option<String>) -> Fut,
        Fut: Future<Output = Result<T, StreamableHttpError<reqwest::Error>>>,
    {
        let Some(auth) = &self.auth else {
            return call(static_header).await;
        };
        let mut rounds = 0;
        loop {
            let token = auth.bearer().await.map_err(failed)?;
            let (challenge, insufficient_scope) = match call(token.clone()).await {
                Err(StreamableHttpError::AuthRequired(e)) => (e.www_authenticate_header, false),
                Err(StreamableHttpError::InsufficientScope(e)) => (e.www_authenticate_header, true),
                Ok(value) => {
                    auth.succeeded();
                    return Ok(value);
                }
                Err(other) => return Err(other),
            };
            if rounds >= ROUNDS_PER_REQUEST {
                return Err(failed(format!(
                    "server {:?} still refuses the request after {rounds} authorizations ({}); check the client's grants and scopes at the authorization server",
                    auth.name(),
                    challenge_summary(&challenge)
                )));
            }
            rounds += 1;
            auth.on_challenge(token.as_deref(), &challenge, insufficient_scope)
                .await
                .map_err(failed)?;
        }
    }
}

/// The challenge without anything secret (it never carries a token).
fn challenge_summary(challenge: &str) -> String {
    let mut s = challenge.to_string();
    s.truncate(300);
    format!("WWW-Authenticate: {s}")
}

fn failed(message: String) -> StreamableHttpError<reqwest::Error> {
    StreamableHttpError::Auth(AuthError::AuthorizationFailed(message))
}

impl StreamableHttpClient for AuthorizingClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        self.run(auth_header, |token| {
            self.inner.post_message(
                uri.clone(),
                message.clone(),
                session_id.clone(),
                token,
                custom_headers.clone(),
            )
        })
        .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        self.run(auth_header, |token| {
            self.inner.post_message_with_max_sse_event_size(
                uri.clone(),
                message.clone(),
                session_id.clone(),
                token,
                custom_headers.clone(),
                max_sse_event_size,
            )
        })
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        self.run(auth_header, |token| {
            self.inner.post_message_with_response_limits(
                uri.clone(),
                message.clone(),
                session_id.clone(),
                token,
                custom_headers.clone(),
                limits,
            )
        })
        .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        self.run(auth_header, |token| {
            self.inner.delete_session(
                uri.clone(),
                session_id.clone(),
                token,
                custom_headers.clone(),
            )
        })
        .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<
        BoxStream<'static, Result<sse_stream::Sse, sse_stream::Error>>,
        StreamableHttpError<Self::Error>,
    > {
        self.run(auth_header, |token| {
            self.inner.get_stream(
                uri.clone(),
                session_id.clone(),
                last_event_id.clone(),
                token,
                custom_headers.clone(),
            )
        })
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<
        BoxStream<'static, Result<sse_stream::Sse, sse_stream::Error>>,
        StreamableHttpError<Self::Error>,
    > {
        self.run(auth_header, |token| {
            self.inner.get_stream_with_max_sse_event_size(
                uri.clone(),
                session_id.clone(),
                last_event_id.clone(),
                token,
                custom_headers.clone(),
                max_sse_event_size,
            )
        })
        .await
    }
}
