//! A submit/status/cancel toolset behind the proxy: callers see the submit
//! tool only, and a caller that declares tasks gets a front task that the
//! tracker follows through the status tool (the fixture server of
//! `mcptask fixture-triplet`).

mod support;

use std::time::Duration;

use mcptask_server::testkit::{Lifecycle, TestClient};
use rmcp::model::CallToolResponse;
use serde_json::json;
use support::{Database, Gateway, status, wait_terminal};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_toolsets_submit_tool_is_a_front_task_followed_through_its_status_tool() {
    let db = Database::sqlite();
    let dir = tempfile::tempdir().expect("temp dir");
    let state = dir.path().join("jobs.json");
    let q = |s: &str| serde_json::to_string(s).expect("a TOML string");
    let toml = format!(
        "[database]\nurl = {db}\n\n[api]\nlisten = \"127.0.0.1:0\"\nauth = \"none\"\n\n\
         [proxy]\nenabled = true\n\n\
         [tracker]\npoll_default_ms = 200\npoll_min_ms = 100\nbackoff_base_ms = 100\nbackoff_max_ms = 1000\n\n\
         [[servers]]\nname = \"jobs\"\ncommand = {bin}\nargs = [\"fixture-triplet\", \"--state\", {state}]\n\n\
         [[servers.toolsets]]\nname = \"jobs\"\nsubmit_tool = \"submit_job\"\n\
         status_tool = \"job_status\"\ncancel_tool = \"cancel_job\"\n",
        db = q(&db.url),
        bin = q(env!("CARGO_BIN_EXE_mcptask")),
        state = q(&state.display().to_string()),
    );
    let gateway = Gateway::start_toml("proxy over a toolset", &toml, &[]).await;
    let client = TestClient::http(
        &format!("{}/mcp", gateway.base),
        None,
        Lifecycle::Modern { tasks: true },
    )
    .await
    .expect("connect to /mcp");
    let names: Vec<String> = client
        .peer()
        .list_all_tools()
        .await
        .expect("tools/list")
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    assert!(names.contains(&"jobs__submit_job".to_string()), "{names:?}");
    assert!(names.contains(&"jobs__echo".to_string()), "{names:?}");
    for hidden in ["jobs__job_status", "jobs__cancel_job"] {
        assert!(
            !names.contains(&hidden.to_string()),
            "{hidden} is the tracker's: {names:?}"
        );
    }
    let id = match client
        .call(
            "jobs__submit_job",
            json!({"polls": 2, "result": {"rows": 42}}),
        )
        .await
        .expect("tools/call")
    {
        CallToolResponse::Task(t) => t.task.task_id,
        other => panic!("expected a front task, got {other:?}"),
    };
    let done = wait_terminal(&client, &id, Duration::from_secs(30)).await;
    assert_eq!(status(&done), "completed", "{done:#}");
    assert!(done["result"].to_string().contains("42"), "{done:#}");
    client.close().await;
}
