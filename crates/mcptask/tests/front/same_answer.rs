//! One answer on every path: what the front's fast path (the byte relay of
//! a stateless pass-through call) tells a caller when something goes wrong
//! is what the full way tells it, in the one error mapping's words. An
//! upstream's refusal is an upstream error, never the gateway's own
//! challenge; an answer cut at the deadline is an error the caller sees; an
//! oversized body is a 413; `Mcp-Param-*` headers that contradict the body
//! are refused before the upstream hears of the call; and a front task
//! failed by an upstream's garbage says so without the transport's
//! internals.

use std::time::Duration;

use mcptask_testkit::mcp::{Lifecycle, TestClient};
use mcptask_testkit::*;
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};

use super::pass_through::{ALICE, Rig, rig_with};

/// The `_meta` of a 2026-07-28 call that does not declare tasks.
fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "same-answer-test", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {},
    })
}

/// A 2026-07-28 `tools/call` of `tool`, as a stateless client posts it
/// (Alice's token, the routing headers), plus `headers` (a test that
/// sends another body sets it on the builder).
fn request(
    rig: &Rig,
    tool: &str,
    arguments: Value,
    headers: &[(&str, &str)],
) -> reqwest::RequestBuilder {
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": tool, "arguments": arguments, "_meta": meta()}});
    let mut request = reqwest::Client::new()
        .post(&rig.mcp)
        .bearer_auth(ALICE)
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "tools/call")
        .header("Mcp-Name", tool)
        .json(&body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request
}

/// The JSON-RPC message of an answer: its JSON body, or the last `data:`
/// of its SSE stream.
fn message(text: &str) -> Value {
    let json = text
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("data:"))
        .unwrap_or(text);
    serde_json::from_str(json.trim()).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// The same call the full way: a session (2025-11-25) caller's, answered
/// by rmcp's server and client instead of the byte relay.
async fn full_way_error(rig: &Rig, tool: &str, arguments: Value) -> rmcp::ErrorData {
    let client = TestClient::http(&rig.mcp, Some(ALICE), Lifecycle::Legacy)
        .await
        .expect("a session at /mcp");
    let params = CallToolRequestParams::new(tool.to_string())
        .with_arguments(arguments.as_object().cloned().unwrap_or_default());
    match client.peer().call_tool_once(params).await {
        Err(rmcp::service::ServiceError::McpError(data)) => data,
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstreams_refusal_is_an_upstream_error_never_the_gateways_challenge() {
    with_deadline(Duration::from_secs(120), async {
        let rig = rig_with("same-answer-refused", "", "").await;
        for status in [401u16, 403] {
            rig.upstream.clear();
            rig.upstream.script(Rule::new(
                "tools/call",
                usize::MAX,
                Scripted::Raw(
                    status,
                    "application/json".into(),
                    br#"{"error":"invalid_token"}"#.to_vec(),
                ),
            ));
            let answer = request(&rig, "up__greet", json!({"name": "x"}), &[])
                .send()
                .await
                .expect("POST /mcp");
            assert_eq!(
                answer.status(),
                200,
                "HTTP {status} relayed as the gateway's own"
            );
            assert!(
                answer.headers().get("www-authenticate").is_none(),
                "{:?}",
                answer.headers()
            );
            let fast = message(&answer.text().await.unwrap());
            assert_eq!(fast["id"], 7, "{fast}");
            assert_eq!(
                fast["error"]["data"]["reason"], "upstream_refused",
                "{fast}"
            );
            assert_eq!(fast["error"]["data"]["status"], status, "{fast}");
            let said = fast["error"]["message"].as_str().unwrap();
            assert!(said.contains(&format!("HTTP {status}")), "{said}");

            // The full way answers the same.
            let full = full_way_error(&rig, "up__greet", json!({"name": "x"})).await;
            assert_eq!(full.code.0, fast["error"]["code"], "{full:?} vs {fast}");
            assert_eq!(full.message, said, "{full:?}");
            assert_eq!(full.data, Some(fast["error"]["data"].clone()), "{full:?}");
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_body_is_413_on_the_fast_path_as_on_the_full_way() {
    with_deadline(Duration::from_secs(120), async {
        let rig = rig_with("same-answer-413", "", "").await;
        // 5 MiB of arguments: over the default 4 MiB `max_body_bytes`.
        let big = json!({"name": "x".repeat(5 << 20)});
        let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "up__greet", "arguments": big, "_meta": meta()}})
        .to_string();
        let answer = |request: reqwest::RequestBuilder| async move {
            let answer = request.send().await.expect("POST /mcp");
            (
                answer.status().as_u16(),
                answer.text().await.unwrap_or_default(),
            )
        };
        // The full way: a request the fast path does not read (no call in
        // its headers).
        let full = answer(
            reqwest::Client::new()
                .post(&rig.mcp)
                .bearer_auth(ALICE)
                .header("Accept", "application/json, text/event-stream")
                .header("Content-Type", "application/json")
                .body(body.clone()),
        )
        .await;
        assert_eq!(full.0, 413, "{full:?}");
        // The fast path.
        let declared = answer(request(&rig, "up__greet", json!({}), &[]).body(body.clone())).await;
        assert_eq!(declared, full);
        assert!(rig.upstream.seen_method("tools/call").is_empty());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_cut_at_the_deadline_never_passes_as_whole() {
    with_deadline(Duration::from_secs(120), async {
        let rig = rig_with("same-answer-cut", "", "call_timeout_ms = 1000").await;
        let endless = |content_type: &str, head: &str, trickle: &str| {
            Rule::new(
                "tools/call",
                usize::MAX,
                Scripted::Endless {
                    content_type: content_type.into(),
                    head: head.as_bytes().to_vec(),
                    trickle: trickle.as_bytes().to_vec(),
                    every: Duration::from_millis(20),
                },
            )
        };
        let cut_json = r#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":""#;

        // A JSON answer cut mid-way: the body is aborted, never ended as
        // if whole.
        rig.upstream
            .script(endless("application/json", cut_json, "a"));
        let answer = request(&rig, "up__greet", json!({"name": "x"}), &[])
            .send()
            .await
            .expect("the answer's head");
        let body = answer.bytes().await;
        assert!(
            body.is_err(),
            "a cut JSON answer ended as a whole one ({} bytes)",
            body.map(|b| b.len()).unwrap_or_default()
        );

        // An SSE stream between events (progress, then keep-alives): a
        // last event carries the call's error.
        rig.upstream.clear();
        let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress",
            "params": {"progressToken": "p", "progress": 1}});
        rig.upstream.script(endless(
            "text/event-stream",
            &format!("event: message\ndata: {progress}\n\n"),
            ": ping\n\n",
        ));
        let answer = request(&rig, "up__greet", json!({"name": "x"}), &[])
            .send()
            .await
            .expect("the answer's head");
        let text = answer
            .text()
            .await
            .expect("an SSE stream ended by the gateway");
        let last = message(&text);
        assert_eq!(last["id"], 7, "{text}");
        let said = last["error"]["message"].as_str().unwrap_or_default();
        assert!(said.contains("did not answer within 1s"), "{text}");

        // An SSE stream cut inside an event: aborted.
        rig.upstream.clear();
        rig.upstream.script(endless(
            "text/event-stream",
            &format!("event: message\ndata: {cut_json}"),
            "a",
        ));
        let answer = request(&rig, "up__greet", json!({"name": "x"}), &[])
            .send()
            .await
            .expect("the answer's head");
        assert!(
            answer.bytes().await.is_err(),
            "a cut event ended as a whole stream"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_param_headers_that_contradict_the_body_never_reach_the_upstream() {
    with_deadline(Duration::from_secs(120), async {
        let rig = rig_with("same-answer-params", "", "").await;
        let tool = "up__test_header_param";
        let region = json!({"region": "eu-west1"});
        // Headers that agree: relayed, headers and all.
        let agreed = request(
            &rig,
            tool,
            region.clone(),
            &[("Mcp-Param-Region", "eu-west1")],
        )
        .send()
        .await
        .expect("POST /mcp");
        let agreed = message(&agreed.text().await.unwrap());
        assert_eq!(
            agreed["result"]["content"][0]["text"], "region: eu-west1",
            "{agreed}"
        );
        let seen = rig.upstream.seen_method("tools/call");
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].headers["mcp-param-region"], "eu-west1");

        for headers in [
            vec![("Mcp-Param-Region", "us-east1")],
            vec![],
            vec![
                ("Mcp-Param-Region", "eu-west1"),
                ("Mcp-Param-Region", "us-east1"),
            ],
        ] {
            let refused = request(&rig, tool, region.clone(), &headers)
                .send()
                .await
                .expect("POST /mcp");
            assert_eq!(refused.status(), 400, "{headers:?}");
            let refused = message(&refused.text().await.unwrap());
            assert_eq!(refused["error"]["code"], -32020, "{headers:?}: {refused}");
        }
        assert_eq!(
            rig.upstream.seen_method("tools/call").len(),
            1,
            "a contradicted call reached the upstream"
        );
    })
    .await;
}

/// A front task (a caller that declares tasks, a synchronous upstream)
/// whose upstream answers garbage fails with a status message for people:
/// rmcp's text named its transport's Rust type.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_front_task_failed_by_garbage_says_so_without_internals() {
    with_deadline(Duration::from_secs(120), async {
        let sync = SyncUpstream::start().await;
        let upstream = ScriptedServer::start(&sync.url).await;
        upstream.script(Rule::new(
            "tools/call",
            usize::MAX,
            Scripted::Raw(200, "application/json".into(), b"{not json".to_vec()),
        ));
        let dir = tempfile::tempdir().expect("temp dir");
        let db = format!("sqlite:{}", dir.path().join("gateway.db").display());
        let toml = fault_gateway_toml(
            &db,
            &format!(
                "[proxy]\nenabled = true\n\n[[servers]]\nname = \"sync\"\nurl = {:?}\nprefix = \"up\"\nanswer_within_ms = 0\n",
                upstream.url()
            ),
        );
        let (_gateway, api) = start_gateway_with("same-answer-garbage", dir.path(), &toml).await;
        let client = TestClient::http(
            &format!("{}/mcp", api.base),
            None,
            Lifecycle::Modern { tasks: true },
        )
        .await
        .expect("a 2026-07-28 client declaring tasks");
        let task = client.start_task("up__echo", json!({"text": "x"})).await;
        let done = wait_terminal(&client, &task, Duration::from_secs(60)).await;
        assert_eq!(status(&done), "failed", "{done:#}");
        let said = done["statusMessage"].as_str().unwrap_or_default();
        assert!(said.contains("not MCP"), "{done:#}");
        for internal in ["::", "Transport", "rmcp", "127.0.0.1"] {
            assert!(!said.contains(internal), "{internal:?} in {said:?}");
        }
    })
    .await;
}
