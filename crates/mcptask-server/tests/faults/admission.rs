//! Admission control: live-task caps per principal and in total, and a
//! bounded create queue. A refused create answers a clear JSON-RPC error
//! (`SERVER_BUSY`) and stores nothing; capacity comes back as tasks end.

use std::sync::Arc;

use mcptask_core::ManualClock;
use mcptask_core::store::ServerTaskStore;
use mcptask_server::{SERVER_BUSY, TaskError};
use rmcp::model::TaskStatus;
use serde_json::json;

use crate::support::*;
use mcptask_testkit::fixtures::server::{Gate, config, registry, request, runtime_with};

fn as_principal(tool: &str, who: &str) -> mcptask_server::CreateRequest {
    let mut r = request(tool, json!({}));
    r.principal = Some(who.into());
    r
}

fn is_busy(r: Result<rmcp::model::Task, TaskError>) -> bool {
    matches!(r, Err(TaskError::Overloaded(_)))
}

mcptask_testkit::on_both_backends! {
    async fn live_task_caps_refused_server_busy(db: TestDatabase) {
        let clock = ManualClock::new(1_800_000_000_000);
        let gate = Gate::new();
        let mut cfg = config();
        cfg.max_live_tasks = Some(3);
        cfg.max_live_tasks_per_principal = Some(2);
        let rt = runtime_with(db.server_tasks().await, &clock, registry(&gate), cfg, "A").await;
        let probe = Probe::open(&db).await;

        let alice1 = rt.create_task(as_principal("hold", "alice")).await.unwrap().task_id;
        rt.create_task(as_principal("hold", "alice")).await.unwrap();
        let refused = rt.create_task(as_principal("hold", "alice")).await;
        assert!(is_busy(refused), "alice is at her cap");
        rt.create_task(as_principal("hold", "bob")).await.unwrap();
        assert!(is_busy(rt.create_task(as_principal("hold", "carol")).await), "total cap");

        // Over rmcp (anonymous caller): a clear JSON-RPC error, nothing stored.
        let tasks = client(&rt).await;
        let e = tasks.call("hold", json!({})).await.unwrap_err();
        assert_eq!(mcptask_testkit::mcp::error_code(&e), Some(SERVER_BUSY), "{e}");
        assert!(e.to_string().contains("server busy"), "{e}");
        assert_eq!(probe.int("SELECT count(*) FROM server_tasks").await, 3);

        // Capacity comes back when a task ends.
        rt.cancel_task(&alice1, Some("alice")).await.unwrap();
        until("alice's cancelled task ended", || async { rt.running_count() == 2 }).await;
        let id = tasks.start_task("echo", json!({})).await;
        tasks.wait_status(&id, TaskStatus::Completed, WAIT).await;
        until("the echo task ended", || async { rt.running_count() == 2 }).await;
        rt.create_task(as_principal("hold", "alice")).await.unwrap();
        tasks.close().await;
    }

    async fn create_queue_full_refused_server_busy(db: TestDatabase) {
        let clock = ManualClock::new(1_800_000_000_000);
        let store = Interposed::new(db.server_tasks().await, Pause::new());
        let mut cfg = config();
        cfg.max_create_queue = 2;
        cfg.max_create_batch = 1;
        // One writer, held in its commit: with the store's default (several
        // on PostgreSQL) a second writer on another worker thread could take
        // a queued create between the polls below, leaving the fourth room
        // to wait in (it failed so in full runs under load: "a fourth create
        // finds the queue full", after 20 s).
        cfg.create_writers = Some(1);
        let rt = runtime_with(
            store.clone() as Arc<dyn ServerTaskStore>,
            &clock,
            registry(&Gate::new()),
            cfg,
            "A",
        )
        .await;
        // The writer is held inside its first commit; two more creates wait.
        let first = tokio::spawn({
            let rt = rt.clone();
            async move { rt.create_task(request("echo", json!({}))).await }
        });
        store.hook.committed.notified().await;
        // Each create is queued on its first poll.
        let mut queued: Vec<_> = (0..2)
            .map(|_| Box::pin(rt.create_task(request("echo", json!({})))))
            .collect();
        for create in &mut queued {
            assert!(futures::poll!(create.as_mut()).is_pending());
        }
        let fourth = tokio::time::timeout(WAIT, rt.create_task(request("echo", json!({}))));
        assert!(
            fourth.await.is_ok_and(is_busy),
            "a fourth create finds the queue full"
        );
        store.hook.resume.send_replace(true);
        first.await.unwrap().unwrap();
        for create in queued {
            create.await.unwrap();
        }
        assert_eq!(store.hook.created().len(), 3, "refused creates stored nothing");
        rt.create_task(request("echo", json!({}))).await.unwrap();
    }
}
