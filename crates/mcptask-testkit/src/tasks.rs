//! Task helpers on the wire form of `tasks/get`: poll until a state is
//! reached, and read status, result and input requests.

use std::time::Duration;

use crate::mcp::{TestClient, wire};
use serde_json::Value;

/// Poll `tasks/get` until `done(wire)` holds; panics with the last state after
/// `timeout`. `seen` is called on every snapshot (to assert invariants while
/// polling).
pub async fn poll_task(
    client: &TestClient,
    task_id: &str,
    timeout: Duration,
    mut seen: impl FnMut(&Value),
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let got = client
            .get(task_id)
            .await
            .unwrap_or_else(|e| panic!("tasks/get {task_id} while polling: {e}"));
        let w = wire(&got);
        seen(&w);
        if done(&w) {
            return w;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!(
                "task {task_id} did not reach the expected state within {timeout:?}; last: {w:#}"
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn status(w: &Value) -> &str {
    w["status"].as_str().unwrap_or("<no status>")
}

pub fn is_terminal(w: &Value) -> bool {
    matches!(status(w), "completed" | "failed" | "cancelled")
}

/// Poll until the task is terminal.
pub async fn wait_terminal(client: &TestClient, task_id: &str, timeout: Duration) -> Value {
    poll_task(client, task_id, timeout, |_| {}, is_terminal).await
}

/// Poll until the task has `status`.
pub async fn wait_status(
    client: &TestClient,
    task_id: &str,
    wanted: &str,
    timeout: Duration,
) -> Value {
    poll_task(client, task_id, timeout, |_| {}, |w| status(w) == wanted).await
}

/// The text of the first content block of a completed task's result.
pub fn result_text(w: &Value) -> String {
    w["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text result in {w:#}"))
        .to_string()
}

/// The keys of the task's outstanding `inputRequests`.
pub fn input_keys(w: &Value) -> Vec<String> {
    w["inputRequests"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}
