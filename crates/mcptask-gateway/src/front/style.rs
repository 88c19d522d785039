//! The front answers in the style of the servers behind it: an SSE stream
//! where they stream, one JSON body where they answer JSON. A client that
//! reads SSE from a server directly gets SSE through the front as well, so
//! the front changes nothing a client could tell apart (rmcp's conformance
//! check `server-sse-streams-functional` passes through it as it does
//! directly).
//!
//! The relayed fast path already answers with the upstream's own bytes;
//! this covers what the front answers itself (listings, discovery, the
//! full way's calls). How each upstream answers is learnt from its answers
//! (`mcptask_client::remote::answers`); [`crate::upstreams::Upstreams::streams`]
//! folds them into one style.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::http::{HeaderMap, Method, Request, header};

/// Whether a request is answered as a stream: a POST whose caller accepts
/// one, while the upstreams stream (`upstreams_stream`).
pub(super) fn answers_as_stream(
    method: &Method,
    headers: &HeaderMap,
    upstreams_stream: bool,
) -> bool {
    upstreams_stream
        && method == Method::POST
        && headers
            .get_all(header::ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| v.contains("text/event-stream"))
}

/// Serves each request with the JSON-answering service or the streaming
/// one (the same service, configured twice, over one session manager).
///
/// Both are behind `Arc`s and the one a request needs is cloned for it:
/// the layers above clone this service for every request (tower's way for
/// a `'static` future), including the relayed ones that never reach rmcp,
/// and cloning rmcp's service copies its configuration.
#[derive(Clone)]
pub struct ByStyle<S> {
    json: Arc<S>,
    stream: Arc<S>,
    streams: Arc<dyn Fn() -> bool + Send + Sync>,
}

impl<S> ByStyle<S> {
    /// `json` and `stream` serve the same requests, answering as their
    /// names say; `streams` tells whether the upstreams stream now.
    pub(super) fn new(json: S, stream: S, streams: Arc<dyn Fn() -> bool + Send + Sync>) -> Self {
        Self {
            json: Arc::new(json),
            stream: Arc::new(stream),
            streams,
        }
    }
}

impl<S, B> tower::Service<Request<B>> for ByStyle<S>
where
    S: tower::Service<Request<B>, Error = Infallible> + Clone,
{
    type Response = S::Response;
    type Error = Infallible;
    type Future = S::Future;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // rmcp's service is always ready (its `poll_ready` answers `Ready`
        // at once), so the clone made in `call` serves at once too.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let chosen = if answers_as_stream(request.method(), request.headers(), (self.streams)()) {
            &self.stream
        } else {
            &self.json
        };
        S::clone(chosen).call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn accepting(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::ACCEPT, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn only_a_post_that_accepts_a_stream_streams_and_only_before_streaming_upstreams() {
        let both = accepting("application/json, text/event-stream");
        assert!(answers_as_stream(&Method::POST, &both, true));
        assert!(!answers_as_stream(&Method::POST, &both, false));
        assert!(!answers_as_stream(
            &Method::POST,
            &accepting("application/json"),
            true
        ));
        assert!(!answers_as_stream(&Method::DELETE, &both, true));
        assert!(!answers_as_stream(&Method::POST, &HeaderMap::new(), true));
    }
}
