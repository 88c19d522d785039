//! The route's rules (`route::decide`), pinned at both faces of a call in
//! this process ([`crate::seam`]): the MCP front (`FrontServer`, its full
//! way) and `Calls::call`, the face of the REST API, the CLI and the Rust
//! API. A rule decided once reads the same at both.

use std::time::{Duration, Instant};

use mcptask_core::call::{Driver, Face};
use mcptask_gateway::calls::{CallError, Started};
use mcptask_gateway::failure::Failure;
use mcptask_testkit::mcp::{TestClient, wire};
use mcptask_testkit::with_deadline;
use rmcp::ErrorData;
use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult, TaskStatus};
use rmcp::service::ServiceError;
use serde_json::{Value, json};

use crate::seam::{Declares, Seam};

/// The bound on each test: a hang fails here, not in the harness's
/// timeout (each takes well under 5 s; a refusal is held up to 1 s).
const LIMIT: Duration = Duration::from_secs(15);

/// The bound on waiting for a kept call to settle.
const SETTLE: Duration = Duration::from_secs(5);

fn echo(text: &str) -> Value {
    json!({"text": text})
}

/// The JSON-RPC error a front call was refused with.
fn refusal(answer: Result<CallToolResponse, ServiceError>) -> ErrorData {
    match answer {
        Err(ServiceError::McpError(data)) => data,
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    }
}

/// The synchronous answer of a front call.
fn complete(answer: Result<CallToolResponse, ServiceError>) -> CallToolResult {
    match answer {
        Ok(CallToolResponse::Complete(result)) => result,
        other => panic!("expected a synchronous answer, got {other:?}"),
    }
}

fn text(result: &CallToolResult) -> &str {
    result.content[0]
        .as_text()
        .map(|t| t.text.as_str())
        .unwrap_or_else(|| panic!("a text answer: {result:?}"))
}

/// The failure a `Calls::call` was refused with, as REST renders it.
fn failure(made: Result<Started, CallError>) -> Failure {
    match made {
        Err(e) => Failure::from(e),
        Ok(started) => panic!("expected a refusal, got {started:?}"),
    }
}

/// The front names `tool` to this client.
async fn lists(client: &TestClient, tool: &str) -> bool {
    let listed = client.peer().list_tools(None).await.expect("tools/list");
    listed.tools.iter().any(|t| t.name == tool)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_tool_reads_as_unknown_at_both_faces() {
    with_deadline(LIMIT, async {
        let seam = Seam::start(
            "[[policy]]\nprincipal = \"alice\"\ndeny = [\"up/echo\"]",
            "",
        )
        .await;
        for declares in [Declares::No, Declares::Tasks] {
            let alice = seam.front(Some("alice"), declares).await;
            assert!(!lists(&alice, "up__echo").await, "{declares:?}");
            assert!(lists(&alice, "up__held").await, "{declares:?}");
            let denied = refusal(alice.call("up__echo", echo("x")).await);
            let missing = refusal(alice.call("up__nope", echo("x")).await);
            assert_eq!(denied.code, missing.code, "{declares:?}");
            assert_eq!(
                denied.message.replace("up__echo", "up__nope"),
                missing.message,
                "{declares:?}"
            );
        }
        let denied = failure(seam.call(Some("alice"), "echo", None).await);
        let missing = failure(seam.call(Some("alice"), "nope", None).await);
        assert_eq!(
            (denied.code(), missing.code()),
            ("unknown_tool", "unknown_tool")
        );
        assert_eq!(denied.message().replace("echo", "nope"), missing.message());
        assert_eq!(
            seam.upstream.heard("echo"),
            0,
            "a denied call reached the upstream"
        );

        // The rule is alice's: bob calls the tool at both faces.
        let bob = seam.front(Some("bob"), Declares::No).await;
        assert_eq!(
            text(&complete(bob.call("up__echo", echo("hi")).await)),
            "hi"
        );
        assert!(matches!(
            seam.call(Some("bob"), "echo", None).await,
            Ok(Started::Completed(_))
        ));
        assert_eq!(seam.upstream.heard("echo"), 2);
    })
    .await;
}

/// A front refusal for a caller over its fair limits: the protocol's busy
/// error, saying why.
fn assert_rate_limited(data: &ErrorData) {
    assert_eq!(data.code.0, mcptask_server::SERVER_BUSY, "{data:?}");
    assert_eq!(
        data.data.as_ref().unwrap()["reason"],
        "rate_limited",
        "{data:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_over_its_rate_is_refused_busy_before_the_upstream_hears_of_it() {
    with_deadline(LIMIT, async {
        let seam = Seam::start(
            "[limits]\nper_principal_rate = 0.05\nper_principal_burst = 1",
            "",
        )
        .await;
        let alice = seam.front(Some("alice"), Declares::No).await;
        complete(alice.call("up__echo", echo("first")).await);
        // Its one call of the burst spent: refused at both faces (each
        // refusal held a while, so they are made together).
        let (front, rest) = tokio::join!(
            alice.call("up__echo", echo("second")),
            seam.call(Some("alice"), "echo", None),
        );
        assert_rate_limited(&refusal(front));
        assert!(matches!(failure(rest), Failure::RateLimited(_)));
        assert_eq!(
            seam.upstream.heard("echo"),
            1,
            "a refused call reached the upstream"
        );
        // Another principal's budget is its own.
        assert!(matches!(
            seam.call(Some("bob"), "echo", None).await,
            Ok(Started::Completed(_))
        ));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_with_a_call_in_flight_over_its_cap_is_refused_busy_before_the_upstream_hears_of_it()
 {
    with_deadline(LIMIT, async {
        let seam = Seam::start("[limits]\nper_principal_in_flight = 1", "").await;
        let alice = seam.front(Some("alice"), Declares::No).await;
        let peer = alice.peer().clone();
        let held = tokio::spawn(async move {
            peer.call_tool_once(CallToolRequestParams::new("up__held"))
                .await
        });
        seam.upstream.wait_heard("held", 1).await;
        let (front, rest) = tokio::join!(
            alice.call("up__echo", echo("meanwhile")),
            seam.call(Some("alice"), "echo", None),
        );
        assert_rate_limited(&refusal(front));
        let rest = failure(rest);
        assert!(
            matches!(&rest, Failure::RateLimited(busy) if busy.why.contains("in flight")),
            "{rest:?}"
        );
        assert_eq!(
            seam.upstream.heard("echo"),
            0,
            "a refused call reached the upstream"
        );

        // Its call answered, its place is free again.
        seam.upstream.release(1);
        assert_eq!(text(&complete(held.await.unwrap())), "released");
        assert_eq!(
            text(&complete(alice.call("up__echo", echo("after")).await)),
            "after"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declaring_callers_call_of_a_synchronous_tool_is_kept_as_a_task_and_completes() {
    with_deadline(LIMIT, async {
        // Handed out as its task at once, however quick the call (a quick
        // call is otherwise answered directly: `front::answer_within`).
        let seam = Seam::start("", "answer_within_ms = 0").await;
        let alice = seam.front(Some("alice"), Declares::Tasks).await;
        let id = match alice
            .call("up__echo", echo("kept"))
            .await
            .expect("tools/call")
        {
            CallToolResponse::Task(created) => created.task.task_id,
            other => panic!("expected a task, got {other:?}"),
        };
        let done = alice.wait_terminal(&id, SETTLE).await;
        assert_eq!(done.task.status(), TaskStatus::Completed, "{done:?}");
        let done = wire(&done);
        assert_eq!(done["result"]["content"][0]["text"], "kept", "{done}");
        // One row, the call's: run here as a synchronous call, made at the front.
        let row = seam.gateway.tracker.get(&id).await.expect("the call's row");
        assert_eq!(
            (row.driver.driver(), row.face, row.principal.as_deref()),
            (Driver::Sync, Some(Face::Mcp), Some("alice"))
        );

        // The Rust/REST face keeps it the same way when asked to.
        let Ok(Started::Task(kept)) = seam.call(Some("alice"), "echo", Some(true)).await else {
            panic!("background: true keeps the call");
        };
        assert_eq!(kept.driver.driver(), Driver::Sync);
        let done = seam.gateway.tracker.wait(&kept.id, SETTLE).await.unwrap();
        assert_eq!(
            done.status,
            mcptask_client::TaskStatus::Completed,
            "{done:?}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_does_not_declare_tasks_gets_the_synchronous_answer() {
    with_deadline(LIMIT, async {
        let seam = Seam::start("", "").await;
        let alice = seam.front(Some("alice"), Declares::No).await;
        let answer = complete(alice.call("up__echo", echo("now")).await);
        assert_eq!(text(&answer), "now");
        let Ok(Started::Completed(answer)) = seam.call(Some("alice"), "echo", None).await else {
            panic!("a synchronous tool answers synchronously at the Rust face");
        };
        assert_eq!(text(&answer), "hello");
        // Nothing was kept.
        let (rows, _) = seam
            .gateway
            .tracker
            .list(&Default::default(), None, 10)
            .await
            .unwrap();
        assert!(rows.is_empty(), "{rows:?}");
    })
    .await;
}

/// The structured answer of an agent tool.
async fn agent(client: &TestClient, tool: &str, arguments: Value) -> Value {
    let result = complete(client.call(tool, arguments).await);
    assert_ne!(result.is_error, Some(true), "{tool}: {result:?}");
    result.structured_content.expect("a structured answer")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_does_not_declare_tasks_follows_a_background_call_with_the_agent_tools() {
    with_deadline(LIMIT, async {
        let seam = Seam::start("", "background = [\"held\"]").await;
        let alice = seam.front(Some("alice"), Declares::No).await;
        let started = complete(alice.call("up__held", json!({})).await);
        let id = started.structured_content.unwrap()["taskId"]
            .as_str()
            .expect("the started answer names the task")
            .to_string();
        let live = agent(&alice, "mcptask_list_tasks", json!({})).await;
        assert_eq!(live["tasks"][0]["taskId"], id.as_str(), "{live}");
        assert_eq!(live["tasks"][0]["tool"], "up__held", "{live}");

        seam.upstream.release(1);
        let deadline = Instant::now() + SETTLE;
        let done = loop {
            let got = agent(&alice, "mcptask_get_task", json!({"taskId": id})).await;
            if got["status"] == "completed" {
                break got;
            }
            assert!(
                Instant::now() < deadline,
                "not completed in {SETTLE:?}: {got}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert_eq!(done["result"]["content"][0]["text"], "released", "{done}");

        // Another principal does not see it; a declaring caller has
        // tasks/* instead, and no agent tools.
        let bob = seam.front(Some("bob"), Declares::No).await;
        let listed = agent(&bob, "mcptask_list_tasks", json!({"status": "all"})).await;
        assert_eq!(listed["tasks"], json!([]), "{listed}");
        let declaring = seam.front(Some("alice"), Declares::Tasks).await;
        assert!(!lists(&declaring, "mcptask_list_tasks").await);
        let unknown = refusal(declaring.call("mcptask_list_tasks", json!({})).await);
        assert!(unknown.message.contains("unknown tool"), "{unknown:?}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_call_timeout_bounds_a_pass_through_call_at_both_faces() {
    with_deadline(LIMIT, async {
        // The tracker's own bound (30 s by default) is far longer.
        let seam = Seam::start("", "call_timeout_ms = 300").await;
        let alice = seam.front(Some("alice"), Declares::No).await;
        let started = Instant::now();
        let (front, rest) = tokio::join!(
            alice.call("up__stall", json!({})),
            seam.call(Some("alice"), "stall", Some(false)),
        );
        let took = started.elapsed();
        assert!(took < Duration::from_secs(3), "answered after {took:?}");
        let front = refusal(front);
        assert!(
            front.message.contains("did not answer within 300ms"),
            "{front:?}"
        );
        // The Rust/REST face says the same, in the same words (one
        // mapping of an upstream's silence).
        let rest = failure(rest);
        let Failure::Timeout(said) = &rest else {
            panic!("expected the call timeout, got {rest:?}");
        };
        assert_eq!(said, &front.message, "{rest:?}");
        assert_eq!(seam.upstream.heard("stall"), 2);
    })
    .await;
}
