//! Starting durable work through a submit/status/cancel toolset: a plain
//! `tools/call` of the submit tool, whose answer names the task, recorded
//! like a SEP-2663 handle (durably, before the caller sees it) with the
//! toolset's driver so the workers poll and cancel it with its own tools.

use mcptask_core::TaskStatus;
use mcptask_core::client::toolset::{self, Unreadable};
use mcptask_core::client::{RemoteDriver, RemoteSnapshot};
use rmcp::model::CallToolRequestParams;
use serde_json::Value;

use super::record::{Handle, bound_correlation};
use super::{CallOptions, CallOutcome, Tracker, TrackerError};
use crate::remote::bounded;

impl Tracker {
    /// Call `submit_tool`, the submit tool of one of `server`'s toolsets, and
    /// track the task it starts to a terminal state with the toolset's status
    /// and cancel tools.
    ///
    /// Returns [`CallOutcome::Task`] once the task is durably recorded, or
    /// [`CallOutcome::Completed`] with the tool's own result when the submit
    /// tool reported an error (`isError`: nothing was started). An answer
    /// that breaks the toolset contract (no `structuredContent`, no
    /// `task_id`, a status other than `running`) is
    /// [`TrackerError::Protocol`] and nothing is tracked.
    ///
    /// ```no_run
    /// # async fn demo(tracker: mcptask_client::Tracker) -> Result<(), mcptask_client::TrackerError> {
    /// use mcptask_client::{CallOptions, CallOutcome};
    /// let outcome = tracker
    ///     .call_toolset("jobs", "submit_job", serde_json::json!({"n": 3}), CallOptions::default())
    ///     .await?;
    /// if let CallOutcome::Task(task) = outcome {
    ///     println!("tracking {} as {}", task.remote_task_id, task.id);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn call_toolset(
        &self,
        server: &str,
        submit_tool: &str,
        arguments: Value,
        mut options: CallOptions,
    ) -> Result<CallOutcome, TrackerError> {
        let inner = &self.inner;
        let limits = inner.config.policy.limits;
        let arguments = self.call_arguments(arguments)?;
        // Before the call: refused after the submit, it would leave the work
        // running on the server untracked.
        bound_correlation(options.correlation.clone(), &limits)?;
        let (def, hash) = inner
            .servers
            .get(server)
            .ok_or_else(|| TrackerError::UnknownServer(server.into()))?;
        let toolset = def.toolset_for(submit_tool).ok_or_else(|| {
            TrackerError::InvalidInput(format!(
                "{submit_tool:?} is not the submit tool of a toolset of server {server:?}"
            ))
        })?;
        let driver = RemoteDriver::Toolset {
            status_tool: toolset.status_tool.clone(),
            cancel_tool: toolset.cancel_tool.clone(),
        };
        let (conn, _) = self.connect_to_make(server, &mut options).await?;
        let params =
            CallToolRequestParams::new(submit_tool.to_string()).with_arguments(arguments.clone());
        let result = bounded("tools/call", conn.call_timeout, conn.call_tool(params))
            .await
            .map_err(|e| super::call::call_failure(&inner.servers, server, &conn, &e))?;
        inner.servers.observe(server, crate::remote::Seen::Answered);
        conn.heard();
        let answer = serde_json::to_value(&result).unwrap_or(Value::Null);
        let submitted = match toolset::submitted(&answer) {
            Ok(h) => h,
            Err(Unreadable::ToolError(_)) => return Ok(CallOutcome::Completed(result)),
            Err(Unreadable::Contract(e)) => {
                return Err(TrackerError::Protocol(format!(
                    "toolset {:?}: {e}; nothing is tracked",
                    toolset.name
                )));
            }
        };
        let seed = RemoteSnapshot {
            status: Some(TaskStatus::Working),
            poll_interval_ms: submitted.poll_interval_ms,
            ..Default::default()
        };
        let handle = Handle {
            server,
            hash: &hash,
            tool: submit_tool,
            arguments: &arguments,
            remote_id: &submitted.task_id,
            driver,
        };
        self.record_handle(handle, Ok(seed), &options, &conn).await
    }
}
