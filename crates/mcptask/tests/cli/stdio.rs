//! End to end over stdio: `mcptask demo-server --stdio` as a child process
//! speaking MCP on stdin/stdout, tasks stored in a real SQLite file.

use std::time::Duration;

use mcptask_testkit::mcp::{Lifecycle, TestClient};
use mcptask_testkit::{
    TestDatabase, bin, input_keys, result_text, status, wait_status, wait_terminal, with_deadline,
};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_server_over_stdio() {
    let db = TestDatabase::sqlite();
    with_deadline(Duration::from_secs(240), async {
        let mut command = tokio::process::Command::new(bin());
        command
            .args(["demo-server", "--stdio", "--database-url", &db.url])
            // Logs go to stderr (inherited); stdout carries only MCP messages.
            .env("MCPTASK_LOG", "warn")
            .env_remove("MCPTASK_DATABASE_URL")
            .kill_on_drop(true);
        let client = TestClient::stdio(command, Lifecycle::Modern { tasks: true })
            .await
            .expect("connect to demo-server --stdio");

        // A task that simply runs to completion.
        let slow = client
            .start_task("slow_compute", json!({"seconds": 0.2}))
            .await;
        let slow = wait_terminal(&client, &slow, WAIT).await;
        assert_eq!(status(&slow), "completed", "{slow:#}");
        assert_eq!(result_text(&slow), "compute: computed in 0.2s");

        // input_required, answered with tasks/update.
        let confirm = client
            .start_task("confirm_delete", json!({"filename": "notes.txt"}))
            .await;
        let asked = wait_status(&client, &confirm, "input_required", WAIT).await;
        assert_eq!(input_keys(&asked), ["confirm_delete"], "{asked:#}");
        assert_eq!(
            asked["inputRequests"]["confirm_delete"]["method"], "elicitation/create",
            "{asked:#}"
        );
        client
            .update(
                &confirm,
                json!({"confirm_delete": {"action": "accept", "content": {"confirm": true}}}),
            )
            .await
            .expect("tasks/update");
        let confirm = wait_terminal(&client, &confirm, WAIT).await;
        assert_eq!(status(&confirm), "completed", "{confirm:#}");
        assert_eq!(result_text(&confirm), "Deleted notes.txt");

        // A JSON-RPC error during execution: failed, with the error inlined.
        let broken = client.start_task("protocol_error_job", json!({})).await;
        let broken = wait_terminal(&client, &broken, WAIT).await;
        assert_eq!(status(&broken), "failed", "{broken:#}");
        assert_eq!(broken["error"]["code"], -32603, "{broken:#}");
        assert!(broken.get("result").is_none(), "{broken:#}");

        // A tool error (isError) is a completed task, not a failed one.
        let tool_error = client.start_task("failing_job", json!({})).await;
        let tool_error = wait_terminal(&client, &tool_error, WAIT).await;
        assert_eq!(status(&tool_error), "completed", "{tool_error:#}");
        assert_eq!(tool_error["result"]["isError"], true, "{tool_error:#}");
        assert!(tool_error.get("error").is_none(), "{tool_error:#}");

        client.close().await;
    })
    .await;
}
