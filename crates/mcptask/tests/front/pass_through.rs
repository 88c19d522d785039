//! The front's fast path for stateless pass-through calls (a 2026-07-28
//! `tools/call` of a synchronous tool, tasks not declared): the call reaches
//! the upstream as the caller sent it (renamed for a prefixed tool, the
//! caller's `_meta` and trace context kept, the server's configured headers
//! instead of the caller's credentials), and fair limits refuse a flood the
//! way the MCP server does, from the request's headers, while another
//! principal's calls all pass.

use serde_json::{Value, json};

use mcptask_testkit::*;

pub(super) const ALICE: &str = "alice-token-0123456789";
const BOB: &str = "bob-token-0123456789";

pub(super) struct Rig {
    _demo: DemoServer,
    pub(super) upstream: ScriptedServer,
    _gateway: LoggedChild,
    pub(super) mcp: String,
    _dir: tempfile::TempDir,
}

/// demo-server behind a recording proxy, fronted by a gateway with token
/// auth, the server under prefix `up`, and `limits` (TOML) in force.
async fn rig(name: &str, limits: &str) -> Rig {
    rig_with(name, limits, "").await
}

/// [`rig`] with `server` (TOML lines) added to the server's entry.
pub(super) async fn rig_with(name: &str, limits: &str, server: &str) -> Rig {
    let dir = tempfile::tempdir().expect("temp dir");
    let demo_db = format!("sqlite:{}", dir.path().join("server.db").display());
    let demo = DemoServer::start_named(&format!("{name}-server"), &demo_db, &[]).await;
    let upstream = ScriptedServer::start(&demo.url).await;
    let db = format!("sqlite:{}", dir.path().join("gateway.db").display());
    let toml = format!(
        "[database]\nurl = {db:?}\n\n[api]\nlisten = \"127.0.0.1:0\"\n\n[[api.tokens]]\ntoken = {ALICE:?}\nprincipal = \"alice\"\n\n[[api.tokens]]\ntoken = {BOB:?}\nprincipal = \"bob\"\n\n[proxy]\nenabled = true\n\n{limits}\n\n[[servers]]\nname = \"demo\"\nurl = {:?}\nprefix = \"up\"\nheaders = {{ X-Upstream-Key = \"upstream-secret\" }}\n{server}\n",
        upstream.url()
    );
    let (gateway, api) = start_gateway_with(&format!("{name}-gateway"), dir.path(), &toml).await;
    Rig {
        _demo: demo,
        upstream,
        _gateway: gateway,
        mcp: format!("{}/mcp", api.base),
        _dir: dir,
    }
}

/// A 2026-07-28 `tools/call` of `tool`, posted raw as a stateless client does.
async fn call(mcp: &str, tool: &str, extra_meta: Value) -> Value {
    call_as(ALICE, mcp, tool, extra_meta).await
}

/// [`call`] with `token`.
async fn call_as(token: &str, mcp: &str, tool: &str, extra_meta: Value) -> Value {
    let mut meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "pass-through-test", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    meta.as_object_mut()
        .unwrap()
        .extend(extra_meta.as_object().cloned().unwrap_or_default());
    post_tools_call(
        mcp,
        Some(token),
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        tool,
        json!({"name": "relay"}),
        meta,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateless_call_reaches_the_upstream_as_sent_with_the_servers_credentials() {
    let rig = rig("pass-through-relay", "").await;
    let answer = call(&rig.mcp, "up__greet", json!({"example.com/probe": "kept"})).await;
    assert_eq!(answer["id"], 7, "{answer}");
    assert_eq!(
        answer["result"]["content"][0]["text"], "Hello, relay!",
        "{answer}"
    );

    let seen = rig.upstream.seen_method("tools/call");
    let call = seen.last().expect("the call reached the upstream");
    assert_eq!(call.params["name"], "greet", "renamed for the upstream");
    assert_eq!(call.params["arguments"], json!({"name": "relay"}));
    assert_eq!(
        call.params["_meta"]["example.com/probe"], "kept",
        "the caller's _meta goes through untouched: {}",
        call.params
    );
    assert_eq!(
        call.params["_meta"]["io.modelcontextprotocol/clientInfo"]["name"], "pass-through-test",
        "the caller speaks to the upstream as itself: {}",
        call.params
    );
    let header = |name: &str| {
        call.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    assert_eq!(header("mcp-name").as_deref(), Some("greet"));
    assert_eq!(
        header("traceparent").as_deref(),
        Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
    );
    assert_eq!(
        header("x-upstream-key").as_deref(),
        Some("upstream-secret"),
        "the server's configured headers"
    );
    assert!(
        !call
            .authorization
            .as_deref()
            .is_some_and(|a| a.contains(ALICE)),
        "the caller's credentials never reach an upstream: {:?}",
        call.authorization
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_over_its_limits_is_refused_busy_before_the_upstream_hears_of_it() {
    let rig = rig(
        "pass-through-busy",
        "[limits]\nper_principal_rate = 0.01\nper_principal_burst = 1",
    )
    .await;
    let first = call(&rig.mcp, "up__greet", json!({})).await;
    assert_eq!(first["result"]["content"][0]["text"], "Hello, relay!");
    let second = call(&rig.mcp, "up__greet", json!({})).await;
    assert_eq!(second["id"], 7, "{second}");
    assert_eq!(
        second["error"]["code"],
        mcptask_server::SERVER_BUSY,
        "{second}"
    );
    assert_eq!(second["error"]["data"]["reason"], "rate_limited");
    assert!(
        second["error"]["data"]["retryAfterMs"].as_u64().is_some(),
        "{second}"
    );
    assert_eq!(
        rig.upstream.seen_method("tools/call").len(),
        1,
        "the refused call never reached the upstream"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_is_refused_from_its_headers_and_held_while_another_principals_calls_pass() {
    // A burst of 2, then one call every 20 s: the flood below is over.
    let rig = rig(
        "pass-through-flood",
        "[limits]\nper_principal_rate = 0.05\nper_principal_burst = 2\nper_principal_in_flight = 8",
    )
    .await;
    let flood = futures::future::join_all(
        (0..24).map(|_| call_as(ALICE, &rig.mcp, "up__greet", json!({}))),
    );
    let calm = async {
        let mut answers = Vec::new();
        for _ in 0..2 {
            answers.push(call_as(BOB, &rig.mcp, "up__greet", json!({})).await);
        }
        answers
    };
    let (flood, calm) = tokio::join!(flood, calm);
    for answer in &calm {
        assert_eq!(
            answer["result"]["content"][0]["text"], "Hello, relay!",
            "every call of the other principal passes: {answer}"
        );
    }
    let refused: Vec<&Value> = flood.iter().filter(|a| a.get("error").is_some()).collect();
    assert!(refused.len() >= 22, "{} of 24 refused", refused.len());
    for answer in &refused {
        assert_eq!(answer["id"], 7, "{answer}");
        assert_eq!(
            answer["error"]["code"],
            mcptask_server::SERVER_BUSY,
            "{answer}"
        );
        assert_eq!(answer["error"]["data"]["reason"], "rate_limited");
        // Held a second of the 20 s it was told to wait, and told the rest.
        let ms = answer["error"]["data"]["retryAfterMs"].as_i64().unwrap();
        assert!((1..20_000).contains(&ms), "{answer}");
    }

    // Refused from the headers: a body that is no call at all is not read
    // until the refusal is answered (the full way would call it a parse
    // error).
    let garbage = reqwest::Client::new()
        .post(&rig.mcp)
        .bearer_auth(ALICE)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "tools/call")
        .header("Mcp-Name", "up__greet")
        .body("not json")
        .send()
        .await
        .expect("POST /mcp");
    let answer: Value = garbage.json().await.expect("a JSON-RPC answer");
    assert_eq!(
        answer["error"]["code"],
        mcptask_server::SERVER_BUSY,
        "{answer}"
    );
    assert_eq!(answer["id"], Value::Null, "{answer}");
    // Any other request of the principal is not a call: not limited.
    let listed = reqwest::Client::new()
        .post(&rig.mcp)
        .bearer_auth(ALICE)
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "tools/list")
        .json(
            &json!({"jsonrpc": "2.0", "id": 8, "method": "tools/list", "params": {"_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "pass-through-test", "version": "0"},
                "io.modelcontextprotocol/clientCapabilities": {},
            }}}),
        )
        .send()
        .await
        .expect("POST /mcp");
    let text = listed.text().await.unwrap();
    assert!(
        text.contains("up__greet"),
        "tools/list is not limited: {text}"
    );
    assert_eq!(
        rig.upstream.seen_method("tools/call").len(),
        2 + 2,
        "only the admitted calls reached the upstream"
    );
}
