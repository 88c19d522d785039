//! Edges of the Streamable HTTP face of the demo server, over real HTTP:
//! principal isolation, capability gating, and hostile or broken input.

use std::time::Duration;

use mcptask_testkit::mcp::{Lifecycle, error_code, wire};
use mcptask_testkit::{
    DemoServer, TestDatabase, input_keys, result_text, status, wait_status, wait_terminal,
    with_deadline,
};
use rmcp::ErrorData;
use rmcp::model::CallToolResponse;
use rmcp::service::ServiceError;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);
const TEST_LIMIT: Duration = Duration::from_secs(240);
const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// The JSON-RPC error of a failed request (panics on transport errors, which
/// would mean the server misbehaved at the HTTP level).
fn rpc_error(e: &ServiceError) -> ErrorData {
    match e {
        ServiceError::McpError(data) => data.clone(),
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    }
}

/// A plain HTTP client that builds 2026-07-28 requests by hand.
struct Raw {
    http: reqwest::Client,
    url: String,
    bearer: Option<String>,
}

/// What came back: HTTP status, and the body as JSON when it is JSON.
#[derive(Debug)]
struct RawResponse {
    status: u16,
    body: String,
    json: Option<Value>,
}

impl RawResponse {
    fn error_code(&self) -> Option<i64> {
        self.json.as_ref()?["error"]["code"].as_i64()
    }

    fn error_message(&self) -> String {
        self.json
            .as_ref()
            .and_then(|j| j["error"]["message"].as_str())
            .unwrap_or_default()
            .to_string()
    }
}

impl Raw {
    fn new(url: &str, bearer: Option<&str>) -> Self {
        // reqwest panics without a TLS provider installed first.
        mcptask_client::tls::install_crypto_provider();
        Raw {
            http: reqwest::Client::builder()
                // A hang is a failure, not a stuck test.
                .timeout(Duration::from_secs(30))
                // A fresh connection per request: after refusing an oversized
                // body the server closes the connection (without saying so), and
                // a pooled connection would make the *next* request fail.
                .pool_max_idle_per_host(0)
                .build()
                .expect("reqwest client"),
            url: url.to_string(),
            bearer: bearer.map(str::to_string),
        }
    }

    /// The per-request `_meta` of the 2026-07-28 lifecycle, declaring the
    /// tasks extension.
    fn meta() -> Value {
        json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "raw-http-test", "version": "0.0.0"},
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS_EXTENSION: {}}},
        })
    }

    /// A JSON-RPC request with `params` (plus `_meta`).
    fn request(id: u64, method: &str, mut params: Value) -> String {
        params["_meta"] = Self::meta();
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
    }

    /// POST `body` with the standard headers; `mcp_name` is the `Mcp-Name`
    /// header the method needs (tool name or task id).
    async fn post(
        &self,
        method: &str,
        mcp_name: Option<&str>,
        body: impl Into<reqwest::Body>,
    ) -> RawResponse {
        let mut request = self
            .http
            .post(&self.url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", "2026-07-28")
            .header("Mcp-Method", method)
            .body(body);
        if let Some(name) = mcp_name {
            request = request.header("Mcp-Name", name);
        }
        if let Some(token) = &self.bearer {
            request = request.bearer_auth(token);
        }
        let response = request
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {method} to {}: no response ({e})", self.url));
        let status = response.status().as_u16();
        let body = response.text().await.unwrap_or_default();
        let json = serde_json::from_str(&body).ok();
        RawResponse { status, body, json }
    }
}

// ---------------------------------------------------------------------------

/// A task belongs to the principal that created it: to anyone else it does not
/// exist (same error and message as an unknown id), and they cannot answer or
/// cancel it. Requests without a known bearer token never reach MCP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_are_private_to_their_principal() {
    let db = TestDatabase::sqlite();
    with_deadline(TEST_LIMIT, async {
        let server = DemoServer::start(
            &db.url,
            &["--auth-token", "tokA=alice", "--auth-token", "tokB=bob"],
        )
        .await;
        let alice = server
            .client_with(Some("tokA"), Lifecycle::Modern { tasks: true })
            .await;
        let bob = server
            .client_with(Some("tokB"), Lifecycle::Modern { tasks: true })
            .await;

        let secret = alice
            .start_task("confirm_delete", json!({"filename": "alice-secret.txt"}))
            .await;
        wait_status(&alice, &secret, "input_required", WAIT).await;

        let unknown = rpc_error(
            &bob.get("0123456789abcdef0123456789abcdef")
                .await
                .expect_err("unknown id"),
        );
        assert_eq!(unknown.code.0, -32602, "{unknown:?}");

        let foreign = rpc_error(
            &bob.get(&secret)
                .await
                .expect_err("bob must not read alice's task"),
        );
        assert_eq!(foreign.code.0, -32602, "{foreign:?}");
        assert_eq!(
            foreign.message, unknown.message,
            "a foreign task must look exactly like an unknown one"
        );

        let answer = json!({"confirm_delete": {"action": "accept", "content": {"confirm": true}}});
        let update = rpc_error(
            &bob.update(&secret, answer)
                .await
                .expect_err("bob must not answer alice's task"),
        );
        assert_eq!(
            (update.code.0, &update.message),
            (-32602, &unknown.message),
            "{update:?}"
        );
        let cancel = rpc_error(
            &bob.cancel(&secret)
                .await
                .expect_err("bob must not cancel alice's task"),
        );
        assert_eq!(
            (cancel.code.0, &cancel.message),
            (-32602, &unknown.message),
            "{cancel:?}"
        );

        // Alice's unknown ids look the same as bob's.
        let alice_unknown = rpc_error(
            &alice
                .get("0123456789abcdef0123456789abcdef")
                .await
                .expect_err("unknown id"),
        );
        assert_eq!(alice_unknown.message, unknown.message);

        // Bob's attempts changed nothing: still waiting for alice's answer.
        let still = wire(&alice.get(&secret).await.expect("alice reads her task"));
        assert_eq!(status(&still), "input_required", "{still:#}");
        assert_eq!(input_keys(&still), ["confirm_delete"], "{still:#}");

        // No token, or an unknown one: HTTP 401 before any MCP processing.
        let get = Raw::request(1, "tasks/get", json!({"taskId": secret}));
        for bearer in [None, Some("not-a-token")] {
            let raw = Raw::new(&server.url, bearer);
            let response = raw.post("tasks/get", Some(&secret), get.clone()).await;
            assert_eq!(response.status, 401, "bearer {bearer:?}: {response:?}");
            assert!(!response.body.contains("alice-secret"), "{response:?}");
        }
        let call = Raw::request(2, "tools/call", json!({"name": "greet", "arguments": {}}));
        let response = Raw::new(&server.url, None)
            .post("tools/call", Some("greet"), call)
            .await;
        assert_eq!(response.status, 401, "{response:?}");
        // The same request with alice's token works (the 401s were about the token).
        let response = Raw::new(&server.url, Some("tokA"))
            .post("tasks/get", Some(&secret), get)
            .await;
        assert_eq!(response.status, 200, "{response:?}");
        assert_eq!(
            response.json.as_ref().unwrap()["result"]["taskId"],
            secret.as_str(),
            "{response:?}"
        );

        // Alice can still finish her task.
        alice
            .update(
                &secret,
                json!({"confirm_delete": {"action": "accept", "content": {"confirm": false}}}),
            )
            .await
            .expect("alice answers");
        let done = wait_terminal(&alice, &secret, WAIT).await;
        assert_eq!(status(&done), "completed", "{done:#}");
        assert_eq!(result_text(&done), "Kept alice-secret.txt");
    })
    .await;
}

/// Tasks only for clients that declare the extension on a 2026-07-28 request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_only_for_declaring_clients() {
    let db = TestDatabase::sqlite();
    with_deadline(TEST_LIMIT, async {
        let server = DemoServer::start(&db.url, &[]).await;
        let modern = server.client().await;
        let task = modern
            .start_task("slow_compute", json!({"seconds": 30}))
            .await;

        // Legacy (initialize) session: a task-optional tool runs synchronously.
        let legacy = server.client_with(None, Lifecycle::Legacy).await;
        match legacy
            .call("slow_compute", json!({"seconds": 0.1}))
            .await
            .expect("legacy tools/call")
        {
            CallToolResponse::Complete(result) => {
                let result = serde_json::to_value(&result).unwrap();
                assert_eq!(
                    result["content"][0]["text"], "compute: computed in 0.1s",
                    "{result:#}"
                );
                assert!(result.get("taskId").is_none(), "{result:#}");
            }
            other => panic!("a legacy client must get a plain CallToolResult, got {other:?}"),
        }
        // … and the tasks methods are not there for it, even for a real task id.
        let legacy_get = legacy
            .get(&task)
            .await
            .expect_err("legacy tasks/get must fail");
        assert!(
            error_code(&legacy_get).is_some(),
            "expected a JSON-RPC error from the server: {legacy_get:?}"
        );

        // 2026-07-28 without declaring the extension.
        let plain = server
            .client_with(None, Lifecycle::Modern { tasks: false })
            .await;
        match plain
            .call("slow_compute", json!({"seconds": 0.1}))
            .await
            .expect("tools/call")
        {
            CallToolResponse::Complete(result) => {
                let result = serde_json::to_value(&result).unwrap();
                assert_eq!(
                    result["content"][0]["text"], "compute: computed in 0.1s",
                    "{result:#}"
                );
            }
            other => {
                panic!("a non-declaring client must get a plain CallToolResult, got {other:?}")
            }
        }
        let required = rpc_error(
            &plain
                .call("failing_job", json!({}))
                .await
                .expect_err("task-required tool"),
        );
        assert_eq!(required.code.0, -32021, "{required:?}");
        let data = required.data.clone().unwrap_or_default();
        assert!(
            data["requiredCapabilities"]["extensions"]
                .get(TASKS_EXTENSION)
                .is_some(),
            "-32021 must name the required extension: {required:?}"
        );
        // Synchronous tools work for everybody.
        match plain
            .call("greet", json!({"name": "Ada"}))
            .await
            .expect("greet")
        {
            CallToolResponse::Complete(result) => {
                assert_eq!(
                    serde_json::to_value(&result).unwrap()["content"][0]["text"],
                    "Hello, Ada!"
                )
            }
            other => panic!("greet: {other:?}"),
        }

        // The declaring client's task is unharmed by all of this.
        let still = wire(&modern.get(&task).await.expect("tasks/get"));
        assert_eq!(status(&still), "working", "{still:#}");
        modern.cancel(&task).await.expect("tasks/cancel");
        let end = wait_terminal(&modern, &task, WAIT).await;
        assert_eq!(status(&end), "cancelled", "{end:#}");
    })
    .await;
}

/// SEP-2663: "Servers MUST return -32021 for non-declaring clients issuing
/// tasks/get, tasks/update, and tasks/cancel requests."
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_methods_need_the_extension_declared() {
    let db = TestDatabase::sqlite();
    with_deadline(TEST_LIMIT, async {
        let server = DemoServer::start(&db.url, &[]).await;
        let modern = server.client().await;
        let task = modern
            .start_task("confirm_delete", json!({"filename": "gated.txt"}))
            .await;
        wait_status(&modern, &task, "input_required", WAIT).await;

        let plain = server
            .client_with(None, Lifecycle::Modern { tasks: false })
            .await;
        let get = plain
            .get(&task)
            .await
            .expect_err("tasks/get without the extension");
        assert_eq!(error_code(&get), Some(-32021), "{get:?}");
        let answer = json!({"confirm_delete": {"action": "accept", "content": {"confirm": true}}});
        let update = plain
            .update(&task, answer)
            .await
            .expect_err("tasks/update without the extension");
        assert_eq!(error_code(&update), Some(-32021), "{update:?}");
        let cancel = plain
            .cancel(&task)
            .await
            .expect_err("tasks/cancel without the extension");
        assert_eq!(error_code(&cancel), Some(-32021), "{cancel:?}");

        let still = wire(&modern.get(&task).await.expect("tasks/get"));
        assert_eq!(status(&still), "input_required", "{still:#}");
    })
    .await;
}

/// Broken, oversized and nonsensical requests get clear client errors (never
/// a 5xx or a hang), and no stored task is harmed by them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_and_harms_nothing() {
    let db = TestDatabase::sqlite();
    with_deadline(TEST_LIMIT, async {
        let server = DemoServer::start(
            &db.url,
            &["--max-arguments-bytes", "1000", "--max-body-bytes", "65536"],
        )
        .await;
        let client = server.client().await;
        let raw = Raw::new(&server.url, None);

        // A task created before the onslaught.
        let keep = client.start_task("confirm_delete", json!({"filename": "keep.txt"})).await;
        wait_status(&client, &keep, "input_required", WAIT).await;

        // The raw client is a valid client to begin with.
        let ok = raw
            .post("tasks/get", Some(&keep), Raw::request(1, "tasks/get", json!({"taskId": keep})))
            .await;
        assert_eq!(ok.status, 200, "{ok:?}");
        assert_eq!(ok.json.as_ref().unwrap()["result"]["status"], "input_required", "{ok:?}");

        // Malformed JSON: a parse error or a 4xx, never a 5xx.
        for body in [r#"{"jsonrpc":"2.0","id":2,"method":"tasks/get","params":{"taskId":"#, "not json at all", ""] {
            let r = raw.post("tasks/get", None, body).await;
            assert!(
                (400..500).contains(&r.status) || r.error_code() == Some(-32700),
                "malformed body {body:?}: {r:?}"
            );
        }

        // tasks/get without a taskId: a client error (its exact code is checked
        // by `tasks_params_of_the_wrong_shape_are_invalid_params`).
        let r = raw.post("tasks/get", None, Raw::request(3, "tasks/get", json!({}))).await;
        assert!(r.status < 500 && r.error_code().is_some(), "{r:?}");

        // Unknown and absurd task ids: -32602, the same for every method.
        let unknown = "ffffffffffffffffffffffffffffffff";
        let long = "x".repeat(4000);
        for id in [unknown, long.as_str(), "'; DROP TABLE tasks; --"] {
            let r = raw.post("tasks/get", Some(id), Raw::request(4, "tasks/get", json!({"taskId": id}))).await;
            assert_eq!(r.error_code(), Some(-32602), "tasks/get {id:.40}: {r:?}");
            assert!(r.status < 500, "{r:?}");
            let params = json!({"taskId": id, "inputResponses": {"confirm_delete": {"action": "accept", "content": {"confirm": true}}}});
            let r = raw.post("tasks/update", Some(id), Raw::request(5, "tasks/update", params)).await;
            assert_eq!(r.error_code(), Some(-32602), "tasks/update {id:.40}: {r:?}");
            let r = raw.post("tasks/cancel", Some(id), Raw::request(6, "tasks/cancel", json!({"taskId": id}))).await;
            assert_eq!(r.error_code(), Some(-32602), "tasks/cancel {id:.40}: {r:?}");
        }
        let e = rpc_error(&client.get(unknown).await.expect_err("unknown id"));
        assert_eq!(e.code.0, -32602, "{e:?}");

        // Arguments over --max-arguments-bytes: -32602 naming the limit, no task.
        let big = "y".repeat(2000);
        let e = rpc_error(
            &client
                .call("slow_compute", json!({"seconds": 0.1, "label": big}))
                .await
                .expect_err("oversized arguments"),
        );
        assert_eq!(e.code.0, -32602, "{e:?}");
        assert!(e.message.contains("1000"), "the error must name the limit: {e:?}");
        let params = json!({"name": "slow_compute", "arguments": {"seconds": 0.1, "label": big}});
        let r = raw.post("tools/call", Some("slow_compute"), Raw::request(7, "tools/call", params)).await;
        assert_eq!(r.error_code(), Some(-32602), "{r:?}");
        assert!(r.error_message().contains("1000"), "{r:?}");

        // A body over --max-body-bytes: 413 (or a clear error), never a 5xx.
        let huge = "z".repeat(200_000);
        let params = json!({"name": "greet", "arguments": {"name": huge}});
        let r = raw.post("tools/call", Some("greet"), Raw::request(8, "tools/call", params)).await;
        assert!(
            r.status == 413 || (r.status < 500 && r.error_code().is_some()),
            "oversized body: {} {:.300}",
            r.status,
            r.body
        );

        // Answers of the wrong shape to the real task: refused, not stored.
        for responses in [json!({"confirm_delete": "yes"}), json!(["confirm_delete"]), json!(null)] {
            let params = json!({"taskId": keep, "inputResponses": responses});
            let r = raw.post("tasks/update", Some(&keep), Raw::request(9, "tasks/update", params)).await;
            assert!(r.status < 500 && r.error_code().is_some(), "{responses}: {r:?}");
        }

        // The task from before is intact and still completes.
        let still = wire(&client.get(&keep).await.expect("tasks/get after bad input"));
        assert_eq!(status(&still), "input_required", "{still:#}");
        assert_eq!(input_keys(&still), ["confirm_delete"], "{still:#}");
        client
            .update(&keep, json!({"confirm_delete": {"action": "accept", "content": {"confirm": true}}}))
            .await
            .expect("tasks/update");
        let done = wait_terminal(&client, &keep, WAIT).await;
        assert_eq!(status(&done), "completed", "{done:#}");
        assert_eq!(result_text(&done), "Deleted keep.txt");

        // And the server still creates and runs new tasks.
        let fresh = client.start_task("slow_compute", json!({"seconds": 0.1})).await;
        let fresh = wait_terminal(&client, &fresh, WAIT).await;
        assert_eq!(status(&fresh), "completed", "{fresh:#}");
    })
    .await;
}

/// `tasks/*` requests whose params do not have the shape of the method (no
/// `taskId`, an `inputResponses` that is not a map of objects) are Invalid
/// params (-32602), not "method not found" (-32601): the method exists.
///
/// Regression: rmcp parses such a request as a custom request (its typed
/// params do not deserialize); without `DurableTaskServer::on_custom_request`
/// the default answered -32601 with HTTP 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_params_of_the_wrong_shape_are_invalid_params() {
    let db = TestDatabase::sqlite();
    with_deadline(TEST_LIMIT, async {
        let server = DemoServer::start(&db.url, &[]).await;
        let client = server.client().await;
        let raw = Raw::new(&server.url, None);
        let task = client
            .start_task("confirm_delete", json!({"filename": "shape.txt"}))
            .await;
        wait_status(&client, &task, "input_required", WAIT).await;

        let mut failures = Vec::new();
        for method in ["tasks/get", "tasks/update", "tasks/cancel"] {
            let r = raw
                .post(method, None, Raw::request(1, method, json!({})))
                .await;
            if r.error_code() != Some(-32602) {
                failures.push(format!(
                    "{method} without taskId: HTTP {} {}",
                    r.status, r.body
                ));
            }
        }
        for responses in [json!({"confirm_delete": "yes"}), json!(["confirm_delete"])] {
            let params = json!({"taskId": task, "inputResponses": responses});
            let r = raw
                .post(
                    "tasks/update",
                    Some(&task),
                    Raw::request(2, "tasks/update", params),
                )
                .await;
            if r.error_code() != Some(-32602) {
                failures.push(format!(
                    "tasks/update with inputResponses {responses}: HTTP {} {}",
                    r.status, r.body
                ));
            }
        }
        assert!(
            failures.is_empty(),
            "expected -32602 (Invalid params):\n{}",
            failures.join("\n")
        );

        let still = wire(&client.get(&task).await.expect("tasks/get"));
        assert_eq!(status(&still), "input_required", "{still:#}");
    })
    .await;
}
