//! A front in the test process placed before a real server, switched at run
//! time between forwarding and the faults production networks bring: a
//! server that hangs, a host that accepts TCP and never answers, a proxy
//! answering 408/429/5xx or an HTML error page, and nothing listening at
//! all. Every request it sees is logged (JSON-RPC method and time), so tests
//! can measure how often each server is polled.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the front does with what reaches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Pass every request to the server behind.
    Forward,
    /// Read each request and never answer it (a hung server).
    Hang,
    /// Accept TCP connections and never read from them (a blackholed host);
    /// requests on connections opened before get no answer either.
    Blackhole,
    /// Answer with this status and a short `text/plain` body (a proxy's 408,
    /// 429, 502, 503, 504).
    Status(u16),
    /// Answer with this status and an HTML error page (200: a captive login page).
    Html(u16),
    /// Nothing listens: new connections are refused, open ones are reset.
    Refuse,
    /// Forward each request after this long (a server slow to answer).
    Delay(Duration),
    /// Answer the next request that names a session (`Mcp-Session-Id`)
    /// `404 Session not found`, as a server does once it forgot the session
    /// after an idle spell, then forward again (the rule goes back to
    /// [`Fault::Forward`]). Requests without a session id are forwarded.
    SessionExpiredOnce,
}

impl Fault {
    fn label(&self) -> String {
        match self {
            Fault::Forward => "forward".into(),
            Fault::Hang => "hang".into(),
            Fault::Blackhole => "blackhole".into(),
            Fault::Status(c) => format!("status {c}"),
            Fault::Html(c) => format!("html {c}"),
            Fault::Refuse => "refuse".into(),
            Fault::Delay(d) => format!("delay {} ms", d.as_millis()),
            Fault::SessionExpiredOnce => "session expired".into(),
        }
    }
}

/// The fault in force and the JSON-RPC methods it applies to (`None`: every
/// request; connection-level faults always apply to everything).
#[derive(Debug, Clone)]
struct Rule {
    fault: Fault,
    methods: Option<Vec<String>>,
}

/// One request the front saw.
#[derive(Debug, Clone)]
pub struct FrontSeen {
    pub at: Instant,
    /// The JSON-RPC method of a POST, else the HTTP method (`GET`, `DELETE`).
    pub method: String,
    /// The remote task id in `params.taskId`, if any.
    pub task_id: Option<String>,
    /// What the front did (`forward`, `hang`, `status 503`, …).
    pub answered: String,
}

struct Shared {
    rule: watch::Sender<Rule>,
    seen: Mutex<Vec<FrontSeen>>,
    /// Bumped when connections must die (switching to `Refuse`).
    epoch: Arc<AtomicU64>,
    /// [`FaultFront::close_idle_after`] in ms (0: connections stay open).
    idle_close_ms: Arc<AtomicU64>,
}

/// A running front; stopped on drop.
pub struct FaultFront {
    /// `http://127.0.0.1:PORT` (the same port for the front's whole life).
    pub base: String,
    shared: Arc<Shared>,
    server: tokio::task::JoinHandle<()>,
}

impl FaultFront {
    /// A front forwarding to `target` (`http://HOST:PORT`).
    pub async fn start(target: &str) -> FaultFront {
        let (rule, _) = watch::channel(Rule {
            fault: Fault::Forward,
            methods: None,
        });
        let shared = Arc::new(Shared {
            rule,
            seen: Mutex::new(Vec::new()),
            epoch: Arc::new(AtomicU64::new(0)),
            idle_close_ms: Arc::new(AtomicU64::new(0)),
        });
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the fault front");
        let addr = listener.local_addr().expect("front address");
        let front_listener = FrontListener {
            listener: Some(listener),
            addr,
            rule: shared.rule.subscribe(),
            held: Vec::new(),
            epoch: shared.epoch.clone(),
            idle_close_ms: shared.idle_close_ms.clone(),
        };
        let client = crate::forwarding_client();
        let target = target.trim_end_matches('/').to_string();
        let state = shared.clone();
        let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
            handle(state.clone(), client.clone(), target.clone(), request)
        });
        let server = tokio::spawn(async move {
            let _ = axum::serve(front_listener, app).await;
        });
        FaultFront {
            base: format!("http://{addr}"),
            shared,
            server,
        }
    }

    /// The MCP endpoint through the front.
    pub fn url(&self) -> String {
        format!("{}/mcp", self.base)
    }

    /// Apply `fault` to every request from now on.
    pub fn set(&self, fault: Fault) {
        self.shared.rule.send_replace(Rule {
            fault,
            methods: None,
        });
    }

    /// Apply `fault` only to JSON-RPC requests of these methods; forward the rest.
    pub fn set_for(&self, fault: Fault, methods: &[&str]) {
        self.shared.rule.send_replace(Rule {
            fault,
            methods: Some(methods.iter().map(|m| m.to_string()).collect()),
        });
    }

    /// Behave like a server whose keep-alive timer closes a connection idle
    /// for `idle` (Node's and uvicorn's default is 5 s), at its worst: the
    /// close meets a request the client just sent on that connection, which
    /// is read and dropped unanswered (the connection is reset). A client
    /// that keeps idle connections longer than its servers do loses such a
    /// request.
    pub fn close_idle_after(&self, idle: Duration) {
        self.shared
            .idle_close_ms
            .store(idle.as_millis() as u64, Ordering::SeqCst);
    }

    /// Every request seen so far.
    pub fn seen(&self) -> Vec<FrontSeen> {
        self.shared.seen.lock().unwrap().clone()
    }

    /// Times of the requests of `method` seen at or after `since`.
    pub fn times(&self, method: &str, since: Instant) -> Vec<Instant> {
        self.seen()
            .into_iter()
            .filter(|s| s.method == method && s.at >= since)
            .map(|s| s.at)
            .collect()
    }

    /// How many requests of `method` were seen.
    pub fn count(&self, method: &str) -> usize {
        self.seen().iter().filter(|s| s.method == method).count()
    }
}

impl Drop for FaultFront {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn handle(
    shared: Arc<Shared>,
    client: reqwest::Client,
    target: String,
    request: axum::extract::Request,
) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, 64 * 1024 * 1024).await else {
        return (StatusCode::BAD_REQUEST, "unreadable body").into_response();
    };
    let rpc: Option<serde_json::Value> = serde_json::from_slice(&body).ok();
    let method = rpc
        .as_ref()
        .and_then(|v| v["method"].as_str())
        .map_or_else(|| parts.method.to_string(), str::to_string);
    let task_id = rpc
        .as_ref()
        .and_then(|v| v["params"]["taskId"].as_str())
        .map(str::to_string);
    let rule = shared.rule.borrow().clone();
    let connection_level = matches!(rule.fault, Fault::Blackhole | Fault::Refuse);
    let applies = connection_level || rule.methods.as_ref().is_none_or(|m| m.contains(&method));
    let mut fault = if applies { rule.fault } else { Fault::Forward };
    if fault == Fault::SessionExpiredOnce {
        // One request only, even among concurrent ones: the one that turns
        // the rule back to forwarding.
        let names_session = parts.headers.contains_key("mcp-session-id");
        let first = names_session
            && shared.rule.send_if_modified(|r| {
                let armed = r.fault == Fault::SessionExpiredOnce;
                if armed {
                    r.fault = Fault::Forward;
                }
                armed
            });
        if !first {
            fault = Fault::Forward;
        }
    }
    shared.seen.lock().unwrap().push(FrontSeen {
        at: Instant::now(),
        method,
        task_id,
        answered: fault.label(),
    });
    match fault {
        Fault::Forward => forward(&client, &target, parts, body).await,
        Fault::Delay(d) => {
            tokio::time::sleep(d).await;
            forward(&client, &target, parts, body).await
        }
        Fault::Hang | Fault::Blackhole | Fault::Refuse => std::future::pending().await,
        Fault::SessionExpiredOnce => Response::builder()
            .status(StatusCode::NOT_FOUND)
            .header(header::CONTENT_TYPE, "text/plain")
            .body(Body::from("Not Found: Session not found"))
            .expect("a plain response"),
        Fault::Status(code) => Response::builder()
            .status(code)
            .header(header::CONTENT_TYPE, "text/plain")
            .header(header::RETRY_AFTER, "1")
            .body(Body::from(format!("upstream unavailable ({code})")))
            .expect("a plain response"),
        Fault::Html(code) => Response::builder()
            .status(code)
            .header(header::CONTENT_TYPE, "text/html; charset=utf-8")
            .body(Body::from(format!(
                "<!DOCTYPE html>\n<html><head><title>{code} Error</title></head>\
                 <body><h1>{code}</h1><p>The upstream server is temporarily unavailable. \
                 Please try again later.</p><hr><address>nginx</address></body></html>\n"
            )))
            .expect("an html response"),
    }
}

async fn forward(
    client: &reqwest::Client,
    target: &str,
    parts: axum::http::request::Parts,
    body: axum::body::Bytes,
) -> Response {
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut request = client
        .request(parts.method.clone(), format!("{target}{path}"))
        .body(body);
    for (name, value) in &parts.headers {
        if name != header::HOST && name != header::CONTENT_LENGTH {
            request = request.header(name, value);
        }
    }
    match request.send().await {
        Ok(upstream) => {
            let mut response = Response::builder().status(upstream.status());
            for (name, value) in upstream.headers() {
                if name != header::TRANSFER_ENCODING && name != header::CONNECTION {
                    response = response.header(name, value);
                }
            }
            response
                .body(Body::from_stream(upstream.bytes_stream()))
                .unwrap_or_else(|e| (StatusCode::BAD_GATEWAY, e.to_string()).into_response())
        }
        Err(e) => (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    }
}

/// Accepts connections according to the rule in force: holds them unread
/// (`Blackhole`), or closes the listening socket altogether (`Refuse`) and
/// binds the same port again once the rule changes.
struct FrontListener {
    listener: Option<TcpListener>,
    addr: SocketAddr,
    rule: watch::Receiver<Rule>,
    held: Vec<TcpStream>,
    epoch: Arc<AtomicU64>,
    idle_close_ms: Arc<AtomicU64>,
}

impl FrontListener {
    async fn rebind(&mut self) -> TcpListener {
        loop {
            match TcpListener::bind(self.addr).await {
                Ok(l) => return l,
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }
}

impl axum::serve::Listener for FrontListener {
    type Io = KillableStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let fault = self.rule.borrow_and_update().fault.clone();
            if fault != Fault::Blackhole {
                self.held.clear();
            }
            if fault == Fault::Refuse {
                self.listener = None;
                self.epoch.fetch_add(1, Ordering::SeqCst);
                if self.rule.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
                continue;
            }
            if self.listener.is_none() {
                self.listener = Some(self.rebind().await);
            }
            let listener = self.listener.as_ref().expect("bound");
            tokio::select! {
                accepted = listener.accept() => {
                    let Ok((stream, addr)) = accepted else {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    };
                    if self.rule.borrow().fault == Fault::Blackhole {
                        self.held.push(stream);
                        continue;
                    }
                    let epoch = self.epoch.load(Ordering::SeqCst);
                    let stream = KillableStream {
                        inner: stream,
                        epoch,
                        current: self.epoch.clone(),
                        idle_close_ms: self.idle_close_ms.clone(),
                        last: Instant::now(),
                    };
                    return (stream, addr);
                }
                changed = self.rule.changed() => {
                    if changed.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.addr)
    }
}

/// A connection that fails its next read or write once the front refuses
/// (so a pooled keep-alive connection does not outlive a "down" server), or
/// once bytes arrive on it after an idle spell longer than
/// [`FaultFront::close_idle_after`].
pub struct KillableStream {
    inner: TcpStream,
    epoch: u64,
    current: Arc<AtomicU64>,
    idle_close_ms: Arc<AtomicU64>,
    /// When a byte last went either way.
    last: Instant,
}

impl KillableStream {
    fn dead(&self) -> bool {
        self.current.load(Ordering::SeqCst) != self.epoch
    }
}

fn reset() -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionReset, "the front refuses")
}

impl AsyncRead for KillableStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.dead() {
            return Poll::Ready(Err(reset()));
        }
        let this = self.get_mut();
        let before = buf.filled().len();
        let read = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = read
            && buf.filled().len() > before
        {
            // Only bytes that arrive count: a handler working for long
            // without traffic is not an idle connection.
            let idle_ms = this.idle_close_ms.load(Ordering::SeqCst);
            if idle_ms > 0 && this.last.elapsed() > Duration::from_millis(idle_ms) {
                buf.set_filled(before);
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::ConnectionReset,
                    "the front closed the idle connection",
                )));
            }
            this.last = Instant::now();
        }
        read
    }
}

impl AsyncWrite for KillableStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.dead() {
            return Poll::Ready(Err(reset()));
        }
        let this = self.get_mut();
        let written = Pin::new(&mut this.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = written
            && n > 0
        {
            this.last = Instant::now();
        }
        written
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
