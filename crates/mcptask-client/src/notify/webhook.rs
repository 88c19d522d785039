//! Events as signed HTTP POSTs: the body, its HMAC signature, and which
//! answers are worth retrying.

use std::time::Duration;

use async_trait::async_trait;
use hmac::{Hmac, KeyInit, Mac};
use mcptask_core::client::TaskEvent;
use sha2::Sha256;
use tracing::Instrument;

use super::{Notifier, NotifyError};

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
    /// POST to `url`, signing with `secret`, each attempt bounded by `timeout`.
    pub fn new(
        url: impl Into<String>,
        secret: impl Into<Vec<u8>>,
        timeout: Duration,
    ) -> Result<Self, String> {
        let client = crate::tls::build_http_client(|| reqwest::Client::builder().timeout(timeout))
            .map_err(|e| format!("cannot build the webhook HTTP client: {e}"))?;
        Ok(Self {
            url: url.into(),
            secret: secret.into(),
            client,
        })
    }
}

/// The URL without user info, query or fragment: a target name is shown on
/// the dashboard and stored, and those parts may carry credentials.
pub fn redact_url(url: &str) -> String {
    let Ok(mut parsed) = reqwest::Url::parse(url) else {
        return url.split(['?', '#']).next().unwrap_or_default().to_string();
    };
    let _ = parsed.set_username("");
    let _ = parsed.set_password(None);
    parsed.set_query(None);
    parsed.set_fragment(None);
    parsed.to_string()
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
        let span = tracing::info_span!(
            target: crate::trace::TARGET,
            "webhook",
            otel.name = "webhook POST",
            otel.kind = "client",
            http.request.method = "POST",
            mcp.task.id = %event.task_id,
            mcptask.event.version = event.version,
        );
        let mut request = self
            .client
            .post(&self.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(SIGNATURE_HEADER, sign(&self.secret, &body))
            .header(IDEMPOTENCY_HEADER, event.idempotency_key());
        if let Some(cx) = crate::trace::of(&span) {
            request = request.header("traceparent", cx.traceparent);
        }
        let response = request
            .body(body)
            .send()
            .instrument(span)
            .await
            .map_err(|e| {
                let why = crate::tls::tls_failure(&e).unwrap_or_else(|| e.to_string());
                NotifyError::Transient(format!("webhook POST failed: {why}"))
            })?;
        let status = response.status();
        if status.is_success() {
            Ok(())
        } else if status.is_server_error() || status.as_u16() == 408 || status.as_u16() == 429 {
            Err(NotifyError::Transient(format!("webhook answered {status}")))
        } else {
            Err(NotifyError::Permanent(format!("webhook answered {status}")))
        }
    }

    fn name(&self) -> String {
        format!("webhook {}", redact_url(&self.url))
    }
}
