//! The gateway's HTTP surface over real HTTP: a real `mcptask serve` process
//! tracking tasks of a real `mcptask demo-server` process.
//!
//! - Every route of the router: `/api/v1/tasks` (filters, limit bounds,
//!   cursor pagination), `/api/v1/tasks/{id}`, `…/cancel`, `…/answers`,
//!   `/api/v1/calls` (completed and task outcomes, `waitMs`, unknown server,
//!   unknown tool, bad arguments), `/api/v1/servers`, `/api/v1/events` (SSE),
//!   `/metrics`, `/healthz`, `/openapi.json` (every route of the router is
//!   described) and `/` (the dashboard).
//! - Auth: missing or unknown tokens get 401 `unauthorized`; principal tokens
//!   only see, cancel and answer their own tasks (others' are 404) while
//!   operator tokens see all; `auth = "none"` needs no token.
//! - Errors are JSON with stable codes: bad JSON 400 `bad_request`, wrong
//!   content type 415, oversized bodies 413 `payload_too_large`, unknown ids
//!   404 `not_found`.
//! - `/metrics` parses as Prometheus text and moves when tasks run.
//! - `mcptask demo --once` in a fresh directory exits 0 once its three tasks
//!   have settled.

use std::collections::BTreeSet;
use std::time::Duration;

use mcptask_testkit::*;
use serde_json::{Value, json};

const TEST_LIMIT: Duration = Duration::from_secs(420);

/// A demo server and a gateway in front of it (separate SQLite files).
struct Stack {
    gateway: GatewayProcess,
    server: DemoServer,
    _dbs: (TestDatabase, TestDatabase),
}

async fn stack(spec: impl FnOnce(&str, &str) -> GatewaySpec) -> Stack {
    stack_with_env(spec, &[]).await
}

async fn stack_with_env(
    spec: impl FnOnce(&str, &str) -> GatewaySpec,
    env: &[(&str, &str)],
) -> Stack {
    let server_db = TestDatabase::sqlite();
    let gateway_db = TestDatabase::sqlite();
    let server = DemoServer::start(&server_db.url, &[]).await;
    let spec = spec(&gateway_db.url, &server.url);
    let gateway = GatewayProcess::start_with_env("gateway", &spec, env).await;
    Stack {
        gateway,
        server,
        _dbs: (server_db, gateway_db),
    }
}

async fn token_stack(max_body_bytes: Option<usize>) -> Stack {
    stack(|db, url| GatewaySpec {
        max_body_bytes,
        ..GatewaySpec::with_tokens(db, &[("demo", url)])
    })
    .await
}

/// `(path, method)` of every `.route("PATH", METHOD(…))` of the router, read
/// from its source so that a new route cannot go undescribed.
fn router_routes() -> Vec<(String, String)> {
    let source = std::fs::read_to_string(repo_root().join("crates/mcptask-gateway/src/api/mod.rs"))
        .expect("read the router's source");
    let mut routes = Vec::new();
    for piece in source.split(".route(\"").skip(1) {
        let (path, rest) = piece.split_once('"').expect("a quoted route path");
        let method = rest
            .trim_start_matches([',', ' ', '\n'])
            .split('(')
            .next()
            .unwrap_or("")
            .trim()
            .to_string();
        assert!(
            ["get", "post", "put", "patch", "delete"].contains(&method.as_str()),
            "cannot read the method of route {path}: {rest:.60}"
        );
        routes.push((path.to_string(), method));
    }
    routes
}

/// The protected routes, with a request each (a valid body for POSTs).
fn protected_requests() -> Vec<(reqwest::Method, &'static str, Option<Value>)> {
    use reqwest::Method;
    vec![
        (Method::GET, "/api/v1/tasks", None),
        (Method::GET, "/api/v1/tasks/rt_x", None),
        (Method::POST, "/api/v1/tasks/rt_x/cancel", None),
        (
            Method::POST,
            "/api/v1/tasks/rt_x/answers",
            Some(json!({"answers": {"k": {"action": "decline"}}})),
        ),
        (
            Method::POST,
            "/api/v1/calls",
            Some(json!({"server": "demo", "tool": "greet"})),
        ),
        (Method::GET, "/api/v1/servers", None),
        (Method::GET, "/api/v1/admin/servers", None),
        (
            Method::PUT,
            "/api/v1/admin/servers/x",
            Some(json!({"url": "http://127.0.0.1:9/mcp"})),
        ),
        (Method::DELETE, "/api/v1/admin/servers/x", None),
        (Method::GET, "/api/v1/admin/virtual_servers", None),
        (
            Method::PUT,
            "/api/v1/admin/virtual_servers/x",
            Some(json!({"tools": ["demo/*"]})),
        ),
        (Method::DELETE, "/api/v1/admin/virtual_servers/x", None),
        (Method::GET, "/api/v1/events", None),
        (Method::GET, "/metrics", None),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_answers_json_with_stable_codes() {
    with_deadline(TEST_LIMIT, async {
        let s = token_stack(Some(2048)).await;
        let anon = s.gateway.client(None);
        let op = s.gateway.client(Some(OPERATOR));

        // Public routes.
        let health = anon.get("/healthz").await;
        assert_eq!((health.status, health.text.as_str()), (200, "ok"));
        let page = anon.get("/").await;
        assert_eq!(page.status, 200);
        assert!(page.content_type.starts_with("text/html"), "{page:?}");
        assert!(
            page.text.contains("data-testid=\"task-list\""),
            "the dashboard"
        );
        anon.get("/no/such/route")
            .await
            .assert_error(404, "not_found");
        // One list of calls: the front's calls are rows of /api/v1/tasks,
        // and there is no second list of them.
        op.get("/api/v1/front-tasks")
            .await
            .assert_error(404, "not_found");

        // The OpenAPI document parses and describes every route of the router.
        let doc = anon.get("/openapi.json").await;
        let doc = doc.assert_status(200);
        assert_eq!(doc["openapi"], "3.1.0");
        let routes = router_routes();
        assert!(
            routes.len() >= 11,
            "routes read from the router: {routes:?}"
        );
        for (path, method) in &routes {
            assert!(
                doc["paths"][path][method].is_object(),
                "{method} {path} is missing from /openapi.json paths: {:#}",
                doc["paths"]
            );
        }
        for (path, _) in &routes {
            assert!(
                !path.starts_with("/api/") || doc["paths"][path].to_string().contains("401"),
                "{path}: 401 is documented"
            );
        }

        // Every protected route: no token, an unknown token, another scheme,
        // and ?access_token= on a POST (only the event stream's GET takes it).
        let unknown = s.gateway.client(Some("not-a-known-token"));
        for (method, path, body) in protected_requests() {
            for (who, api) in [("no token", &anon), ("unknown token", &unknown)] {
                let mut request = api.request(method.clone(), path);
                if let Some(b) = &body {
                    request = request.json(b);
                }
                let r = api.send(request).await;
                assert_eq!(r.status, 401, "{method} {path} with {who}: {r:#?}");
                r.assert_error(401, "unauthorized");
            }
            let basic = anon
                .send(
                    anon.request(method.clone(), path)
                        .header("Authorization", format!("Basic {OPERATOR}")),
                )
                .await;
            basic.assert_error(401, "unauthorized");
        }
        anon.post(
            &format!("/api/v1/calls?access_token={OPERATOR}"),
            &json!({"server": "demo", "tool": "greet"}),
        )
        .await
        .assert_error(401, "unauthorized");
        // Regression: a query token on another GET used to authenticate, then
        // fail with 400 (the list rejects unknown parameters). Only the event
        // stream takes it.
        anon.get(&format!("/api/v1/tasks?access_token={OPERATOR}"))
            .await
            .assert_error(401, "unauthorized");

        // Servers.
        let servers = op.get("/api/v1/servers").await;
        let servers = servers.assert_status(200)["servers"].clone();
        assert_eq!(servers.as_array().map(Vec::len), Some(1), "{servers:#}");
        assert_eq!(servers[0]["name"], "demo");
        assert_eq!(servers[0]["transport"]["type"], "http");
        assert_eq!(servers[0]["transport"]["url"], s.server.url.as_str());
        assert!(servers[0]["definitionHash"].is_string(), "{servers:#}");

        // Calls: a synchronous tool completes in the response.
        let greet = op
            .post(
                "/api/v1/calls",
                &json!({"server": "demo", "tool": "greet", "arguments": {"name": "Ada"}}),
            )
            .await;
        let greet = greet.assert_status(200);
        assert_eq!(greet["outcome"], "completed", "{greet:#}");
        assert_eq!(greet["result"]["content"][0]["text"], "Hello, Ada!");

        // A task tool is tracked; with waitMs the answer comes once it settled.
        let quick = op
            .start_task_with(json!({"server": "demo", "tool": "slow_compute",
                "arguments": {"seconds": 0.2, "label": "quick"}, "waitMs": 60_000}))
            .await;
        assert_eq!(
            quick["status"], "completed",
            "waitMs waits for the end: {quick:#}"
        );
        assert_eq!(
            quick["result"]["content"][0]["text"],
            "quick: computed in 0.2s"
        );
        assert!(
            quick["id"].as_str().unwrap().starts_with("rt_"),
            "{quick:#}"
        );
        assert!(quick["timeline"].as_array().is_some_and(|t| !t.is_empty()));
        // Without waitMs the answer is immediate and the task still active.
        let slow = op.start_task("slow_compute", json!({"seconds": 120})).await;
        assert!(
            ["working", "input_required"].contains(&slow["status"].as_str().unwrap()),
            "{slow:#}"
        );
        let slow_id = slow["id"].as_str().unwrap().to_string();

        // Calls that fail.
        op.post(
            "/api/v1/calls",
            &json!({"server": "nowhere", "tool": "greet"}),
        )
        .await
        .assert_error(404, "unknown_server");
        let unknown_tool = op
            .post(
                "/api/v1/calls",
                &json!({"server": "demo", "tool": "no_such_tool"}),
            )
            .await;
        // The gateway knows the server's tools: an unknown one is refused
        // without a call (and reads as a tool a policy hides).
        unknown_tool.assert_error(404, "unknown_tool");
        assert!(
            unknown_tool.json["error"]["message"]
                .as_str()
                .unwrap()
                .contains("no_such_tool"),
            "{unknown_tool:#?}"
        );
        for bad in [
            json!({"server": "demo", "tool": "greet", "arguments": "not an object"}),
            json!({"server": "demo", "tool": "greet", "arguments": [1, 2]}),
            json!({"server": "demo"}),
            json!({"server": "demo", "tool": "greet", "unexpected": true}),
            json!({"server": "demo", "tool": "greet", "waitMs": -1}),
            json!(["server", "demo"]),
        ] {
            op.post("/api/v1/calls", &bad)
                .await
                .assert_error(400, "bad_request");
        }
        // Arguments the tool itself rejects: the task fails, honestly.
        let rejected = op
            .start_task_with(json!({"server": "demo", "tool": "slow_compute",
                "arguments": {"seconds": -5}, "waitMs": 60_000}))
            .await;
        let rejected = if rejected["status"] == "failed" {
            rejected
        } else {
            op.wait_status(rejected["id"].as_str().unwrap(), "failed")
                .await
        };
        assert!(
            rejected["error"]
                .to_string()
                .contains("seconds must be between"),
            "{rejected:#}"
        );

        // Bodies: bad JSON, wrong or missing content type, too large.
        for path in ["/api/v1/calls", &format!("/api/v1/tasks/{slow_id}/answers")] {
            op.post_raw(path, Some("application/json"), b"{\"server\": ".to_vec())
                .await
                .assert_error(400, "bad_request");
            op.post_raw(path, Some("application/json"), b"not json".to_vec())
                .await
                .assert_error(400, "bad_request");
            op.post_raw(
                path,
                Some("text/plain"),
                br#"{"server": "demo", "tool": "greet"}"#.to_vec(),
            )
            .await
            .assert_error(415, "unsupported_media_type");
            op.post_raw(
                path,
                None,
                br#"{"server": "demo", "tool": "greet"}"#.to_vec(),
            )
            .await
            .assert_error(415, "unsupported_media_type");
            let big = json!({"server": "demo", "tool": "greet",
                "arguments": {"name": "x".repeat(10_000)}});
            op.post(path, &big)
                .await
                .assert_error(413, "payload_too_large");
        }

        // Unknown ids.
        let long = "x".repeat(300);
        for id in ["rt_doesnotexist", "nope", long.as_str()] {
            op.get(&format!("/api/v1/tasks/{id}"))
                .await
                .assert_error(404, "not_found");
            op.post_raw(&format!("/api/v1/tasks/{id}/cancel"), None, Vec::new())
                .await
                .assert_error(404, "not_found");
            op.post(
                &format!("/api/v1/tasks/{id}/answers"),
                &json!({"answers": {"k": {"action": "accept", "content": {}}}}),
            )
            .await
            .assert_error(404, "not_found");
        }

        // Cancel: 202 with the durable intent; the task settles as cancelled.
        let cancel = op
            .post_raw(&format!("/api/v1/tasks/{slow_id}/cancel"), None, Vec::new())
            .await;
        let cancel = cancel.assert_status(202);
        assert_eq!(cancel["cancelRequested"], true, "{cancel:#}");
        let cancelled = op.wait_status(&slow_id, "cancelled").await;
        assert!(cancelled["completedAt"].is_string(), "{cancelled:#}");
        // Cancelling a settled task changes nothing (terminal is absorbing).
        let quick_id = quick["id"].as_str().unwrap();
        let again = op
            .post_raw(
                &format!("/api/v1/tasks/{quick_id}/cancel"),
                None,
                Vec::new(),
            )
            .await;
        assert_eq!(again.assert_status(202)["status"], "completed");
        assert_eq!(op.task(quick_id).await["status"], "completed");

        // /metrics needs a token in token mode and answers Prometheus text.
        let metrics = op.get("/metrics").await;
        assert_eq!(metrics.status, 200, "{metrics:?}");
        assert!(
            metrics.content_type.starts_with("text/plain"),
            "{metrics:?}"
        );
        parse_prometheus(&metrics.text).unwrap_or_else(|e| panic!("{e}\n{}", metrics.text));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn principal_tokens_only_see_their_own_tasks_and_lists_filter_and_paginate() {
    with_deadline(TEST_LIMIT, async {
        // The token trap: `serve` started in a shell that exports alice's
        // CLI credential must not make alice an operator.
        let s = stack_with_env(
            |db, url| GatewaySpec::with_tokens(db, &[("demo", url)]),
            &[("MCPTASK_API_TOKEN", ALICE)],
        )
        .await;
        let op = s.gateway.client(Some(OPERATOR));
        let alice = s.gateway.client(Some(ALICE));
        let bob = s.gateway.client(Some(BOB));

        // A principal token acts for itself: naming another principal is
        // refused (403), naming its own is fine; an operator may act for anyone.
        alice
            .post(
                "/api/v1/calls",
                &json!({"server": "demo", "tool": "slow_compute",
                    "arguments": {"seconds": 120}, "principal": "bob"}),
            )
            .await
            .assert_error(403, "forbidden");
        let a_slow = alice
            .start_task_with(json!({"server": "demo", "tool": "slow_compute",
                "arguments": {"seconds": 120}, "principal": "alice", "conversation": "chat-a"}))
            .await;
        assert_eq!(a_slow["principal"], "alice", "{a_slow:#}");
        assert!(
            a_slow.get("remoteTaskId").is_none(),
            "remote ids are for operators: {a_slow:#}"
        );
        let a_id = a_slow["id"].as_str().unwrap().to_string();
        let b_ask = bob
            .start_task("confirm_delete", json!({"filename": "bob.txt"}))
            .await;
        assert_eq!(b_ask["principal"], "bob");
        let b_id = b_ask["id"].as_str().unwrap().to_string();
        let c_task = op
            .start_task_with(json!({"server": "demo", "tool": "slow_compute",
                "arguments": {"seconds": 0}, "principal": "carol", "waitMs": 60_000}))
            .await;
        assert_eq!(c_task["principal"], "carol");
        let c_id = c_task["id"].as_str().unwrap().to_string();

        // Visibility of single tasks.
        assert_eq!(alice.task(&a_id).await["id"], a_id.as_str());
        for (who, api, foreign) in [
            ("alice", &alice, &b_id),
            ("alice", &alice, &c_id),
            ("bob", &bob, &a_id),
        ] {
            let r = api.get(&format!("/api/v1/tasks/{foreign}")).await;
            assert_eq!(r.status, 404, "{who} must not see {foreign}: {r:#?}");
            r.assert_error(404, "not_found");
            api.post_raw(&format!("/api/v1/tasks/{foreign}/cancel"), None, Vec::new())
                .await
                .assert_error(404, "not_found");
            api.post(
                &format!("/api/v1/tasks/{foreign}/answers"),
                &json!({"answers": {"confirm_delete": {"action": "accept", "content": {"confirm": true}}}}),
            )
            .await
            .assert_error(404, "not_found");
        }
        let seen_by_op = op.task(&a_id).await;
        assert_eq!(seen_by_op["principal"], "alice");
        assert!(seen_by_op["remoteTaskId"].is_string(), "{seen_by_op:#}");
        op.task(&b_id).await;

        // Lists are scoped the same way.
        let all = ids(&op.list_all("limit=500").await);
        for id in [&a_id, &b_id, &c_id] {
            assert!(all.contains(id), "the operator sees {id}: {all:?}");
        }
        let mine = alice.list_all("limit=500").await;
        assert_eq!(ids(&mine), vec![a_id.clone()], "alice sees only hers");
        assert!(mine[0].get("remoteTaskId").is_none());
        alice
            .get("/api/v1/tasks?principal=bob")
            .await
            .assert_error(403, "forbidden");
        assert_eq!(ids(&alice.list_all("principal=alice").await), vec![a_id.clone()]);
        assert_eq!(
            ids(&op.list_all("principal=bob").await),
            vec![b_id.clone()]
        );
        assert_eq!(
            ids(&op.list_all("conversation=chat-a").await),
            vec![a_id.clone()]
        );
        assert_eq!(op.list_all("server=elsewhere").await.len(), 0);
        assert_eq!(op.list_all("server=demo").await.len(), all.len());
        let done = ids(&op.list_all("status=completed").await);
        assert!(done.contains(&c_id) && !done.contains(&a_id), "{done:?}");
        let active = op.list_all("active=true").await;
        assert!(
            active
                .iter()
                .all(|t| ["working", "input_required"].contains(&t["status"].as_str().unwrap())),
            "{active:#?}"
        );
        assert!(ids(&active).contains(&a_id) && !ids(&active).contains(&c_id));

        // Pagination: newest first, pages of `limit`, no repeats, no gaps.
        let mut made = Vec::new();
        for i in 0..5 {
            let t = op
                .start_task_with(json!({"server": "demo", "tool": "slow_compute",
                    "arguments": {"seconds": 0, "label": format!("page {i}")}, "conversation": "paged"}))
                .await;
            made.push(t["id"].as_str().unwrap().to_string());
        }
        let mut pages = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let path = match &cursor {
                Some(c) => format!("/api/v1/tasks?conversation=paged&limit=2&cursor={}", encode(c)),
                None => "/api/v1/tasks?conversation=paged&limit=2".to_string(),
            };
            let page = op.get(&path).await;
            let page = page.assert_status(200).clone();
            pages.push(page["tasks"].as_array().unwrap().clone());
            match page["nextCursor"].as_str() {
                Some(c) => cursor = Some(c.to_string()),
                None => break,
            }
            assert!(pages.len() < 10, "pagination does not end: {pages:?}");
        }
        let sizes: Vec<usize> = pages.iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![2, 2, 1], "{pages:?}");
        let flat: Vec<Value> = pages.concat();
        let flat_ids = ids(&flat);
        assert_eq!(
            flat_ids.iter().collect::<BTreeSet<_>>(),
            made.iter().collect::<BTreeSet<_>>(),
            "every task exactly once: {flat_ids:?}"
        );
        assert_eq!(flat_ids.len(), made.len(), "no repeats: {flat_ids:?}");
        // Newest first: (createdAt, id) descending across page boundaries.
        let keys: Vec<(String, String)> = flat
            .iter()
            .map(|t| (t["createdAt"].as_str().unwrap().to_string(), t["id"].as_str().unwrap().to_string()))
            .collect();
        assert!(
            keys.windows(2).all(|w| w[0] > w[1]),
            "newest first: {keys:?}"
        );
        // Bad list queries.
        for q in [
            "limit=0",
            "limit=501",
            "limit=-1",
            "limit=many",
            "status=sleeping",
            "active=maybe",
            "cursor=not-a-cursor",
            "cursor=%00%01",
            "unknown=1",
        ] {
            let r = op.get(&format!("/api/v1/tasks?{q}")).await;
            assert_eq!(r.status, 400, "?{q}: {r:#?}");
            r.assert_error(400, "bad_request");
        }
        op.get("/api/v1/tasks?limit=1").await.assert_status(200);
        op.get("/api/v1/tasks?limit=500").await.assert_status(200);

        // Answers: bob answers his own question through the API.
        let asked = bob.wait_status(&b_id, "input_required").await;
        assert_eq!(asked["inputs"][0]["key"], "confirm_delete", "{asked:#}");
        assert_eq!(asked["inputs"][0]["answered"], false);
        assert!(asked["inputRequests"]["confirm_delete"].is_object(), "{asked:#}");
        let path = format!("/api/v1/tasks/{b_id}/answers");
        bob.post(&path, &json!({"answers": {}}))
            .await
            .assert_error(400, "bad_request");
        bob.post(&path, &json!({"answers": {"confirm_delete": "yes"}}))
            .await
            .assert_error(400, "bad_request");
        bob.post(&path, &json!({"answer": {}}))
            .await
            .assert_error(400, "bad_request");
        let yes = json!({"answers": {"confirm_delete": {"action": "accept", "content": {"confirm": true}}}});
        let stored = bob.post(&path, &yes).await;
        assert_eq!(
            stored.assert_status(200)["stored"],
            json!(["confirm_delete"]),
            "{stored:#?}"
        );
        let twice = bob.post(&path, &yes).await;
        let twice = twice.assert_status(200);
        assert_eq!(twice["stored"], json!([]), "each key is answered once: {twice:#}");
        assert_eq!(twice["ignored"], json!(["confirm_delete"]), "{twice:#}");
        let answered = bob.wait_status(&b_id, "completed").await;
        assert_eq!(answered["result"]["content"][0]["text"], "Deleted bob.txt");
        assert_eq!(answered["inputs"][0]["answered"], true);

        // Cancel: alice cancels her own task.
        let c = alice
            .post_raw(&format!("/api/v1/tasks/{a_id}/cancel"), None, Vec::new())
            .await;
        assert_eq!(c.assert_status(202)["cancelRequested"], true);
        alice.wait_status(&a_id, "cancelled").await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_stream_reports_task_changes_to_those_who_may_see_them() {
    with_deadline(TEST_LIMIT, async {
        let s = token_stack(None).await;
        let anon = s.gateway.client(None);
        let alice = s.gateway.client(Some(ALICE));
        let bob = s.gateway.client(Some(BOB));
        let op = s.gateway.client(Some(OPERATOR));

        let refused =
            SseStream::connect(anon.request(reqwest::Method::GET, "/api/v1/events")).await;
        assert_eq!(refused.status, 401);
        let bad = SseStream::connect(anon.request(
            reqwest::Method::GET,
            "/api/v1/events?access_token=wrong-token-123",
        ))
        .await;
        assert_eq!(bad.status, 401);

        // EventSource style: the token in the query string.
        let mut a_stream = SseStream::connect(anon.request(
            reqwest::Method::GET,
            &format!("/api/v1/events?access_token={}", encode(ALICE)),
        ))
        .await;
        assert_eq!(a_stream.status, 200);
        assert!(
            a_stream.content_type.starts_with("text/event-stream"),
            "{}",
            a_stream.content_type
        );
        assert_eq!(a_stream.next(WAIT).await.event, "hello");
        // An operator with the header.
        let mut o_stream =
            SseStream::connect(op.request(reqwest::Method::GET, "/api/v1/events")).await;
        assert_eq!(o_stream.status, 200);
        assert_eq!(o_stream.next(WAIT).await.event, "hello");

        // Bob's task first, then alice's.
        let b_task = bob
            .start_task("confirm_delete", json!({"filename": "secret.txt"}))
            .await;
        let b_id = b_task["id"].as_str().unwrap().to_string();
        let a_task = alice
            .start_task("slow_compute", json!({"seconds": 0.5, "label": "sse"}))
            .await;
        let a_id = a_task["id"].as_str().unwrap().to_string();

        // Alice sees her task change until it completes, and nothing of bob's.
        let (done, before) = a_stream
            .until(WAIT, |m| {
                m.event == "task"
                    && m.json()["id"] == a_id.as_str()
                    && m.json()["status"] == "completed"
            })
            .await;
        let summary = done.json();
        assert_eq!(summary["principal"], "alice");
        assert!(summary.get("remoteTaskId").is_none(), "{summary:#}");
        assert!(
            done.id.as_deref().is_some_and(|id| id.starts_with(&a_id)),
            "task events carry id TASK:VERSION: {done:?}"
        );
        for m in &before {
            let j = m.json();
            let id = j["id"].as_str().or(j["taskId"].as_str()).unwrap_or("");
            assert_ne!(id, b_id, "alice saw bob's task: {m:?}");
            if m.event == "task" {
                assert_eq!(j["principal"], "alice", "{m:?}");
            }
        }
        assert!(
            before
                .iter()
                .any(|m| m.event == "task" && m.json()["id"] == a_id.as_str()),
            "the task was reported before it completed: {before:#?}"
        );

        // The operator sees bob's task (and its question).
        let (seen, _) = o_stream
            .until(WAIT, |m| {
                m.event == "task"
                    && m.json()["id"] == b_id.as_str()
                    && m.json()["status"] == "input_required"
            })
            .await;
        assert!(
            seen.json()["inputRequests"]["confirm_delete"].is_object(),
            "{seen:?}"
        );
        assert!(seen.json()["remoteTaskId"].is_string());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_auth_every_route_is_open_and_metrics_move_when_tasks_run() {
    with_deadline(TEST_LIMIT, async {
        let s = stack(|db, url| GatewaySpec::open(db, &[("demo", url)])).await;
        let api = s.gateway.client(None);

        // auth = "none": no token needed anywhere.
        api.get("/api/v1/tasks").await.assert_status(200);
        api.get("/api/v1/servers").await.assert_status(200);
        let mut events =
            SseStream::connect(api.request(reqwest::Method::GET, "/api/v1/events")).await;
        assert_eq!(events.status, 200);
        assert_eq!(events.next(WAIT).await.event, "hello");
        drop(events);

        let scrape = || async {
            let r = api.get("/metrics").await;
            assert_eq!(r.status, 200, "{r:?}");
            assert!(r.content_type.starts_with("text/plain"), "{r:?}");
            parse_prometheus(&r.text).unwrap_or_else(|e| panic!("{e}\n{}", r.text))
        };
        let before = scrape().await;
        // Every family is described and present from the first scrape, before
        // any task ran: alerts on rate() or absent() need no first event.
        let raw = api.get("/metrics").await.text;
        for family in [
            "mcptask_tasks",
            "mcptask_notification_backlog",
            "mcptask_claims_total",
            "mcptask_remote_errors_total",
            "mcptask_stale_claims_total",
            "mcptask_abandon_cancels_total",
            "mcptask_stdio_recycled_total",
            "mcptask_notifications_total",
            "mcptask_remote_purged_total",
        ] {
            assert!(
                raw.contains(&format!("# HELP {family} ")),
                "no HELP for {family}:\n{raw}"
            );
            assert!(
                before.has(family),
                "{family} absent before its first event:\n{raw}"
            );
        }
        assert!(raw.contains("# HELP mcptask_api_requests_total "), "{raw}");
        let completed = |m: &Metrics| m.sum("mcptask_tasks", &[("status", "completed")]);
        let claims = |m: &Metrics| m.sum("mcptask_claims_total", &[]);
        let calls = |m: &Metrics| {
            m.sum(
                "mcptask_api_requests_total",
                &[
                    ("route", "/api/v1/calls"),
                    ("method", "POST"),
                    ("status", "202"),
                ],
            )
        };

        const RUNS: usize = 3;
        for i in 0..RUNS {
            let t = api
                .start_task_with(json!({"server": "demo", "tool": "slow_compute",
                    "arguments": {"seconds": 0.2, "label": format!("m{i}")}, "waitMs": 60_000}))
                .await;
            if t["status"] != "completed" {
                api.wait_status(t["id"].as_str().unwrap(), "completed")
                    .await;
            }
        }

        // Gauges are refreshed from the store every few seconds: wait for it.
        let deadline = tokio::time::Instant::now() + WAIT;
        let after = loop {
            let m = scrape().await;
            if completed(&m) >= completed(&before) + RUNS as f64 {
                break m;
            }
            if tokio::time::Instant::now() >= deadline {
                panic!(
                    "mcptask_tasks{{status=\"completed\"}} stayed at {} (was {})",
                    completed(&m),
                    completed(&before)
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        assert!(
            claims(&after) > claims(&before),
            "claims: {} -> {}",
            claims(&before),
            claims(&after)
        );
        assert!(
            calls(&after) >= calls(&before) + RUNS as f64,
            "API requests: {} -> {}",
            calls(&before),
            calls(&after)
        );
        assert!(
            after.sum("mcptask_api_requests_total", &[("route", "/metrics")]) >= 1.0,
            "scrapes are counted"
        );
        assert!(
            after.sum("mcptask_remote_call_seconds_count", &[]) > 0.0,
            "remote calls are timed"
        );
        for status in [
            "working",
            "input_required",
            "completed",
            "failed",
            "cancelled",
        ] {
            assert!(
                after
                    .samples
                    .iter()
                    .any(|s| s.name == "mcptask_tasks" && s.labels["status"] == status),
                "a gauge per status: {status}"
            );
        }
        assert!(after.has("mcptask_notification_backlog"));
        assert_eq!(after.types["mcptask_tasks"], "gauge");
        assert_eq!(after.types["mcptask_claims_total"], "counter");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_once_exits_zero_after_the_three_tasks_settle() {
    with_deadline(TEST_LIMIT, async {
        // A fresh directory as on a fresh clone: no database, no config.
        let dir = tempfile::tempdir().expect("temp dir");
        let child = tokio::process::Command::new(bin())
            .args(["demo", "--once", "--listen", "127.0.0.1:0"])
            .current_dir(dir.path())
            .env("MCPTASK_LOG", "warn")
            .env_remove("MCPTASK_DATABASE_URL")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn mcptask demo --once");
        let out = tokio::time::timeout(Duration::from_secs(300), child.wait_with_output())
            .await
            .expect("mcptask demo --once did not exit within 300s")
            .expect("wait for mcptask demo");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let context = format!(
            "status {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
            out.status
        );
        assert!(out.status.success(), "{context}");
        for line in [
            "[1/3] completed: quarterly report: computed in 3s",
            "[2/3] completed: Deleted old-report.txt",
            "[3/3] cancelled",
            "All three tasks settled.",
        ] {
            assert!(stdout.contains(line), "missing {line:?}:\n{context}");
        }
        assert!(
            !stdout.contains("#token="),
            "no dashboard link that dies with the process:\n{context}"
        );
        assert!(
            dir.path().join("mcptask.db").exists(),
            "the embedded SQLite file is created in the working directory"
        );
    })
    .await;
}

#[test]
fn the_prometheus_parser_accepts_valid_and_rejects_broken_text() {
    let good = "# HELP x_total things\n# TYPE x_total counter\nx_total{a=\"1\",b=\"q\\\"uote\"} 3\n\
                # TYPE h histogram\nh_bucket{le=\"0.5\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 0.7\nh_count 2\n\
                # TYPE g gauge\ng 1.5e3 1700000000000\n";
    let m = parse_prometheus(good).expect("valid text");
    assert_eq!(m.sum("x_total", &[("a", "1")]), 3.0);
    assert_eq!(m.samples[0].labels["b"], "q\"uote");
    assert_eq!(m.sum("g", &[]), 1500.0);
    assert_eq!(m.sum("h_bucket", &[("le", "+Inf")]), 2.0);
    for bad in [
        "# TYPE x counter\nx{a=\"1\"} notanumber\n",
        "# TYPE x counter\nx{a=1} 2\n",
        "# TYPE x counter\nx{a=\"1\" 2\n",
        "y 2\n",
        "# TYPE x bogus\nx 1\n",
        "# TYPE h histogram\nh_bucket 1\n",
        "# TYPE x gauge\nx 1 2 3\n",
        "# TYPE x counter\nx -1\n",
    ] {
        assert!(parse_prometheus(bad).is_err(), "accepted {bad:?}");
    }
}

/// A principal's token reads neither `/metrics` (every server and tool is
/// named there) nor how upstreams are reached (hosts, ports, commands,
/// their error texts): both are the operator's. A principal listed in
/// `[api] metrics_principals` reads the metrics, and a reload changes the
/// list without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_upstream_addresses_are_the_operators() {
    with_deadline(TEST_LIMIT, async {
        let s = token_stack(None).await;
        let (op, alice, bob) = (
            s.gateway.client(Some(OPERATOR)),
            s.gateway.client(Some(ALICE)),
            s.gateway.client(Some(BOB)),
        );
        op.get("/metrics").await.assert_status(200);
        alice.get("/metrics").await.assert_error(403, "forbidden");
        bob.get("/metrics").await.assert_error(403, "forbidden");

        // Alice may still pick a server to call: names and health states only.
        let seen = alice.get("/api/v1/servers").await;
        let text = seen.text.clone();
        let servers = seen.assert_status(200)["servers"].clone();
        assert_eq!(servers[0]["name"], "demo", "{servers:#}");
        for hidden in ["transport", "definitionHash", "oauth"] {
            assert!(servers[0].get(hidden).is_none(), "{hidden}: {servers:#}");
        }
        let port = s
            .server
            .url
            .split(':')
            .nth(2)
            .unwrap()
            .split('/')
            .next()
            .unwrap();
        assert!(!text.contains(port), "the upstream's port shown: {text}");
        let full = op.get("/api/v1/servers").await.assert_status(200)["servers"].clone();
        assert_eq!(full[0]["transport"]["url"], s.server.url.as_str());

        // A scraper's principal, given by a reload.
        let toml = std::fs::read_to_string(s.gateway.config_path()).unwrap();
        let next = toml.replacen(
            "auth = \"token\"\n",
            "auth = \"token\"\nmetrics_principals = [\"bob\"]\n",
            1,
        );
        assert_ne!(toml, next);
        let line = s.gateway.reload(&next).await.expect("reloaded");
        assert!(line.contains("metrics readers"), "{line}");
        bob.get("/metrics").await.assert_status(200);
        alice.get("/metrics").await.assert_error(403, "forbidden");
    })
    .await;
}
