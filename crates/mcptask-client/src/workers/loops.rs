//! The background loops: one per claim phase and one for notifications. A
//! claim phase is a pipeline (`batch::pipeline`: calls in flight, results
//! applied as they end, due work claimed as slots free up); the notification
//! loop runs batches back to back while they come back full, and otherwise
//! idles until its wake-up, the idle tick, or shutdown.

use std::sync::Arc;

use mcptask_core::client::Phase;
use tokio::sync::Notify;

use super::{batch, notify};
use crate::shared::Inner;

/// Start every loop on the tracker's task set (`shutdown` waits for them).
pub(crate) fn spawn_all(inner: &Arc<Inner>) {
    for phase in [Phase::Poll, Phase::Cancel, Phase::Update] {
        let inner2 = inner.clone();
        inner.loops.spawn(async move {
            phase_loop(inner2, phase).await;
        });
    }
    let inner2 = inner.clone();
    inner.loops.spawn(async move { notify_loop(inner2).await });
    super::maintenance::spawn(inner);
}

async fn idle(inner: &Inner, wake: &Notify) {
    tokio::select! {
        _ = inner.shutdown.cancelled() => {}
        _ = wake.notified() => {}
        _ = tokio::time::sleep(inner.config.idle_tick) => {}
    }
}

async fn phase_loop(inner: Arc<Inner>, phase: Phase) {
    batch::pipeline(inner, phase).await;
}

async fn notify_loop(inner: Arc<Inner>) {
    let wake = &inner.wakers.notify;
    while !inner.shutdown.is_cancelled() {
        match notify::run(&inner).await {
            Ok(n) if (n as i64) >= inner.config.batch_size => {}
            Ok(_) => idle(&inner, wake).await,
            Err(e) => {
                tracing::warn!(error = %e, "notification claim failed; retrying after a pause");
                idle(&inner, wake).await;
            }
        }
    }
}
