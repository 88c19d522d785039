//! The call runtime as the tracker's [`LocalWork`]: the tracker follows a
//! 2025-11-25 or synchronous call through the call task of the same id, and
//! the runtime's change feed makes it poll at once when that task changes.

use async_trait::async_trait;
use mcptask_client::remote::RemoteError;
use mcptask_client::{LocalTask, LocalWork, Tracker};
use mcptask_server::{TaskError, TaskRuntime};
use rmcp::model::InputResponses;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

/// [`TaskRuntime`] reached in-process by the tracker.
pub struct RuntimeWork(pub TaskRuntime);

fn classified(e: TaskError) -> RemoteError {
    match e {
        TaskError::NotFound => RemoteError::NotFound(e.to_string()),
        TaskError::InvalidParams(m) => RemoteError::Rpc(rmcp::ErrorData::invalid_params(m, None)),
        TaskError::Store(s) if !s.is_transient() => RemoteError::Protocol(s.to_string()),
        other => RemoteError::Transient(other.to_string()),
    }
}

#[async_trait]
impl LocalWork for RuntimeWork {
    async fn get(&self, id: &str, principal: Option<&str>) -> Result<LocalTask, RemoteError> {
        let (task, attempt, by) = self
            .0
            .get_task_and_attempt(id, principal)
            .await
            .map_err(classified)?;
        Ok(LocalTask { task, attempt, by })
    }

    async fn update(
        &self,
        id: &str,
        principal: Option<&str>,
        answers: InputResponses,
    ) -> Result<(), RemoteError> {
        self.0
            .update_task(id, principal, answers)
            .await
            .map_err(classified)
    }

    async fn cancel(&self, id: &str, principal: Option<&str>) -> Result<(), RemoteError> {
        self.0.cancel_task(id, principal).await.map_err(classified)
    }
}

/// Until `stop`: each change this process makes to a call task makes the
/// tracker poll the call's row now, if the call runs here (SEP-1686,
/// synchronous; a tracked call's task mirrors its row and needs no poll).
/// Every replica relays its own changes, so each change is relayed once.
pub fn relay_changes(runtime: &TaskRuntime, tracker: Tracker, stop: CancellationToken) {
    let mut changes = runtime.changes_here();
    tokio::spawn(async move {
        loop {
            let change = tokio::select! {
                _ = stop.cancelled() => return,
                c = changes.recv() => c,
            };
            match change {
                Ok(id) => {
                    if let Err(e) = tracker.local_task_changed(&id).await {
                        tracing::debug!(task = %id, error = %e, "cannot hurry a call's poll");
                    }
                }
                // Missed hints cost latency only: the rows are polled anyway.
                Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => return,
            }
        }
    });
}
