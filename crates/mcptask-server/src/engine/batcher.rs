//! Group commit for task creation.
//!
//! Each create must be committed before its `CreateTaskResult` goes out, and a
//! durable commit costs an fsync. Concurrent creates therefore share commits:
//! a writer takes the first queued create, drains whatever else is already
//! waiting (up to a bound) and commits them in one transaction. A lone create
//! is committed at once, so nothing waits for a batch to fill.
//!
//! The queue is bounded: when `max_queue` creates already wait, another is
//! refused at once ([`Enqueue::Full`]) instead of piling up in memory.

use std::future::Future;
use std::sync::Arc;

use mcptask_core::StoreError;
use mcptask_core::server::NewServerTask;
use mcptask_core::store::ServerTaskStore;
use tokio::sync::{Mutex, mpsc, oneshot};

type Reply = oneshot::Sender<Result<(), StoreError>>;

#[derive(Clone)]
pub(crate) struct CreateBatcher {
    tx: mpsc::Sender<(NewServerTask, Reply)>,
}

/// Why a create could not be queued.
#[derive(Debug)]
pub(crate) enum Enqueue {
    /// `max_queue` creates are waiting already.
    Full,
    /// The store failed, or the writers stopped.
    Store(StoreError),
}

impl From<StoreError> for Enqueue {
    fn from(e: StoreError) -> Self {
        Enqueue::Store(e)
    }
}

impl CreateBatcher {
    pub(crate) fn start(
        store: Arc<dyn ServerTaskStore>,
        writers: usize,
        max_batch: usize,
        max_queue: usize,
    ) -> Self {
        let (tx, rx) = mpsc::channel::<(NewServerTask, Reply)>(max_queue.max(1));
        let rx = Arc::new(Mutex::new(rx));
        for _ in 0..writers.max(1) {
            let rx = rx.clone();
            let store = store.clone();
            tokio::spawn(async move {
                loop {
                    let batch = {
                        let mut rx = rx.lock().await;
                        let Some(first) = rx.recv().await else { return };
                        let mut batch = vec![first];
                        while batch.len() < max_batch.max(1) {
                            match rx.try_recv() {
                                Ok(item) => batch.push(item),
                                Err(_) => break,
                            }
                        }
                        batch
                    };
                    commit(&*store, batch).await;
                }
            });
        }
        Self { tx }
    }

    /// Queue one task for commit, or refuse it at once if the queue is full.
    /// The returned future resolves once the task is durable.
    pub(crate) fn create(
        &self,
        task: NewServerTask,
    ) -> Result<impl Future<Output = Result<(), StoreError>> + use<>, Enqueue> {
        let (reply, done) = oneshot::channel();
        self.tx.try_send((task, reply)).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => Enqueue::Full,
            mpsc::error::TrySendError::Closed(_) => {
                Enqueue::Store(StoreError::Database("task creation is shut down".into()))
            }
        })?;
        Ok(async move {
            done.await
                .map_err(|_| StoreError::Database("task creation writer stopped".into()))?
        })
    }
}

async fn commit(store: &dyn ServerTaskStore, batch: Vec<(NewServerTask, Reply)>) {
    let (tasks, replies): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
    match store.create_tasks(&tasks).await {
        Ok(()) => {
            for reply in replies {
                let _ = reply.send(Ok(()));
            }
        }
        Err(_) if tasks.len() > 1 => {
            // One bad row must not fail its neighbours: retry each alone.
            for (task, reply) in tasks.into_iter().zip(replies) {
                let _ = reply.send(store.create_tasks(std::slice::from_ref(&task)).await);
            }
        }
        Err(e) => {
            // A single create: its own error, transient or not.
            if let Some(reply) = replies.into_iter().next() {
                let _ = reply.send(Err(e));
            }
        }
    }
}
