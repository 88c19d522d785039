//! Group commit for task creation.
//!
//! Each create must be committed before its `CreateTaskResult` goes out, and a
//! durable commit costs an fsync. Concurrent creates therefore share commits:
//! a writer takes the first queued create, drains whatever else is already
//! waiting (up to a bound) and commits them in one transaction. A lone create
//! is committed at once, so nothing waits for a batch to fill.

use std::sync::Arc;

use mcptask_core::StoreError;
use mcptask_core::server::NewServerTask;
use mcptask_core::store::ServerTaskStore;
use tokio::sync::{Mutex, mpsc, oneshot};

type Reply = oneshot::Sender<Result<(), StoreError>>;

#[derive(Clone)]
pub(crate) struct CreateBatcher {
    tx: mpsc::UnboundedSender<(NewServerTask, Reply)>,
}

impl CreateBatcher {
    pub(crate) fn start(store: Arc<dyn ServerTaskStore>, writers: usize, max_batch: usize) -> Self {
        let (tx, rx) = mpsc::unbounded_channel::<(NewServerTask, Reply)>();
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

    /// Commit one task; returns once it is durable.
    pub(crate) async fn create(&self, task: NewServerTask) -> Result<(), StoreError> {
        let (reply, done) = oneshot::channel();
        self.tx
            .send((task, reply))
            .map_err(|_| StoreError::Database("task creation is shut down".into()))?;
        done.await
            .map_err(|_| StoreError::Database("task creation writer stopped".into()))?
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
            for reply in replies {
                let _ = reply.send(Err(StoreError::Database(e.to_string().into())));
            }
        }
    }
}
