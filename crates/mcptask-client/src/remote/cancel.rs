//! Cancelling an upstream task nothing tracks any more, the way its driver
//! cancels.

use std::time::Duration;

use mcptask_core::client::RemoteDriver;
use rmcp::model::{CallToolRequestParams, CancelTaskParams};

use super::{Connection, bounded};

/// Cancel `remote_id` on its server the way `driver` does (`tasks/cancel`,
/// or the toolset's cancel tool), bounded by `timeout`. Whether the server
/// then reports the task settled is not checked: this is for handles
/// nothing tracks any more.
pub(crate) async fn cancel_remote(
    conn: &Connection,
    driver: &RemoteDriver,
    remote_id: &str,
    timeout: Duration,
) -> Result<(), rmcp::service::ServiceError> {
    match driver {
        RemoteDriver::Sep2663 => bounded(
            "tasks/cancel",
            timeout,
            conn.cancel_task(CancelTaskParams::new(remote_id.to_string())),
        )
        .await
        .map(|_| ()),
        RemoteDriver::Toolset { cancel_tool, .. } => {
            let args = serde_json::json!({"task_id": remote_id});
            let params = CallToolRequestParams::new(cancel_tool.clone())
                .with_arguments(args.as_object().cloned().unwrap_or_default());
            bounded("tools/call", timeout, conn.call_tool(params))
                .await
                .map(|_| ())
        }
        // The call runtime's own tasks are cancelled in-process.
        RemoteDriver::Sep1686 | RemoteDriver::Sync => Ok(()),
    }
}
