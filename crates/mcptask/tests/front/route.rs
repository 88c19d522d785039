//! One route for every path: a rule of the call (here the server's own
//! `call_timeout_ms`) holds on the full way as on the fast path.

use std::time::{Duration, Instant};

use mcptask_testkit::mcp::{Lifecycle, TestClient};
use mcptask_testkit::*;
use rmcp::model::CallToolRequestParams;
use serde_json::json;

/// A legacy (session) caller is served the full way: its pass-through call
/// of a slow tool is bounded by the server's `call_timeout_ms`, not by the
/// tracker's default (which is far longer than the tool).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_call_timeout_bounds_a_full_way_pass_through() {
    with_deadline(Duration::from_secs(120), async {
        let upstream_db = TestDatabase::sqlite();
        let demo = DemoServer::start(&upstream_db.url, &[]).await;
        let front_db = TestDatabase::sqlite();
        let toml = format!(
            "{}call_timeout_ms = 1000\n\n[proxy]\nenabled = true\n",
            GatewaySpec::open(&front_db.url, &[("demo", &demo.url)]).toml(),
        );
        let gateway = GatewayProcess::start_toml("gateway", &toml, &[]).await;
        // A 2026-07-28 caller: its unknown tool is a JSON-RPC error (a
        // session caller's is a tool result, as its era's servers answer).
        let modern = Lifecycle::Modern { tasks: false };
        let client = TestClient::http(&format!("{}/mcp", gateway.base), None, modern)
            .await
            .expect("a client of /mcp");
        let params = CallToolRequestParams::new("demo__slow_compute")
            .with_arguments(json!({"seconds": 6}).as_object().unwrap().clone());
        let started = Instant::now();
        let answer = client.peer().call_tool_once(params).await;
        let took = started.elapsed();
        let error = answer.expect_err("the call outlived its server's call timeout");
        assert!(
            took < Duration::from_secs(4),
            "answered after {took:?} (the server's bound is 1 s): {error}"
        );
        assert!(error.to_string().contains("1s"), "{error}");
    })
    .await;
}

/// With the default log filter, errors the front answers its callers (an
/// unknown tool, twice) are not operator warnings: rmcp's service loop
/// logged each as `WARN … response error`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_answered_to_callers_are_not_logged_as_warnings() {
    with_deadline(Duration::from_secs(120), async {
        let upstream_db = TestDatabase::sqlite();
        let demo = DemoServer::start(&upstream_db.url, &[]).await;
        let front_db = TestDatabase::sqlite();
        let toml = format!(
            "{}\n[proxy]\nenabled = true\n",
            GatewaySpec::open(&front_db.url, &[("demo", &demo.url)]).toml(),
        );
        // The binary's own default filter (MCPTASK_LOG unset).
        let gateway = GatewayProcess::start_toml("gateway", &toml, &[("MCPTASK_LOG", "")]).await;
        // A 2026-07-28 caller: its unknown tool is a JSON-RPC error (a
        // session caller's is a tool result, as its era's servers answer).
        let modern = Lifecycle::Modern { tasks: false };
        let client = TestClient::http(&format!("{}/mcp", gateway.base), None, modern)
            .await
            .expect("a client of /mcp");
        for _ in 0..2 {
            let unknown = client
                .peer()
                .call_tool_once(CallToolRequestParams::new("nobody__greet"))
                .await
                .expect_err("no such tool");
            assert!(unknown.to_string().contains("unknown tool"), "{unknown}");
        }
        // The log is drained asynchronously: a line the gateway wrote while
        // answering may arrive here a moment after the answer. A reload of
        // the same file logs a line of its own after both answers; once it
        // is read, so is everything the gateway wrote before it.
        gateway
            .reload(&toml)
            .await
            .expect("reloading the same file is accepted");
        let log = gateway.log();
        assert!(!log.contains("response error"), "{log}");
        assert!(!log.contains(" WARN "), "{log}");
    })
    .await;
}
