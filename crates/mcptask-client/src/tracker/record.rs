//! Recording a remote task handle durably: the row is written before the
//! caller gets a local id, and a handle that cannot be recorded is cancelled
//! on the server rather than left running untracked.

use std::time::Duration;

use mcptask_core::client::transition;
use mcptask_core::client::{
    InsertOutcome, NewRemoteTask, RemoteDriver, RemoteSnapshot, RemoteTaskRecord,
};
use mcptask_core::{TaskStatus, ids, payload};
use rmcp::model::GetTaskParams;
use serde_json::Value;

use super::{CallOptions, CallOutcome, Tracker, TrackerError};
use crate::remote::snapshot::{self, MAX_REMOTE_ID_LEN};
use crate::remote::{Connection, bounded, cancel_remote, classify};

impl Tracker {
    /// Record a `CreateTaskResult`. Runs detached so that a caller giving up
    /// mid-write can never leave a live remote task untracked.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn record_created(
        &self,
        server: &str,
        hash: &str,
        tool: &str,
        arguments: &rmcp::model::JsonObject,
        task: &rmcp::model::Task,
        options: &CallOptions,
        conn: &Connection,
    ) -> Result<CallOutcome, TrackerError> {
        let limits = self.inner.config.policy.limits;
        let handle = Handle {
            server,
            hash,
            tool,
            arguments,
            remote_id: &task.task_id,
            driver: RemoteDriver::Sep2663,
        };
        let seed = snapshot::from_created(task, &limits).map_err(TrackerError::from);
        self.record_handle(handle, seed, options, conn).await
    }

    /// Record a handle the server just handed out (`seed`: what it said, or
    /// why that cannot be recorded), durably before the caller sees it. Runs
    /// detached so that a caller giving up mid-write can never leave a live
    /// remote task untracked; a handle that cannot be recorded is cancelled on
    /// the server, in the way its driver cancels.
    pub(super) async fn record_handle(
        &self,
        handle: Handle<'_>,
        seed: Result<RemoteSnapshot, TrackerError>,
        options: &CallOptions,
        conn: &Connection,
    ) -> Result<CallOutcome, TrackerError> {
        let inner = self.inner.clone();
        let limits = inner.config.policy.limits;
        let arguments = Value::Object(handle.arguments.clone());
        let arguments =
            (payload::json_size(&arguments) <= limits.max_arguments_bytes).then_some(arguments);
        let correlation = bound_correlation(options.correlation.clone(), &limits)?;
        let remote_id = handle.remote_id.to_string();
        let driver = handle.driver.clone();
        let new = seed.map(|snapshot| NewRemoteTask {
            id: options.id.clone().unwrap_or_else(ids::new_local_task_id),
            server: handle.server.to_string(),
            server_hash: handle.hash.to_string(),
            remote_task_id: remote_id.clone(),
            driver: handle.driver,
            face: options.face,
            principal: options.principal.clone(),
            conversation: options.conversation.clone(),
            call_id: options.call_id.clone(),
            correlation,
            tool: handle.tool.to_string(),
            arguments,
            trace: options.trace.clone().or_else(crate::trace::current),
            snapshot,
            created_at: inner.clock.now_ms(),
        });
        let conn = conn.clone();
        let commit = options.commit.clone();
        let job = tokio::spawn(async move {
            let outcome = match (new, commit) {
                (Ok(new), None) => inner
                    .store
                    .insert_remote(&new, &inner.config.policy)
                    .await
                    .map_err(TrackerError::from),
                (Ok(new), Some(commit)) => {
                    let row =
                        transition::new_record(&new, &inner.config.policy, ids::random_unit());
                    let record = row.record.clone();
                    commit
                        .0
                        .commit(row)
                        .await
                        .map(|()| InsertOutcome::Inserted(Box::new(record)))
                }
                (Err(e), _) => Err(e),
            };
            match outcome {
                Ok(outcome) => {
                    inner.wakers.poll.notify_one();
                    inner.wakers.notify.notify_one();
                    inner.changed(&outcome.record().id);
                    Ok(outcome)
                }
                // Another call's row holds this handle: it is tracked.
                Err(e @ TrackerError::AlreadyTracked(_)) => Err(e),
                Err(e) => {
                    // Nothing durable holds this handle: cancel it rather than
                    // leave an untracked task running on the server.
                    let cancel = cancel_remote(&conn, &driver, &remote_id, Duration::from_secs(5));
                    if let Err(ce) = cancel.await {
                        tracing::error!(remote_id, error = %ce, "could not cancel an untracked remote task");
                    }
                    Err(e)
                }
            }
        });
        match job.await {
            Ok(Ok(outcome)) => Ok(CallOutcome::Task(Box::new(outcome.record().clone()))),
            Ok(Err(e)) => Err(e),
            Err(e) => Err(TrackerError::Unavailable(format!(
                "recording the task failed: {e}"
            ))),
        }
    }

    /// Track a handle obtained elsewhere (e.g. by another client). The first
    /// `tasks/get` validates it.
    pub async fn track(
        &self,
        server: &str,
        remote_task_id: &str,
        tool: &str,
        options: CallOptions,
    ) -> Result<RemoteTaskRecord, TrackerError> {
        let inner = &self.inner;
        let (_, hash) = inner
            .servers
            .get(server)
            .ok_or_else(|| TrackerError::UnknownServer(server.into()))?;
        if remote_task_id.is_empty() || remote_task_id.len() > MAX_REMOTE_ID_LEN {
            return Err(TrackerError::InvalidInput(
                "remote task id must be 1..=512 characters".into(),
            ));
        }
        let limits = inner.config.policy.limits;
        let correlation = bound_correlation(options.correlation, &limits)?;
        let conn = inner
            .servers
            .connect(server, Some(&hash), inner.timeouts())
            .await?
            .bounded_by(options.timeout);
        let got = bounded(
            "tasks/get",
            conn.call_timeout,
            conn.peer.get_task(GetTaskParams::new(remote_task_id)),
        )
        .await
        .map_err(|e| classify::task_error("tasks/get", &e))?;
        let mut snapshot = snapshot::from_detailed(remote_task_id, &got.task, &limits)?;
        // Start from "working" so the first poll records the real state as an event.
        snapshot.status = Some(TaskStatus::Working);
        snapshot.input_requests.clear();
        let new = NewRemoteTask {
            id: options.id.unwrap_or_else(ids::new_local_task_id),
            server: server.to_string(),
            server_hash: hash,
            remote_task_id: remote_task_id.to_string(),
            driver: RemoteDriver::Sep2663,
            face: options.face,
            principal: options.principal,
            conversation: options.conversation,
            call_id: options.call_id,
            correlation,
            tool: tool.to_string(),
            arguments: None,
            trace: options.trace.or_else(crate::trace::current),
            snapshot,
            created_at: inner.clock.now_ms(),
        };
        let outcome = inner
            .store
            .insert_remote(&new, &inner.config.policy)
            .await?;
        inner.wakers.poll.notify_one();
        inner.wakers.notify.notify_one();
        Ok(match outcome {
            InsertOutcome::Inserted(r) | InsertOutcome::AlreadyTracked(r) => *r,
        })
    }
}

/// Where a new handle came from: the call that created it.
pub(super) struct Handle<'a> {
    pub(super) server: &'a str,
    pub(super) hash: &'a str,
    pub(super) tool: &'a str,
    pub(super) arguments: &'a rmcp::model::JsonObject,
    pub(super) remote_id: &'a str,
    pub(super) driver: RemoteDriver,
}

/// Refuse correlation data over its bound (four status messages' worth).
pub(super) fn bound_correlation(
    value: Option<Value>,
    limits: &payload::PayloadLimits,
) -> Result<Option<Value>, TrackerError> {
    match value {
        Some(v) if payload::json_size(&v) > limits.max_message_bytes * 4 => {
            Err(TrackerError::InvalidInput(format!(
                "correlation data is limited to {} bytes",
                limits.max_message_bytes * 4
            )))
        }
        other => Ok(other),
    }
}
