//! How the gateway meets its upstreams: the 2026-07-28 way first
//! (`server/discover`), `initialize` only for a server that does not know
//! it, and the era recorded from what the server says it speaks. A
//! 2026-07-28 server is stateless (its calls take the front's fast path)
//! whether or not it also answers `initialize`; and a server that cannot
//! be met is logged once per change, not once per retry.

use std::time::{Duration, Instant};

use mcptask_testkit::mcp::{Lifecycle, TestClient};
use mcptask_testkit::*;
use serde_json::{Value, json};

/// The JSON-RPC id of the test's call: rmcp's clients number their
/// requests, so an upstream that hears this one heard the caller's body as
/// sent (the fast path), not a request the front made anew.
const CALLER_ID: &str = "caller-own-id-2026";

/// A gateway fronting `url` as server `up`.
async fn gateway_before(url: &str, env: &[(&str, &str)]) -> (GatewayProcess, TestDatabase) {
    let db = TestDatabase::sqlite();
    let toml = format!(
        "{}\n[proxy]\nenabled = true\n",
        GatewaySpec::open(&db.url, &[("up", url)]).toml()
    );
    (GatewayProcess::start_toml("gateway", &toml, env).await, db)
}

/// Until the front lists `tool` (the test fails after 30 s).
async fn wait_listed(gateway: &GatewayProcess, tool: &str) {
    let client = TestClient::http(
        &format!("{}/mcp", gateway.base),
        None,
        Lifecycle::Modern { tasks: false },
    )
    .await
    .expect("a client of /mcp");
    let start = Instant::now();
    loop {
        let tools = client.peer().list_all_tools().await.expect("tools/list");
        if tools.iter().any(|t| t.name == tool) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{tool} never listed: {:?}\n{}",
            tools.iter().map(|t| t.name.to_string()).collect::<Vec<_>>(),
            gateway.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A stateless 2026-07-28 `tools/call` of `up__echo`, posted raw with
/// [`CALLER_ID`]; the JSON-RPC answer.
async fn call_echo(gateway: &GatewayProcess, text: &str) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": CALLER_ID, "method": "tools/call", "params": {
    "name": "up__echo",
    "arguments": {"text": text},
    "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "eras-test", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }}});
    let text = reqwest::Client::new()
        .post(format!("{}/mcp", gateway.base))
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "tools/call")
        .header("Mcp-Name", "up__echo")
        .json(&body)
        .send()
        .await
        .expect("POST /mcp")
        .text()
        .await
        .expect("the answer");
    let json = text
        .lines()
        .find_map(|l| l.strip_prefix("data:"))
        .unwrap_or(&text);
    serde_json::from_str(json.trim()).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// The call reached `upstream` under the caller's own id (relayed as
/// bytes: the fast path), and nothing ever asked it `initialize`.
fn assert_fast_path_and_no_initialize(upstream: &ScriptedServer, gateway: &GatewayProcess) {
    let calls = upstream.seen_method("tools/call");
    let call = calls.last().expect("the call reached the upstream");
    assert_eq!(
        call.id,
        json!(CALLER_ID),
        "the call went the full way (a request of the front's own), not the fast path: {call:?}\n{}",
        gateway.log()
    );
    assert_eq!(call.params["name"], "echo");
    let asked: Vec<_> = upstream.seen_method("initialize");
    assert!(
        asked.is_empty(),
        "a 2026-07-28 server was asked initialize: {asked:?}"
    );
    assert!(
        !upstream.seen_method("server/discover").is_empty(),
        "the server was met with server/discover"
    );
}

/// A 2026-07-28 server that refuses `initialize` (the handshake is gone
/// from that revision) is listed and its tool called through the front,
/// on the fast path. Before, every server without the tasks extension was
/// probed with a 2025-11-25 `initialize`: this one was "not ready" forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_server_that_refuses_initialize_is_listed_and_called_on_the_fast_path() {
    with_deadline(Duration::from_secs(120), async {
        let server = SyncUpstream::start().await;
        let upstream = ScriptedServer::start(&server.url).await;
        upstream.script(Rule::new(
            "initialize",
            usize::MAX,
            Scripted::Error(-32601, "Method not found: initialize".into()),
        ));
        let (gateway, _db) = gateway_before(&upstream.url(), &[]).await;
        wait_listed(&gateway, "up__echo").await;
        let answer = call_echo(&gateway, "met by discover").await;
        assert_eq!(answer["id"], CALLER_ID, "{answer}");
        assert_eq!(
            answer["result"]["content"][0]["text"], "met by discover",
            "{answer}"
        );
        assert_fast_path_and_no_initialize(&upstream, &gateway);
    })
    .await;
}

/// A 2026-07-28 server that also answers `initialize` (rmcp's servers
/// do) is recorded as of 2026-07-28, what its `server/discover` says it
/// speaks: its calls take the fast path. Before, the `initialize` probe's
/// 2025-11-25 answer was recorded and every call went the full way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_server_that_also_answers_initialize_is_recorded_as_2026() {
    with_deadline(Duration::from_secs(120), async {
        let server = SyncUpstream::start().await;
        let upstream = ScriptedServer::start(&server.url).await;
        let (gateway, _db) = gateway_before(&upstream.url(), &[]).await;
        wait_listed(&gateway, "up__echo").await;
        let answer = call_echo(&gateway, "stateless").await;
        assert_eq!(
            answer["result"]["content"][0]["text"], "stateless",
            "{answer}"
        );
        assert_fast_path_and_no_initialize(&upstream, &gateway);
    })
    .await;
}

/// A 2025-11-25 server (`server/discover` unknown: method not found) is
/// still met with `initialize`, listed, and called (the full way: it holds
/// sessions).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2025_server_is_still_met_with_initialize() {
    with_deadline(Duration::from_secs(120), async {
        let server = SyncUpstream::start_legacy().await;
        let upstream = ScriptedServer::start(&server.url).await;
        let (gateway, _db) = gateway_before(&upstream.url(), &[]).await;
        wait_listed(&gateway, "up__echo").await;
        let answer = call_echo(&gateway, "handshake").await;
        assert_eq!(
            answer["result"]["content"][0]["text"], "handshake",
            "{answer}"
        );
        assert!(!upstream.seen_method("initialize").is_empty());
        let calls = upstream.seen_method("tools/call");
        let call = calls.last().expect("the call reached the upstream");
        assert_ne!(
            call.id,
            json!(CALLER_ID),
            "a session server gets no relayed body"
        );
    })
    .await;
}

/// A server whose command is missing is listed again every second until
/// it answers; the gateway says so once (and again only if the reason
/// changes), not once per retry. Before: a WARN line a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_whose_command_is_missing_is_logged_once_not_per_retry() {
    with_deadline(Duration::from_secs(120), async {
        let db = TestDatabase::sqlite();
        let toml = format!(
            "{}\n[proxy]\nenabled = true\n\n[[servers]]\nname = \"gone\"\ncommand = \"/nonexistent/mcptask-test-missing-command\"\n",
            GatewaySpec::open(&db.url, &[]).toml()
        );
        // The retries are logged at debug: the test counts them instead of
        // guessing how many a wait allows.
        let gateway = GatewayProcess::start_toml(
            "gateway",
            &toml,
            &[("MCPTASK_LOG", "info,sqlx=warn,rmcp=warn,rmcp::service=error,rmcp::transport::worker=off,mcptask_gateway::upstreams=debug")],
        )
        .await;
        // Each listing that failed: a warning or, once said, a debug line.
        let retries = |log: &str| {
            log.lines()
                .filter(|l| {
                    l.contains("listing the upstream server failed again")
                        || l.contains("cannot list the tools")
                })
                .count()
        };
        let start = Instant::now();
        while retries(&gateway.log()) < 5 {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the server was not listed 5 times: {}",
                gateway.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let log = gateway.log();
        let warnings: Vec<&str> = log
            .lines()
            .filter(|l| l.contains(" WARN ") && l.contains("gone"))
            .collect();
        let listing: Vec<&&str> = warnings
            .iter()
            .filter(|l| l.contains("cannot list the tools"))
            .collect();
        assert_eq!(listing.len(), 1, "{warnings:#?}");
        assert!(
            listing[0].contains("mcptask-test-missing-command"),
            "the warning says why: {}",
            listing[0]
        );
        assert!(
            warnings.len() <= 2,
            "one warning per change (listing, and the server's health): {warnings:#?}"
        );
    })
    .await;
}
