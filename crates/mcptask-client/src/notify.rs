//! Delivering task events to the application: at least once per event, with
//! `(task, version)` as the idempotency key.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use hmac::{Hmac, KeyInit, Mac};
use mcptask_core::client::TaskEvent;
use sha2::Sha256;
use tokio::sync::broadcast;

/// Why a delivery failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotifyError {
    /// Retry later (with backoff, within the retry budget).
    #[error("{0}")]
    Transient(String),
    /// Retrying cannot help: dead-letter this event now.
    #[error("{0}")]
    Permanent(String),
}

/// Receives task events. Implementations must tolerate duplicates (deduplicate
/// on [`TaskEvent::idempotency_key`]): delivery is at least once.
#[async_trait]
pub trait Notifier: Send + Sync + 'static {
    async fn deliver(&self, event: &TaskEvent) -> Result<(), NotifyError>;
}

/// In-process stream of events (`Tracker::subscribe`). Delivery succeeds
/// whether or not anyone listens; slow subscribers may miss events (they can
/// re-read the timeline from the store).
#[derive(Clone)]
pub struct ChannelNotifier {
    tx: broadcast::Sender<TaskEvent>,
}

impl ChannelNotifier {
    pub fn new(capacity: usize) -> Self {
        Self {
            tx: broadcast::channel(capacity.max(1)).0,
        }
    }

    pub fn subscribe(&self) -> broadcast::Receiver<TaskEvent> {
        self.tx.subscribe()
    }
}

#[async_trait]
impl Notifier for ChannelNotifier {
    async fn deliver(&self, event: &TaskEvent) -> Result<(), NotifyError> {
        let _ = self.tx.send(event.clone());
        Ok(())
    }
}

/// Deliver to several notifiers; an event counts as delivered only when all
/// accepted it (so a retry may repeat it to some: they deduplicate).
#[derive(Clone, Default)]
pub struct FanoutNotifier {
    targets: Vec<Arc<dyn Notifier>>,
}

impl FanoutNotifier {
    pub fn new(targets: Vec<Arc<dyn Notifier>>) -> Self {
        Self { targets }
    }
}

#[async_trait]
impl Notifier for FanoutNotifier {
    async fn deliver(&self, event: &TaskEvent) -> Result<(), NotifyError> {
        let mut transient = None;
        for t in &self.targets {
            match t.deliver(event).await {
                Ok(()) => {}
                Err(NotifyError::Permanent(e)) => return Err(NotifyError::Permanent(e)),
                Err(NotifyError::Transient(e)) => transient = Some(e),
            }
        }
        transient.map_or(Ok(()), |e| Err(NotifyError::Transient(e)))
    }
}

/// Header carrying `sha256=<hex HMAC-SHA256 of the body>`.
pub const SIGNATURE_HEADER: &str = "X-Mcptask-Signature";
/// Header carrying `"{task_id}:{version}"`.
pub const IDEMPOTENCY_HEADER: &str = "Idempotency-Key";

/// POSTs each event as JSON to a URL, signed with HMAC-SHA256.
///
/// 2xx is delivered; 408, 429 and 5xx are retried; other 4xx are permanent.
///
/// ```
/// let sig = mcptask_client::notify::sign(b"secret", b"{}");
/// assert!(sig.starts_with("sha256=") && sig.len() == 7 + 64);
/// ```
#[derive(Clone)]
pub struct WebhookNotifier {
    url: String,
    secret: Vec<u8>,
    client: reqwest::Client,
}

impl WebhookNotifier {
    pub fn new(
        url: impl Into<String>,
        secret: impl Into<Vec<u8>>,
        timeout: Duration,
    ) -> Result<Self, String> {
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .map_err(|e| format!("cannot build the webhook HTTP client: {e}"))?;
        Ok(Self {
            url: url.into(),
            secret: secret.into(),
            client,
        })
    }
}

/// `sha256=<hex>` HMAC of `body` under `secret`.
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    let mut mac =
        <Hmac<Sha256> as KeyInit>::new_from_slice(secret).expect("HMAC takes keys of any size");
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

/// The JSON body a webhook receives for an event.
pub fn webhook_body(event: &TaskEvent) -> serde_json::Value {
    serde_json::json!({
        "idempotencyKey": event.idempotency_key(),
        "taskId": event.task_id,
        "version": event.version,
        "kind": event.kind,
        "status": event.status,
        "occurredAt": mcptask_core::time::to_rfc3339(event.occurred_at),
        "task": event.data,
    })
}

#[async_trait]
impl Notifier for WebhookNotifier {
    async fn deliver(&self, event: &TaskEvent) -> Result<(), NotifyError> {
        let body = serde_json::to_vec(&webhook_body(event))
            .map_err(|e| NotifyError::Permanent(e.to_string()))?;
        let response = self
            .client
            .post(&self.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(SIGNATURE_HEADER, sign(&self.secret, &body))
            .header(IDEMPOTENCY_HEADER, event.idempotency_key())
            .body(body)
            .send()
            .await
            .map_err(|e| NotifyError::Transient(format!("webhook POST failed: {e}")))?;
        let status = response.status();
        if status.is_success() {
            Ok(())
        } else if status.is_server_error() || status.as_u16() == 408 || status.as_u16() == 429 {
            Err(NotifyError::Transient(format!("webhook answered {status}")))
        } else {
            Err(NotifyError::Permanent(format!("webhook answered {status}")))
        }
    }
}
