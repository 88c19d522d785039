//! The loops beside the claim phases: redelivery to targets that fell behind
//! (its own loop, so a target that times out never slows the outbox), and
//! the retention sweep that purges settled tasks.

use std::sync::Arc;

use mcptask_core::StoreError;

use super::notify;
use crate::shared::Inner;

/// Start the redelivery and purge loops on the tracker's task set.
pub(super) fn spawn(inner: &Arc<Inner>) {
    let inner2 = inner.clone();
    inner
        .loops
        .spawn(async move { redeliver_loop(inner2).await });
    let inner2 = inner.clone();
    inner.loops.spawn(async move { purge_loop(inner2).await });
}

async fn pause(inner: &Inner, for_: std::time::Duration) {
    tokio::select! {
        _ = inner.shutdown.cancelled() => {}
        _ = tokio::time::sleep(for_) => {}
    }
}

async fn redeliver_loop(inner: Arc<Inner>) {
    while !inner.shutdown.is_cancelled() {
        match notify::redeliver(&inner).await {
            Ok(n) if (n as i64) >= inner.config.batch_size => {}
            Ok(_) => pause(&inner, inner.config.idle_tick).await,
            Err(e) => {
                tracing::warn!(error = %e, "redelivery claim failed; retrying after a pause");
                pause(&inner, inner.config.idle_tick).await;
            }
        }
    }
}

async fn purge_loop(inner: Arc<Inner>) {
    while !inner.shutdown.is_cancelled() {
        if let Err(e) = purge(&inner).await {
            tracing::warn!(error = %e, "purge of settled tasks failed; retrying later");
        }
        pause(&inner, inner.config.purge_interval).await;
    }
}

/// Delete settled tasks past their retention, a bounded batch per statement,
/// until a batch comes back short. Returns how many were deleted.
pub(super) async fn purge(inner: &Inner) -> Result<u64, StoreError> {
    let before = inner
        .clock
        .now_ms()
        .saturating_sub(inner.config.policy.retention_ms);
    let batch = inner.config.purge_batch.max(1);
    let mut total = 0;
    while !inner.shutdown.is_cancelled() {
        let n = inner.store.purge_remote(before, batch).await?;
        total += n;
        metrics::counter!("mcptask_remote_purged_total").increment(n);
        if (n as i64) < batch {
            break;
        }
    }
    Ok(total)
}
