//! The Streamable HTTP client of every upstream session: with OAuth it
//! presents the server's token on every MCP request (as a bearer token, or
//! DPoP-bound with a fresh proof each time) and answers the server's
//! challenges: a 401 or a 403 `insufficient_scope` by authorizing and
//! retrying, a DPoP `use_dpop_nonce` by retrying with the server's nonce.

use std::collections::HashMap;
use std::sync::Arc;

use futures::stream::BoxStream;
use http::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::auth::{AuthError, WWWAuthenticateParams};
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};

use super::ServerAuth;
use super::authorizer::Credential;
use super::dpop;
use crate::remote::exchange::{Exchange, Resumes};

/// How many times one request authorizes before the challenge is reported.
const ROUNDS_PER_REQUEST: usize = 3;
/// How many nonces one request asks for before the challenge is reported.
const NONCES_PER_REQUEST: usize = 2;

/// The Streamable HTTP client of every upstream session: with OAuth it
/// authorizes (see the module docs); without, it sends the configured
/// `Authorization` header, if any, as it is.
#[derive(Clone)]
pub(crate) struct AuthorizingClient {
    inner: reqwest::Client,
    auth: Option<Arc<ServerAuth>>,
    /// The configured server's name (for the logs of a crossed answer).
    server: Arc<str>,
    /// Where each response stream's answer is expected, for resumptions
    /// (see `crate::remote::exchange`).
    resumes: Resumes,
}

impl AuthorizingClient {
    pub(crate) fn new(
        inner: reqwest::Client,
        auth: Option<Arc<ServerAuth>>,
        server: impl Into<Arc<str>>,
    ) -> Self {
        Self {
            inner,
            auth,
            server: server.into(),
            resumes: Resumes::default(),
        }
    }

    /// One request (`call`, given the token rmcp is to send as a bearer
    /// token and the headers to add) made for `method` `uri`, authorized.
    async fn run<T, F, Fut>(
        &self,
        method: &str,
        uri: &str,
        static_header: Option<String>,
        custom: &HashMap<HeaderName, HeaderValue>,
        call: F,
    ) -> Result<T, StreamableHttpError<reqwest::Error>>
    where
        F: Fn(Option<String>, HashMap<HeaderName, HeaderValue>) -> Fut,
        Fut: Future<Output = Result<T, StreamableHttpError<reqwest::Error>>>,
    {
        let Some(auth) = &self.auth else {
            return call(static_header, custom.clone()).await;
        };
        let mut rounds = 0;
        let mut nonces = 0;
        loop {
            let credential = auth.credential().await.map_err(failed)?;
            let mut headers = custom.clone();
            if let Some(c) = &credential {
                headers.extend(auth.authorization(c, method, uri).map_err(failed)?);
            }
            let (challenge, insufficient_scope) = match call(None, headers).await {
                Err(StreamableHttpError::AuthRequired(e)) => (e.www_authenticate_header, false),
                Err(StreamableHttpError::InsufficientScope(e)) => (e.www_authenticate_header, true),
                Ok(value) => {
                    auth.succeeded();
                    return Ok(value);
                }
                Err(other) => return Err(other),
            };
            if let Some(c) = &credential
                && c.is_dpop()
                && nonces < NONCES_PER_REQUEST
                && wants_nonce(&challenge, uri)
            {
                nonces += 1;
                self.fetch_nonce(auth, c, uri).await.map_err(failed)?;
                continue;
            }
            if rounds >= ROUNDS_PER_REQUEST {
                return Err(failed(format!(
                    "server {:?} still refuses the request after {rounds} authorizations ({}); check the client's grants and scopes at the authorization server",
                    auth.name(),
                    challenge_summary(&challenge)
                )));
            }
            rounds += 1;
            let sent = credential.as_ref().map(Credential::token);
            auth.on_challenge(sent, &challenge, insufficient_scope)
                .await
                .map_err(failed)?;
        }
    }

    /// A POST of `message` made by `send` (rmcp's client, given the token
    /// and headers) and authorized as [`AuthorizingClient::run`] does; the
    /// style of its answer is noted for the front when it [`shows_style`].
    /// Its answer is the answer to `message` or none (an answer with
    /// another id is dropped: see `crate::remote::exchange`). Every POST
    /// variant of the trait goes through here.
    async fn post<F, Fut>(
        &self,
        uri: &str,
        message: &ClientJsonRpcMessage,
        session_id: Option<&str>,
        auth_header: Option<String>,
        custom: &HashMap<HeaderName, HeaderValue>,
        send: F,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>>
    where
        F: Fn(Option<String>, HashMap<HeaderName, HeaderValue>) -> Fut,
        Fut: Future<
            Output = Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>>,
        >,
    {
        let shows = shows_style(message, session_id);
        let response = match call_credential(message) {
            // A call's own credential: sent as it is, in place of whatever
            // the session sends (the gateway's OAuth token or static
            // header), and never retried with the gateway's.
            Some(token) => send(Some(token), custom.clone()).await,
            None => self.run("POST", uri, auth_header, custom, send).await,
        };
        if shows {
            use crate::remote::{AnswerStyle, saw};
            match &response {
                Ok(StreamableHttpPostResponse::Json(..)) => saw(uri, AnswerStyle::Json),
                Ok(StreamableHttpPostResponse::Sse(..)) => saw(uri, AnswerStyle::Sse),
                _ => {}
            }
        }
        let exchange = Exchange::post(
            self.server.clone(),
            message,
            session_id.map(Arc::from),
            self.resumes.clone(),
        );
        response.map(|answer| match answer {
            StreamableHttpPostResponse::Json(message, session) => {
                StreamableHttpPostResponse::Json(exchange.json(message), session)
            }
            StreamableHttpPostResponse::Sse(stream, session) => {
                StreamableHttpPostResponse::Sse(exchange.sse(stream), session)
            }
            // Accepted (nothing to check), or a kind of answer rmcp added
            // later.
            other => other,
        })
    }

    /// A GET stream of the session (`last_event_id`: resuming a response
    /// stream), checked as `crate::remote::exchange` says.
    fn checked_stream(
        &self,
        session_id: Option<&Arc<str>>,
        last_event_id: Option<&str>,
        stream: BoxStream<'static, Result<sse_stream::Sse, sse_stream::Error>>,
    ) -> BoxStream<'static, Result<sse_stream::Sse, sse_stream::Error>> {
        Exchange::get(
            self.server.clone(),
            session_id.cloned(),
            last_event_id,
            self.resumes.clone(),
        )
        .sse(stream)
    }

    /// Learn the nonce a resource server asks for (RFC 9449 §9). rmcp's
    /// client reports the 401 but not its `DPoP-Nonce` header, so the server
    /// is asked once more with an empty object for a body: no JSON-RPC
    /// message, nothing a server could act on, and refused for want of the
    /// nonce all the same, with the nonce in its answer.
    async fn fetch_nonce(
        &self,
        auth: &ServerAuth,
        credential: &Credential,
        uri: &str,
    ) -> Result<(), String> {
        let mut request = self
            .inner
            .post(uri)
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "application/json, text/event-stream")
            .body("{}");
        for (name, value) in auth.authorization(credential, "POST", uri)? {
            request = request.header(name, value);
        }
        let response = request
            .send()
            .await
            .map_err(|e| format!("asking {:?} for its DPoP nonce: {e}", auth.name()))?;
        if auth.learn_nonce(uri, response.headers()) {
            Ok(())
        } else {
            Err(format!(
                "server {:?} asks for a DPoP nonce (use_dpop_nonce) but sends none (HTTP {})",
                auth.name(),
                response.status()
            ))
        }
    }
}

/// Whether a 401's challenge asks for a DPoP nonce.
fn wants_nonce(challenge: &str, uri: &str) -> bool {
    url::Url::parse(uri).is_ok_and(|base| {
        WWWAuthenticateParams::parse(challenge, &base)
            .error
            .as_deref()
            == Some(dpop::USE_NONCE)
    })
}

/// The challenge without anything secret (it never carries a token).
fn challenge_summary(challenge: &str) -> String {
    let mut s = challenge.to_string();
    s.truncate(300);
    format!("WWW-Authenticate: {s}")
}

/// The bearer token of the call `message` is a request of, when the call
/// carries its own (`crate::identity`).
fn call_credential(message: &ClientJsonRpcMessage) -> Option<String> {
    match message {
        ClientJsonRpcMessage::Request(r) => {
            crate::identity::CallCredential::of(&r.request).map(|c| c.token().to_string())
        }
        _ => None,
    }
}

/// Whether the answer to `message` shows how the upstream answers requests
/// in general (see `crate::remote::answers`): a session-less listing, which
/// every upstream gets when it is listed. A session's answers and a call's
/// say less (a server may stream only the calls that send progress).
fn shows_style(message: &ClientJsonRpcMessage, session_id: Option<&str>) -> bool {
    session_id.is_none()
        && matches!(message, ClientJsonRpcMessage::Request(r)
            if matches!(r.request.method(), "server/discover" | "tools/list"))
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
        self.post(
            &uri,
            &message,
            session_id.as_deref(),
            auth_header,
            &custom_headers,
            |token, headers| {
                self.inner.post_message(
                    uri.clone(),
                    message.clone(),
                    session_id.clone(),
                    token,
                    headers,
                )
            },
        )
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
        self.post(
            &uri,
            &message,
            session_id.as_deref(),
            auth_header,
            &custom_headers,
            |token, headers| {
                self.inner.post_message_with_max_sse_event_size(
                    uri.clone(),
                    message.clone(),
                    session_id.clone(),
                    token,
                    headers,
                    max_sse_event_size,
                )
            },
        )
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
        self.post(
            &uri,
            &message,
            session_id.as_deref(),
            auth_header,
            &custom_headers,
            |token, headers| {
                self.inner.post_message_with_response_limits(
                    uri.clone(),
                    message.clone(),
                    session_id.clone(),
                    token,
                    headers,
                    limits,
                )
            },
        )
        .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        self.run(
            "DELETE",
            &uri,
            auth_header,
            &custom_headers,
            |token, headers| {
                self.inner
                    .delete_session(uri.clone(), session_id.clone(), token, headers)
            },
        )
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
        self.run(
            "GET",
            &uri,
            auth_header,
            &custom_headers,
            |token, headers| {
                self.inner.get_stream(
                    uri.clone(),
                    session_id.clone(),
                    last_event_id.clone(),
                    token,
                    headers,
                )
            },
        )
        .await
        .map(|stream| self.checked_stream(session_id.as_ref(), last_event_id.as_deref(), stream))
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
        self.run(
            "GET",
            &uri,
            auth_header,
            &custom_headers,
            |token, headers| {
                self.inner.get_stream_with_max_sse_event_size(
                    uri.clone(),
                    session_id.clone(),
                    last_event_id.clone(),
                    token,
                    headers,
                    max_sse_event_size,
                )
            },
        )
        .await
        .map(|stream| self.checked_stream(session_id.as_ref(), last_event_id.as_deref(), stream))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nonce_challenge_is_told_from_other_401s() {
        let uri = "https://rs.example/mcp";
        assert!(wants_nonce(
            r#"DPoP error="use_dpop_nonce", error_description="Resource server requires nonce""#,
            uri
        ));
        assert!(!wants_nonce(r#"DPoP error="invalid_token""#, uri));
        assert!(!wants_nonce(
            r#"Bearer resource_metadata="https://rs.example/.well-known/x""#,
            uri
        ));
    }
}
