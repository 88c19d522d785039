//! Leaving a load balancer without failing a call: what `mcptask serve`
//! does between SIGTERM and the shutdown of its runtime.
//!
//! A replica that stops must neither refuse a request it already has nor
//! close a connection a balancer is about to send one on. The sequence:
//!
//! 1. [`Drain::begin`] (SIGTERM): `/readyz` answers 503 `draining` at once,
//!    and the listener is closed, after accepting what the kernel had
//!    already queued. A new connection is refused before anything is sent
//!    on it, which a balancer may retry on a peer whatever the method
//!    (nginx's `proxy_next_upstream error`).
//! 2. Open connections go on being served, but each response now carries
//!    `Connection: close`: the client (nginx's upstream keep-alive pool,
//!    an HTTP client's pool) closes it after reading that answer, so no
//!    request races the server's close. An idle connection is left for its
//!    client to close (nginx's upstream `keepalive_timeout`, which must be
//!    shorter than [`QUIET_WAIT`]).
//! 3. When the last connection closed, or after [`QUIET_WAIT`], the server
//!    stops: idle connections are closed, requests in flight get up to
//!    [`HANDLER_GRACE`] more; then [`Drain::serve`] returns and the rest of
//!    the runtime shuts down ([`Gateway::shutdown`](crate::Gateway::shutdown)),
//!    cancelling what is still in flight at the MCP front.
//!
//! A hard stop (the gateway's stop token, e.g. a second SIGTERM) skips
//! steps 1 and 2.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::api::error::ApiError;

/// How long a draining server waits for its clients to close their
/// connections (after their last answer, or idle) before closing them.
pub const QUIET_WAIT: Duration = Duration::from_secs(5);

/// How long requests still in flight when the server closes its
/// connections may run before the server stops waiting for them.
pub const HANDLER_GRACE: Duration = Duration::from_secs(5);

/// The drain of one HTTP server: whether it began, and how many
/// connections are still open. Cheap to clone.
#[derive(Clone, Default)]
pub struct Drain {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    begun: CancellationToken,
    open: AtomicUsize,
    /// Notified whenever a connection closes.
    closed: Notify,
}

impl Drain {
    /// A drain not begun.
    pub fn new() -> Drain {
        Drain::default()
    }

    /// Start draining (idempotent): see the module's sequence.
    pub fn begin(&self) {
        if !self.inner.begun.is_cancelled() {
            tracing::info!(
                open_connections = self.open_connections(),
                "draining: not ready any more, the listener closes, open connections are closed after their next answer"
            );
        }
        self.inner.begun.cancel();
    }

    /// Whether [`Drain::begin`] was called.
    pub fn is_draining(&self) -> bool {
        self.inner.begun.is_cancelled()
    }

    /// Connections accepted and not closed yet.
    pub fn open_connections(&self) -> usize {
        self.inner.open.load(Ordering::SeqCst)
    }

    /// Until every accepted connection is closed.
    async fn quiet(&self) {
        loop {
            let closed = self.inner.closed.notified();
            if self.open_connections() == 0 {
                return;
            }
            closed.await;
        }
    }

    /// Serve `app` on `listener` until the drain has run its course, or
    /// until `stop` (a hard stop: idle connections closed at once, requests
    /// in flight given [`HANDLER_GRACE`]). Connections are served with
    /// bounded reads ([`crate::serve`]).
    pub async fn serve(
        &self,
        listener: TcpListener,
        app: axum::Router,
        stop: CancellationToken,
    ) -> std::io::Result<()> {
        let local = listener.local_addr()?;
        let listener = DrainingListener {
            listener: Some(listener),
            local,
            drain: self.clone(),
        };
        let app = app.layer(axum::middleware::from_fn_with_state(
            self.clone(),
            while_draining,
        ));
        let closing = CancellationToken::new();
        let signal = {
            let drain = self.clone();
            let closing = closing.clone();
            async move {
                tokio::select! {
                    _ = stop.cancelled() => {}
                    _ = drain.run_quiet_wait() => {}
                }
                closing.cancel();
            }
        };
        let serving = crate::serve::serve(listener, app, signal);
        tokio::select! {
            () = serving => Ok(()),
            _ = async { closing.cancelled().await; tokio::time::sleep(HANDLER_GRACE).await } => {
                tracing::warn!(
                    open_connections = self.open_connections(),
                    "requests still in flight {HANDLER_GRACE:?} after the server closed; they are cancelled with the runtime"
                );
                Ok(())
            }
        }
    }

    /// Step 2 of the sequence: from the drain's start until the last
    /// connection closed, or [`QUIET_WAIT`].
    async fn run_quiet_wait(&self) {
        self.inner.begun.cancelled().await;
        if tokio::time::timeout(QUIET_WAIT, self.quiet())
            .await
            .is_err()
        {
            tracing::info!(
                open_connections = self.open_connections(),
                "draining: connections still open after {QUIET_WAIT:?}; closing the idle ones"
            );
        }
    }
}

/// While draining: `/readyz` is 503 `draining` (whatever the store says),
/// and every answer closes its connection.
async fn while_draining(State(drain): State<Drain>, request: Request, next: Next) -> Response {
    if !drain.is_draining() {
        return next.run(request).await;
    }
    let mut response = if request.uri().path() == "/readyz" {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "draining",
            "this replica is stopping: send requests to another one",
        )
        .into_response()
    } else {
        next.run(request).await
    };
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// A TCP listener that counts its open connections and closes once its
/// drain begins (after accepting what is already queued).
struct DrainingListener {
    listener: Option<TcpListener>,
    local: SocketAddr,
    drain: Drain,
}

impl DrainingListener {
    fn counted(&self, stream: TcpStream) -> Counted {
        self.drain.inner.open.fetch_add(1, Ordering::SeqCst);
        Counted {
            stream,
            drain: self.drain.clone(),
        }
    }

    /// The connections the kernel completed before the close, taken now
    /// rather than reset with the socket: their clients may have sent a
    /// request already, which a balancer must not retry.
    fn take_queued(&mut self) -> Option<TcpStream> {
        let listener = self.listener.take()?;
        let queued = match listener.into_std() {
            Ok(std) => loop {
                match std.accept() {
                    Ok((stream, _)) => {
                        let stream = stream
                            .set_nonblocking(true)
                            .and_then(|()| TcpStream::from_std(stream));
                        match stream {
                            Ok(stream) => {
                                // Keep the socket open for the next one.
                                self.listener = TcpListener::from_std(std).ok();
                                break Some(stream);
                            }
                            Err(_) => continue,
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break None,
                    Err(e) if is_connection_error(&e) => continue,
                    Err(_) => break None,
                }
            },
            Err(_) => None,
        };
        if self.listener.is_none() {
            tracing::info!(addr = %self.local, "draining: the listener is closed");
        }
        queued
    }
}

impl axum::serve::Listener for DrainingListener {
    type Io = Counted;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Counted, SocketAddr) {
        loop {
            if self.drain.is_draining() {
                if let Some(stream) = self.take_queued() {
                    let peer = stream.peer_addr().unwrap_or(self.local);
                    return (self.counted(stream), peer);
                }
                return std::future::pending().await;
            }
            let Some(listener) = &self.listener else {
                return std::future::pending().await;
            };
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, peer)) => return (self.counted(stream), peer),
                    Err(e) if is_connection_error(&e) => {}
                    Err(e) => {
                        // Out of file descriptors and the like: wait rather than spin.
                        tracing::error!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                },
                _ = self.drain.inner.begun.cancelled() => {}
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.local)
    }
}

/// An accept error about one connection only (the next accept may work).
fn is_connection_error(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
    )
}

/// An accepted connection, counted open until dropped.
pub struct Counted {
    stream: TcpStream,
    drain: Drain,
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.drain.inner.open.fetch_sub(1, Ordering::SeqCst);
        self.drain.inner.closed.notify_waiters();
    }
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// Connections the kernel completed before the drain began, each with
    /// a request sent, are answered (and told to close) rather than reset
    /// with the listening socket: a balancer cannot retry a `POST` it sent.
    /// New connections after that are refused. Without `take_queued` every
    /// queued client read a reset.
    #[tokio::test]
    async fn queued_connections_are_answered_then_new_ones_refused() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut clients = Vec::new();
        for _ in 0..4 {
            let mut client = TcpStream::connect(addr).await.unwrap();
            client
                .write_all(b"POST /work HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
                .await
                .unwrap();
            clients.push(client);
        }
        let drain = Drain::new();
        drain.begin();
        let app = axum::Router::new().route("/work", axum::routing::post(|| async { "done" }));
        let served = tokio::spawn({
            let drain = drain.clone();
            async move { drain.serve(listener, app, CancellationToken::new()).await }
        });
        for mut client in clients {
            let mut answer = String::new();
            tokio::time::timeout(Duration::from_secs(5), client.read_to_string(&mut answer))
                .await
                .expect("answered within the drain")
                .expect("answered, not reset");
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
            assert!(
                answer.to_ascii_lowercase().contains("connection: close"),
                "{answer}"
            );
            assert!(answer.ends_with("done"), "{answer}");
        }
        tokio::time::timeout(Duration::from_secs(5), served)
            .await
            .expect("the server stops once its connections closed")
            .unwrap()
            .unwrap();
        assert!(
            TcpStream::connect(addr).await.is_err(),
            "the port is closed"
        );
    }
}
