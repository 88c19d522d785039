//! The named notify targets of a tracker, each with its own delivery state.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use super::Notifier;

/// One notifier under the name its delivery state is stored by.
pub(crate) struct Target {
    pub name: String,
    pub notifier: Arc<dyn Notifier>,
    /// Set (to its next retry time, epoch ms) by a failed delivery and
    /// cleared by the next successful one: while set, the outbox hands the
    /// target's events straight to the redelivery worker (which probes it)
    /// instead of waiting for another failed, possibly timing-out, attempt.
    /// 0: up.
    down_until: AtomicI64,
}

impl Target {
    /// `Some(retry time)` while the target's last delivery failed.
    pub fn down_until(&self, now: i64) -> Option<i64> {
        let until = self.down_until.load(Ordering::Relaxed);
        (until != 0).then_some(until.max(now))
    }

    pub fn mark_down(&self, until: i64) {
        self.down_until.fetch_max(until, Ordering::Relaxed);
    }

    pub fn mark_up(&self) {
        self.down_until.store(0, Ordering::Relaxed);
    }
}

/// Every target of a tracker, in registration order, with unique names.
pub(crate) struct Targets {
    pub list: Vec<Target>,
}

impl Targets {
    /// Name each notifier by [`Notifier::name`]; a repeated name gets `#2`,
    /// `#3`… in registration order (stable across restarts of the same
    /// configuration, which is what stored lag rows and dead letters need).
    pub fn new(notifiers: Vec<Arc<dyn Notifier>>) -> Self {
        Self::succeeding(notifiers, None)
    }

    /// [`Targets::new`] for a replaced set of notifiers: a target whose name
    /// was already there keeps its delivery state (known to be down, its
    /// stored lag rows and dead letters are found under the same name).
    pub fn succeeding(notifiers: Vec<Arc<dyn Notifier>>, previous: Option<&Targets>) -> Self {
        let mut list: Vec<Target> = Vec::with_capacity(notifiers.len());
        for notifier in notifiers {
            let base = notifier.name();
            let mut name = base.clone();
            let mut n = 1;
            while list.iter().any(|t| t.name == name) {
                n += 1;
                name = format!("{base}#{n}");
            }
            let down = previous
                .and_then(|p| p.get(&name))
                .map_or(0, |t| t.down_until.load(Ordering::Relaxed));
            list.push(Target {
                name,
                notifier,
                down_until: AtomicI64::new(down),
            });
        }
        Self { list }
    }

    pub fn names(&self) -> Vec<String> {
        self.list.iter().map(|t| t.name.clone()).collect()
    }

    pub fn get(&self, name: &str) -> Option<&Target> {
        self.list.iter().find(|t| t.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notify::ChannelNotifier;

    #[test]
    fn a_target_kept_under_its_name_keeps_its_delivery_state() {
        let old = Targets::new(vec![Arc::new(ChannelNotifier::new(4))]);
        old.get("subscribe").unwrap().mark_down(5_000);
        // The same name again (e.g. a webhook whose secret changed): still
        // known to be down; a target that is new starts up.
        let kept = Targets::succeeding(vec![Arc::new(ChannelNotifier::new(4))], Some(&old));
        assert_eq!(kept.get("subscribe").unwrap().down_until(0), Some(5_000));
        let fresh = Targets::succeeding(vec![Arc::new(ChannelNotifier::new(4))], None);
        assert_eq!(fresh.get("subscribe").unwrap().down_until(0), None);
    }
}
