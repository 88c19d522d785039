//! This process's identity on its store: the process slot a runtime takes
//! when it starts, so a restart adopts its previous incarnation's work at
//! once.
//!
//! Taking a slot proves its previous holder is gone (the store's lock on it
//! dies with its holder: [`mcptask_core::slot`]), so the owner leases and
//! claims named after it lapse now, before this process registers its own:
//! the first recovery pass reruns or fails the dead incarnation's tasks, per
//! each tool's interrupt policy, instead of waiting out the lease. Another
//! live process holds a slot of its own, so its work is never touched; a
//! replica that dies for good is recovered by the others when its lease
//! lapses, as before.

use std::sync::Arc;

use mcptask_core::Clock;
use mcptask_core::slot::HeldSlot;
use mcptask_core::store::ServerTaskStore;

/// The slot this process holds, if it got one. Cheap to clone; the slot is
/// held until the last clone is dropped (or the process dies).
///
/// A [`TaskRuntime`](crate::TaskRuntime) takes one when it starts
/// ([`RuntimeBuilder::start`](crate::RuntimeBuilder::start)); a process
/// that runs more on the same store (a gateway's tracker) takes it first
/// and hands it over with [`RuntimeBuilder::incarnation`](crate::RuntimeBuilder::incarnation).
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let store = mcptask_sql::open("sqlite:tasks.db").await?;
/// let incarnation =
///     mcptask_server::Incarnation::take(&*store.server_tasks(), &mcptask_core::SystemClock).await;
/// let tracker_owner = incarnation.owner_id("tracker"); // `None`: no slot, a fresh id
/// # let _ = tracker_owner; Ok(()) }
/// ```
#[derive(Clone, Default)]
pub struct Incarnation {
    slot: Option<Arc<dyn HeldSlot>>,
}

impl Incarnation {
    /// Take the lowest free slot of `store` and let the leases and claims
    /// of its earlier incarnations lapse at `clock`'s now. A store whose
    /// slots cannot be taken (every one held, none at all, or an error) is
    /// used without one: a dead process's work is then recovered when its
    /// leases lapse.
    pub async fn take(store: &dyn ServerTaskStore, clock: &dyn Clock) -> Incarnation {
        let slot = match store.take_slot().await {
            Ok(Some(slot)) => slot,
            Ok(None) => {
                tracing::warn!(
                    "no process slot of the store could be taken (every one held, or the store has none); a dead process's work will be recovered when its leases lapse"
                );
                return Incarnation::default();
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot take a process slot; a dead process's work will be recovered when its leases lapse");
                return Incarnation::default();
            }
        };
        match store.release_slot(&slot.prefix(), clock.now_ms()).await {
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
            slot: Some(Arc::from(slot)),
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

    /// Resolves if the slot was lost to another process
    /// ([`HeldSlot::lost`]); never without a slot.
    pub async fn lost(&self) {
        match &self.slot {
            Some(slot) => slot.lost().await,
            None => std::future::pending().await,
        }
    }
}
