//! Honest health: an upstream's state follows what its calls do. Killed,
//! it is down (`GET /api/v1/servers`, `mcptask_upstream_up`, `/readyz`)
//! with the first call that fails, on every path — the front's fast path,
//! the full way of a session and the REST API — and
//! it is up again with the first call it answers once it is back.

use serde_json::{Value, json};

use mcptask_testkit::mcp::{Lifecycle, TestClient};
use mcptask_testkit::*;

const TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

/// The health of server `demo` as an operator reads it.
async fn health(api: &Api) -> Value {
    let reply = api.get("/api/v1/servers").await;
    let servers = reply.assert_status(200)["servers"].clone();
    servers
        .as_array()
        .and_then(|all| all.iter().find(|s| s["name"] == "demo"))
        .map(|s| s["health"].clone())
        .unwrap_or_else(|| panic!("no server demo in {servers}"))
}

/// `mcptask_upstream_up{server="demo"}` as scraped now.
async fn up_gauge(api: &Api) -> Option<f64> {
    let reply = api.get("/metrics").await;
    let text = reply.text.clone();
    text.lines()
        .find(|l| l.starts_with("mcptask_upstream_up{server=\"demo\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// What `/readyz` says.
async fn readiness(api: &Api) -> String {
    reqwest::get(api.url("/readyz"))
        .await
        .expect("GET /readyz")
        .text()
        .await
        .expect("its body")
}

/// Asserts `demo` is down now (no waiting: the failed call decided it),
/// with a reason, in the API, the gauge and `/readyz`.
async fn assert_down(api: &Api, after: &str) {
    let h = health(api).await;
    assert_eq!(h["state"], "error", "after {after}: {h}");
    assert!(
        h["lastError"].as_str().is_some_and(|e| !e.is_empty()),
        "after {after}, no reason: {h}"
    );
    assert_eq!(up_gauge(api).await, Some(0.0), "after {after}");
    let ready = readiness(api).await;
    assert!(ready.contains("0 of 1"), "after {after}: {ready}");
}

/// Asserts `demo` is up now.
async fn assert_up(api: &Api, after: &str) {
    let h = health(api).await;
    assert_eq!(h["state"], "ok", "after {after}: {h}");
    assert_eq!(up_gauge(api).await, Some(1.0), "after {after}");
    let ready = readiness(api).await;
    assert!(ready.contains("1 of 1"), "after {after}: {ready}");
}

/// A stateless 2026-07-28 call of `greet` (`demo__greet` at the front):
/// the front's fast path.
async fn fast_call(mcp: &str) -> Value {
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "health-test", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    post_tools_call(
        mcp,
        Some(OPERATOR),
        TRACEPARENT,
        "demo__greet",
        json!({"name": "health"}),
        meta,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_upstream_is_down_with_its_first_failed_call_on_every_path_and_up_once_it_answers()
{
    let dir = tempfile::tempdir().expect("temp dir");
    let addr = format!("127.0.0.1:{}", free_port());
    let demo_db = format!("sqlite:{}", dir.path().join("server.db").display());
    let start_demo = |n: u32| {
        let (addr, demo_db) = (addr.clone(), demo_db.clone());
        async move { DemoServer::start_at(&format!("health-demo-{n}"), &addr, &demo_db, &[]).await }
    };
    let mut demo = start_demo(1).await;
    let db = format!("sqlite:{}", dir.path().join("gateway.db").display());
    let spec = GatewaySpec::with_tokens(&db, &[("demo", &demo.url)]);
    let toml = format!("{}\n[proxy]\nenabled = true\n", spec.toml());
    let gateway = GatewayProcess::start_toml("health-gateway", &toml, &[]).await;
    let api = gateway.client(Some(OPERATOR));
    let mcp = format!("{}/mcp", gateway.base);

    // Listed at the start: up.
    let deadline = std::time::Instant::now() + WAIT;
    while health(&api).await["state"] != "ok" {
        assert!(
            std::time::Instant::now() < deadline,
            "never listed: {}",
            health(&api).await
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_up(&api, "the first listing").await;
    // A session of the full way, opened while the server answers.
    let session = TestClient::http(&mcp, Some(OPERATOR), Lifecycle::Legacy)
        .await
        .expect("a session at the front");

    // The fast path.
    demo.kill().await;
    let failed = fast_call(&mcp).await;
    assert!(failed["error"].is_object(), "{failed}");
    assert_down(&api, "a failed call on the fast path").await;
    demo = start_demo(2).await;
    let answered = fast_call(&mcp).await;
    assert_eq!(
        answered["result"]["content"][0]["text"], "Hello, health!",
        "{answered}"
    );
    assert_up(&api, "an answered call on the fast path").await;

    // The full way of a session.
    demo.kill().await;
    let failed = session.call("demo__greet", json!({"name": "health"})).await;
    assert!(failed.is_err(), "{failed:?}");
    assert_down(&api, "a failed call of a session").await;
    demo = start_demo(3).await;
    session
        .call("demo__greet", json!({"name": "health"}))
        .await
        .expect("answered once the server is back");
    assert_up(&api, "an answered call of a session").await;

    // The REST API (the tracker's own connection).
    let greet = json!({"server": "demo", "tool": "greet", "background": false});
    let rest_call = || api.post("/api/v1/calls", &greet);
    demo.kill().await;
    let failed = rest_call().await;
    assert_eq!(failed.status, 502, "{failed:#?}");
    assert_down(&api, "a failed REST call").await;
    let _demo = start_demo(4).await;
    rest_call().await.assert_status(200);
    assert_up(&api, "an answered REST call").await;
    session.close().await;
}
