//! Waiting for tasks and watching them change: local hints wake waiters
//! early, and a periodic re-read covers changes made by other processes.

use std::time::Duration;

use mcptask_core::client::{RemoteTaskRecord, TaskEvent};
use tokio::sync::broadcast;

use super::{Tracker, TrackerError};

impl Tracker {
    /// Wait until the task is terminal (or `timeout` passes).
    pub async fn wait(
        &self,
        id: &str,
        timeout: Duration,
    ) -> Result<RemoteTaskRecord, TrackerError> {
        self.wait_until(id, timeout, RemoteTaskRecord::is_terminal)
            .await
    }

    /// Wait until `done` holds for the task (or it settles, or `timeout` passes).
    pub async fn wait_until(
        &self,
        id: &str,
        timeout: Duration,
        done: impl Fn(&RemoteTaskRecord) -> bool,
    ) -> Result<RemoteTaskRecord, TrackerError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut watch = self.watch(id);
        loop {
            let record = self.get(id).await?;
            if done(&record) || record.is_terminal() {
                return Ok(record);
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Err(TrackerError::Timeout(Box::new(record)));
            }
            // Local hints wake us early; the periodic re-read covers other processes.
            let tick = (deadline - now).min(Duration::from_millis(250));
            let _ = tokio::time::timeout(tick, watch.changed()).await;
        }
    }

    /// Events as they are delivered (in-process, at least once per event).
    pub fn subscribe(&self) -> broadcast::Receiver<TaskEvent> {
        self.inner.channel.subscribe()
    }

    /// Ids of tasks that changed in this process (a hint for live views).
    /// Every subscriber sees every change: for a view of one task, take
    /// [`Tracker::watch`].
    pub fn changes(&self) -> broadcast::Receiver<String> {
        self.inner.changes.subscribe()
    }

    /// Hints that task `id` changed in this process, from now on; only its
    /// own changes wake the watch, whatever the number of tasks. Changes
    /// made by other processes are not seen: re-read now and then.
    ///
    /// ```no_run
    /// # async fn f(tracker: mcptask_client::Tracker) -> Result<(), mcptask_client::TrackerError> {
    /// let mut watch = tracker.watch("rt_1");
    /// loop {
    ///     let task = tracker.get("rt_1").await?;
    ///     if task.is_terminal() {
    ///         break;
    ///     }
    ///     // A change between the read and this wait is not missed.
    ///     let _ = tokio::time::timeout(std::time::Duration::from_secs(1), watch.changed()).await;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn watch(&self, id: &str) -> crate::TaskWatch {
        self.inner.watches.watch(id)
    }
}
