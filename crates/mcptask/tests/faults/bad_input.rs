//! Bad input: generated JSON-RPC bodies and headers sent to the demo server
//! (Streamable HTTP) and generated requests sent to the gateway's HTTP API
//! (random methods, params shapes, sizes, ids with control characters,
//! invalid UTF-8). Whatever comes in:
//! - never a 5xx (a panic, or a store failure caused by the input);
//! - never a stored task changed by a rejected request;
//! - task ids and input keys with control characters are rejected with
//!   `-32602` (MCP) / HTTP 400 (API);
//! - the store's error text (driver messages, SQL, file paths) never reaches
//!   the client.
//!
//! Both processes run on PostgreSQL when it is available (where a NUL byte
//! in a text parameter is an error of the database itself), else on SQLite.
//! Cases are generated with proptest's strategies (a random seed each run;
//! a failing case is printed in full) and kept few enough to run in seconds.

use std::time::Duration;

use mcptask_testkit::mcp::wire;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use serde_json::{Value, json};

use mcptask_testkit::*;

const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";
/// Generated requests per surface.
const CASES: usize = 120;

/// Pieces of text the store's errors carry; none may reach a client.
const STORE_MARKERS: &[&str] = &[
    "sqlx",
    "SQLITE",
    "sqlite",
    "database error",
    "error returned from database",
    "invalid byte sequence",
    "violates",
    "constraint",
    "server_tasks",
    "remote_tasks",
    "postgres",
    "syntax error",
];

fn assert_no_store_text(body: &str, case: &dyn std::fmt::Debug) {
    for marker in STORE_MARKERS {
        assert!(
            !body.contains(marker),
            "store error text ({marker:?}) echoed to the client for {case:#?}: {body:.500}"
        );
    }
}

fn has_control(s: &str) -> bool {
    s.chars().any(char::is_control)
}

/// Text that is likely to hold control characters (C0, DEL, C1, NUL).
fn nasty_text(max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            3 => prop::char::range('a', 'z'),
            2 => prop::char::range('\u{0}', '\u{1f}'),
            1 => Just('\u{7f}'),
            1 => prop::char::range('\u{80}', '\u{9f}'),
            1 => any::<char>(),
        ],
        0..max,
    )
    .prop_map(String::from_iter)
}

/// A JSON value of any shape, a few levels deep.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        nasty_text(24).prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::from),
            prop::collection::btree_map(nasty_text(10), inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A task id as an attacker would send it: a real id decorated with a
/// control character, control-laden text, a huge string or not a string.
fn task_id(real: Vec<String>) -> impl Strategy<Value = Value> {
    let decorated = (
        prop::sample::select(real),
        prop::char::range('\u{0}', '\u{1f}'),
        any::<bool>(),
    )
        .prop_map(|(id, c, front)| {
            Value::from(if front {
                format!("{c}{id}")
            } else {
                format!("{id}{c}")
            })
        });
    prop_oneof![
        4 => decorated,
        3 => nasty_text(40).prop_map(Value::from),
        1 => (1usize..20_000).prop_map(|n| Value::from("x".repeat(n))),
        1 => any_json(),
    ]
}

#[derive(Debug, Clone)]
struct McpCase {
    method: String,
    params: Value,
    rpc_id: Value,
    /// Send these bytes instead of the JSON request.
    raw_body: Option<Vec<u8>>,
    /// Replace a byte of the JSON text with an invalid UTF-8 byte.
    break_utf8: bool,
    content_type: &'static str,
    accept: &'static str,
    protocol_version: &'static str,
    with_meta: bool,
}

fn mcp_case(real: Vec<String>, input_task: String) -> impl Strategy<Value = McpCase> {
    let real_input = input_task.clone();
    let method = prop_oneof![
        3 => Just("tasks/get".to_string()),
        3 => Just("tasks/update".to_string()),
        3 => Just("tasks/cancel".to_string()),
        1 => Just("tools/call".to_string()),
        1 => Just("tools/list".to_string()),
        1 => Just("server/discover".to_string()),
        1 => nasty_text(20),
    ];
    let key = prop_oneof![nasty_text(12), Just("confirm_delete".to_string())];
    let responses = prop_oneof![
        prop::collection::btree_map(key, any_json(), 0..4)
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        any_json(),
    ];
    let target = prop_oneof![task_id(real), Just(Value::from(input_task.clone()))];
    let params = (target, responses, any_json(), any::<u8>()).prop_map(
        move |(id, mut responses, other, shape)| {
            // The real task may only be sent what must be refused: answers
            // always carry a key with a control character.
            if id == input_task.as_str()
                && let Some(map) = responses.as_object_mut()
            {
                map.insert("\u{0}bad".into(), json!({}));
            }
            match shape % 4 {
                0 => json!({"taskId": id}),
                1 => json!({"taskId": id, "inputResponses": responses}),
                2 => json!({"name": id, "arguments": other}),
                _ => other,
            }
        },
    );
    let rpc_id = prop_oneof![
        any::<i64>().prop_map(Value::from),
        nasty_text(16).prop_map(Value::from),
        Just(Value::Null),
        any_json(),
    ];
    let raw_body = prop::option::weighted(0.15, prop::collection::vec(any::<u8>(), 0..200));
    (
        method,
        params,
        rpc_id,
        raw_body,
        prop::bool::weighted(0.15),
        prop::sample::select(vec![
            "application/json",
            "application/json",
            "text/plain",
            "application/json; charset=latin1",
            "",
        ]),
        prop::sample::select(vec![
            "application/json, text/event-stream",
            "application/json, text/event-stream",
            "text/html",
            "*/*",
        ]),
        prop::sample::select(vec![
            "2026-07-28",
            "2026-07-28",
            "2025-11-25",
            "1999-01-01",
            "\u{7f}",
        ]),
        prop::bool::weighted(0.85),
        // Most cases keep a well-formed envelope, so that the generated
        // params reach the handler rather than the transport's checks.
        prop::bool::weighted(0.7),
        any::<i64>(),
    )
        .prop_map(
            move |(
                method,
                params,
                rpc_id,
                raw_body,
                break_utf8,
                content_type,
                accept,
                protocol_version,
                with_meta,
                clean,
                number,
            )| {
                let (
                    rpc_id,
                    raw_body,
                    break_utf8,
                    content_type,
                    accept,
                    protocol_version,
                    with_meta,
                ) = if clean {
                    (
                        Value::from(number),
                        None,
                        false,
                        "application/json",
                        "application/json, text/event-stream",
                        "2026-07-28",
                        true,
                    )
                } else {
                    (
                        rpc_id,
                        raw_body,
                        break_utf8,
                        content_type,
                        accept,
                        protocol_version,
                        with_meta,
                    )
                };
                McpCase {
                    // A valid cancel of the real task would be honoured: ask instead.
                    method: if method == "tasks/cancel" && params["taskId"] == real_input.as_str() {
                        "tasks/get".into()
                    } else {
                        method
                    },
                    params,
                    rpc_id,
                    raw_body,
                    break_utf8,
                    content_type,
                    accept,
                    protocol_version,
                    with_meta,
                }
            },
        )
}

impl McpCase {
    /// Whether this is a well-formed task request whose task id or input key
    /// holds a control character: it must be answered `-32602` (or HTTP 400).
    fn must_be_invalid_params(&self) -> bool {
        if self.raw_body.is_some() || self.break_utf8 || !self.standard_headers() || !self.with_meta
        {
            return false;
        }
        // Not a JSON-RPC request at all without a string or number id.
        if !(self.rpc_id.is_string() || self.rpc_id.is_i64()) {
            return false;
        }
        if !matches!(
            self.method.as_str(),
            "tasks/get" | "tasks/update" | "tasks/cancel"
        ) {
            return false;
        }
        let id_bad = self.params["taskId"].as_str().is_some_and(has_control);
        let keys_bad = self.method == "tasks/update"
            && self.params["inputResponses"]
                .as_object()
                .is_some_and(|m| m.keys().any(|k| has_control(k)));
        id_bad || keys_bad
    }

    fn standard_headers(&self) -> bool {
        self.content_type == "application/json"
            && self.accept == "application/json, text/event-stream"
            && self.protocol_version == "2026-07-28"
    }

    fn body(&self) -> Vec<u8> {
        if let Some(raw) = &self.raw_body {
            return raw.clone();
        }
        let mut params = self.params.clone();
        if self.with_meta && params.is_object() {
            params["_meta"] = json!({
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "fuzz", "version": "0.0.0"},
                "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS_EXTENSION: {}}},
            });
        }
        let mut bytes =
            json!({"jsonrpc": "2.0", "id": self.rpc_id, "method": self.method, "params": params})
                .to_string()
                .into_bytes();
        if self.break_utf8 && bytes.len() > 20 {
            let at = bytes.len() / 2;
            bytes[at] = 0xff;
        }
        bytes
    }
}

async fn send_mcp(http: &reqwest::Client, url: &str, case: &McpCase) -> (u16, String) {
    let mut request = http.post(url).body(case.body());
    let mut header = |name: &str, value: &str| {
        if let Ok(v) = reqwest::header::HeaderValue::from_str(value) {
            request = std::mem::replace(&mut request, http.get(url)).header(name, v);
        }
    };
    if !case.content_type.is_empty() {
        header("Content-Type", case.content_type);
    }
    header("Accept", case.accept);
    header("MCP-Protocol-Version", case.protocol_version);
    header("Mcp-Method", &case.method);
    let name = case.params["taskId"]
        .as_str()
        .or(case.params["name"].as_str())
        .map(str::to_string);
    if let Some(name) = name {
        header("Mcp-Name", &name);
    }
    let response = request
        .send()
        .await
        .unwrap_or_else(|e| panic!("no answer to {case:#?}: {e}"));
    let status = response.status().as_u16();
    let body = response.text().await.unwrap_or_default();
    (status, body)
}

/// The JSON-RPC error code of a response body (plain JSON or one SSE event).
fn rpc_error_code(body: &str) -> Option<i64> {
    let json: Value = serde_json::from_str(body).ok().or_else(|| {
        body.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .find_map(|d| serde_json::from_str(d.trim()).ok())
    })?;
    json["error"]["code"].as_i64()
}

/// The stored tasks every case must leave alone, as the server and the
/// gateway show them.
struct Witnesses {
    /// Server task ids: completed, input_required, working.
    server: Vec<String>,
    /// GatewayProcess task ids (tracking the server tasks above).
    gateway: Vec<String>,
}

async fn server_state(client: &mcptask_testkit::mcp::TestClient, ids: &[String]) -> Vec<Value> {
    let mut out = Vec::new();
    for id in ids {
        let mut w = wire(&client.get(id).await.expect("tasks/get a witness"));
        // Changes by the passage of time alone: the update time, and a
        // working task's progress message ("compute: 596s left").
        let w_obj = w.as_object_mut().unwrap();
        w_obj.remove("lastUpdatedAt");
        if w_obj.get("status").and_then(Value::as_str) == Some("working") {
            w_obj.remove("statusMessage");
        }
        out.push(w);
    }
    out
}

async fn gateway_state(api: &Api, ids: &[String]) -> Vec<Value> {
    let mut out = Vec::new();
    for id in ids {
        let t = api.task(id).await;
        out.push(json!({
            "status": t["status"], "result": t["result"], "error": t["error"],
            "inputRequests": t["inputRequests"], "inputs": t["inputs"],
            "eventVersion": t["notifications"]["eventVersion"],
            "cancelRequested": t["cancelRequestedAt"],
        }));
    }
    out
}

async fn setup() -> (TestDatabase, DemoServer, GatewayProcess, Witnesses) {
    let db = match TestDatabase::postgres().await {
        Some(db) => db,
        None => TestDatabase::sqlite(),
    };
    let server = DemoServer::start(&db.url, &[]).await;
    let gateway = GatewayProcess::start(
        "gateway",
        &GatewaySpec::open(&db.url, &[("demo", &server.url)]),
    )
    .await;
    let api = gateway.client(None);
    let done = api
        .start_task("slow_compute", json!({"seconds": 0.1, "label": "done"}))
        .await;
    let ask = api
        .start_task("confirm_delete", json!({"filename": "keep.txt"}))
        .await;
    let long = api
        .start_task("slow_compute", json!({"seconds": 600}))
        .await;
    let gateway_ids: Vec<String> = [&done, &ask, &long]
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_string())
        .collect();
    api.wait_status(&gateway_ids[0], "completed").await;
    api.wait_status(&gateway_ids[1], "input_required").await;
    let mut server_ids = Vec::new();
    for id in &gateway_ids {
        let t = api.task(id).await;
        server_ids.push(
            t["remoteTaskId"]
                .as_str()
                .expect("remoteTaskId (operator view)")
                .to_string(),
        );
    }
    (
        db,
        server,
        gateway,
        Witnesses {
            server: server_ids,
            gateway: gateway_ids,
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_jsonrpc_never_5xx_never_changes_tasks() {
    with_deadline(Duration::from_secs(120), async {
        let (_db, server, _gateway, witnesses) = setup().await;
        let client = server.client().await;
        let before = server_state(&client, &witnesses.server).await;
        // reqwest panics without a TLS provider installed first.
        mcptask_client::tls::install_crypto_provider();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap();
        let strategy = mcp_case(witnesses.server.clone(), witnesses.server[1].clone());
        let mut runner = TestRunner::default();
        let (mut invalid_params, mut statuses) = (0, std::collections::BTreeMap::new());
        for _ in 0..CASES {
            let case = strategy.new_tree(&mut runner).expect("generate a case").current();
            let (status, body) = send_mcp(&http, &server.url, &case).await;
            *statuses.entry(status).or_insert(0) += 1;
            assert!(status < 500, "HTTP {status} for {case:#?}: {body:.500}");
            assert_no_store_text(&body, &case);
            if case.must_be_invalid_params() {
                invalid_params += 1;
                assert!(
                    status == 400 || rpc_error_code(&body) == Some(-32602),
                    "a control character in a task id or input key must be -32602/400: HTTP {status} {body:.300} for {case:#?}"
                );
            }
        }
        assert_eq!(
            server_state(&client, &witnesses.server).await,
            before,
            "a rejected request changed a stored task"
        );
        eprintln!(
            "bad_input::jsonrpc: {CASES} generated requests (HTTP statuses {statuses:?}), \
             {invalid_params} with control characters in a task id or input key (all -32602/400), \
             0 stored tasks changed"
        );
    })
    .await;
}

#[derive(Debug, Clone)]
struct ApiCase {
    method: reqwest::Method,
    path: String,
    body: Option<Vec<u8>>,
    content_type: &'static str,
    /// The path's task id holds a control character (after decoding).
    id_has_control: bool,
    /// The answers' keys hold a control character.
    keys_have_control: bool,
}

/// Percent-encode every byte that is not unreserved.
fn encode_bytes(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|&b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn api_case(real: Vec<String>) -> impl Strategy<Value = ApiCase> {
    // An id: real ones decorated with a control character, control text,
    // invalid UTF-8 or a huge string; as the raw bytes before encoding.
    let id = prop_oneof![
        3 => (prop::sample::select(real.clone()), prop::char::range('\u{0}', '\u{1f}'))
            .prop_map(|(id, c)| format!("{id}{c}").into_bytes()),
        2 => nasty_text(30).prop_map(String::into_bytes),
        1 => prop::collection::vec(any::<u8>(), 1..30),
        1 => (1usize..3000).prop_map(|n| vec![b'y'; n]),
    ];
    let key = prop_oneof![nasty_text(12), Just("confirm_delete".to_string())];
    let answers = prop::collection::btree_map(key, any_json(), 1..4).prop_map(|m| {
        json!({"answers": Value::Object(m.into_iter().collect())})
            .to_string()
            .into_bytes()
    });
    let call = (any_json(), nasty_text(12), any_json()).prop_map(|(server, tool, arguments)| {
        let server = if server.is_null() {
            Value::from("demo")
        } else {
            server
        };
        json!({"server": server, "tool": tool, "arguments": arguments})
            .to_string()
            .into_bytes()
    });
    let body = prop_oneof![
        2 => answers,
        1 => call,
        1 => any_json().prop_map(|v| v.to_string().into_bytes()),
        1 => prop::collection::vec(any::<u8>(), 0..300),
    ];
    let method = prop::sample::select(vec![
        reqwest::Method::GET,
        reqwest::Method::POST,
        reqwest::Method::POST,
        reqwest::Method::PUT,
        reqwest::Method::DELETE,
        reqwest::Method::PATCH,
    ]);
    let query = nasty_text(20).prop_map(|q| encode_bytes(q.as_bytes()));
    (
        prop::option::weighted(0.25, method),
        id,
        any::<u8>(),
        prop::option::weighted(0.8, body),
        query,
        prop::sample::select(vec![
            "application/json",
            "application/json",
            "text/plain",
            "",
        ]),
    )
        .prop_map(move |(method, id, route, body, query, content_type)| {
            let encoded = encode_bytes(&id);
            let id_text = String::from_utf8(id.clone());
            let id_has_control = id_text.as_deref().is_ok_and(has_control);
            let (path, task_route, right) = match route % 6 {
                0 => (
                    format!("/api/v1/tasks/{encoded}"),
                    true,
                    reqwest::Method::GET,
                ),
                1 => (
                    format!("/api/v1/tasks/{encoded}/cancel"),
                    true,
                    reqwest::Method::POST,
                ),
                2 | 3 => (
                    format!("/api/v1/tasks/{encoded}/answers"),
                    true,
                    reqwest::Method::POST,
                ),
                4 => ("/api/v1/calls".to_string(), false, reqwest::Method::POST),
                _ => (
                    format!("/api/v1/tasks?status={query}&server={query}&cursor={query}"),
                    false,
                    reqwest::Method::GET,
                ),
            };
            // Mostly the route's own method, so that handlers see the input.
            let method = method.unwrap_or(right);
            let keys_have_control = path.ends_with("/answers")
                && body.as_deref().is_some_and(|b| {
                    serde_json::from_slice::<Value>(b).ok().is_some_and(|v| {
                        v["answers"]
                            .as_object()
                            .is_some_and(|m| m.keys().any(|k| has_control(k)))
                    })
                });
            ApiCase {
                method,
                path,
                body,
                content_type,
                id_has_control: task_route && id_has_control,
                keys_have_control,
            }
        })
}

impl ApiCase {
    /// Whether the route matched and the request is otherwise well formed, so
    /// that the control character is what it must be refused for.
    fn must_be_bad_request(&self) -> bool {
        let route_method = if self.path.ends_with("/cancel") || self.path.ends_with("/answers") {
            reqwest::Method::POST
        } else {
            reqwest::Method::GET
        };
        if self.method != route_method || !self.path.starts_with("/api/v1/tasks/") {
            return false;
        }
        // Answers must be a well-formed body for the id to be looked at.
        if self.path.ends_with("/answers") {
            let answers = self
                .body
                .as_deref()
                .and_then(|b| serde_json::from_slice::<Value>(b).ok())
                .filter(|v| v.as_object().is_some_and(|o| o.len() == 1))
                .and_then(|v| v["answers"].as_object().map(|m| !m.is_empty()));
            if self.content_type != "application/json" || answers != Some(true) {
                return false;
            }
        }
        self.id_has_control
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_api_requests_never_5xx_never_change_tasks() {
    with_deadline(Duration::from_secs(120), async {
        let (_db, server, gateway, witnesses) = setup().await;
        let api = gateway.client(None);
        let client = server.client().await;
        let before = gateway_state(&api, &witnesses.gateway).await;
        let server_before = server_state(&client, &witnesses.server).await;
        let strategy = api_case(witnesses.gateway.clone());
        let mut runner = TestRunner::default();
        let (mut bad_requests, mut statuses) = (0, std::collections::BTreeMap::new());
        for _ in 0..CASES {
            let case = strategy.new_tree(&mut runner).expect("generate a case").current();
            let mut request = api.request(case.method.clone(), &case.path);
            if !case.content_type.is_empty() {
                request = request.header("Content-Type", case.content_type);
            }
            if let Some(body) = &case.body {
                request = request.body(body.clone());
            }
            let reply = api.send(request).await;
            *statuses.entry(reply.status).or_insert(0) += 1;
            // 502 is a remote error of a generated tools/call, passed on.
            assert!(
                reply.status < 500 || reply.status == 502,
                "HTTP {} for {case:#?}: {:.500}",
                reply.status,
                reply.text
            );
            assert_no_store_text(&reply.text, &case);
            if case.id_has_control {
                assert!((400..500).contains(&reply.status), "{case:#?}: {reply:#?}");
            }
            if case.must_be_bad_request() {
                bad_requests += 1;
                assert_eq!(reply.status, 400, "a control character in a task id: {case:#?}: {reply:#?}");
            }
            // An answer with a control-character key to a task one may see.
            if case.keys_have_control && reply.status != 404 && reply.status != 405 {
                assert!(
                    (400..500).contains(&reply.status),
                    "a control character in an input key: {case:#?}: {reply:#?}"
                );
            }
        }
        assert_eq!(gateway_state(&api, &witnesses.gateway).await, before, "a rejected request changed a tracked task");
        assert_eq!(server_state(&client, &witnesses.server).await, server_before, "a rejected request reached the server");
        eprintln!(
            "bad_input::api: {CASES} generated requests (HTTP statuses {statuses:?}), {bad_requests} \
             task ids with control characters (all 400), 0 stored tasks changed"
        );
    })
    .await;
}

/// Regression: the exact inputs the generators found, on every run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_characters_in_ids_and_keys_are_invalid_params() {
    with_deadline(Duration::from_secs(120), async {
        let (_db, server, gateway, witnesses) = setup().await;
        // reqwest panics without a TLS provider installed first.
        mcptask_client::tls::install_crypto_provider();
        let http = reqwest::Client::new();
        let ask = &witnesses.server[1];
        let client = server.client().await;
        let before = server_state(&client, &witnesses.server).await;
        let base = McpCase {
            method: String::new(),
            params: Value::Null,
            rpc_id: json!(1),
            raw_body: None,
            break_utf8: false,
            content_type: "application/json",
            accept: "application/json, text/event-stream",
            protocol_version: "2026-07-28",
            with_meta: true,
        };
        for id in [format!("{ask}\u{0}"), format!("\n{ask}"), "\u{0}".to_string(), format!("{ask}\u{7f}")] {
            for method in ["tasks/get", "tasks/cancel", "tasks/update"] {
                let case = McpCase {
                    method: method.into(),
                    params: json!({"taskId": id, "inputResponses": {"confirm_delete": {"action": "decline"}}}),
                    ..base.clone()
                };
                let (status, body) = send_mcp(&http, &server.url, &case).await;
                assert!(
                    status == 400 || rpc_error_code(&body) == Some(-32602),
                    "{method} {id:?}: HTTP {status} {body:.300}"
                );
                assert_no_store_text(&body, &case);
            }
        }
        for key in ["confirm\u{0}delete", "confirm_delete\n", "\u{1b}[2J"] {
            let case = McpCase {
                method: "tasks/update".into(),
                params: json!({"taskId": ask, "inputResponses": {key: {"action": "accept", "content": {"confirm": true}}}}),
                ..base.clone()
            };
            let (status, body) = send_mcp(&http, &server.url, &case).await;
            assert!(
                status == 400 || rpc_error_code(&body) == Some(-32602),
                "input key {key:?}: HTTP {status} {body:.300}"
            );
        }
        assert_eq!(server_state(&client, &witnesses.server).await, before);

        let api = gateway.client(None);
        let real = &witnesses.gateway[1];
        for path in [
            format!("/api/v1/tasks/{real}%00"),
            format!("/api/v1/tasks/%0A{real}"),
            "/api/v1/tasks/%00".to_string(),
        ] {
            api.get(&path).await.assert_error(400, "bad_request");
            api.post(&format!("{path}/cancel"), &json!({})).await.assert_error(400, "bad_request");
        }
        // Invalid UTF-8 in the id: a client error, never the store's.
        let r = api.get("/api/v1/tasks/%FF%FE").await;
        assert!((400..500).contains(&r.status), "{r:#?}");
        for key in ["confirm\u{0}delete", "confirm_delete\n"] {
            let body = json!({"answers": {key: {"action": "accept", "content": {"confirm": true}}}});
            api.post(&format!("/api/v1/tasks/{real}/answers"), &body)
                .await
                .assert_error(400, "bad_request");
        }
        let t = api.task(real).await;
        assert_eq!(t["status"], "input_required", "{t:#}");
    })
    .await;
}
