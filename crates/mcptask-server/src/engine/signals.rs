//! Cross-process wake-ups: a `tasks/update` or `tasks/cancel` handled by one
//! replica reaches the work running on another through the store's push
//! channel (PostgreSQL `LISTEN/NOTIFY`), and a replica that stopped and
//! released its owner lease has its leftovers recovered by the others at
//! once. Hints only; the backstop re-check in
//! maintenance covers anything lost. The listener runs until the drain of a
//! shutdown has ended: work still draining must hear of answers and cancels.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use mcptask_core::store::OWNER_RELEASED;

use super::RuntimeInner;
use super::maintenance::Maintenance;

/// Wait before subscribing again after the push channel failed or closed.
const RESUBSCRIBE_DELAY: Duration = Duration::from_secs(1);

/// Start listening. The first subscription is made before this returns, so a
/// runtime that has started never misses a signal sent after its start.
pub(crate) async fn spawn_listener(rt: Arc<RuntimeInner>) {
    let mut first = Some(rt.store.listen_signals().await);
    tokio::spawn(async move {
        loop {
            let stream = match first.take() {
                Some(s) => s,
                None => tokio::select! {
                    _ = rt.stopped.cancelled() => return,
                    s = rt.store.listen_signals() => s,
                },
            };
            match stream {
                Ok(None) => return, // Backend has no push channel.
                Ok(Some(mut stream)) => loop {
                    tokio::select! {
                        _ = rt.stopped.cancelled() => return,
                        next = stream.next() => match next {
                            Some(released) if released == OWNER_RELEASED => recover_now(&rt),
                            Some(task_id) => {
                                let rt = rt.clone();
                                tokio::spawn(async move { rt.refresh_local(&task_id).await });
                            }
                            None => break,
                        },
                    }
                },
                Err(e) => {
                    tracing::warn!(error = %e, "signal listener unavailable; relying on the backstop")
                }
            }
            tokio::select! {
                _ = rt.stopped.cancelled() => return,
                _ = tokio::time::sleep(RESUBSCRIBE_DELAY) => {}
            }
        }
    });
}

/// A peer stopped and released its owner lease: recover what it left now,
/// not at the next recovery pass (a rolling update hands work over at
/// once). A draining process takes on nothing, as its recovery loop.
fn recover_now(rt: &Arc<RuntimeInner>) {
    if rt.shutdown.is_cancelled() {
        return;
    }
    let maintenance = Maintenance { rt: rt.clone() };
    tokio::spawn(async move {
        if let Err(e) = maintenance.recover_once().await {
            tracing::debug!(error = %e, "recovery after a peer's release failed; the recovery loop retries");
        }
    });
}

impl RuntimeInner {
    /// Re-read one task after a cross-process hint and act on what the store says.
    pub(crate) async fn refresh_local(&self, task_id: &str) {
        if !self.local.contains(task_id) {
            return;
        }
        match self.store.get_task(task_id).await {
            Ok(Some(view)) => {
                let r = &view.record;
                if r.status.is_terminal() || r.owner.as_deref() != Some(&self.owner) {
                    self.local.stop(task_id);
                } else {
                    if r.cancel_requested {
                        self.local.cancel(task_id);
                    }
                    self.local.wake(task_id);
                }
            }
            Ok(None) => self.local.stop(task_id),
            Err(e) => {
                tracing::debug!(task_id, error = %e, "refresh after signal failed; backstop will retry")
            }
        }
    }
}
