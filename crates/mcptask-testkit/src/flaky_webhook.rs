//! A webhook in the test process whose answer the test switches at run time:
//! 200, any status (5xx, 4xx), or no answer at all (a hang the gateway's
//! webhook timeout cuts). Records every attempt and every accepted event.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How the webhook answers from now on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookMode {
    /// 200: the event is accepted.
    Accept,
    /// This HTTP status (e.g. 503, 410); the event is not accepted.
    Status(u16),
    /// Never answer (the request hangs until the client gives up).
    Hang,
}

#[derive(Default)]
struct FlakyState {
    attempts: u64,
    /// Accepted deliveries per idempotency key.
    accepted: HashMap<String, u32>,
    /// When each key was first accepted.
    first_accepted: HashMap<String, tokio::time::Instant>,
}

/// See the module docs.
pub struct FlakyWebhook {
    /// `http://127.0.0.1:PORT/hook`
    pub url: String,
    mode: Arc<Mutex<HookMode>>,
    state: Arc<Mutex<FlakyState>>,
    server: tokio::task::JoinHandle<()>,
}

impl FlakyWebhook {
    pub async fn start(mode: HookMode) -> Self {
        let mode = Arc::new(Mutex::new(mode));
        let state = Arc::new(Mutex::new(FlakyState::default()));
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post({
                let mode = mode.clone();
                let state = state.clone();
                move |headers: axum::http::HeaderMap| {
                    let mode = *mode.lock().unwrap();
                    let state = state.clone();
                    async move {
                        let key = headers
                            .get(mcptask_client::notify::IDEMPOTENCY_HEADER)
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default()
                            .to_string();
                        state.lock().unwrap().attempts += 1;
                        match mode {
                            HookMode::Accept => {
                                let mut s = state.lock().unwrap();
                                *s.accepted.entry(key.clone()).or_default() += 1;
                                s.first_accepted
                                    .entry(key)
                                    .or_insert_with(tokio::time::Instant::now);
                                axum::http::StatusCode::OK
                            }
                            HookMode::Status(code) => axum::http::StatusCode::from_u16(code)
                                .unwrap_or(axum::http::StatusCode::INTERNAL_SERVER_ERROR),
                            HookMode::Hang => {
                                tokio::time::sleep(Duration::from_secs(3600)).await;
                                axum::http::StatusCode::OK
                            }
                        }
                    }
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the webhook");
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FlakyWebhook {
            url,
            mode,
            state,
            server,
        }
    }

    pub fn set(&self, mode: HookMode) {
        *self.mode.lock().unwrap() = mode;
    }

    /// Every POST received, whatever the answer.
    pub fn attempts(&self) -> u64 {
        self.state.lock().unwrap().attempts
    }

    /// Keys of `keys` not accepted yet.
    pub fn missing(&self, keys: &[String]) -> Vec<String> {
        let s = self.state.lock().unwrap();
        keys.iter()
            .filter(|k| !s.accepted.contains_key(*k))
            .cloned()
            .collect()
    }

    /// When `key` was first accepted.
    pub fn accepted_at(&self, key: &str) -> Option<tokio::time::Instant> {
        self.state.lock().unwrap().first_accepted.get(key).copied()
    }

    pub fn accepted(&self) -> usize {
        self.state.lock().unwrap().accepted.len()
    }
}

impl Drop for FlakyWebhook {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// `mcptask.toml` for a gateway with no API auth, one Streamable HTTP server
/// `demo`, the given webhooks (`(url, timeout_ms)`) and raw `[tracker]` lines.
pub fn notify_gateway_config(
    database_url: &str,
    server_url: &str,
    hooks: &[(&str, u64)],
    tracker: &str,
) -> String {
    let q = |s: &str| serde_json::to_string(s).expect("a TOML basic string");
    let mut text = format!(
        "[database]\nurl = {}\n\n[api]\nlisten = \"127.0.0.1:0\"\nauth = \"none\"\n\n[tracker]\n{}\n\n[[servers]]\nname = \"demo\"\nurl = {}\n",
        q(database_url),
        tracker.trim(),
        q(server_url)
    );
    for (url, timeout_ms) in hooks {
        text.push_str(&format!(
            "\n[[webhooks]]\nurl = {}\nsecret = \"notify-fault-secret\"\ntimeout_ms = {timeout_ms}\n",
            q(url)
        ));
    }
    text
}
