//! Two proxy replicas on one PostgreSQL serve each other's front tasks: a
//! front task created through A is read, answered and cancelled through B,
//! and B adopts A's front tasks when A is killed. The upstream is the demo
//! server (SEP-2663), so the front tasks follow tracked upstream tasks.

use std::time::Duration;

use mcptask_testkit::{
    DemoServer, GatewayProcess, GatewaySpec, TestDatabase, input_keys, result_text, status,
    wait_status, wait_terminal, with_deadline,
};
use rmcp::model::CallToolResponse;
use serde_json::json;

fn proxy_toml(front_db: &str, upstream: &str) -> String {
    GatewaySpec::open(front_db, &[("demo", upstream)]).toml()
        + "\n[proxy]\nenabled = true\nowner_lease_ms = 2000\n"
}

fn task_id(response: CallToolResponse) -> String {
    match response {
        CallToolResponse::Task(t) => t.task.task_id,
        other => panic!("expected a front task, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_proxy_replicas_on_postgres_serve_each_others_front_tasks() {
    let Some(front_db) = TestDatabase::postgres().await else {
        eprintln!(
            "two_proxy_replicas_on_postgres_serve_each_others_front_tasks: SKIPPED (no PostgreSQL, see above)"
        );
        return;
    };
    with_deadline(Duration::from_secs(240), async {
        let upstream_db = TestDatabase::sqlite();
        let demo = DemoServer::start(&upstream_db.url, &[]).await;
        let toml = proxy_toml(&front_db.url, &demo.url);
        let a = GatewayProcess::start_toml("proxy A", &toml, &[]).await;
        let b = GatewayProcess::start_toml("proxy B", &toml, &[]).await;
        let (on_a, on_b) = (a.front_client().await, b.front_client().await);

        // Created on A; its question read and answered on B.
        let asked = task_id(
            on_a.call("demo__confirm_delete", json!({"filename": "x.txt"}))
                .await
                .expect("tools/call"),
        );
        let waiting = wait_status(&on_b, &asked, "input_required", Duration::from_secs(30)).await;
        let keys = input_keys(&waiting);
        assert_eq!(keys, ["confirm_delete"], "{waiting:#}");
        on_b.update(
            &asked,
            json!({"confirm_delete": {"action": "accept", "content": {"confirm": true}}}),
        )
        .await
        .expect("tasks/update on B");
        let done = wait_terminal(&on_b, &asked, Duration::from_secs(30)).await;
        assert_eq!(status(&done), "completed", "{done:#}");
        assert_eq!(result_text(&done), "Deleted x.txt");

        // Created on A, cancelled through B: the cancel reaches the upstream.
        let long = task_id(
            on_a.call("demo__slow_compute", json!({"seconds": 120}))
                .await
                .expect("tools/call"),
        );
        wait_status(&on_b, &long, "working", Duration::from_secs(30)).await;
        on_b.cancel(&long).await.expect("tasks/cancel on B");
        let cancelled = wait_terminal(&on_a, &long, Duration::from_secs(30)).await;
        assert_eq!(status(&cancelled), "cancelled", "{cancelled:#}");

        // A dies with a front task running; B adopts it and follows the
        // same upstream task to its end (nothing is sent upstream twice).
        let adopted = task_id(
            on_a.call(
                "demo__slow_compute",
                json!({"seconds": 4, "label": "adopted"}),
            )
            .await
            .expect("tools/call"),
        );
        wait_status(&on_b, &adopted, "working", Duration::from_secs(30)).await;
        drop(on_a);
        drop(a); // SIGKILL
        let done = wait_terminal(&on_b, &adopted, Duration::from_secs(60)).await;
        assert_eq!(status(&done), "completed", "{done:#}");
        assert_eq!(result_text(&done), "adopted: computed in 4s");
        on_b.close().await;
        drop(b);
        drop(demo);
    })
    .await;
}
