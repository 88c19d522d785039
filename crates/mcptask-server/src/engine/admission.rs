//! What a request must satisfy before the runtime acts on it.
//!
//! Everything here guards a trust boundary: payloads are measured before they
//! reach the store, and a task is only visible to the principal it is bound to
//! while it is retained. Refusals for unknown, purged and foreign ids are the
//! same [`TaskError::NotFound`], so ids cannot be probed.

use mcptask_core::payload;
use mcptask_core::server::{ServerTaskState, ServerTaskView};
use rmcp::model::InputResponses;
use serde_json::Value;

use super::RuntimeInner;
use crate::TaskError;

/// Longest accepted task id; anything longer cannot be one of ours.
const MAX_TASK_ID_LEN: usize = 128;
/// Most `inputResponses` entries accepted in one `tasks/update`.
const MAX_RESPONSES_PER_UPDATE: usize = 256;

impl RuntimeInner {
    /// The task if it exists, is not purged, and belongs to `principal`.
    pub(crate) async fn visible(
        &self,
        task_id: &str,
        principal: Option<&str>,
    ) -> Result<ServerTaskView, TaskError> {
        if task_id.is_empty() || task_id.len() > MAX_TASK_ID_LEN {
            return Err(TaskError::NotFound);
        }
        let view = self
            .store
            .get_task(task_id)
            .await?
            .ok_or(TaskError::NotFound)?;
        if view.record.principal.as_deref() != principal
            || view.record.is_purged(self.clock.now_ms())
        {
            return Err(TaskError::NotFound);
        }
        Ok(view)
    }

    /// [`RuntimeInner::visible`] for `tasks/get`: only the task's state.
    pub(crate) async fn visible_state(
        &self,
        task_id: &str,
        principal: Option<&str>,
    ) -> Result<ServerTaskState, TaskError> {
        if task_id.is_empty() || task_id.len() > MAX_TASK_ID_LEN {
            return Err(TaskError::NotFound);
        }
        let state = self
            .store
            .get_task_state(task_id)
            .await?
            .ok_or(TaskError::NotFound)?;
        if state.principal.as_deref() != principal || state.is_purged(self.clock.now_ms()) {
            return Err(TaskError::NotFound);
        }
        Ok(state)
    }

    /// Tool arguments (or stored call inputs) within the configured bound.
    pub(crate) fn check_arguments(&self, arguments: &Value) -> Result<(), TaskError> {
        let size = payload::json_size(arguments);
        let max = self.config.limits.max_arguments_bytes;
        if size > max {
            return Err(TaskError::InvalidParams(format!(
                "arguments are {size} bytes; this server accepts at most {max}"
            )));
        }
        Ok(())
    }

    /// A `tasks/update`'s answers: not too many, each an object within bounds.
    pub(crate) fn check_responses(&self, responses: &InputResponses) -> Result<(), TaskError> {
        if responses.len() > MAX_RESPONSES_PER_UPDATE {
            return Err(TaskError::InvalidParams(format!(
                "too many inputResponses ({}, at most {MAX_RESPONSES_PER_UPDATE})",
                responses.len()
            )));
        }
        for (key, value) in responses {
            self.config
                .limits
                .check_input_response(value)
                .map_err(|why| {
                    TaskError::InvalidParams(format!("inputResponses[{key:?}] {why}"))
                })?;
        }
        Ok(())
    }
}
