//! Front task notifications: a caller of the proxy's `/mcp` listens for its
//! front task (`subscriptions/listen` with `taskIds`) and is told when the
//! task settles, as the front follows the demo server's task.

use std::time::Duration;

use mcptask_testkit::mcp::{Lifecycle, TaskListen, TestClient, listen_body};
use mcptask_testkit::{DemoServer, GatewayProcess, GatewaySpec, TestDatabase, with_deadline};
use rmcp::model::CallToolResponse;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_is_told_when_its_front_task_settles() {
    let (db, front_db) = (TestDatabase::sqlite(), TestDatabase::sqlite());
    with_deadline(Duration::from_secs(120), async {
        let demo = DemoServer::start(&db.url, &[]).await;
        let toml = GatewaySpec::open(&front_db.url, &[("demo", &demo.url)]).toml()
            + "\n[proxy]\nenabled = true\n";
        let gateway = GatewayProcess::start_toml("proxy", &toml, &[]).await;
        let url = format!("{}/mcp", gateway.base);
        let client = TestClient::http(&url, None, Lifecycle::Modern { tasks: true })
            .await
            .expect("connect to /mcp");
        let id = match client
            .call("demo__slow_compute", json!({"seconds": 2}))
            .await
            .expect("tools/call")
        {
            CallToolResponse::Task(t) => t.task.task_id,
            other => panic!("expected a front task, got {other:?}"),
        };

        let mut listen = TaskListen::open(&url, None, listen_body(7, &[&id], true)).await;
        let ack = listen.next().await.expect("an acknowledgement");
        assert_eq!(
            ack["method"], "notifications/subscriptions/acknowledged",
            "{ack}"
        );
        assert_eq!(
            ack["params"]["notifications"]["taskIds"],
            json!([id]),
            "{ack}"
        );
        let done = listen.next().await.expect("a notification");
        assert_eq!(done["method"], "notifications/tasks", "{done}");
        assert_eq!(done["params"]["taskId"], id.as_str(), "{done}");
        assert_eq!(done["params"]["status"], "completed", "{done}");
        assert_eq!(
            done["params"]["result"]["content"][0]["text"], "compute: computed in 2s",
            "{done}"
        );
        let end = listen.next().await.expect("the final result");
        assert_eq!(end["id"], 7, "the stream ends with its result: {end}");
    })
    .await;
}

/// The next message of `listen`, waiting at most `wait` (`None`: nothing came).
async fn next_within(listen: &mut TaskListen, wait: Duration) -> Option<serde_json::Value> {
    tokio::time::timeout(wait, listen.next())
        .await
        .ok()
        .flatten()
}

/// A 2026-07-28 upstream tells of changed lists only on a listen stream of
/// its own: the front holds one open to the demo server and passes every
/// change on to its listeners, tagged with their subscription ids. The demo
/// announces a change of a list it keeps as it is, so the front passes on
/// the upstream's word even when its own catalog reads the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_hears_the_upstreams_list_changes() {
    let (db, front_db) = (TestDatabase::sqlite(), TestDatabase::sqlite());
    with_deadline(Duration::from_secs(120), async {
        let demo = DemoServer::start(&db.url, &[]).await;
        let toml = GatewaySpec::open(&front_db.url, &[("demo", &demo.url)]).toml()
            + "\n[proxy]\nenabled = true\n";
        let gateway = GatewayProcess::start_toml("proxy", &toml, &[]).await;
        let url = format!("{}/mcp", gateway.base);
        let client = TestClient::http(&url, None, Lifecycle::Modern { tasks: false })
            .await
            .expect("connect to /mcp");
        let body = json!({
            "jsonrpc": "2.0", "id": 9, "method": "subscriptions/listen",
            "params": {
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": {},
                },
                "notifications": {"toolsListChanged": true, "promptsListChanged": true},
            }
        });
        let mut listen = TaskListen::open(&url, None, body.to_string()).await;
        let ack = listen.next().await.expect("an acknowledgement");
        assert_eq!(
            ack["method"], "notifications/subscriptions/acknowledged",
            "{ack}"
        );
        assert_eq!(
            ack["params"]["notifications"],
            json!({"toolsListChanged": true, "promptsListChanged": true}),
            "{ack}"
        );
        for (trigger, heard) in [
            (
                "demo__test_trigger_tool_change",
                "notifications/tools/list_changed",
            ),
            (
                "demo__test_trigger_prompt_change",
                "notifications/prompts/list_changed",
            ),
        ] {
            // The front's own stream to the demo opens as the gateway
            // starts: a change made before it listens is not heard, so the
            // change is made again until one is.
            let mut note = None;
            for _ in 0..10 {
                client.call(trigger, json!({})).await.expect(trigger);
                note = next_within(&mut listen, Duration::from_secs(2)).await;
                if note.is_some() {
                    break;
                }
            }
            let note = note.unwrap_or_else(|| panic!("{trigger}: no {heard} on the stream"));
            assert_eq!(note["method"], heard, "{note}");
            assert_eq!(
                note["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 9,
                "{note}"
            );
        }
    })
    .await;
}
