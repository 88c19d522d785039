//! The notify phase: claim tasks with undelivered events, deliver each task's
//! events in version order to the tracker's notifier, and record how far each
//! got (delivered, dead-lettered, or retry at a backoff).

use std::sync::Arc;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use mcptask_core::StoreError;
use mcptask_core::client::{NotifyClaim, NotifyResult};

use crate::notify::NotifyError;
use crate::tracker::Inner;

/// Claim and deliver one batch. Returns how many tasks were claimed.
pub(super) async fn run(inner: &Arc<Inner>) -> Result<usize, StoreError> {
    let now = inner.clock.now_ms();
    let claims = inner
        .store
        .claim_notifications(
            &inner.owner,
            now,
            inner.config.lease_ms,
            inner.config.batch_size,
            inner.config.notify_batch_events,
        )
        .await?;
    if claims.is_empty() {
        return Ok(0);
    }
    let n = claims.len();
    let results: Vec<NotifyResult> = claims
        .into_iter()
        .map(|claim| {
            let inner = inner.clone();
            async move {
                tokio::select! {
                    r = deliver(&inner, &claim) => r,
                    _ = inner.abort.cancelled() => NotifyResult {
                        fence: claim.fence.clone(),
                        delivered_through: 0,
                        dead_lettered: Vec::new(),
                        failure: None,
                        released: true,
                    },
                }
            }
        })
        .collect::<FuturesUnordered<_>>()
        .collect()
        .await;
    let ok = inner
        .store
        .finish_notifications(&results, inner.clock.now_ms())
        .await?;
    for (r, ok) in results.iter().zip(ok) {
        if !ok {
            tracing::info!(task_id = %r.fence.task_id, "notify claim lost; deliveries will repeat (idempotent)");
        }
    }
    Ok(n)
}

/// Deliver one task's pending events in version order; stop at the first failure.
async fn deliver(inner: &Arc<Inner>, claim: &NotifyClaim) -> NotifyResult {
    let policy = &inner.config.policy;
    let mut result = NotifyResult {
        fence: claim.fence.clone(),
        delivered_through: 0,
        dead_lettered: Vec::new(),
        failure: None,
        released: false,
    };
    let mut attempts = claim.attempts;
    for event in &claim.events {
        match inner.notifier.deliver(event).await {
            Ok(()) => {
                metrics::counter!("mcptask_notifications_total", "outcome" => "delivered")
                    .increment(1);
                result.delivered_through = event.version;
                attempts = 0;
            }
            Err(e) => {
                let permanent = matches!(e, NotifyError::Permanent(_));
                attempts += 1;
                if permanent || attempts >= policy.max_notify_attempts {
                    metrics::counter!("mcptask_notifications_total", "outcome" => "dead_letter")
                        .increment(1);
                    tracing::warn!(task_id = %event.task_id, version = event.version, error = %e, "event dead-lettered");
                    result.dead_lettered.push(event.version);
                    result.delivered_through = event.version;
                    attempts = 0;
                    continue;
                }
                metrics::counter!("mcptask_notifications_total", "outcome" => "retry").increment(1);
                let retry_at = inner.clock.now_ms() + policy.backoff.delay_ms(attempts - 1);
                result.failure = Some((e.to_string(), retry_at));
                break;
            }
        }
    }
    result
}
