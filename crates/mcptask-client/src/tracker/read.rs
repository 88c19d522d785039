//! Reading what the tracker knows: one task, its inputs and timeline, pages
//! of tasks, and the counts operators watch. Every read is an indexed lookup.

use mcptask_core::TaskStatus;
use mcptask_core::client::{Cursor, ListFilter, RemoteInput, RemoteTaskRecord, TaskEvent};

use super::{Tracker, TrackerError};

impl Tracker {
    /// The tracked task with local id `id`.
    pub async fn get(&self, id: &str) -> Result<RemoteTaskRecord, TrackerError> {
        self.inner
            .store
            .get_remote(id)
            .await?
            .ok_or_else(|| TrackerError::NotFound(id.to_string()))
    }

    /// Every input key the task was asked for, with the local answer if any.
    pub async fn inputs(&self, id: &str) -> Result<Vec<RemoteInput>, TrackerError> {
        Ok(self.inner.store.remote_inputs(id).await?)
    }

    /// The task's timeline (events after version `after`).
    pub async fn events(
        &self,
        id: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<TaskEvent>, TrackerError> {
        Ok(self
            .inner
            .store
            .remote_events(id, after, limit.clamp(1, 1000))
            .await?)
    }

    /// Newest first; pass the returned cursor to get the next page.
    pub async fn list(
        &self,
        filter: &ListFilter,
        after: Option<&Cursor>,
        limit: i64,
    ) -> Result<(Vec<RemoteTaskRecord>, Option<Cursor>), TrackerError> {
        let limit = limit.clamp(1, 500);
        let page = self.inner.store.list_remote(filter, after, limit).await?;
        let next = (page.len() as i64 == limit).then(|| {
            let last = page.last().expect("non-empty page");
            Cursor {
                created_at: last.created_at,
                id: last.id.clone(),
            }
        });
        Ok((page, next))
    }

    /// How many tracked tasks are in each status (statuses with none may be
    /// missing). One indexed count per status, for metrics and dashboards.
    pub async fn counts(&self) -> Result<Vec<(TaskStatus, i64)>, TrackerError> {
        Ok(self.inner.store.remote_counts().await?)
    }

    /// Events recorded but not yet delivered (or dead-lettered) to the notifiers.
    pub async fn notification_backlog(&self) -> Result<i64, TrackerError> {
        Ok(self.inner.store.notification_backlog().await?)
    }
}
