//! This process's identity on its store: a process slot
//! ([`mcptask_sql::slot`]) and the owner ids of its tracker and call runtime
//! named after it.
//!
//! Taking the slot proves the previous holder of the slot is gone, so the
//! leases and claims it left are let lapse at once, before this process's
//! tracker and call runtime start: their first claims and recovery pass
//! adopt the previous incarnation's work (with fresh fences) instead of
//! waiting out `[proxy] owner_lease_ms` and `[tracker] lease_ms`.

use std::sync::Arc;

use mcptask_core::Clock;
use mcptask_sql::slot::Slot;

/// The slot this process holds, if it got one. Cheap to clone.
#[derive(Clone, Default)]
pub struct Incarnation {
    slot: Option<Arc<Slot>>,
}

impl Incarnation {
    /// Take the lowest free slot of `store` and let its earlier
    /// incarnations' leases and claims lapse. A store whose slots cannot be
    /// taken (every one held, or an error) is used without one: the work of
    /// a dead process is then recovered when its leases lapse, as before.
    pub async fn take(store: &mcptask_sql::Store) -> Incarnation {
        let slot = match store.take_slot().await {
            Ok(Some(slot)) => slot,
            Ok(None) => {
                tracing::warn!(
                    max = mcptask_sql::slot::MAX_SLOTS,
                    "every process slot of the store is held; a dead process's work will be recovered when its leases lapse"
                );
                return Incarnation::default();
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot take a process slot; a dead process's work will be recovered when its leases lapse");
                return Incarnation::default();
            }
        };
        let now = mcptask_core::SystemClock.now_ms();
        match store.release_slot(&slot, now).await {
            Ok(released) => tracing::info!(
                slot = slot.number(),
                owners = released.owners,
                claims = released.claims,
                notify_claims = released.notify_claims,
                "process slot taken; the work its previous holder left is adopted now"
            ),
            Err(e) => tracing::warn!(
                slot = slot.number(),
                error = %e,
                "cannot release the leases of the slot's previous holder; they lapse on their own"
            ),
        }
        Incarnation {
            slot: Some(Arc::new(slot)),
        }
    }

    /// The slot's number, if this process holds one.
    pub fn slot(&self) -> Option<u32> {
        self.slot.as_ref().map(|s| s.number())
    }

    /// A fresh owner id for `role` in this process's slot; `None` without
    /// a slot (the runtimes then make their own).
    pub fn owner_id(&self, role: &str) -> Option<String> {
        self.slot.as_ref().map(|s| s.owner_id(role))
    }

    /// Resolves if the slot was lost to another process ([`Slot::lost`]);
    /// never without a slot.
    pub async fn lost(&self) {
        match &self.slot {
            Some(slot) => slot.lost().await,
            None => std::future::pending().await,
        }
    }
}
