//! The metrics an operator graphs: every call's end is counted in
//! `mcptask_calls_total{server,tool,face,outcome,driver}` with its outcome
//! (a tool's error, a policy refusal, a failure apart from a completed
//! call), and the label sets stay bounded whatever callers send: only the
//! configured servers and the tools their listings have, every other name
//! counted under `(other)`, even before an upstream that lists 1,000 tools.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};

use mcptask_testkit::mcp::{Lifecycle, TestClient};
use mcptask_testkit::*;

const TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

/// The demo server's `greet` and `failing_job` and 1,000 tools more.
fn thousand_tools() -> Value {
    let schema = json!({"type": "object"});
    let mut tools = vec![
        json!({"name": "greet", "inputSchema": schema}),
        json!({"name": "failing_job", "inputSchema": schema, "execution": {"taskSupport": "required"}}),
    ];
    tools.extend((0..1000).map(|i| json!({"name": format!("t{i:04}"), "inputSchema": schema})));
    json!({"tools": tools})
}

/// A stateless 2026-07-28 call of `tool` at the front, by `token`.
async fn fast_call(mcp: &str, token: &str, tool: &str) -> Value {
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "metrics-test", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    post_tools_call(mcp, Some(token), TRACEPARENT, tool, json!({}), meta).await
}

/// Every `mcptask_calls_total` series scraped now: its labels and value.
async fn calls_total(api: &Api) -> Vec<(serde_json::Map<String, Value>, f64)> {
    let reply = api.get("/metrics").await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    reply
        .text
        .lines()
        .filter_map(|line| line.strip_prefix("mcptask_calls_total{"))
        .map(|rest| {
            let (labels, value) = rest.rsplit_once("} ").expect("a series line");
            let labels = labels
                .split("\",")
                .map(|pair| {
                    let (k, v) = pair.split_once("=\"").expect("label=\"value\"");
                    (k.to_string(), json!(v.trim_end_matches('"')))
                })
                .collect();
            (labels, value.parse().expect("a number"))
        })
        .collect()
}

/// The count of the series whose labels include `want`.
fn count(series: &[(serde_json::Map<String, Value>, f64)], want: Value) -> f64 {
    let want = want.as_object().expect("labels").clone();
    series
        .iter()
        .filter(|(labels, _)| want.iter().all(|(k, v)| labels.get(k) == Some(v)))
        .map(|(_, n)| n)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_are_counted_by_outcome_under_bounded_labels_before_an_upstream_of_1000_tools() {
    let dir = tempfile::tempdir().expect("temp dir");
    let demo_db = format!("sqlite:{}", dir.path().join("server.db").display());
    let demo = DemoServer::start_named("metrics-demo", &demo_db, &[]).await;
    let upstream = ScriptedServer::start(&demo.url).await;
    upstream.script(Rule::new(
        "tools/list",
        usize::MAX,
        Scripted::Result(thousand_tools()),
    ));
    let db = format!("sqlite:{}", dir.path().join("gateway.db").display());
    let spec = GatewaySpec::with_tokens(&db, &[("demo", &upstream.url())]);
    let toml = format!(
        "{}\n[proxy]\nenabled = true\n\n[[policy]]\nprincipal = \"alice\"\ndeny = [\"demo/failing_job\"]\n",
        spec.toml()
    );
    let gateway = GatewayProcess::start_toml("metrics-gateway", &toml, &[]).await;
    let api = gateway.client(Some(OPERATOR));
    let mcp = format!("{}/mcp", gateway.base);

    // Listed (all 1,002 tools), then a synchronous call that completes.
    let tools = api.get("/api/v1/servers/demo/tools").await;
    assert_eq!(
        tools.assert_status(200)["tools"].as_array().map(Vec::len),
        Some(1002)
    );
    let greeted = fast_call(&mcp, OPERATOR, "demo__greet").await;
    assert_eq!(
        greeted["result"]["content"][0]["text"], "Hello, World!",
        "{greeted}"
    );

    // Names no one configured, at every face: at the front, through the
    // REST API on a configured server and on one that is not.
    for i in 0..40 {
        let made_up = fast_call(&mcp, OPERATOR, &format!("nope_{i}")).await;
        assert!(made_up["error"].is_object(), "{made_up}");
        let rest = api
            .post(
                "/api/v1/calls",
                &json!({"server": "demo", "tool": format!("made_up_{i}"), "background": false}),
            )
            .await;
        assert!(rest.status >= 400, "{rest:#?}");
        let rest = api
            .post(
                "/api/v1/calls",
                &json!({"server": format!("nowhere_{i}"), "tool": "greet", "background": false}),
            )
            .await;
        assert!(rest.status >= 400, "{rest:#?}");
    }
    // A listed tool the server does not have: its own error, a failed call.
    let missing = fast_call(&mcp, OPERATOR, "demo__t0007").await;
    assert!(missing["error"].is_object(), "{missing}");

    // A policy refusal: nothing is sent.
    let refused = fast_call(&mcp, ALICE, "demo__failing_job").await;
    assert!(refused["error"].is_object(), "{refused}");

    // A tool error: a kept call that completes with `isError`.
    let client = TestClient::http(&mcp, Some(OPERATOR), Lifecycle::Modern { tasks: true })
        .await
        .expect("a client of the front");
    let id = client.start_task("demo__failing_job", json!({})).await;
    let done = client.wait_terminal(&id, Duration::from_secs(60)).await;
    assert_eq!(
        done.task.status(),
        rmcp::model::TaskStatus::Completed,
        "{done:?}"
    );

    let series = calls_total(&api).await;
    let tools: BTreeSet<String> = series
        .iter()
        .map(|(labels, _)| labels["tool"].as_str().unwrap_or_default().to_string())
        .collect();
    let servers: BTreeSet<String> = series
        .iter()
        .map(|(labels, _)| labels["server"].as_str().unwrap_or_default().to_string())
        .collect();
    let known: BTreeSet<String> = ["(other)", "greet", "failing_job", "t0007"]
        .map(String::from)
        .into();
    assert!(tools.is_subset(&known), "tool labels: {tools:?}");
    assert!(
        servers.is_subset(&["(other)", "demo"].map(String::from).into()),
        "server labels: {servers:?}"
    );
    assert!(series.len() <= 12, "{} series: {series:?}", series.len());

    let completed = json!({"server": "demo", "tool": "greet", "outcome": "completed", "face": "mcp", "driver": "pass_through"});
    assert_eq!(count(&series, completed), 1.0, "{series:?}");
    let others = json!({"tool": "(other)", "outcome": "failed"});
    assert_eq!(count(&series, others), 120.0, "{series:?}");
    let missing = json!({"server": "demo", "tool": "t0007", "outcome": "failed"});
    assert_eq!(count(&series, missing), 1.0, "{series:?}");
    let refused = json!({"server": "demo", "tool": "failing_job", "outcome": "refused_policy", "driver": "none"});
    assert_eq!(count(&series, refused), 1.0, "{series:?}");
    let tool_error = json!({"server": "demo", "tool": "failing_job", "outcome": "tool_error", "face": "mcp", "driver": "sep2663"});
    assert_eq!(count(&series, tool_error), 1.0, "{series:?}");
    // The Grafana dashboard in deploy/ graphs only series the gateway
    // exports.
    let scrape = api.get("/metrics").await.text;
    let dashboard = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/grafana/mcptask-dashboard.json"
    ))
    .expect("deploy/grafana/mcptask-dashboard.json");
    let dashboard: Value = serde_json::from_str(&dashboard).expect("the dashboard is JSON");
    let mut queried = BTreeSet::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            let expr = target["expr"].as_str().expect("an expression");
            for (at, _) in expr.match_indices("mcptask_") {
                let name: String = expr[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                queried.insert(name);
            }
        }
    }
    assert!(queried.len() >= 5, "{queried:?}");
    for name in &queried {
        assert!(
            scrape
                .lines()
                .any(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} "))),
            "the dashboard queries {name}, which /metrics does not export"
        );
    }
    client.close().await;
}
