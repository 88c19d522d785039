//! Tool calls from clients that did not ask for a task.
//!
//! Such a call runs the same handler inline, with a [`TaskContext`] that has no
//! task behind it: nothing is stored, so it cannot be recovered, and its
//! result or error goes straight back as the `tools/call` response.

use std::panic::AssertUnwindSafe;

use futures::FutureExt;
use rmcp::ErrorData;
use rmcp::model::{CallToolResult, InputResponses, JsonObject};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::TaskRuntime;
use super::executor::panic_text;
use crate::TaskError;
use crate::tool::{TaskContext, TaskExit, ToolCall};

impl TaskRuntime {
    /// Run a tool synchronously (the client did not ask for tasks).
    pub async fn run_sync(
        &self,
        tool: &str,
        arguments: JsonObject,
        principal: Option<String>,
        call_inputs: InputResponses,
        cancel: CancellationToken,
    ) -> Result<CallToolResult, ErrorData> {
        let tool = self
            .inner
            .source
            .lookup(tool)
            .found()
            .ok_or_else(|| ErrorData::from(TaskError::UnknownTool(tool.to_string())))?;
        self.inner
            .check_arguments(&Value::Object(arguments.clone()))?;
        let ctx = TaskContext::synchronous(principal, call_inputs, cancel);
        let handler = tool.handler.clone();
        // Called inside the guarded future, so a panic in the handler's
        // synchronous part is caught too.
        let call = async move { handler(ToolCall { arguments, ctx }).await };
        match AssertUnwindSafe(call).catch_unwind().await {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(TaskExit::Error(e))) => Err(e),
            Ok(Err(TaskExit::Cancelled | TaskExit::Lost)) => Err(ErrorData::internal_error(
                "the tool call was cancelled",
                None,
            )),
            Err(panic) => Err(ErrorData::internal_error(
                format!("tool panicked: {}", panic_text(&panic)),
                None,
            )),
        }
    }
}
