//! Callers that do not declare tasks, behind the proxy: a tool listed in
//! `background` answers at once with a front task id, and the agent tools
//! (`mcptask_list_tasks`, `_get_task`, `_answer_task`, `_cancel_task`)
//! follow, answer and cancel it, scoped to the caller's principal.

use std::time::Duration;

use mcptask_testkit::mcp::{Lifecycle, TestClient};
use mcptask_testkit::{
    ALICE, BOB, DemoServer, GatewayProcess, GatewaySpec, OPERATOR, TestDatabase, with_deadline,
};
use rmcp::model::{CallToolResponse, CallToolResult};
use serde_json::{Value, json};

const AGENT_TOOLS: [&str; 4] = [
    "mcptask_list_tasks",
    "mcptask_get_task",
    "mcptask_answer_task",
    "mcptask_cancel_task",
];

async fn call(client: &TestClient, tool: &str, arguments: Value) -> CallToolResult {
    match client.call(tool, arguments).await {
        Ok(CallToolResponse::Complete(result)) => result,
        other => panic!("{tool}: expected a complete result, got {other:?}"),
    }
}

fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

async fn tool_names(client: &TestClient) -> Vec<String> {
    // Once the demo server is listed (the front lists it in the background).
    client.tools_once_listed("demo__confirm_delete").await
}

/// Start `tool` in the background; returns the front task id.
async fn start(client: &TestClient, tool: &str, arguments: Value) -> String {
    let started = call(client, tool, arguments).await;
    assert_ne!(started.is_error, Some(true), "{}", text(&started));
    let said = text(&started);
    let structured = started
        .structured_content
        .clone()
        .expect("structuredContent");
    assert_eq!(structured["status"], "working");
    let id = structured["taskId"].as_str().expect("taskId").to_string();
    assert!(
        said.starts_with(&format!("Started background task {id} ({tool}).")),
        "{said}"
    );
    assert!(
        said.contains(&format!("mcptask_get_task {{\"taskId\":\"{id}\"}}")),
        "{said}"
    );
    id
}

/// Poll `mcptask_get_task` until `done` holds for its structured content.
async fn poll(client: &TestClient, id: &str, done: impl Fn(&Value) -> bool) -> CallToolResult {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let got = call(client, "mcptask_get_task", json!({"taskId": id})).await;
        assert_ne!(got.is_error, Some(true), "{}", text(&got));
        if done(got.structured_content.as_ref().expect("structuredContent")) {
            return got;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "task {id} never got there: {}",
            text(&got)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn start_stack(db: &TestDatabase, front_db: &TestDatabase) -> (DemoServer, GatewayProcess) {
    let server = DemoServer::start(&db.url, &[]).await;
    let spec = GatewaySpec::with_tokens(&front_db.url, &[("demo", &server.url)]);
    let toml = spec.toml().replace(
        "name = \"demo\"\n",
        "name = \"demo\"\nbackground = [\"confirm_delete\", \"slow_compute\"]\n",
    ) + "\n[proxy]\nenabled = true\n";
    let gateway = GatewayProcess::start_toml("proxy with background tools", &toml, &[]).await;
    (server, gateway)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_declaring_client_runs_background_tasks_with_the_agent_tools() {
    let (db, front_db) = (TestDatabase::sqlite(), TestDatabase::sqlite());
    with_deadline(Duration::from_secs(180), async {
        let (_server, gateway) = start_stack(&db, &front_db).await;
        let url = format!("{}/mcp", gateway.base);
        let alice = TestClient::http(&url, Some(ALICE), Lifecycle::Modern { tasks: false })
            .await
            .expect("alice connects");

        let names = tool_names(&alice).await;
        for tool in AGENT_TOOLS {
            assert!(names.iter().any(|n| n == tool), "{tool} missing in {names:?}");
        }
        assert!(names.iter().any(|n| n == "demo__confirm_delete"));

        // A question, answered through the agent tools.
        let id = start(&alice, "demo__confirm_delete", json!({"filename": "a.txt"})).await;
        let asked = poll(&alice, &id, |s| s["status"] == "input_required").await;
        let said = text(&asked);
        assert!(said.contains("confirm_delete"), "{said}");
        assert!(said.contains("Delete a.txt?"), "{said}");
        let listed = call(&alice, "mcptask_list_tasks", json!({})).await;
        let rows = listed.structured_content.clone().unwrap()["tasks"].clone();
        let row = rows
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["taskId"] == id.as_str())
            .unwrap_or_else(|| panic!("{id} not listed: {rows:#}"));
        assert_eq!(row["tool"], "demo__confirm_delete");
        assert_eq!(row["questions"], json!(["confirm_delete"]));

        // Bob sees nothing of it.
        let bob = TestClient::http(&url, Some(BOB), Lifecycle::Modern { tasks: false })
            .await
            .expect("bob connects");
        let foreign = call(&bob, "mcptask_get_task", json!({"taskId": id})).await;
        assert_eq!(foreign.is_error, Some(true));
        assert!(text(&foreign).contains("Unknown task"), "{}", text(&foreign));
        let foreign = call(
            &bob,
            "mcptask_cancel_task",
            json!({"taskId": id}),
        )
        .await;
        assert_eq!(foreign.is_error, Some(true));
        let bobs = call(&bob, "mcptask_list_tasks", json!({"status": "all"})).await;
        assert_eq!(bobs.structured_content.unwrap()["tasks"], json!([]));

        let answered = call(
            &alice,
            "mcptask_answer_task",
            json!({"taskId": id, "answers": {"confirm_delete": {"action": "accept", "content": {"confirm": true}}}}),
        )
        .await;
        assert_ne!(answered.is_error, Some(true), "{}", text(&answered));
        assert!(text(&answered).contains("confirm_delete"));
        let done = poll(&alice, &id, |s| s["status"] == "completed").await;
        assert!(text(&done).contains("Deleted a.txt"), "{}", text(&done));

        // Another, cancelled.
        let slow = start(&alice, "demo__slow_compute", json!({"seconds": 60})).await;
        let cancelled = call(&alice, "mcptask_cancel_task", json!({"taskId": slow})).await;
        assert_ne!(cancelled.is_error, Some(true), "{}", text(&cancelled));
        assert!(text(&cancelled).starts_with("Cancellation requested"));
        poll(&alice, &slow, |s| s["status"] == "cancelled").await;

        let unknown = call(&alice, "mcptask_get_task", json!({"taskId": "no-such-task"})).await;
        assert_eq!(unknown.is_error, Some(true));

        // The API lists the same calls, one row each under the id the
        // agent tools gave, scoped the same way, with face and driver.
        let alice_api = gateway.client(Some(ALICE));
        let listed = alice_api.list_all("").await;
        let row = |rows: &[Value], id: &str| rows.iter().find(|t| t["id"] == id).cloned();
        let asked = row(&listed, &id).unwrap_or_else(|| panic!("{id} not listed: {listed:#?}"));
        assert_eq!(
            (&asked["tool"], &asked["driver"], &asked["face"], &asked["status"]),
            (&json!("confirm_delete"), &json!("sep2663"), &json!("mcp"), &json!("completed")),
            "{asked:#}"
        );
        assert!(asked.get("remoteTaskId").is_none(), "operators only: {asked:#}");
        assert_eq!(listed.iter().filter(|t| t["id"] == id).count(), 1, "one row per call");
        assert_eq!(alice_api.task(&slow).await["status"], "cancelled");
        let bob_api = gateway.client(Some(BOB));
        assert!(row(&bob_api.list_all("").await, &id).is_none(), "bob sees none of alice's calls");
        bob_api
            .get(&format!("/api/v1/tasks/{id}"))
            .await
            .assert_error(404, "not_found");
        bob_api
            .post(&format!("/api/v1/tasks/{id}/cancel"), &json!({}))
            .await
            .assert_error(404, "not_found");
        bob_api
            .get("/api/v1/tasks?principal=alice")
            .await
            .assert_error(403, "forbidden");
        let op = gateway.client(Some(OPERATOR));
        let for_alice = op.list_all("principal=alice").await;
        assert!(row(&for_alice, &id).is_some() && row(&for_alice, &slow).is_some());
        let seen_by_operator = op.task(&id).await;
        assert!(seen_by_operator["remoteTaskId"].is_string(), "{seen_by_operator:#}");

        // A client that declares tasks does not see the agent tools.
        let declaring = TestClient::http(&url, Some(ALICE), Lifecycle::Modern { tasks: true })
            .await
            .expect("declaring client connects");
        let names = tool_names(&declaring).await;
        for tool in AGENT_TOOLS {
            assert!(!names.iter().any(|n| n == tool), "{tool} listed in {names:?}");
        }
        assert!(names.iter().any(|n| n == "demo__confirm_delete"));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_tools_work_for_a_legacy_client() {
    let (db, front_db) = (TestDatabase::sqlite(), TestDatabase::sqlite());
    with_deadline(Duration::from_secs(180), async {
        let (_server, gateway) = start_stack(&db, &front_db).await;
        let url = format!("{}/mcp", gateway.base);
        let client = TestClient::http(&url, Some(ALICE), Lifecycle::Legacy)
            .await
            .expect("legacy client connects");
        let names = tool_names(&client).await;
        for tool in AGENT_TOOLS {
            assert!(
                names.iter().any(|n| n == tool),
                "{tool} missing in {names:?}"
            );
        }
        let id = start(&client, "demo__slow_compute", json!({"seconds": 1})).await;
        let done = poll(&client, &id, |s| s["status"] == "completed").await;
        assert!(text(&done).contains("computed in"), "{}", text(&done));
        let all = call(&client, "mcptask_list_tasks", json!({"status": "all"})).await;
        let rows = all.structured_content.unwrap()["tasks"].clone();
        assert_eq!(rows[0]["taskId"], id.as_str(), "{rows:#}");
        assert_eq!(rows[0]["status"], "completed");
    })
    .await;
}
