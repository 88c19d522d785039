//! Faults injected by the chaos tests: a slow network in front of a server,
//! and a view of which tracker process holds claims.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::rng::Rng;

/// A reverse proxy in the test process in front of an HTTP server, delaying
/// every request by a random `0..max_delay` (a slow network or a busy
/// server): remote calls take a while, so tracker claims stay held long
/// enough for a frozen tracker process to lose them mid-call.
pub struct SlowProxy {
    /// `http://127.0.0.1:PORT` (append the target's path, e.g. `/mcp`).
    pub base: String,
    server: tokio::task::JoinHandle<()>,
}

impl SlowProxy {
    /// Proxy to `target` (`http://HOST:PORT`).
    pub async fn start(target: &str, max_delay: Duration, seed: u64) -> Self {
        use axum::body::Body;
        use axum::http::{StatusCode, header};
        use axum::response::IntoResponse;
        let client = crate::forwarding_client();
        let target = target.trim_end_matches('/').to_string();
        let rng = Arc::new(Mutex::new(Rng(seed)));
        let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
            let (client, target, rng) = (client.clone(), target.clone(), rng.clone());
            async move {
                let delay = max_delay.mul_f64(rng.lock().unwrap().unit());
                tokio::time::sleep(delay).await;
                let (parts, body) = request.into_parts();
                let Ok(body) = axum::body::to_bytes(body, 64 * 1024 * 1024).await else {
                    return (StatusCode::BAD_REQUEST, "unreadable body").into_response();
                };
                let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
                let mut forward = client
                    .request(parts.method.clone(), format!("{target}{path}"))
                    .body(body);
                for (name, value) in &parts.headers {
                    if name != header::HOST && name != header::CONTENT_LENGTH {
                        forward = forward.header(name, value);
                    }
                }
                match forward.send().await {
                    Ok(upstream) => {
                        let mut response =
                            axum::response::Response::builder().status(upstream.status());
                        for (name, value) in upstream.headers() {
                            if name != header::TRANSFER_ENCODING && name != header::CONNECTION {
                                response = response.header(name, value);
                            }
                        }
                        response
                            .body(Body::from_stream(upstream.bytes_stream()))
                            .unwrap_or_else(|e| {
                                (StatusCode::BAD_GATEWAY, e.to_string()).into_response()
                            })
                    }
                    Err(e) => (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
                }
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let base = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        SlowProxy { base, server }
    }
}

impl Drop for SlowProxy {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// How many live tasks the tracker process `pid` (owner ids are
/// `tracker-PID-RANDOM`, behind the process slot's `slotN.` prefix) holds unexpired work claims on, polling the store
/// until it holds some or `within` passes.
pub async fn wait_for_claims(
    tracker: &mcptask_client::Tracker,
    pid: u32,
    within: Duration,
) -> usize {
    let tag = format!("tracker-{pid}-");
    let filter = mcptask_core::client::ListFilter {
        active_only: true,
        ..Default::default()
    };
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let mut held = 0;
        let mut cursor = None;
        loop {
            // The store may be restarting (the chaos run restarts it once).
            let Ok((page, next)) = tracker.list(&filter, cursor.as_ref(), 500).await else {
                break;
            };
            held += page
                .iter()
                .filter(|r| {
                    r.claim_owner.as_deref().is_some_and(|o| o.contains(&tag))
                        && r.claim_expires_at.is_some_and(|e| e > now_ms)
                })
                .count();
            match next {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
        if held > 0 || tokio::time::Instant::now() >= deadline {
            return held;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
