//! Per-task change hints.
//!
//! A live view of one task (a front call mirroring its tracked task, a
//! `wait`) needs to wake when *that* task changes. Subscribing each of them
//! to the process-wide stream of changed ids woke every live view on every
//! change, and each then compared ids: work proportional to the number of
//! live tasks per change. Here a change wakes only the watchers of its id.
//!
//! Changes made by other replicas arrive through the store's change feed
//! (`crate::feed`). While that feed is up, a watch waits for a change and
//! nothing else: an idle live call costs no timer and no store read. While
//! it is down (a backend without a channel, a lost connection), a watch
//! also wakes every `BACKSTOP` so its holder re-reads the store, and when
//! the feed comes back every watcher is woken once, since changes may have
//! been missed in between.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

/// How often a watch wakes its holder to re-read the store while the
/// cross-replica change feed is down.
pub const BACKSTOP: Duration = Duration::from_millis(500);

/// Watchers by task id; an entry lives while someone watches that task.
#[derive(Default)]
pub(crate) struct Watches {
    by_id: Mutex<HashMap<String, watch::Sender<()>>>,
    /// Whether other replicas' changes reach [`Watches::changed`] (the
    /// store's change feed is up).
    feed_up: AtomicBool,
}

impl Watches {
    /// The cross-replica change feed went up or down. Either way every
    /// watcher re-reads once: changes may have been missed meanwhile, and a
    /// watcher waiting without a backstop must learn that it needs one.
    pub(crate) fn set_feed_up(&self, up: bool) {
        self.feed_up.store(up, Ordering::SeqCst);
        self.changed_all();
    }

    /// Whether other replicas' changes are being heard.
    pub(crate) fn feed_up(&self) -> bool {
        self.feed_up.load(Ordering::SeqCst)
    }

    /// Wake every watcher (changes may have been lost): proportional to
    /// the number of watched tasks, so only when the feed says so.
    pub(crate) fn changed_all(&self) {
        for tx in self.by_id.lock().expect("watches lock").values() {
            tx.send_replace(());
        }
    }

    /// Watch `id` from now on (changes before this call are not reported).
    pub(crate) fn watch(self: &Arc<Self>, id: &str) -> TaskWatch {
        let mut map = self.by_id.lock().expect("watches lock");
        let rx = match map.get(id) {
            Some(tx) => tx.subscribe(),
            None => {
                let (tx, rx) = watch::channel(());
                map.insert(id.to_string(), tx);
                rx
            }
        };
        TaskWatch {
            rx: Some(rx),
            id: id.to_string(),
            watches: self.clone(),
        }
    }

    /// `id` changed: wake its watchers, if it has any (one map lookup).
    pub(crate) fn changed(&self, id: &str) {
        if let Some(tx) = self.by_id.lock().expect("watches lock").get(id) {
            tx.send_replace(());
        }
    }

    /// Tasks watched now (for tests and diagnostics).
    #[cfg(test)]
    fn watched(&self) -> usize {
        self.by_id.lock().expect("watches lock").len()
    }
}

/// A watch on one task's changes in this process; unregisters when dropped.
pub struct TaskWatch {
    rx: Option<watch::Receiver<()>>,
    id: String,
    watches: Arc<Watches>,
}

impl TaskWatch {
    /// Until the task changes after the last call returned (or after the
    /// watch began). A change that came in between is reported at once.
    /// While other replicas' changes cannot be heard (see the module), it
    /// also returns after `BACKSTOP` (500 ms): the caller re-reads either way.
    pub async fn changed(&mut self) {
        let feed_up = self.watches.feed_up();
        let rx = self.rx.as_mut().expect("a live watch has its receiver");
        let change = async {
            if rx.changed().await.is_err() {
                // The sender lives in the map while this receiver does.
                std::future::pending::<()>().await;
            }
        };
        if feed_up {
            change.await;
        } else {
            let _ = tokio::time::timeout(BACKSTOP, change).await;
        }
    }
}

impl Drop for TaskWatch {
    fn drop(&mut self) {
        let mut map = self.watches.by_id.lock().expect("watches lock");
        // Drop the receiver under the lock, so that a new watch of the same
        // id cannot subscribe between the count and the removal.
        self.rx = None;
        if map.get(&self.id).is_some_and(|tx| tx.receiver_count() == 0) {
            map.remove(&self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    async fn woken(w: &mut TaskWatch) -> bool {
        tokio::time::timeout(Duration::from_millis(50), w.changed())
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn a_change_wakes_only_the_watchers_of_its_task() {
        let watches = Arc::new(Watches::default());
        let mut a1 = watches.watch("a");
        let mut a2 = watches.watch("a");
        let mut others: Vec<TaskWatch> = (0..1_000)
            .map(|i| watches.watch(&format!("t{i}")))
            .collect();
        watches.changed("a");
        assert!(woken(&mut a1).await && woken(&mut a2).await);
        for w in others.iter_mut().take(10) {
            assert!(!woken(w).await, "another task's watcher was woken");
        }
        // Once reported, the same change does not wake again.
        assert!(!woken(&mut a1).await);
    }

    #[tokio::test]
    async fn a_change_before_the_wait_is_not_missed_but_one_before_the_watch_is() {
        let watches = Arc::new(Watches::default());
        watches.changed("a");
        let mut w = watches.watch("a");
        assert!(!woken(&mut w).await, "a change before the watch began");
        // Between a re-read and the wait: still reported.
        watches.changed("a");
        assert!(woken(&mut w).await);
    }

    /// Bounds only (never an exact duration): the backstop wakes a watch
    /// while the feed is down, and nothing but a change (or the feed coming
    /// up or down) wakes it while the feed is up.
    #[tokio::test]
    async fn without_the_feed_a_watch_wakes_at_the_backstop_and_with_it_only_on_change() {
        let watches = Arc::new(Watches::default());
        let mut w = watches.watch("a");
        let started = tokio::time::Instant::now();
        tokio::time::timeout(BACKSTOP * 20, w.changed())
            .await
            .expect("feed down: the backstop wakes the watch");
        assert!(started.elapsed() >= BACKSTOP, "woken before the backstop");
        watches.set_feed_up(true);
        // Coming up wakes every watcher once: changes may have been missed.
        assert!(woken(&mut w).await);
        let idle = tokio::time::timeout(BACKSTOP * 3, w.changed()).await;
        assert!(idle.is_err(), "feed up: no timer while nothing changes");
        watches.changed("a");
        assert!(woken(&mut w).await);
        // Going down wakes it too, and the backstop applies again.
        watches.set_feed_up(false);
        assert!(woken(&mut w).await);
        tokio::time::timeout(BACKSTOP * 20, w.changed())
            .await
            .expect("feed down again: the backstop");
    }

    #[tokio::test]
    async fn the_entry_goes_with_its_last_watcher() {
        let watches = Arc::new(Watches::default());
        let w1 = watches.watch("a");
        let w2 = watches.watch("a");
        assert_eq!(watches.watched(), 1);
        drop(w1);
        assert_eq!(watches.watched(), 1);
        drop(w2);
        assert_eq!(watches.watched(), 0);
        watches.changed("a");
        let mut w3 = watches.watch("a");
        watches.changed("a");
        assert!(woken(&mut w3).await);
    }
}
