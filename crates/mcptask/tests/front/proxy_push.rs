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
