//! Live calls per principal (`[limits] live_calls_per_principal`): one rule
//! at every face. A principal at its limit is refused with words naming the
//! limit and its value, through the MCP front (a JSON-RPC error) and through
//! REST (429); another principal is not; a call that completes gives its
//! place back. Real `mcptask serve` before a real demo server.

use std::time::Duration;

use mcptask_testkit::mcp::{Lifecycle, TestClient, wire};
use mcptask_testkit::*;
use rmcp::service::ServiceError;
use serde_json::{Value, json};

const LIMIT: &str = "live_calls_per_principal = 2";

fn confirm() -> Value {
    json!({"confirm_delete": {"action": "accept", "content": {"confirm": true}}})
}

async fn client(gateway: &GatewayProcess, token: &str) -> TestClient {
    TestClient::http(
        &format!("{}/mcp", gateway.base),
        Some(token),
        Lifecycle::Modern { tasks: true },
    )
    .await
    .expect("connect to /mcp")
}

/// A front task of `demo__confirm_delete`, waiting for its answer.
async fn asking(client: &TestClient) -> String {
    let id = client
        .start_task("demo__confirm_delete", json!({"filename": "f.txt"}))
        .await;
    client
        .wait_status(&id, rmcp::model::TaskStatus::InputRequired, WAIT)
        .await;
    id
}

/// The front's refusal of a call, as its JSON-RPC error.
async fn front_refusal(client: &TestClient) -> rmcp::ErrorData {
    match client
        .call("demo__confirm_delete", json!({"filename": "g.txt"}))
        .await
    {
        Err(ServiceError::McpError(e)) => e,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn rest_call() -> Value {
    json!({"server": "demo", "tool": "confirm_delete", "arguments": {"filename": "r.txt"}, "background": true})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_principal_at_its_live_call_limit_is_refused_naming_it_at_every_face() {
    let (server_db, gateway_db) = (TestDatabase::sqlite(), TestDatabase::sqlite());
    with_deadline(Duration::from_secs(240), async {
        let server = DemoServer::start(&server_db.url, &[]).await;
        let spec = GatewaySpec::with_tokens(&gateway_db.url, &[("demo", &server.url)]);
        let toml = format!(
            "{}\n[proxy]\nenabled = true\n\n[limits]\n{LIMIT}\n",
            spec.toml()
        );
        let gateway = GatewayProcess::start_toml("gateway", &toml, &[]).await;
        let (alice, bob) = (client(&gateway, ALICE).await, client(&gateway, BOB).await);

        // Through the front: two live calls, the third refused by name.
        let first = asking(&alice).await;
        let second = asking(&alice).await;
        let refused = front_refusal(&alice).await;
        assert!(refused.message.contains(LIMIT), "{refused:?}");
        assert!(refused.message.contains("\"alice\""), "{refused:?}");
        let data = refused.data.clone().unwrap_or_default();
        assert_eq!(data["limit"], "live_calls_per_principal", "{refused:?}");
        // Another principal is not touched by it.
        asking(&bob).await;

        // Through REST: the same rule, the same count.
        let alice_api = gateway.client(Some(ALICE));
        let r = alice_api.post("/api/v1/calls", &rest_call()).await;
        r.assert_error(429, "rate_limited");
        let message = r.json["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(LIMIT), "{r:#?}");
        let bob_api = gateway.client(Some(BOB));
        bob_api.start_task_with(rest_call()).await;

        // A completed call gives its place back: at the front...
        alice.update(&first, confirm()).await.expect("tasks/update");
        let done = alice.wait_terminal(&first, WAIT).await;
        assert_eq!(wire(&done)["status"], "completed", "{done:?}");
        let _third = until_admitted(|| async {
            match alice
                .call("demo__confirm_delete", json!({"filename": "h.txt"}))
                .await
            {
                Ok(rmcp::model::CallToolResponse::Task(t)) => Some(t.task.task_id),
                Err(ServiceError::McpError(e)) if e.message.contains(LIMIT) => None,
                other => panic!("expected a task or the limit, got {other:?}"),
            }
        })
        .await;
        // ...and at REST.
        let r = alice_api
            .post(
                &format!("/api/v1/tasks/{second}/answers"),
                &json!({"answers": confirm()}),
            )
            .await;
        assert!(r.status < 300, "{r:#?}");
        alice_api.wait_status(&second, "completed").await;
        until_admitted(|| async {
            let r = alice_api.post("/api/v1/calls", &rest_call()).await;
            match r.status {
                202 => Some(()),
                429 if r.json["error"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains(LIMIT)) =>
                {
                    None
                }
                _ => panic!("expected a task or the limit, got {r:#?}"),
            }
        })
        .await;
        // Both of alice's places are taken again.
        front_refusal(&alice).await;
        alice.close().await;
        bob.close().await;
    })
    .await;
}

/// `attempt` until it is admitted: the place of a completed call is given
/// back when the gateway hears of the completion, a moment after it.
async fn until_admitted<T, F, Fut>(attempt: F) -> T
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(admitted) = attempt().await {
            return admitted;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the completed call's place was never given back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
