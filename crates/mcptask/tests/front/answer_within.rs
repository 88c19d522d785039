//! A call the front runs as a task for a caller that declares tasks (here a
//! synchronous upstream's tools) is answered directly when it ends within
//! the server's `answer_within_ms`, and handed out as a task when it does
//! not, or when the tool's own setting is 0. Either way the call is one
//! kept record under one id, readable through REST. Real `mcptask serve`
//! before a real synchronous upstream, on both stores. The deadlines are
//! generous (10 s) where a call must make it, so a loaded machine does not
//! turn a direct answer into a task; the default (1 s) is the config
//! tests'.

use std::time::Duration;

use mcptask_testkit::mcp::{TestClient, wire};
use mcptask_testkit::*;
use rmcp::model::CallToolResponse;
use serde_json::json;

/// A front (proxy on, no auth) before two servers of one synchronous
/// upstream: `sync`, answered within 10 s but `stall` within 300 ms and
/// `held` always a task (its calls end at 3 s); `short`, whose calls fail
/// after 300 ms (its call timeout), answered within 10 s.
async fn front(db: &TestDatabase, upstream: &str) -> GatewayProcess {
    let mut spec = GatewaySpec::open(&db.url, &[]);
    spec.servers.clear();
    let toml = format!(
        "{}\n[[servers]]\nname = \"sync\"\nurl = {upstream:?}\n\
         call_timeout_ms = 3000\nanswer_within_ms = 10000\n\
         [servers.tool_answer_within_ms]\nheld = 0\nstall = 300\n\n\
         [[servers]]\nname = \"short\"\nurl = {upstream:?}\ncall_timeout_ms = 300\n\
         answer_within_ms = 10000\n\n\
         [proxy]\nenabled = true\n",
        spec.toml(),
    );
    GatewayProcess::start_toml("front", &toml, &[]).await
}

fn text(response: &CallToolResponse) -> String {
    let CallToolResponse::Complete(result) = response else {
        panic!("expected a direct answer, got {response:?}");
    };
    result.content[0]
        .as_text()
        .map(|t| t.text.clone())
        .unwrap_or_else(|| panic!("expected text, got {result:?}"))
}

/// The one kept call of `tool` as REST lists it.
async fn recorded(api: &Api, tool: &str) -> serde_json::Value {
    let calls = api.list_all(&format!("tool={tool}")).await;
    assert_eq!(calls.len(), 1, "one record of {tool}: {calls:#?}");
    calls[0].clone()
}

async fn answered_within_or_handed_out(db: TestDatabase) {
    let upstream = SyncUpstream::start().await;
    let gateway = front(&db, &upstream.url).await;
    let api = gateway.client(None);
    let client: TestClient = gateway.front_client().await;
    client.tools_once_listed("sync__echo").await;

    // Ends at once: the result itself, no task to follow.
    let quick = client
        .call("sync__echo", json!({"text": "at once"}))
        .await
        .expect("a quick call");
    assert_eq!(text(&quick), "at once");
    // Still one kept call, settled, under the front's face.
    let call = recorded(&api, "echo").await;
    let call = api
        .wait_status(call["id"].as_str().expect("an id"), "completed")
        .await;
    assert_eq!(call["server"], "sync", "{call:#}");

    // Outlives its tool's deadline (300 ms): a task, which ends at the
    // server's call timeout.
    let slow = client
        .call("sync__stall", json!({}))
        .await
        .expect("a slow call");
    let CallToolResponse::Task(created) = slow else {
        panic!("a call that outlives its deadline is a task, got {slow:?}");
    };
    let done = wire(&client.wait_terminal(&created.task.task_id, WAIT).await);
    assert_eq!(done["status"], "failed", "{done:#}");

    // The tool's own 0: a task at once, though the server's deadline is
    // 10 s and the call is still held at the upstream.
    let held = client.call("sync__held", json!({})).await.expect("held");
    let CallToolResponse::Task(created) = held else {
        panic!("a tool with answer_within 0 is a task, got {held:?}");
    };
    upstream.wait_heard("held", 1).await;
    upstream.release(1);
    let done = wire(&client.wait_terminal(&created.task.task_id, WAIT).await);
    assert_eq!(done["status"], "completed", "{done:#}");

    // Fails within the deadline: the error itself, as a direct caller
    // hears it; the call is recorded failed.
    let failed = client.call("short__stall", json!({})).await;
    let error = failed.expect_err("a call that fails at once is an error");
    assert!(
        error.to_string().contains("within") || error.to_string().contains("timed out"),
        "the upstream's timeout, said: {error}"
    );
    let calls = api.list_all("tool=stall").await;
    let call = calls
        .iter()
        .find(|c| c["server"] == "short")
        .unwrap_or_else(|| panic!("the short call is recorded: {calls:#?}"));
    let call = api
        .wait_status(call["id"].as_str().expect("an id"), "failed")
        .await;
    assert_eq!(call["tool"], "stall", "{call:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quick_call_is_answered_directly_and_a_slow_one_is_a_task_sqlite() {
    with_deadline(Duration::from_secs(120), async {
        answered_within_or_handed_out(TestDatabase::sqlite()).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quick_call_is_answered_directly_and_a_slow_one_is_a_task_postgres() {
    with_deadline(Duration::from_secs(120), async {
        let Some(db) = TestDatabase::postgres().await else {
            eprintln!("answer_within postgres: SKIPPED (no PostgreSQL)");
            return;
        };
        answered_within_or_handed_out(db).await;
    })
    .await;
}
