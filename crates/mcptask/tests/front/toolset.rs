//! A submit/status/cancel toolset behind the proxy: callers see the submit
//! tool only, and a caller that declares tasks gets a front task that the
//! tracker follows through the status tool (the fixture server of
//! `mcptask fixture-toolset`).

use std::time::Duration;

use mcptask_testkit::mcp::{Lifecycle, TestClient};
use mcptask_testkit::{GatewayProcess, TestDatabase, status, wait_terminal};
use rmcp::model::CallToolResponse;
use serde_json::json;

/// A proxy in front of the fixture server `jobs` (state in `dir`), with its
/// submit/status/cancel toolset declared when `toolset`.
fn proxy_toml(db: &TestDatabase, dir: &tempfile::TempDir, toolset: bool) -> String {
    let q = |s: &str| serde_json::to_string(s).expect("a TOML string");
    let mut toml = format!(
        "[database]\nurl = {db}\n\n[api]\nlisten = \"127.0.0.1:0\"\nauth = \"none\"\n\n\
         [proxy]\nenabled = true\n\n\
         [tracker]\npoll_default_ms = 200\npoll_min_ms = 100\nbackoff_base_ms = 100\nbackoff_max_ms = 1000\n\n\
         [[servers]]\nname = \"jobs\"\ncommand = {bin}\nargs = [\"fixture-toolset\", \"--state\", {state}]\n",
        db = q(&db.url),
        bin = q(mcptask_testkit::bin()),
        state = q(&dir.path().join("jobs.json").display().to_string()),
    );
    if toolset {
        toml.push_str(
            "\n[[servers.toolsets]]\nname = \"jobs\"\nsubmit_tool = \"submit_job\"\n\
             status_tool = \"job_status\"\ncancel_tool = \"cancel_job\"\n",
        );
    }
    toml
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_toolsets_submit_tool_is_a_front_task_followed_through_its_status_tool() {
    let db = TestDatabase::sqlite();
    let dir = tempfile::tempdir().expect("temp dir");
    let toml = proxy_toml(&db, &dir, true);
    let gateway = GatewayProcess::start_toml("proxy over a toolset", &toml, &[]).await;
    let client = gateway.front_client().await;
    let names = client.tools_once_listed("jobs__submit_job").await;
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

/// Counts `notifications/tools/list_changed` on a legacy (session-ful)
/// connection to the front.
#[derive(Clone)]
struct ListChanged(tokio::sync::mpsc::UnboundedSender<()>);

impl rmcp::ClientHandler for ListChanged {
    async fn on_tool_list_changed(
        &self,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        let _ = self.0.send(());
    }
}

/// An upstream that adds a tool at run time and says so: the front lists it
/// again at once (not at the next 5-minute refresh), tells its session-ful
/// callers, and the new tool can be called through it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_added_upstream_is_listed_and_announced_by_the_front() {
    use rmcp::service::{ClientLifecycleMode, ClientServiceExt as _};
    use rmcp::transport::StreamableHttpClientTransport;

    let db = TestDatabase::sqlite();
    let dir = tempfile::tempdir().expect("temp dir");
    let toml = proxy_toml(&db, &dir, false);
    let gateway = GatewayProcess::start_toml("proxy over a changing server", &toml, &[]).await;
    let url = format!("{}/mcp", gateway.base);
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (tx, mut heard) = tokio::sync::mpsc::unbounded_channel();
    let legacy = ListChanged(tx)
        .serve_with_lifecycle(
            StreamableHttpClientTransport::from_uri(url.clone()),
            ClientLifecycleMode::Initialize,
        )
        .await
        .expect("a legacy session with the front");
    let names = |tools: Vec<rmcp::model::Tool>| -> Vec<String> {
        tools.iter().map(|t| t.name.to_string()).collect()
    };
    let before = names(legacy.peer().list_all_tools().await.expect("tools/list"));
    assert!(before.contains(&"jobs__add_tool".to_string()), "{before:?}");
    assert!(!before.contains(&"jobs__late".to_string()), "{before:?}");

    // Through the front (a synchronous pass-through): the fixture adds the
    // tool and says so on the proxy's upstream session.
    let client = TestClient::http(&url, None, Lifecycle::Modern { tasks: false })
        .await
        .expect("connect to /mcp");
    let added = client
        .call("jobs__add_tool", json!({"name": "late"}))
        .await
        .expect("tools/call");
    assert!(matches!(added, CallToolResponse::Complete(_)), "{added:?}");

    tokio::time::timeout(Duration::from_secs(30), heard.recv())
        .await
        .expect("the front announces the change within 30 s (its timer is 5 minutes)")
        .expect("a list_changed notification");
    let after = names(legacy.peer().list_all_tools().await.expect("tools/list"));
    assert!(after.contains(&"jobs__late".to_string()), "{after:?}");
    let echoed = match client
        .call("jobs__late", json!({"text": "still here"}))
        .await
        .expect("the new tool answers")
    {
        CallToolResponse::Complete(r) => r,
        other => panic!("expected a result, got {other:?}"),
    };
    let text = echoed.content[0].as_text().map(|t| t.text.clone());
    assert_eq!(text.as_deref(), Some("still here"), "{echoed:?}");
}
