//! The tracker's side of the store's change feed: every tracked task this
//! process changes is published (in batches) to every replica, and every
//! replica's changes wake this process's watchers of those tasks.
//!
//! This is what lets a waiting caller (a front call following its tracked
//! task, a REST `wait`, the event stream) sleep until its task changes,
//! wherever the change was applied: no timer and no store read per live
//! call while nothing happens. The feed is a hint; the store stays the
//! truth. When the feed is down, or came back after a gap, the watches say
//! so ([`crate::watch`]) and their holders re-read.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::mpsc;

use crate::shared::{Inner, Outbox};

/// Most ids sent in one publish (the backend splits a large batch itself).
const BATCH: usize = 512;

/// The first wait before listening again after the feed failed; doubled
/// up to [`RETRY_MAX`].
const RETRY_MIN: Duration = Duration::from_millis(250);
const RETRY_MAX: Duration = Duration::from_secs(10);

/// A new outbox and the receiving end [`spawn`] takes.
pub(crate) fn outbox() -> (Outbox, mpsc::UnboundedReceiver<String>) {
    mpsc::unbounded_channel()
}

/// Start the publisher (this process's changes, out) and the listener
/// (every replica's changes, in).
pub(crate) fn spawn(inner: &Arc<Inner>, outgoing: mpsc::UnboundedReceiver<String>) {
    let publisher = inner.clone();
    inner
        .loops
        .spawn(async move { publish(publisher, outgoing).await });
    let listener = inner.clone();
    inner.loops.spawn(async move { listen(listener).await });
}

/// Publish what arrives in `outgoing`, as batches: what piled up while the
/// last publish ran goes out in the next one.
async fn publish(inner: Arc<Inner>, mut outgoing: mpsc::UnboundedReceiver<String>) {
    let mut batch = Vec::with_capacity(BATCH);
    let mut failing = false;
    loop {
        let received = tokio::select! {
            _ = inner.shutdown.cancelled() => return,
            n = outgoing.recv_many(&mut batch, BATCH) => n,
        };
        if received == 0 {
            return;
        }
        batch.sort_unstable();
        batch.dedup();
        match inner.store.publish_remote_changes(&batch).await {
            Ok(()) if failing => {
                failing = false;
                tracing::info!("tracked-task changes are published to the other replicas again");
            }
            Ok(()) => {}
            // A hint lost: the other replicas' listeners reconnect (and
            // re-read) if the database went away; logged once per change.
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(error = %e, "cannot publish tracked-task changes to the other replicas; their waiters see them late");
            }
            Err(_) => {}
        }
        batch.clear();
    }
}

/// Wake this process's watchers of what every replica changed, for as long
/// as the tracker runs; listen again (with backoff) when the feed fails.
async fn listen(inner: Arc<Inner>) {
    let mut retry = RETRY_MIN;
    let mut told = false;
    loop {
        match inner.store.listen_remote_changes().await {
            // No channel on this backend: the watches keep their backstop.
            Ok(None) => return,
            Ok(Some(mut stream)) => {
                retry = RETRY_MIN;
                if told {
                    told = false;
                    tracing::info!("hearing the other replicas' tracked-task changes again");
                }
                inner.watches.set_feed_up(true);
                loop {
                    let batch = tokio::select! {
                        _ = inner.shutdown.cancelled() => return,
                        batch = stream.next() => batch,
                    };
                    match batch {
                        // Some may have been lost: every watcher re-reads.
                        Some(batch) if batch.is_empty() => inner.watches.changed_all(),
                        Some(batch) => {
                            for id in batch {
                                inner.watches.changed(&id);
                                let _ = inner.changes.send(id);
                            }
                        }
                        None => break,
                    }
                }
                inner.watches.set_feed_up(false);
            }
            Err(e) => {
                if !told {
                    told = true;
                    tracing::warn!(error = %e, "cannot hear the other replicas' tracked-task changes; waiters re-read every {:?} meanwhile", crate::watch::BACKSTOP);
                }
            }
        }
        tokio::select! {
            _ = inner.shutdown.cancelled() => return,
            _ = tokio::time::sleep(retry) => {}
        }
        retry = (retry * 2).min(RETRY_MAX);
    }
}
