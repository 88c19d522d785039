//! The front door of the protected routes: every request to `/mcp` (every
//! transport behind it, the byte relay of the fast path included) and to
//! the REST API meets the same guards here, once, before any transport or
//! handler sees it:
//!
//! 1. authentication ([`Authenticator`]): the [`Caller`] every later stage
//!    reads from the request's extensions;
//! 2. the `Host` allow-list ([`allowed_host`]), against DNS rebinding: a page
//!    in the user's browser whose name is made to resolve to the gateway's
//!    address reaches it with its own name in `Host`;
//! 3. the body limit, from the declared `Content-Length` (a body sent
//!    without one is cut at the same limit by the transport reading it).
//!
//! How long reading a request head and body may take is bounded by the
//! listener ([`crate::serve`]).
//!
//! Which requests the `Host` rule covers: every request to `/mcp` (what
//! rmcp's own check did, and the MCP transport requires of a server), and
//! every API request when the API lets anyone in without a credential
//! (`auth = "none"`): then nothing but the `Host` stands between such a page
//! and the API. With tokens, a page has no token to send, and the API stays
//! reachable at any name (a CLI or a metrics scraper at the replica's own
//! address).

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::api::error::ApiError;
use crate::auth::{Authenticator, Caller, Refusal};

/// The names a request may carry in `Host` whatever the configuration:
/// the loopback ones (rmcp's defaults for its DNS-rebinding check). Beside
/// them, only the host of `[api] public_url` ([`allowed_host`]).
pub const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// Which routes a [`Guard`] stands in front of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Door {
    /// The MCP endpoint, `/mcp`: the `Host` is always checked.
    Mcp,
    /// The REST API, event stream and metrics: the `Host` is checked when
    /// the API lets anyone in without a credential.
    Api,
}

/// The guards of one door. Cheap to clone.
#[derive(Clone)]
pub struct Guard {
    auth: Authenticator,
    door: Door,
    max_body_bytes: usize,
}

impl Guard {
    /// The guards of `door`, authenticating with `auth` (whose settings a
    /// reload replaces: tokens, `auth` and `public_url` are read per
    /// request) and refusing bodies over `max_body_bytes`.
    pub fn new(auth: Authenticator, door: Door, max_body_bytes: usize) -> Self {
        Self {
            auth,
            door,
            max_body_bytes,
        }
    }

    /// `routes` behind these guards.
    pub fn around<S>(self, routes: axum::Router<S>) -> axum::Router<S>
    where
        S: Clone + Send + Sync + 'static,
    {
        routes.layer(axum::middleware::from_fn_with_state(self, check))
    }

    /// The host of the `public_url` in force: the authenticator holds the
    /// live `[api]` section, and its resource identifier is built on it.
    fn public_host(&self) -> Option<String> {
        let resource = self.auth.resource()?;
        let url = url::Url::parse(&resource).ok()?;
        url.host_str().map(str::to_string)
    }
}

/// The guards, in their order: authentication (a caller without a valid
/// token learns that first, with the challenge that says where to get one,
/// as before the guards moved here), `Host`, body size.
async fn check(State(guard): State<Guard>, mut request: Request, next: Next) -> Response {
    // `auth = "none"`: anyone is let in (an operator), whatever they send.
    let anonymous = guard.auth.authenticate(None).await;
    let open = anonymous.is_ok();
    let caller = match anonymous {
        Ok(caller) => caller,
        Err(_) => {
            let bearer = bearer(&request);
            match guard.auth.authenticate(bearer.as_deref()).await {
                Ok(caller) => caller,
                Err(refusal) => {
                    let refused = refuse(&guard.auth, &request, refusal);
                    return linger(request, refused);
                }
            }
        }
    };
    if guard.door == Door::Mcp || open {
        let public_host = guard.public_host();
        if let Err(refused) = allowed_host(request.uri(), request.headers(), public_host.as_deref())
        {
            return linger(request, refused.into_response());
        }
    }
    if declared_length(request.headers()).is_some_and(|n| n > guard.max_body_bytes as u64) {
        let refused = ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            "the request body is larger than [api] max_body_bytes",
        )
        .into_response();
        return linger(request, refused);
    }
    request.extensions_mut().insert::<Caller>(caller);
    next.run(request).await
}

/// How long, and how many bytes of it, a refused request's unread body is
/// read and thrown away before its connection closes ([`linger`]).
const LINGER_TIME: std::time::Duration = std::time::Duration::from_secs(5);
const LINGER_BYTES: usize = 32 << 20;

/// Answers `refused` to a request whose body was not read, and closes the
/// connection after it, reading and discarding the body for a moment first
/// (nginx's "lingering close"). Without that, a client that writes its
/// whole body before reading (most do) had its connection reset under it:
/// the kernel answers data sent to a closed socket with a reset, and the
/// client saw "broken pipe" instead of the 413 or 401 it was sent. Past
/// [`LINGER_TIME`] or [`LINGER_BYTES`] the rest is not read (the listener's
/// own body deadline bounds a trickle too).
fn linger(request: Request, mut refused: Response) -> Response {
    refused
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    let body = request.into_body();
    tokio::spawn(async move {
        use futures::StreamExt as _;
        let mut chunks = body.into_data_stream();
        let mut read = 0usize;
        let _ = tokio::time::timeout(LINGER_TIME, async {
            while let Some(Ok(chunk)) = chunks.next().await {
                read += chunk.len();
                if read > LINGER_BYTES {
                    break;
                }
            }
        })
        .await;
    });
    refused
}

/// Whether the request names an allowed host: one of [`LOOPBACK_HOSTS`] or
/// `public_host`, on any port. `Host` is read, else (HTTP/2) the URI's
/// authority. The refusals are rmcp's, to the byte: 400 for a `Host` that
/// is missing or not a host, 403 for a host not allowed.
pub fn allowed_host(
    uri: &Uri,
    headers: &HeaderMap,
    public_host: Option<&str>,
) -> Result<(), HostRefused> {
    let bad = |text| HostRefused {
        status: StatusCode::BAD_REQUEST,
        text,
    };
    let named = match headers.get(header::HOST) {
        Some(value) => {
            let text = value
                .to_str()
                .map_err(|_| bad("Bad Request: Invalid Host header encoding"))?;
            let authority = axum::http::uri::Authority::try_from(text)
                .map_err(|_| bad("Bad Request: Invalid Host header"))?;
            normalized(authority.host())
        }
        None => match uri.authority() {
            Some(authority) => normalized(authority.host()),
            None => return Err(bad("Bad Request: missing Host header")),
        },
    };
    let allowed = LOOPBACK_HOSTS
        .iter()
        .copied()
        .chain(public_host)
        .any(|host| normalized(host) == named);
    if allowed {
        return Ok(());
    }
    tracing::warn!(host = %named, "refused a request naming a host not allowed (possible DNS rebinding)");
    Err(HostRefused {
        status: StatusCode::FORBIDDEN,
        text: "Forbidden: Host header is not allowed",
    })
}

/// A request refused for its `Host`: answered with a plain-text body, as
/// rmcp writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostRefused {
    /// 400 or 403.
    pub status: StatusCode,
    /// The body.
    pub text: &'static str,
}

impl IntoResponse for HostRefused {
    fn into_response(self) -> Response {
        let mut response = (self.status, self.text).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        response
    }
}

/// A host as compared: without IPv6 brackets, in lower case.
fn normalized(host: &str) -> String {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase()
}

/// The body length the request declares, if it declares one.
fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// 401 (or 403 for a missing scope) with the challenge that tells a client
/// where to get a token.
fn refuse(auth: &Authenticator, request: &Request, refusal: Refusal) -> Response {
    if let Refusal::Invalid(why) = &refusal {
        tracing::info!(path = %request.uri().path(), reason = %why, "a bearer token was refused");
    }
    let mut response = match &refusal {
        Refusal::InsufficientScope(scope) => ApiError::new(
            StatusCode::FORBIDDEN,
            "insufficient_scope",
            format!("this token lacks the scope {scope:?}"),
        ),
        _ => ApiError::unauthorized(),
    }
    .into_response();
    if let Ok(value) = auth.challenge(&refusal).parse() {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, value);
    }
    response
}

/// The request's bearer token: `Authorization: Bearer …`, or, on the event
/// stream only, `?access_token=` (EventSource cannot send headers).
fn bearer(request: &Request) -> Option<String> {
    if let Some(h) = request.headers().get(header::AUTHORIZATION) {
        return h
            .to_str()
            .ok()?
            .strip_prefix("Bearer ")
            .map(|t| t.trim().to_string());
    }
    if request.method() == axum::http::Method::GET && request.uri().path() == "/api/v1/events" {
        let query = request.uri().query()?;
        return query
            .split('&')
            .find_map(|kv| kv.strip_prefix("access_token=").map(percent_decode));
    }
    None
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                    }
                    None => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(value: &str, public: Option<&str>) -> Result<(), StatusCode> {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, value.parse().unwrap());
        allowed_host(&Uri::from_static("/mcp"), &headers, public).map_err(|r| r.status)
    }

    #[test]
    fn loopback_names_and_the_public_host_pass_on_any_port() {
        assert_eq!(host("localhost:7777", None), Ok(()));
        assert_eq!(host("127.0.0.1", None), Ok(()));
        assert_eq!(host("[::1]:7777", None), Ok(()));
        assert_eq!(host("LOCALHOST", None), Ok(()));
        assert_eq!(
            host("mcptask.example.com", Some("mcptask.example.com")),
            Ok(())
        );
        assert_eq!(
            host("mcptask.example.com:443", Some("mcptask.example.com")),
            Ok(())
        );
    }

    #[test]
    fn other_hosts_are_forbidden_and_broken_ones_bad() {
        assert_eq!(host("evil.example", None), Err(StatusCode::FORBIDDEN));
        assert_eq!(
            host("evil.example", Some("mcptask.example.com")),
            Err(StatusCode::FORBIDDEN)
        );
        assert_eq!(
            host("localhost.evil.example", None),
            Err(StatusCode::FORBIDDEN)
        );
        assert_eq!(host("10.0.0.5:7777", None), Err(StatusCode::FORBIDDEN));
        assert_eq!(host("a b", None), Err(StatusCode::BAD_REQUEST));
    }
}
