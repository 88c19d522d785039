//! Serving a router on a listener with bounded reads: how every HTTP
//! listener of mcptask serves its connections (the gateway's, through
//! [`crate::drain`], and the demo server's).
//!
//! axum's own `serve` gives hyper no timer, so hyper's header-read timeout
//! never applies there: a client trickling its request head a byte a
//! second, or leaving its connection idle, holds a connection and its file
//! descriptor for as long as it likes. Here hyper gets tokio's timer and
//! [`REQUEST_HEAD_TIMEOUT`], which hyper counts from the moment it waits for
//! a request head: on a new connection, and again after each answer on a
//! kept-alive one. A request head not complete within it (a slow one, or
//! none: the connection idle) closes the connection. A request body must
//! then come whole within [`BODY_READ_TIMEOUT`]: past it, whoever reads the
//! body gets an error (and the connection, its body unread, is closed after
//! the answer). The body's size is bounded by the guards in front of the
//! routes ([`crate::guard`]).
//!
//! HTTP/1.1 only: hyper bounds nothing while it reads an HTTP/2 request's
//! headers (nor the preface of cleartext HTTP/2), and no client of mcptask
//! speaks HTTP/2 without TLS; a proxy in front terminates TLS and HTTP/2
//! (docs/DEPLOY.md).

use std::future::Future;
use std::pin::{Pin, pin};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use http_body::{Frame, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How long a client has to send a whole request head, counted from the
/// moment the server waits for one: after accepting the connection, and
/// after each answer on a kept-alive connection (so it is also how long a
/// kept-alive connection may stay idle). A balancer's keep-alive pool must
/// close its idle connections sooner (nginx: `keepalive_timeout` in the
/// `upstream` block, docs/DEPLOY.md).
pub const REQUEST_HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a client has to send a request's whole body, counted from the
/// end of its head: a 4 MiB body (the default `[api] max_body_bytes`) at
/// about 1 Mbit/s.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Serve `app` on `listener` until `shutdown` completes; then stop
/// accepting, let every connection finish the request it is serving
/// (idle ones close at once), and return when the last one closed.
pub async fn serve<L>(mut listener: L, app: axum::Router, shutdown: impl Future<Output = ()>)
where
    L: axum::serve::Listener,
{
    let closing = CancellationToken::new();
    let connections = TaskTracker::new();
    let mut shutdown = pin!(shutdown);
    loop {
        let (io, _peer) = tokio::select! {
            // A connection ready to be accepted is taken before the
            // shutdown: a draining listener hands over the connections the
            // kernel queued before it closed (`crate::drain`), which must be
            // answered, not reset, even when the shutdown is due at once.
            biased;
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let service = TowerToHyperService::new(tower::ServiceExt::map_request(
            app.clone(),
            |request: axum::http::Request<hyper::body::Incoming>| {
                request.map(|body| {
                    if http_body::Body::is_end_stream(&body) {
                        Body::new(body)
                    } else {
                        Body::new(Deadline::new(body, BODY_READ_TIMEOUT))
                    }
                })
            },
        ));
        let closing = closing.clone();
        connections.spawn(async move {
            let mut http1 = hyper::server::conn::http1::Builder::new();
            http1
                .timer(TokioTimer::new())
                .header_read_timeout(REQUEST_HEAD_TIMEOUT);
            let mut connection = pin!(http1.serve_connection(TokioIo::new(io), service));
            tokio::select! {
                served = connection.as_mut() => {
                    if let Err(e) = served {
                        tracing::debug!(error = %e, "an HTTP connection ended with an error");
                    }
                    return;
                }
                () = closing.cancelled() => connection.as_mut().graceful_shutdown(),
            }
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "an HTTP connection ended with an error");
            }
        });
    }
    drop(listener);
    closing.cancel();
    connections.close();
    connections.wait().await;
}

/// A request body that fails once `timeout` passed before its end.
struct Deadline<B> {
    body: B,
    expires: Pin<Box<tokio::time::Sleep>>,
}

impl<B> Deadline<B> {
    fn new(body: B, timeout: Duration) -> Self {
        Self {
            body,
            expires: Box::pin(tokio::time::sleep(timeout)),
        }
    }
}

/// The error of a body that did not come in time.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {BODY_READ_TIMEOUT:?}")]
struct BodyTimeout;

impl<B> http_body::Body for Deadline<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: Into<axum::BoxError>,
{
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::BoxError>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.body).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        if self.expires.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err(BodyTimeout.into())));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
