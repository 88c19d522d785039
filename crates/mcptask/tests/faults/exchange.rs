//! An upstream exchange held or crossed by a malicious upstream
//! (docs/RELIABILITY.md, "An upstream's answers"): a synchronous upstream
//! that answers a call with an SSE stream that never ends, or under another
//! request's id, ends a front task at the server's call timeout with the
//! words a call that is not a task gets, and its lane is not held; an
//! upstream that swaps the answers of two principals' concurrent calls
//! delivers nothing across. Real `mcptask serve` processes before a
//! `ScriptedServer` in front of a real upstream.

use std::time::Duration;

use mcptask_testkit::mcp::{Lifecycle, TestClient, wire};
use mcptask_testkit::*;
use rmcp::model::CallToolResponse;
use serde_json::{Value, json};

/// A front (`mcptask serve`, proxy on) before `servers`, with static tokens
/// for alice and bob.
async fn front(db: &TestDatabase, servers: &str) -> GatewayProcess {
    let mut spec = GatewaySpec::with_tokens(&db.url, &[]);
    spec.servers.clear();
    let toml = format!("{}\n{servers}\n[proxy]\nenabled = true\n", spec.toml());
    GatewayProcess::start_toml("front", &toml, &[]).await
}

async fn client(gateway: &GatewayProcess, token: &str, tasks: bool) -> TestClient {
    TestClient::http(
        &format!("{}/mcp", gateway.base),
        Some(token),
        Lifecycle::Modern { tasks },
    )
    .await
    .expect("connect to /mcp")
}

/// The front's error for a call of `tool` by a caller that does not
/// declare tasks (answered synchronously).
async fn plain_error(client: &TestClient, arguments: Value) -> String {
    match client.call("sync__echo", arguments).await {
        Err(rmcp::service::ServiceError::McpError(e)) => e.message.to_string(),
        other => panic!("expected the call to fail, got {other:?}"),
    }
}

/// The outcome of a front task of `sync__echo` (a caller that declares
/// tasks): its terminal wire form.
async fn task_outcome(client: &TestClient, arguments: Value) -> Value {
    let id = client.start_task("sync__echo", arguments).await;
    wire(&client.wait_terminal(&id, WAIT).await)
}

/// A plain call through `client` answers (a lane of the upstream is free).
async fn echo_answers(client: &TestClient, text: &str) {
    match client.call("sync__echo", json!({"text": text})).await {
        Ok(CallToolResponse::Complete(result)) => {
            let seen = serde_json::to_value(&result).unwrap().to_string();
            assert!(seen.contains(text), "{seen}");
        }
        other => panic!("expected the answer {text:?}, got {other:?}"),
    }
}

/// A synchronous upstream (2025-11-25, sessions) behind a scripted proxy,
/// the front before it with `call_timeout_ms = 1500`; `tools/call echo` of
/// the text `bad` is answered as `fault` says. A front task of it ends
/// `failed` with the very words of the same call made without tasks, at
/// the call timeout at the latest; a following call answers; the upstream
/// heard the timed-out call withdrawn.
async fn a_held_or_crossed_answer_ends_the_front_task(fault: Scripted, timed_out: bool) {
    let front_db = TestDatabase::sqlite();
    with_deadline(Duration::from_secs(180), async {
        let upstream = SyncUpstream::start_legacy().await;
        let scripted = ScriptedServer::start(&upstream.url).await;
        scripted.script(
            Rule::new("tools/call", usize::MAX, fault).when("/arguments/text", json!("bad")),
        );
        // Every call of a caller that declares tasks is handed out as its
        // task (no direct answer): these faults are a front task's.
        let servers = format!(
            "[[servers]]\nname = \"sync\"\nurl = {}\ncall_timeout_ms = 1500\nanswer_within_ms = 0\n",
            json!(scripted.url())
        );
        let gateway = front(&front_db, &servers).await;
        let plain = client(&gateway, ALICE, false).await;
        let tasks = client(&gateway, ALICE, true).await;

        let started = std::time::Instant::now();
        let expected = plain_error(&plain, json!({"text": "bad"})).await;
        eprintln!(
            "without tasks: {expected:?} after {} ms",
            started.elapsed().as_millis()
        );
        let started = std::time::Instant::now();
        let ended = task_outcome(&tasks, json!({"text": "bad"})).await;
        eprintln!(
            "as a task: {ended:#} after {} ms",
            started.elapsed().as_millis()
        );
        assert_eq!(ended["status"], "failed", "{ended:#}");
        assert_eq!(ended["error"]["message"], json!(expected), "{ended:#}");
        if timed_out {
            assert!(
                expected.contains("did not answer within 1.5s"),
                "{expected}"
            );
            // Both calls were withdrawn upstream (their lanes closed).
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            while scripted.seen_method("notifications/cancelled").len() < 2 {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the timed-out calls were not withdrawn upstream: {:?}",
                    scripted.seen_method("notifications/cancelled")
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        // The upstream's lanes are free: calls of both kinds answer.
        echo_answers(&plain, "after").await;
        let done = task_outcome(&tasks, json!({"text": "after, as a task"})).await;
        assert_eq!(done["status"], "completed", "{done:#}");
        plain.close().await;
        tasks.close().await;
    })
    .await;
}

/// An upstream that answers a front task's synchronous call with an SSE
/// stream that never ends: the task fails at the call timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_sse_answer_ends_a_front_task_at_the_call_timeout() {
    a_held_or_crossed_answer_ends_the_front_task(Scripted::EndlessSse, true).await;
}

/// An upstream that answers a front task's synchronous call under another
/// request's id: the task fails at once, as the call without tasks does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_id_answer_ends_a_front_task_as_a_plain_call() {
    a_held_or_crossed_answer_ends_the_front_task(
        Scripted::WrongId(json!({"content": [{"type": "text", "text": "not yours"}]})),
        false,
    )
    .await;
}

/// What `client` sees of its call of `demo__greet`: the answer, the task
/// it ends as, or the error, as text.
async fn seen_by(client: &TestClient, name: &str) -> String {
    match client.call("demo__greet", json!({"name": name})).await {
        Ok(CallToolResponse::Task(created)) => {
            wire(&client.wait_terminal(&created.task.task_id, WAIT).await).to_string()
        }
        Ok(CallToolResponse::Complete(result)) => {
            serde_json::to_value(&result).unwrap().to_string()
        }
        Ok(other) => format!("{other:?}"),
        Err(e) => format!("error: {e}"),
    }
}

/// A SEP-2663 (2026-07-28) upstream that answers two concurrent calls of
/// alice and bob each under the other's id: neither sees the other's data;
/// each either fails or gets its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swapped_answers_of_two_principals_deliver_nothing_across() {
    let (db, front_db) = (TestDatabase::sqlite(), TestDatabase::sqlite());
    with_deadline(Duration::from_secs(180), async {
        let server = DemoServer::start(&db.url, &[]).await;
        let scripted = ScriptedServer::start(&server.url).await;
        let servers = format!(
            "[[servers]]\nname = \"demo\"\nurl = {}\n",
            json!(scripted.url())
        );
        let gateway = front(&front_db, &servers).await;
        let alice = client(&gateway, ALICE, true).await;
        let bob = client(&gateway, BOB, true).await;
        assert!(
            alice
                .tools_once_listed("demo__greet")
                .await
                .contains(&"demo__greet".to_string())
        );
        scripted.script(Rule::new("tools/call", 2, Scripted::Swap).when("/name", json!("greet")));
        let (to_alice, to_bob) =
            tokio::join!(seen_by(&alice, "alice-secret"), seen_by(&bob, "bob-secret"));
        eprintln!("alice saw: {to_alice}\nbob saw: {to_bob}");
        assert_eq!(scripted.swaps(), 1, "the upstream swapped two answers");
        assert!(
            !to_alice.contains("bob-secret"),
            "alice saw bob's: {to_alice}"
        );
        assert!(
            !to_bob.contains("alice-secret"),
            "bob saw alice's: {to_bob}"
        );
        // What each did see is its own answer or the crossed-answer error.
        for (seen, own) in [(&to_alice, "alice-secret"), (&to_bob, "bob-secret")] {
            assert!(
                seen.contains(own) || seen.contains("answered another request's id"),
                "{seen}"
            );
        }
        // And the server serves both again once it behaves.
        let (again_alice, again_bob) =
            tokio::join!(seen_by(&alice, "alice-again"), seen_by(&bob, "bob-again"));
        assert!(again_alice.contains("alice-again"), "{again_alice}");
        assert!(again_bob.contains("bob-again"), "{again_bob}");
        alice.close().await;
        bob.close().await;
    })
    .await;
}
