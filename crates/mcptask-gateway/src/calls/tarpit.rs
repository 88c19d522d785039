//! Held refusals. A client that ignores `Retry-After` sends again the moment
//! it is refused; answered at once, its refusals keep the gateway's cores
//! busy, and another principal's call waits among them. So a refusal is
//! held before it is answered, for about as long as its retry could not
//! have succeeded anyway, and the `Retry-After` it carries is lowered by the
//! time held: a client that waits as told waits no longer in all.
//!
//! A principal's concurrent refusals are held for staggered times (the
//! k-th one k calls' spacing longer), because the first token to come can
//! serve only one of them. Holds are bounded per principal and in all,
//! since each keeps a connection and its request: beyond the bounds a
//! refusal is answered at once, as before.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The longest hold: a refusal told to wait longer is answered after this
/// with the rest of its wait to go.
pub const HOLD_CAP_MS: i64 = 1000;
/// Refusals of one principal held at once.
pub const HELD_PER_PRINCIPAL: usize = 64;
/// Refusals held at once in all: well under a process's usual limit of
/// open files, since each keeps its connection open.
pub const HELD_IN_ALL: usize = 256;

#[derive(Default)]
struct Counts {
    by_key: HashMap<String, usize>,
    total: usize,
}

/// The refusals being held.
#[derive(Default)]
pub struct Tarpit {
    counts: Arc<Mutex<Counts>>,
}

/// One refusal's hold; dropping it (served, or its caller gone) frees its
/// place.
pub struct Hold {
    /// How long to hold.
    pub ms: i64,
    key: String,
    counts: Arc<Mutex<Counts>>,
}

impl Drop for Hold {
    fn drop(&mut self) {
        let mut counts = self.counts.lock().expect("tarpit lock");
        counts.total -= 1;
        if let Some(n) = counts.by_key.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                counts.by_key.remove(&self.key);
            }
        }
    }
}

impl Tarpit {
    /// The hold of a refusal of `key` told to retry in `retry_after_ms`,
    /// the principal's calls let through `spacing_ms` apart; `None`: too
    /// many are held already, answer at once.
    pub fn hold(&self, key: &str, retry_after_ms: i64, spacing_ms: i64) -> Option<Hold> {
        let mut counts = self.counts.lock().expect("tarpit lock");
        if counts.total >= HELD_IN_ALL {
            return None;
        }
        let ahead = counts.by_key.get(key).copied().unwrap_or(0);
        if ahead >= HELD_PER_PRINCIPAL {
            return None;
        }
        counts.total += 1;
        *counts.by_key.entry(key.to_string()).or_insert(0) += 1;
        let staggered = retry_after_ms.saturating_add((ahead as i64).saturating_mul(spacing_ms));
        Some(Hold {
            ms: staggered.clamp(0, HOLD_CAP_MS),
            key: key.to_string(),
            counts: self.counts.clone(),
        })
    }

    /// Refusals held now (of `key`, and in all).
    #[cfg(test)]
    fn held(&self, key: &str) -> (usize, usize) {
        let counts = self.counts.lock().unwrap();
        (counts.by_key.get(key).copied().unwrap_or(0), counts.total)
    }

    #[cfg(test)]
    pub(super) fn held_in_all(&self) -> usize {
        self.counts.lock().unwrap().total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrent_refusals_are_staggered_up_to_the_cap() {
        let tarpit = Tarpit::default();
        let first = tarpit.hold("flood", 10, 10).unwrap();
        let second = tarpit.hold("flood", 10, 10).unwrap();
        assert_eq!((first.ms, second.ms), (10, 20));
        // Another principal's refusal does not queue behind them.
        assert_eq!(tarpit.hold("calm", 10, 10).unwrap().ms, 10);
        assert_eq!(tarpit.hold("flood", 1000, 10).unwrap().ms, HOLD_CAP_MS);
        assert_eq!(
            tarpit.hold("flood", i64::MAX, i64::MAX).unwrap().ms,
            HOLD_CAP_MS
        );
        drop(first);
        assert_eq!(tarpit.held("flood"), (1, 1));
        drop(second);
        assert_eq!(tarpit.held("flood"), (0, 0));
        assert!(tarpit.counts.lock().unwrap().by_key.is_empty());
    }

    #[test]
    fn holds_are_bounded_per_principal_and_in_all() {
        let tarpit = Tarpit::default();
        let flood: Vec<Hold> = (0..HELD_PER_PRINCIPAL)
            .map(|_| tarpit.hold("flood", 10, 10).unwrap())
            .collect();
        assert!(tarpit.hold("flood", 10, 10).is_none());
        let mut others = Vec::new();
        while let Some(hold) = tarpit.hold(&format!("p{}", others.len()), 10, 10) {
            others.push(hold);
        }
        assert_eq!(flood.len() + others.len(), HELD_IN_ALL);
        drop(others);
        assert!(tarpit.hold("calm", 10, 10).is_some());
        drop(flood);
        assert_eq!(tarpit.held("flood"), (0, 0));
    }
}
