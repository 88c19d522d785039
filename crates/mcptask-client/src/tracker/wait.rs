//! Waiting for tasks and watching them change: a waiter sleeps until its
//! task changes, in this process or another replica (`crate::feed`), and
//! re-reads it then.

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
            // Woken by a change here or at another replica (with a
            // backstop only while the change feed is down).
            let _ = tokio::time::timeout(deadline - now, watch.changed()).await;
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

    /// Whether changes made by other replicas sharing the store are heard
    /// now (the store's change feed is up: PostgreSQL `LISTEN`, or the
    /// in-process feed of a SQLite file). While they are not, watches wake
    /// now and then so that their holders re-read.
    pub fn hears_other_replicas(&self) -> bool {
        self.inner.watches.feed_up()
    }

    /// Hints that task `id` changed, in this process or at another replica
    /// sharing the store, from now on; only its own changes wake the watch,
    /// whatever the number of tasks. While the store's change feed is down
    /// the watch also wakes now and then, so a re-read after each wake is
    /// all a caller needs.
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
    ///     watch.changed().await;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn watch(&self, id: &str) -> crate::TaskWatch {
        self.inner.watches.watch(id)
    }
}
