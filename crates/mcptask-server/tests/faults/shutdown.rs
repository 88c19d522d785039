//! Shutdown: while running work drains, the process keeps its lease and keeps
//! hearing answers and cancellations sent to any replica, so what the client
//! sends during the drain is acted on and nothing is taken over.

use std::time::Duration;

use rmcp::model::TaskStatus;
use serde_json::json;

use crate::support::*;
use mcptask_testkit::fixtures::server::{Gate, registry, wire_text};

const LEASE_MS: i64 = 600;
const ANSWER: &str = r#"{"q": {"action": "accept", "content": {"v": "blue"}}}"#;

mcptask_testkit::on_both_backends! {
    async fn answer_and_cancel_during_drain_delivered(db: TestDatabase) {
        let gate = Gate::new();
        let a = start_real(&db, registry(&gate), fast_config(LEASE_MS), "A").await;
        let b = start_real(&db, registry(&gate), fast_config(LEASE_MS), "B").await;
        let to_a = client(&a).await;
        let to_b = client(&b).await;
        let asking = to_a.start_task("ask", json!({})).await;
        let holding = to_a.start_task("hold", json!({})).await;
        to_a.wait_status(&asking, TaskStatus::InputRequired, WAIT).await;

        let draining = tokio::spawn({
            let a = a.clone();
            async move { a.shutdown(Duration::from_secs(60)).await }
        });
        // Shutdown has begun once creates are refused.
        until("A refuses new tasks", || async {
            matches!(
                a.create_task(mcptask_testkit::fixtures::server::request("no-such-tool", json!({}))).await,
                Err(mcptask_server::TaskError::ShuttingDown)
            )
        })
        .await;
        // The drain outlasts several leases: A must keep its own.
        tokio::time::sleep(Duration::from_millis(4 * LEASE_MS as u64)).await;
        assert!(a.is_running_here(&asking) && a.is_running_here(&holding));
        assert!(!b.is_running_here(&asking) && !b.is_running_here(&holding));

        // Sent to the other replica during the drain: both reach A's work.
        to_b.update(&asking, serde_json::from_str(ANSWER).unwrap()).await.unwrap();
        to_b.cancel(&holding).await.unwrap();
        let cancelled = to_b.wait_terminal(&holding, WAIT).await;
        assert_eq!(cancelled.task.status(), TaskStatus::Cancelled, "{cancelled:?}");
        gate.release(1);
        let done = to_b.wait_terminal(&asking, WAIT).await;
        assert_eq!(done.task.status(), TaskStatus::Completed, "{done:?}");
        assert_eq!(wire_text(&done), "answer blue attempt 1");
        tokio::time::timeout(WAIT, draining)
            .await
            .expect("the drain ends once its work has")
            .unwrap();
        to_a.close().await;
        to_b.close().await;
        b.shutdown(Duration::from_secs(1)).await;
    }
}
