//! Calls whose work runs in this process's call runtime: their rows are
//! made here (committed by the runtime, in the same transaction as the
//! call's task), and the runtime's changes hurry their polls.

use std::sync::Arc;

use mcptask_core::client::transition::{self, Change};
use mcptask_core::client::{NewRemoteTask, RemoteDriver, RemoteSnapshot};
use mcptask_core::{TaskStatus, ids};
use serde_json::Value;

use super::{CallOptions, Tracker, TrackerError};
use crate::local::LocalWork;

impl Tracker {
    /// Follow the calls of `work` (this process's call runtime): their
    /// polls, answers and cancels go to it. Set once; later calls are
    /// ignored (one runtime per tracker).
    pub fn set_local_work(&self, work: Arc<dyn LocalWork>) {
        let _ = self.inner.local.set(work);
    }

    /// The row of a call whose work runs as the call runtime's task of the
    /// same id (`driver` is [`RemoteDriver::Sep1686`] or
    /// [`RemoteDriver::Sync`]), as the tracker's policy makes it: to be
    /// committed with that task (`CreateRequest::call_row` of
    /// `mcptask-server`), then announced with [`Tracker::call_committed`].
    ///
    /// The arguments and correlation are checked and bounded as for
    /// [`Tracker::call_tool`].
    pub fn local_call_row(
        &self,
        server: &str,
        tool: &str,
        arguments: &Value,
        driver: RemoteDriver,
        options: &CallOptions,
    ) -> Result<Change, TrackerError> {
        let inner = &self.inner;
        debug_assert!(driver.is_local(), "{driver:?} is followed upstream");
        let arguments = self.call_arguments(arguments.clone())?;
        let limits = inner.config.policy.limits;
        let correlation = super::record::bound_correlation(options.correlation.clone(), &limits)?;
        let (_, hash) = inner
            .servers
            .get(server)
            .ok_or_else(|| TrackerError::UnknownServer(server.into()))?;
        let id = options.id.clone().unwrap_or_else(ids::new_local_task_id);
        let new = NewRemoteTask {
            remote_task_id: id.clone(),
            id,
            server: server.to_string(),
            server_hash: hash,
            driver,
            face: options.face,
            principal: options.principal.clone(),
            conversation: options.conversation.clone(),
            call_id: options.call_id.clone(),
            correlation,
            tool: tool.to_string(),
            arguments: Some(Value::Object(arguments)),
            trace: options.trace.clone().or_else(crate::trace::current),
            snapshot: RemoteSnapshot {
                status: Some(TaskStatus::Working),
                ..Default::default()
            },
            created_at: inner.clock.now_ms(),
        };
        Ok(transition::new_record(
            &new,
            &inner.config.policy,
            ids::random_unit(),
        ))
    }

    /// A call row was committed by someone else (the call runtime): start
    /// following it and delivering its events now.
    pub fn call_committed(&self, id: &str) {
        self.inner.wakers.poll.notify_one();
        self.inner.wakers.notify.notify_one();
        self.inner.changed(id);
    }

    /// The task may have changed (a hint, such as the call runtime's change
    /// feed): poll it now rather than at its next scheduled time.
    pub async fn poll_now(&self, id: &str) -> Result<(), TrackerError> {
        Ok(self.inner.expedite(id).await?)
    }

    /// The call runtime's task `id` changed: if it carries a call run here
    /// (SEP-1686, synchronous), poll that call now. Any other id changes
    /// nothing (one conditional write).
    pub async fn local_task_changed(&self, id: &str) -> Result<(), TrackerError> {
        let inner = &self.inner;
        if inner
            .store
            .expedite_local_poll(id, inner.clock.now_ms())
            .await?
        {
            inner.wakers.poll.notify_one();
        }
        Ok(())
    }
}
