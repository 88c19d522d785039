//! A webhook receiver in the test process that verifies every delivery's
//! signature and idempotency key, and the check that a tracked task's events
//! all reached it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::rng::Rng;

/// What a webhook received for one idempotency key.
#[derive(Debug, Clone, Default)]
pub struct HookEvent {
    /// How many POSTs carried this key (more than one is a duplicate delivery).
    pub count: u32,
    pub kind: String,
    pub status: String,
}

#[derive(Default)]
struct HookState {
    posts: u64,
    events: std::collections::HashMap<String, HookEvent>,
    /// Requests that failed verification (bad signature, inconsistent keys).
    bad: Vec<String>,
}

/// An HTTP endpoint in the test process receiving mcptask webhooks: verifies
/// each `X-Mcptask-Signature` (HMAC-SHA256 of the body under `secret`) and
/// that the idempotency key is `taskId:version` in body and header, then
/// records every delivery. Answers 200.
pub struct WebhookReceiver {
    /// `http://127.0.0.1:PORT/hook`
    pub url: String,
    state: Arc<Mutex<HookState>>,
    server: tokio::task::JoinHandle<()>,
}

impl WebhookReceiver {
    pub async fn start(secret: &str) -> Self {
        Self::start_with_delay(secret, Duration::ZERO, 0).await
    }

    /// Like [`WebhookReceiver::start`], but each request is answered after a
    /// random delay in `0..max_delay` (a slow endpoint: notify claims stay
    /// held while deliveries are in flight).
    pub async fn start_with_delay(secret: &str, max_delay: Duration, seed: u64) -> Self {
        use axum::http::{HeaderMap, StatusCode};
        let state = Arc::new(Mutex::new(HookState::default()));
        let secret = secret.as_bytes().to_vec();
        let rng = Arc::new(Mutex::new(Rng(seed)));
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post({
                let state = state.clone();
                move |headers: HeaderMap, body: axum::body::Bytes| {
                    let state = state.clone();
                    let secret = secret.clone();
                    let delay = max_delay.mul_f64(rng.lock().unwrap().unit());
                    async move {
                        if !delay.is_zero() {
                            tokio::time::sleep(delay).await;
                        }
                        let header = |name: &str| {
                            headers
                                .get(name)
                                .and_then(|v| v.to_str().ok())
                                .unwrap_or_default()
                                .to_string()
                        };
                        let signature = header(mcptask_client::notify::SIGNATURE_HEADER);
                        let idem = header(mcptask_client::notify::IDEMPOTENCY_HEADER);
                        let json: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                        let key = json["idempotencyKey"].as_str().unwrap_or_default();
                        let expected_key = format!(
                            "{}:{}",
                            json["taskId"].as_str().unwrap_or("?"),
                            json["version"].as_i64().unwrap_or(-1)
                        );
                        let mut s = state.lock().unwrap();
                        s.posts += 1;
                        if signature != mcptask_client::notify::sign(&secret, &body) {
                            s.bad.push(format!("bad signature {signature:?} on {key}"));
                        } else if key != expected_key || idem != key {
                            s.bad.push(format!(
                                "inconsistent keys: body {key:?}, header {idem:?}, expected {expected_key:?}"
                            ));
                        } else {
                            let e = s.events.entry(key.to_string()).or_default();
                            e.count += 1;
                            e.kind = json["kind"].as_str().unwrap_or_default().to_string();
                            e.status = json["status"].as_str().unwrap_or_default().to_string();
                        }
                        StatusCode::OK
                    }
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the webhook receiver");
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        WebhookReceiver { url, state, server }
    }

    /// Every POST received (duplicates included).
    pub fn posts(&self) -> u64 {
        self.state.lock().unwrap().posts
    }

    /// Distinct idempotency keys received.
    pub fn unique(&self) -> usize {
        self.state.lock().unwrap().events.len()
    }

    /// Deliveries beyond the first per key (allowed: at least once).
    pub fn duplicates(&self) -> u64 {
        let s = self.state.lock().unwrap();
        s.events.values().map(|e| u64::from(e.count - 1)).sum()
    }

    pub fn get(&self, key: &str) -> Option<HookEvent> {
        self.state.lock().unwrap().events.get(key).cloned()
    }

    /// The keys of `keys` not received yet.
    pub fn missing<'a>(&self, keys: impl IntoIterator<Item = &'a String>) -> Vec<String> {
        let s = self.state.lock().unwrap();
        keys.into_iter()
            .filter(|k| !s.events.contains_key(*k))
            .cloned()
            .collect()
    }

    /// Requests that failed verification.
    pub fn bad(&self) -> Vec<String> {
        self.state.lock().unwrap().bad.clone()
    }
}

impl Drop for WebhookReceiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// Wait (until `deadline`) for a tracked task to be terminal with every event
/// delivered, then check its timeline and the webhook: versions exactly
/// `1..=event_version` (no gap, no duplicate), exactly one event with a
/// terminal status (a `status` event, the last one: a terminal task was
/// settled once), every event received by the webhook at least once with the
/// same kind and status, and nothing dead-lettered. Returns the final record
/// and its timeline.
pub async fn verify_delivered(
    tracker: &mcptask_client::Tracker,
    hook: &WebhookReceiver,
    id: &str,
    deadline: tokio::time::Instant,
) -> (
    mcptask_client::RemoteTaskRecord,
    Vec<mcptask_client::TaskEvent>,
) {
    use mcptask_core::client::EventKind;
    let record = loop {
        let r = tracker.get(id).await.expect("read a tracked task");
        let keys: Vec<String> = (1..=r.event_version).map(|v| format!("{id}:{v}")).collect();
        let missing = hook.missing(&keys);
        if r.is_terminal() && r.delivered_version == r.event_version && missing.is_empty() {
            break r;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!(
                "task {id} not terminal and fully delivered in time: status {}, events {} (delivered_version {}), \
                 webhook misses {missing:?}, last notify error {:?}",
                r.status, r.event_version, r.delivered_version, r.last_notify_error
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        record.dead_letters, 0,
        "task {id}: events were dead-lettered: {record:#?}"
    );
    let timeline = tracker
        .events(id, 0, 1000)
        .await
        .expect("read the timeline");
    let brief: Vec<String> = timeline
        .iter()
        .map(|e| format!("{}:{}:{}", e.version, e.kind.as_str(), e.status))
        .collect();
    let versions: Vec<i64> = timeline.iter().map(|e| e.version).collect();
    assert_eq!(
        versions,
        (1..=record.event_version).collect::<Vec<_>>(),
        "task {id}: the timeline must number its events 1..=event_version: {brief:?}"
    );
    let terminal: Vec<_> = timeline.iter().filter(|e| e.status.is_terminal()).collect();
    assert_eq!(
        terminal.len(),
        1,
        "task {id}: exactly one terminal event (a settlement applied once): {brief:?}"
    );
    let settled = terminal[0];
    assert_eq!(settled.kind, EventKind::Status, "task {id}: {brief:?}");
    assert_eq!(
        settled.version, record.event_version,
        "task {id}: nothing happens after settling: {brief:?}"
    );
    assert_eq!(settled.status, record.status, "task {id}: {brief:?}");
    for e in &timeline {
        let got = hook
            .get(&e.idempotency_key())
            .unwrap_or_else(|| panic!("webhook never got {}", e.idempotency_key()));
        assert_eq!(
            (got.kind.as_str(), got.status.as_str()),
            (e.kind.as_str(), e.status.as_str()),
            "webhook body of {} differs from the timeline",
            e.idempotency_key()
        );
    }
    (record, timeline)
}
