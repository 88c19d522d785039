//! One call path through every face: the TypeScript everything server's
//! 2025-11-25 task tool and its long-running synchronous tool, called
//! through the REST API, the CLI and the MCP front of one `mcptask serve`.
//! Each call is one kept task with one id and one row, with its face and
//! driver, whatever face made it; a background call's progress shows, and
//! a gateway SIGKILLed mid-call settles it as the server's `interrupt` says.

use std::collections::BTreeSet;
use std::time::Duration;

use mcptask_testkit::mcp::{Lifecycle, TestClient};
use mcptask_testkit::*;
use rmcp::model::CallToolResponse;
use serde_json::{Value, json};

/// A gateway with the everything server twice: `ev` (`interrupt = "fail"`)
/// and `evr` (`interrupt = "rerun"`), both running their long tool in the
/// background; a webhook; the front on; a short owner lease.
fn config(db: &str, ev: &Everything, webhook: &str) -> String {
    let q = |s: &str| serde_json::to_string(s).expect("a TOML string");
    let mut text = format!(
        "[database]\nurl = {}\n\n[api]\nlisten = \"127.0.0.1:0\"\n[[api.tokens]]\ntoken = {}\n\n\
         [proxy]\nenabled = true\nowner_lease_ms = 1500\n\n\
         [tracker]\npoll_default_ms = 200\npoll_min_ms = 100\npoll_max_ms = 500\ninput_required_poll_ms = 200\n\n\
         [[webhooks]]\nurl = {}\nsecret = \"s3cret\"\ntimeout_ms = 5000\n",
        q(db),
        q(OPERATOR),
        q(webhook)
    );
    for (name, interrupt) in [("ev", "fail"), ("evr", "rerun")] {
        text.push_str(&ev.server_toml(
            name,
            &format!(
                "interrupt = {}\nbackground = [\"trigger-long-running-operation\"]\n\
                 connect_timeout_ms = 20000\ncall_timeout_ms = 60000\n",
                q(interrupt)
            ),
        ));
    }
    text
}

/// The first (only) outstanding input key of a task in the API.
fn only_key(task: &Value) -> String {
    let keys: Vec<&String> = task["inputRequests"]
        .as_object()
        .map(|m| m.keys().collect())
        .unwrap_or_default();
    assert_eq!(keys.len(), 1, "one question: {task:#}");
    keys[0].clone()
}

fn text(task: &Value) -> String {
    task["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Wait until every event of call `id` reached the webhook (its row says
/// the outbox is delivered and the receiver has each `(id, version)` key).
async fn delivered(api: &Api, hook: &WebhookReceiver, id: &str) {
    let row = api
        .wait_task(id, "delivered", |t| {
            t["notifications"]["deliveredVersion"] == t["notifications"]["eventVersion"]
        })
        .await;
    let version = row["notifications"]["eventVersion"].as_i64().unwrap();
    assert!(version >= 2, "created and settled at least: {row:#}");
    let keys: Vec<String> = (1..=version).map(|v| format!("{id}:{v}")).collect();
    let deadline = tokio::time::Instant::now() + WAIT;
    while !hook.missing(&keys).is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the webhook misses {:?}",
            hook.missing(&keys)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn task_id(response: CallToolResponse) -> String {
    match response {
        CallToolResponse::Task(t) => t.task.task_id,
        other => panic!("expected a task, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2025_11_25_task_is_one_call_answered_through_the_api_the_cli_and_the_front() {
    let test = "a_2025_11_25_task_is_one_call_answered_through_the_api_the_cli_and_the_front";
    let Some(ev) = Everything::or_skip(test) else {
        return;
    };
    let db = TestDatabase::sqlite();
    let hook = WebhookReceiver::start("s3cret").await;
    let gateway =
        GatewayProcess::start_toml("gateway", &config(&db.url, &ev, &hook.url), &[]).await;
    let api = gateway.client(Some(OPERATOR));
    with_deadline(Duration::from_secs(240), async {
        // REST: a durable call, its question answered through the API.
        let rest = api
            .start_task_with(json!({"server": "ev", "tool": "simulate-research-query",
                "arguments": {"topic": "rust", "ambiguous": true}}))
            .await;
        assert_eq!((&rest["driver"], &rest["face"]), (&json!("sep1686"), &json!("api")));
        let rest_id = rest["id"].as_str().unwrap().to_string();
        let asking = api.wait_status(&rest_id, "input_required").await;
        let key = only_key(&asking);
        api.post(
            &format!("/api/v1/tasks/{rest_id}/answers"),
            &json!({"answers": {key: {"action": "accept", "content": {"interpretation": "technical"}}}}),
        )
        .await
        .assert_status(200);
        let done = api.wait_status(&rest_id, "completed").await;
        assert!(text(&done).contains("technical"), "{done:#}");

        // The CLI: the same, answered with `mcptask tasks answer`.
        let called = run_cli(
            &gateway.base,
            OPERATOR,
            &["call", "ev", "simulate-research-query", "--args", r#"{"topic": "go", "ambiguous": true}"#],
        )
        .await;
        assert!(called.status.success(), "{called:?}");
        let cli_id = String::from_utf8_lossy(&called.stdout).trim().to_string();
        assert!(cli_id.starts_with("rt_"), "{cli_id:?}");
        let asking = api.wait_status(&cli_id, "input_required").await;
        assert_eq!((&asking["driver"], &asking["face"]), (&json!("sep1686"), &json!("cli")));
        let key = only_key(&asking);
        let answered = run_cli(
            &gateway.base,
            OPERATOR,
            &["tasks", "answer", &cli_id, &key, r#"{"interpretation": "historical"}"#],
        )
        .await;
        assert!(answered.status.success(), "{answered:?}");
        let done = api.wait_status(&cli_id, "completed").await;
        assert!(text(&done).contains("historical"), "{done:#}");

        // The MCP front: a task of a caller that declares tasks, its question
        // answered with tasks/update there.
        let mcp = TestClient::http(
            &format!("{}/mcp", gateway.base),
            Some(OPERATOR),
            Lifecycle::Modern { tasks: true },
        )
        .await
        .expect("connect to the front");
        let front_id = task_id(
            mcp.call("ev__simulate-research-query", json!({"topic": "c", "ambiguous": true}))
                .await
                .expect("tools/call"),
        );
        let asking = wait_status(&mcp, &front_id, "input_required", WAIT).await;
        let key = input_keys(&asking).pop().expect("a question");
        mcp.update(
            &front_id,
            json!({key: {"action": "accept", "content": {"interpretation": "current"}}}),
        )
        .await
        .expect("tasks/update");
        let done = wait_terminal(&mcp, &front_id, WAIT).await;
        assert_eq!(status(&done), "completed", "{done:#}");
        assert!(result_text(&done).contains("current"), "{done:#}");

        // One row per call, under the id each face handed out.
        let rows: Vec<Value> = api
            .list_all("server=ev")
            .await
            .into_iter()
            .filter(|t| t["tool"] == "simulate-research-query")
            .collect();
        let ids: BTreeSet<&str> = rows.iter().map(|t| t["id"].as_str().unwrap()).collect();
        assert_eq!(
            ids,
            BTreeSet::from([rest_id.as_str(), cli_id.as_str(), front_id.as_str()]),
            "{rows:#?}"
        );
        // The front hands its caller the upstream's outcome as it relays it;
        // the row records it a moment later.
        let front_row = api.wait_status(&front_id, "completed").await;
        assert_eq!(
            (&front_row["face"], &front_row["driver"], &front_row["status"]),
            (&json!("mcp"), &json!("sep1686"), &json!("completed")),
            "{front_row:#}"
        );
        assert!(
            front_row["remoteTaskId"].is_string(),
            "an operator sees the upstream's task id: {front_row:#}"
        );

        // Every call's events reached the webhook, each with its own id.
        for id in [&rest_id, &cli_id, &front_id] {
            delivered(&api, &hook, id).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_tool_is_a_kept_call_with_progress_and_sync_when_asked() {
    let test = "a_background_tool_is_a_kept_call_with_progress_and_sync_when_asked";
    let Some(ev) = Everything::or_skip(test) else {
        return;
    };
    let db = TestDatabase::sqlite();
    let hook = WebhookReceiver::start("s3cret").await;
    let gateway =
        GatewayProcess::start_toml("gateway", &config(&db.url, &ev, &hook.url), &[]).await;
    let api = gateway.client(Some(OPERATOR));
    with_deadline(Duration::from_secs(240), async {
        // Listed in `background`: a kept call whose progress is its status.
        let call = api
            .start_task_with(
                json!({"server": "ev", "tool": "trigger-long-running-operation",
                "arguments": {"duration": 4, "steps": 4}}),
            )
            .await;
        assert_eq!(
            (&call["driver"], &call["face"]),
            (&json!("sync"), &json!("api"))
        );
        let id = call["id"].as_str().unwrap().to_string();
        let progressing = api
            .wait_task(&id, "showing progress", |t| {
                t["statusMessage"]
                    .as_str()
                    .is_some_and(|m| m.contains("/4"))
            })
            .await;
        assert_eq!(progressing["status"], "working", "{progressing:#}");
        let done = api.wait_status(&id, "completed").await;
        assert!(
            text(&done).contains("Long running operation completed"),
            "{done:#}"
        );

        // The old synchronous answer, for a caller that asks for it.
        let sync = api
            .post(
                "/api/v1/calls",
                &json!({"server": "ev", "tool": "trigger-long-running-operation",
                    "arguments": {"duration": 1, "steps": 1}, "background": false}),
            )
            .await;
        assert_eq!(sync.status, 200, "{sync:#?}");
        assert_eq!(sync.json["outcome"], "completed");

        // The CLI, asking for the background explicitly of a tool not listed.
        let called = run_cli(
            &gateway.base,
            OPERATOR,
            &[
                "call",
                "ev",
                "echo",
                "--args",
                r#"{"message": "hi"}"#,
                "--background",
                "--wait",
            ],
        )
        .await;
        assert!(called.status.success(), "{called:?}");
        let cli_rows: Vec<Value> = api
            .list_all("server=ev")
            .await
            .into_iter()
            .filter(|t| t["tool"] == "echo")
            .collect();
        assert_eq!(cli_rows.len(), 1, "{cli_rows:#?}");
        assert_eq!(
            (
                &cli_rows[0]["driver"],
                &cli_rows[0]["face"],
                &cli_rows[0]["status"]
            ),
            (&json!("sync"), &json!("cli"), &json!("completed"))
        );

        // The front: the same tool, one row with face mcp.
        let mcp = TestClient::http(
            &format!("{}/mcp", gateway.base),
            Some(OPERATOR),
            Lifecycle::Modern { tasks: true },
        )
        .await
        .expect("connect to the front");
        let front_id = task_id(
            mcp.call(
                "ev__trigger-long-running-operation",
                json!({"duration": 1, "steps": 1}),
            )
            .await
            .expect("tools/call"),
        );
        let done = wait_terminal(&mcp, &front_id, WAIT).await;
        assert_eq!(status(&done), "completed", "{done:#}");
        let row = api.wait_status(&front_id, "completed").await;
        assert_eq!(
            (&row["face"], &row["driver"]),
            (&json!("mcp"), &json!("sync"))
        );

        // The kept calls' events reached the webhook like a tracked task's.
        for id in [&id, &front_id] {
            delivered(&api, &hook, id).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_call_survives_a_gateway_sigkill_as_its_interrupt_says() {
    let test = "a_background_call_survives_a_gateway_sigkill_as_its_interrupt_says";
    let Some(ev) = Everything::or_skip(test) else {
        return;
    };
    let db = TestDatabase::sqlite();
    let hook = WebhookReceiver::start("s3cret").await;
    let toml = config(&db.url, &ev, &hook.url);
    let mut gateway = GatewayProcess::start_toml("gateway", &toml, &[]).await;
    let api = gateway.client(Some(OPERATOR));
    with_deadline(Duration::from_secs(300), async {
        let start = |server: &'static str, seconds: u64| {
            let api = api.clone();
            async move {
                api.start_task_with(
                    json!({"server": server, "tool": "trigger-long-running-operation",
                    "arguments": {"duration": seconds, "steps": seconds}}),
                )
                .await["id"]
                    .as_str()
                    .unwrap()
                    .to_string()
            }
        };
        let failing = start("ev", 120).await;
        let rerun = start("evr", 5).await;
        for id in [&failing, &rerun] {
            api.wait_task(id, "showing progress", |t| t["statusMessage"].is_string())
                .await;
        }
        gateway.kill().await;

        // Another gateway on the same database: after the dead one's lease,
        // `fail` settles its call failed and `rerun` makes it again.
        let gateway = GatewayProcess::start_toml("gateway again", &toml, &[]).await;
        let api = gateway.client(Some(OPERATOR));
        let failed = api
            .wait_task(&failing, "settled", |t| t["status"] != "working")
            .await;
        assert_eq!(failed["status"], "failed", "{failed:#}");
        let why = failed["statusMessage"].as_str().unwrap_or_default();
        assert!(why.starts_with("Interrupted"), "{failed:#}");
        let again = api.wait_status(&rerun, "completed").await;
        assert!(
            text(&again).contains("Long running operation completed"),
            "{again:#}"
        );
        // Each call is still one row.
        let rows = api.list_all("server=").await;
        assert_eq!(rows.len(), 0, "no server is named the empty string");
        let ids: BTreeSet<String> = api
            .list_all("")
            .await
            .iter()
            .map(|t| t["id"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(ids, BTreeSet::from([failing.clone(), rerun.clone()]));
    })
    .await;
}
