//! A tool error is its own outcome wherever calls are listed: a call whose
//! tool answered `isError: true` keeps the wire status `completed`, and is
//! listed and filtered as `tool_error`, apart from the calls that
//! completed, in the REST API (`outcome`, `?outcome=`) and the CLI
//! (`tasks list --outcome`, the STATUS column).

use std::process::Command;

use serde_json::{Value, json};

use mcptask_testkit::*;

/// `mcptask ARGS` as an operator of `gateway`.
async fn mcptask(gateway: &str, args: &[&str]) -> std::process::Output {
    let (gateway, args): (String, Vec<String>) =
        (gateway.into(), args.iter().map(|a| a.to_string()).collect());
    tokio::task::spawn_blocking(move || {
        Command::new(bin())
            .args(&args)
            .env("MCPTASK_GATEWAY", gateway)
            .env("MCPTASK_API_TOKEN", OPERATOR)
            .env("MCPTASK_LOG", "warn")
            .output()
            .expect("run mcptask")
    })
    .await
    .expect("mcptask thread")
}

/// The ids of the tasks of `GET /api/v1/tasks?QUERY`.
async fn listed(api: &Api, query: &str) -> Vec<String> {
    ids(&api.list_all(query).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_error_is_listed_and_filtered_as_its_own_outcome_in_the_api_and_the_cli() {
    let dir = tempfile::tempdir().expect("temp dir");
    let demo_db = format!("sqlite:{}", dir.path().join("server.db").display());
    let demo = DemoServer::start_named("outcomes-demo", &demo_db, &[]).await;
    let db = format!("sqlite:{}", dir.path().join("gateway.db").display());
    let spec = GatewaySpec::with_tokens(&db, &[("demo", &demo.url)]);
    let gateway = GatewayProcess::start("outcomes-gateway", &spec).await;
    let api = gateway.client(Some(OPERATOR));

    // One call the tool fails (`isError`), one that completes, one that fails.
    let tool_error = api.start_task("failing_job", json!({})).await;
    let completed = api
        .start_task("slow_compute", json!({"seconds": 0.1}))
        .await;
    let failed = api.start_task("protocol_error_job", json!({})).await;
    let id = |t: &Value| t["id"].as_str().expect("an id").to_string();
    let (tool_error, completed, failed) = (id(&tool_error), id(&completed), id(&failed));
    // The wire status stays what the spec says.
    let t = api.wait_status(&tool_error, "completed").await;
    assert_eq!(
        (t["outcome"].as_str(), t["toolError"].as_bool()),
        (Some("tool_error"), Some(true)),
        "{t}"
    );
    let t = api.wait_status(&completed, "completed").await;
    assert_eq!(t["outcome"], "completed", "{t}");
    let t = api.wait_status(&failed, "failed").await;
    assert_eq!(t["outcome"], "failed", "{t}");

    // The REST API: a filter per outcome; `status` is still the wire's.
    assert_eq!(
        listed(&api, "outcome=tool_error").await,
        [tool_error.as_str()]
    );
    assert_eq!(
        listed(&api, "outcome=completed").await,
        [completed.as_str()]
    );
    assert_eq!(listed(&api, "outcome=failed").await, [failed.as_str()]);
    let mut both = listed(&api, "status=completed").await;
    both.sort();
    let mut want = vec![tool_error.clone(), completed.clone()];
    want.sort();
    assert_eq!(both, want);
    let page = api.get("/api/v1/tasks").await;
    let rows = page.assert_status(200)["tasks"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let row = rows
        .iter()
        .find(|r| r["id"] == tool_error.as_str())
        .expect("listed");
    assert_eq!(
        (row["status"].as_str(), row["outcome"].as_str()),
        (Some("completed"), Some("tool_error")),
        "{row}"
    );
    let bad = api.get("/api/v1/tasks?outcome=sort_of").await;
    assert_eq!(bad.status, 400, "{bad:#?}");

    // The CLI: `--outcome`, and the STATUS column says it.
    let out = mcptask(&gateway.base, &["tasks", "list", "--outcome", "tool_error"]).await;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{out:?}");
    assert!(
        text.contains(&tool_error) && text.contains("tool error"),
        "{text}"
    );
    assert!(
        !text.contains(&completed) && !text.contains(&failed),
        "{text}"
    );
    let out = mcptask(
        &gateway.base,
        &["tasks", "list", "--outcome", "completed", "--json"],
    )
    .await;
    let page: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let ids: Vec<&str> = page["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .filter_map(|t| t["id"].as_str())
        .collect();
    assert_eq!(ids, [completed.as_str()], "{page}");
}
