//! Admission control: how many live tasks this process takes on.
//!
//! Every live task this process runs holds a [`Slot`] until its work ends:
//! tasks it created and tasks it recovered from a dead replica alike. A
//! create is refused (never queued) when it would take the process past its
//! total cap, or its principal past the per-principal cap, so a burst from
//! one caller cannot take the whole server. Recovery is never refused: the
//! tasks exist already, and leaving them unowned would only move the load.
//!
//! The slot is reserved before the commit and released when the work ends
//! (or at once if the commit fails), so concurrent creates cannot overshoot.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Live tasks by principal, and in total.
#[derive(Default)]
struct Counts {
    total: usize,
    by_principal: HashMap<String, usize>,
}

/// The live-task counts of one runtime and its caps.
#[derive(Clone)]
pub(crate) struct LiveQuota {
    counts: Arc<Mutex<Counts>>,
    max_total: Option<usize>,
    max_per_principal: Option<usize>,
}

/// Why a create was refused.
pub(crate) enum Refusal {
    /// The process runs `max_live_tasks` already.
    Total(usize),
    /// The principal has `max_live_tasks_per_principal` live tasks here already.
    Principal(usize),
}

/// One live task's place in the counts; released when dropped.
pub(crate) struct Slot {
    counts: Arc<Mutex<Counts>>,
    principal: Option<String>,
}

impl LiveQuota {
    pub(crate) fn new(max_total: Option<usize>, max_per_principal: Option<usize>) -> Self {
        Self {
            counts: Default::default(),
            max_total,
            max_per_principal,
        }
    }

    /// A slot for a new task of `principal` (anonymous callers are bound only
    /// by the total), or why not.
    pub(crate) fn admit(&self, principal: Option<&str>) -> Result<Slot, Refusal> {
        let mut c = self.counts.lock().expect("quota counts");
        if let Some(max) = self.max_total
            && c.total >= max
        {
            return Err(Refusal::Total(max));
        }
        if let (Some(max), Some(p)) = (self.max_per_principal, principal)
            && c.by_principal.get(p).copied().unwrap_or(0) >= max
        {
            return Err(Refusal::Principal(max));
        }
        Ok(Self::take(&mut c, &self.counts, principal))
    }

    /// A slot whatever the caps say (recovered tasks).
    pub(crate) fn force(&self, principal: Option<&str>) -> Slot {
        let mut c = self.counts.lock().expect("quota counts");
        Self::take(&mut c, &self.counts, principal)
    }

    fn take(c: &mut Counts, counts: &Arc<Mutex<Counts>>, principal: Option<&str>) -> Slot {
        c.total += 1;
        if let Some(p) = principal {
            *c.by_principal.entry(p.to_string()).or_default() += 1;
        }
        Slot {
            counts: counts.clone(),
            principal: principal.map(str::to_string),
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let Ok(mut c) = self.counts.lock() else {
            return;
        };
        c.total = c.total.saturating_sub(1);
        if let Some(p) = &self.principal
            && let Some(n) = c.by_principal.get_mut(p)
        {
            *n = n.saturating_sub(1);
            if *n == 0 {
                c.by_principal.remove(p);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_hold_and_slots_come_back() {
        let q = LiveQuota::new(Some(3), Some(2));
        let a1 = q.admit(Some("alice")).ok().unwrap();
        let _a2 = q.admit(Some("alice")).ok().unwrap();
        assert!(matches!(q.admit(Some("alice")), Err(Refusal::Principal(2))));
        let _b = q.admit(Some("bob")).ok().unwrap();
        assert!(matches!(q.admit(None), Err(Refusal::Total(3))));
        drop(a1);
        let _a3 = q.admit(Some("alice")).ok().unwrap();
        let _forced = q.force(Some("alice"));
        assert!(matches!(q.admit(Some("carol")), Err(Refusal::Total(3))));
    }
}
