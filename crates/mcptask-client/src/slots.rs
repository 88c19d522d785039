//! Per-server caps on the calls in flight (`ServerDef::max_in_flight`): a
//! claimed task whose server is at its cap is not called now but deferred a
//! moment (no error counted), so one slow server never takes every call
//! slot of a phase.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How long a task whose server is at its cap waits before it is due again.
pub(crate) const DEFER_MS: i64 = 100;

/// A server's slots in one phase: the cap they were made for, and the
/// semaphore.
type Slots = HashMap<(String, &'static str), (usize, Arc<Semaphore>)>;

/// The slots of every capped server, per phase (a cap is per phase and
/// process), made when first needed.
#[derive(Default)]
pub struct ServerSlots {
    slots: Mutex<Slots>,
}

impl ServerSlots {
    /// A slot for a call to `server` in `phase` under `cap`, or `None` when
    /// all are taken. A changed cap takes effect for calls made from now on.
    pub(crate) fn try_take(
        &self,
        server: &str,
        phase: &'static str,
        cap: usize,
    ) -> Option<OwnedSemaphorePermit> {
        let semaphore = {
            let mut slots = self.slots.lock().expect("server slots lock");
            let entry = slots
                .entry((server.to_string(), phase))
                .or_insert_with(|| (cap, Arc::new(Semaphore::new(cap.max(1)))));
            if entry.0 != cap {
                *entry = (cap, Arc::new(Semaphore::new(cap.max(1))));
            }
            entry.1.clone()
        };
        semaphore.try_acquire_owned().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_at_its_cap_gets_no_slot_until_one_is_given_back() {
        let slots = ServerSlots::default();
        let a = slots.try_take("slow", "poll", 2).unwrap();
        let _b = slots.try_take("slow", "poll", 2).unwrap();
        assert!(slots.try_take("slow", "poll", 2).is_none());
        assert!(slots.try_take("slow", "cancel", 2).is_some(), "per phase");
        assert!(slots.try_take("fast", "poll", 2).is_some(), "per server");
        drop(a);
        assert!(slots.try_take("slow", "poll", 2).is_some());
    }
}
