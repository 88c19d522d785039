//! A front that never waits: an upstream that is mute or not yet up when
//! the gateway starts delays nothing; its tools appear as soon as it
//! answers, and meanwhile a call of one of them is told the server is not
//! ready (not that the tool does not exist).

use std::time::{Duration, Instant};

use mcptask_testkit::mcp::{Lifecycle, TestClient};
use mcptask_testkit::*;
use rmcp::model::CallToolRequestParams;
use serde_json::json;

async fn front(gateway: &GatewayProcess) -> TestClient {
    TestClient::http(
        &format!("{}/mcp", gateway.base),
        None,
        Lifecycle::Modern { tasks: false },
    )
    .await
    .expect("a client of /mcp")
}

async fn tool_names(client: &TestClient) -> Vec<String> {
    let tools = client.peer().list_all_tools().await.expect("tools/list");
    tools.into_iter().map(|t| t.name.to_string()).collect()
}

async fn greet(client: &TestClient, tool: &str) -> Result<String, String> {
    let params = CallToolRequestParams::new(tool.to_string())
        .with_arguments(json!({"name": "ready"}).as_object().unwrap().clone());
    match client.peer().call_tool_once(params).await {
        Ok(answer) => Ok(format!("{answer:?}")),
        Err(e) => Err(e.to_string()),
    }
}

/// A stdio server that never answers (`sleep`) beside a working one: the
/// gateway serves long before the mute one's connect timeout (30 s by
/// default), with the working server's tools listed at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mute_upstream_delays_neither_the_front_nor_the_other_servers_tools() {
    with_deadline(Duration::from_secs(120), async {
        let upstream_db = TestDatabase::sqlite();
        let demo = DemoServer::start(&upstream_db.url, &[]).await;
        let front_db = TestDatabase::sqlite();
        let toml = format!(
            "{}\n[[servers]]\nname = \"mute\"\ncommand = \"sleep\"\nargs = [\"600\"]\n\n[[servers]]\nname = \"quiet\"\ncommand = \"sleep\"\nargs = [\"600\"]\nconnect_timeout_ms = 1000\n\n[proxy]\nenabled = true\n",
            GatewaySpec::open(&front_db.url, &[("demo", &demo.url)]).toml(),
        );
        let started = Instant::now();
        let gateway = GatewayProcess::start_toml("gateway", &toml, &[]).await;
        let client = front(&gateway).await;
        let names = tool_names(&client).await;
        let took = started.elapsed();
        assert!(
            took < Duration::from_secs(15),
            "the front served after {took:?} (the mute server's connect timeout is 30 s)"
        );
        assert!(names.iter().any(|n| n == "demo__greet"), "{names:?}");
        let error = greet(&client, "mute__greet").await.expect_err("the mute server answers nothing");
        assert!(error.contains("not ready"), "{error}");
        // A name no configured server can serve is still unknown.
        let error = greet(&client, "nobody__greet").await.expect_err("no such tool");
        assert!(error.contains("unknown tool"), "{error}");
        // Called by name through the API (an operator: told why), a stdio
        // command that never speaks MCP is said to be one, not a host that
        // cannot be reached.
        let api = gateway.client(None);
        let reply = api
            .send(api.request(reqwest::Method::POST, "/api/v1/calls").json(
                &json!({"server": "quiet", "tool": "greet", "arguments": {}}),
            ))
            .await;
        let message = reply.json["error"]["message"].as_str().unwrap_or_default().to_string();
        assert!(
            message.contains("MCP server speaking on stdio") && !message.contains("host"),
            "{reply:#?}"
        );
    })
    .await;
}

/// A server configured before it is up is listed again until it answers:
/// its tools appear within a few seconds of it listening, and calls of
/// them then work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_started_after_the_gateway_is_listed_as_soon_as_it_answers() {
    with_deadline(Duration::from_secs(120), async {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let url = format!("http://127.0.0.1:{port}/mcp");
        let front_db = TestDatabase::sqlite();
        let toml = format!(
            "{}\n[proxy]\nenabled = true\n",
            GatewaySpec::open(&front_db.url, &[("late", &url)]).toml(),
        );
        let gateway = GatewayProcess::start_toml("gateway", &toml, &[]).await;
        let client = front(&gateway).await;
        let error = greet(&client, "late__greet").await.expect_err("not up yet");
        assert!(error.contains("not ready"), "{error}");
        // Long enough for the retries to have backed off to their cap.
        tokio::time::sleep(Duration::from_secs(3)).await;

        let upstream_db = TestDatabase::sqlite();
        let _late =
            DemoServer::start_at("late", &format!("127.0.0.1:{port}"), &upstream_db.url, &[]).await;
        let up = Instant::now();
        while !tool_names(&client).await.iter().any(|n| n == "late__greet") {
            assert!(
                up.elapsed() < Duration::from_secs(30),
                "its tools never appeared"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let took = up.elapsed();
        assert!(
            took < Duration::from_secs(6),
            "its tools appeared {took:?} after it listened (retries every 2 s at most)"
        );
        let answer = greet(&client, "late__greet")
            .await
            .expect("the call works now");
        assert!(answer.contains("Hello, ready!"), "{answer}");
    })
    .await;
}
