//! The task change feed: which tasks changed state, for the
//! `subscriptions/listen` streams of every replica.
//!
//! A write that changes a task's status (settled, waiting for input, answered,
//! expired) is published here after it committed. Subscribers in this process
//! hear of it at once; other replicas hear of it through the store's push
//! channel (PostgreSQL `LISTEN/NOTIFY`), batched so one `NOTIFY` carries every
//! change made while the previous one was being sent. Changes are hints:
//! subscribers re-read the task and send what the store says, and clients keep
//! polling, so a hint lost in a reconnect costs latency, never correctness.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use mcptask_core::store::ServerTaskStore;
use tokio::sync::{broadcast, mpsc, watch};
use tokio_util::sync::CancellationToken;

/// Changes a slow subscriber may fall behind by before it must re-read all
/// of its tasks ([`TaskChange::Resync`]).
const FEED_CAPACITY: usize = 4096;

/// Ids published in one batch at most (one `NOTIFY` round per batch).
const MAX_PUBLISH_BATCH: usize = 1024;

/// Wait before listening again after the store's push channel failed.
const RELISTEN_DELAY: Duration = Duration::from_secs(1);

/// What a feed subscriber hears.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskChange {
    /// This task may have changed: re-read it.
    Task(Arc<str>),
    /// Changes may have been missed (the push channel reconnected or the
    /// subscriber fell behind): re-read every task of interest.
    Resync,
}

/// The feed of one runtime: an in-process broadcast, fed by this process's
/// writes and by the other replicas' published changes.
pub(crate) struct ChangeFeed {
    local: broadcast::Sender<TaskChange>,
    /// This process's own changes only (each is heard here once, not once
    /// per replica).
    here: broadcast::Sender<Arc<str>>,
    outbox: mpsc::UnboundedSender<String>,
    /// One channel per task someone here waits on ([`TaskWatch`]): a
    /// change wakes the waiters of its own task only.
    watched: Arc<Watched>,
}

/// The tasks waited on in this process, each with its channel.
#[derive(Default)]
struct Watched(Mutex<HashMap<Arc<str>, watch::Sender<u64>>>);

impl Watched {
    fn watch(watched: &Arc<Watched>, task_id: &str) -> TaskWatch {
        let mut map = watched.0.lock().expect("watched tasks");
        let rx = match map.get(task_id) {
            Some(tx) => tx.subscribe(),
            None => {
                let (tx, rx) = watch::channel(0);
                map.insert(task_id.into(), tx);
                rx
            }
        };
        TaskWatch {
            id: task_id.into(),
            rx,
            watched: watched.clone(),
        }
    }

    /// Wake the watches of `task_id` (nothing if none).
    fn wake(&self, task_id: &str) {
        if let Some(tx) = self.0.lock().expect("watched tasks").get(task_id) {
            tx.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.lock().expect("watched tasks").len()
    }
}

/// Wakes when its task changes here (in this process; other replicas'
/// changes reach [`TaskRuntime::changes`](crate::TaskRuntime::changes)).
/// Its channel is forgotten with the last watch of the task.
pub(crate) struct TaskWatch {
    id: Arc<str>,
    rx: watch::Receiver<u64>,
    watched: Arc<Watched>,
}

impl TaskWatch {
    /// Until the task changes after the last call (or this watch's making).
    pub(crate) async fn changed(&mut self) {
        if self.rx.changed().await.is_err() {
            // Never closed while a watch holds its sender's entry.
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for TaskWatch {
    fn drop(&mut self) {
        let mut map = self.watched.0.lock().expect("watched tasks");
        // This watch's own receiver still counts: one means it was the last.
        if map.get(&self.id).is_some_and(|tx| tx.receiver_count() <= 1) {
            map.remove(&self.id);
        }
    }
}

impl ChangeFeed {
    /// Start the feed: the publisher that batches this process's changes to
    /// the store, and the listener that relays other replicas' changes. Both
    /// end when `stopped` is cancelled. The store's listener is subscribed
    /// before this returns, so no change published after start is missed.
    pub(crate) async fn start(store: Arc<dyn ServerTaskStore>, stopped: CancellationToken) -> Self {
        let (local, _) = broadcast::channel(FEED_CAPACITY);
        let (here, _) = broadcast::channel(FEED_CAPACITY);
        let (outbox, pending) = mpsc::unbounded_channel();
        tokio::spawn(publish(store.clone(), pending, stopped.clone()));
        let first = store.listen_changes().await;
        tokio::spawn(relay(store, first, local.clone(), stopped));
        Self {
            local,
            here,
            outbox,
            watched: Arc::default(),
        }
    }

    /// Watch `task_id`'s changes made in this process from now on.
    pub(crate) fn watch(&self, task_id: &str) -> TaskWatch {
        Watched::watch(&self.watched, task_id)
    }

    /// Publish that `task_id` changed (after the write committed).
    pub(crate) fn publish(&self, task_id: &str) {
        self.watched.wake(task_id);
        let id: Arc<str> = task_id.into();
        let _ = self.local.send(TaskChange::Task(id.clone()));
        let _ = self.here.send(id);
        let _ = self.outbox.send(task_id.to_string());
    }

    /// Hear the changes this process makes from now on.
    pub(crate) fn subscribe_here(&self) -> broadcast::Receiver<Arc<str>> {
        self.here.subscribe()
    }

    /// Hear every change published from now on, here or on other replicas.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<TaskChange> {
        self.local.subscribe()
    }
}

/// Send this process's changes to the other replicas, as few batches as the
/// backlog allows: under load, each round carries everything that queued
/// while the previous one was in flight.
async fn publish(
    store: Arc<dyn ServerTaskStore>,
    mut pending: mpsc::UnboundedReceiver<String>,
    stopped: CancellationToken,
) {
    let mut batch = Vec::new();
    loop {
        let received = tokio::select! {
            _ = stopped.cancelled() => return,
            n = pending.recv_many(&mut batch, MAX_PUBLISH_BATCH) => n,
        };
        if received == 0 {
            return;
        }
        batch.sort_unstable();
        batch.dedup();
        if let Err(e) = store.publish_changes(&batch).await {
            tracing::debug!(error = %e, count = batch.len(), "publishing task changes failed; clients poll");
        }
        batch.clear();
    }
}

type Listening =
    Result<Option<futures::stream::BoxStream<'static, Vec<String>>>, mcptask_core::StoreError>;

/// Relay other replicas' changes into the local feed; after the channel was
/// lost and found again, tell subscribers to re-read ([`TaskChange::Resync`]).
async fn relay(
    store: Arc<dyn ServerTaskStore>,
    first: Listening,
    local: broadcast::Sender<TaskChange>,
    stopped: CancellationToken,
) {
    let mut next = Some(first);
    loop {
        let listening = match next.take() {
            Some(l) => l,
            None => tokio::select! {
                _ = stopped.cancelled() => return,
                l = store.listen_changes() => {
                    let _ = local.send(TaskChange::Resync);
                    l
                }
            },
        };
        match listening {
            Ok(None) => return, // In-process only.
            Ok(Some(mut stream)) => loop {
                tokio::select! {
                    _ = stopped.cancelled() => return,
                    batch = stream.next() => match batch {
                        Some(ids) if ids.is_empty() => {
                            let _ = local.send(TaskChange::Resync);
                        }
                        Some(ids) => {
                            for id in ids {
                                let _ = local.send(TaskChange::Task(id.into()));
                            }
                        }
                        None => break,
                    },
                }
            },
            Err(e) => {
                tracing::warn!(error = %e, "task change feed unavailable; subscribers fall back to client polling")
            }
        }
        tokio::select! {
            _ = stopped.cancelled() => return,
            _ = tokio::time::sleep(RELISTEN_DELAY) => {}
        }
    }
}

#[cfg(test)]
mod watch_tests {
    use super::*;

    /// A watch wakes for its own task only, every watch of a task wakes,
    /// and the task's channel is forgotten with its last watch.
    #[tokio::test]
    async fn a_watch_wakes_for_its_task_and_is_forgotten_with_the_last() {
        let watched = Arc::new(Watched::default());
        let mut a1 = Watched::watch(&watched, "a");
        let mut a2 = Watched::watch(&watched, "a");
        let mut b = Watched::watch(&watched, "b");
        assert_eq!(watched.len(), 2);
        watched.wake("a");
        watched.wake("nobody");
        let quick = Duration::from_millis(50);
        assert!(tokio::time::timeout(quick, a1.changed()).await.is_ok());
        assert!(tokio::time::timeout(quick, a2.changed()).await.is_ok());
        assert!(
            tokio::time::timeout(quick, b.changed()).await.is_err(),
            "b did not change"
        );
        drop(a1);
        assert_eq!(watched.len(), 2, "a2 still watches a");
        drop(a2);
        drop(b);
        assert_eq!(watched.len(), 0);
    }
}
