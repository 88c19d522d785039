//! Acceptance "Two server processes on one PostgreSQL": any replica reads,
//! answers and cancels any task; a replica's death is noticed by the other.
//!
//! Skips loudly without PostgreSQL outside CI; under `CI=true` a missing
//! PostgreSQL fails the test.

use std::time::Duration;

use mcptask_testkit::mcp::wire;
use mcptask_testkit::{
    DemoServer, FAST_RECOVERY, TestDatabase, input_keys, result_text, status, wait_status,
    wait_terminal, with_deadline,
};
use serde_json::json;

/// "Within a few seconds": far longer than a signal or a backstop re-check
/// takes, far shorter than the 60 s the `slow_compute` tasks would need to
/// finish on their own.
const PROMPTLY: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_share_one_postgres() {
    let Some(db) = TestDatabase::postgres().await else {
        eprintln!("two_servers_share_one_postgres: SKIPPED (no PostgreSQL, see above)");
        return;
    };
    with_deadline(Duration::from_secs(300), async {
        let mut a = DemoServer::start_named("replica A", &db.url, FAST_RECOVERY).await;
        let b = DemoServer::start_named("replica B", &db.url, FAST_RECOVERY).await;
        let on_a = a.client().await;
        let on_b = b.client().await;

        // Created on A, read and answered on B; the work on A gets the answer.
        // confirm_delete fails as "interrupted" if anyone but A finished it, so
        // "Deleted …" proves A's waiting work was woken by B's answer.
        let confirm = on_a
            .start_task("confirm_delete", json!({"filename": "report.pdf"}))
            .await;
        let asked = wait_status(&on_b, &confirm, "input_required", Duration::from_secs(60)).await;
        assert_eq!(input_keys(&asked), ["confirm_delete"], "{asked:#}");
        on_b.update(
            &confirm,
            json!({"confirm_delete": {"action": "accept", "content": {"confirm": true}}}),
        )
        .await
        .expect("tasks/update on B");
        let done = wait_terminal(&on_b, &confirm, PROMPTLY).await;
        assert_eq!(status(&done), "completed", "{done:#}");
        assert_eq!(result_text(&done), "Deleted report.pdf");
        let seen_on_a = wire(&on_a.get(&confirm).await.expect("tasks/get on A"));
        assert_eq!(seen_on_a["status"], "completed", "{seen_on_a:#}");
        assert_eq!(
            seen_on_a["result"], done["result"],
            "both replicas serve the same task"
        );

        // Created on A, cancelled on B: A's work stops and the task settles
        // cancelled long before its 60 s would be up.
        let to_cancel = on_a
            .start_task("slow_compute", json!({"seconds": 60}))
            .await;
        let working = wire(&on_b.get(&to_cancel).await.expect("tasks/get on B"));
        assert_eq!(status(&working), "working", "{working:#}");
        on_b.cancel(&to_cancel).await.expect("tasks/cancel on B");
        let cancelled = wait_terminal(&on_b, &to_cancel, PROMPTLY).await;
        assert_eq!(status(&cancelled), "cancelled", "{cancelled:#}");
        let cancelled_on_a = wire(&on_a.get(&to_cancel).await.expect("tasks/get on A"));
        assert_eq!(cancelled_on_a["status"], "cancelled", "{cancelled_on_a:#}");

        // A dies mid-task: B recovers the task after A's lease lapses and,
        // per slow_compute's interrupt policy, fails it as interrupted.
        let orphan = on_a
            .start_task("slow_compute", json!({"seconds": 60}))
            .await;
        let before = wire(&on_b.get(&orphan).await.expect("tasks/get on B"));
        assert_eq!(status(&before), "working", "{before:#}");
        drop(on_a);
        a.kill().await;
        let failed = wait_terminal(&on_b, &orphan, PROMPTLY).await;
        assert_eq!(status(&failed), "failed", "{failed:#}");
        let message = failed["error"]["message"].as_str().unwrap_or_default();
        assert!(message.to_lowercase().contains("interrupted"), "{failed:#}");

        // B itself is unaffected and keeps serving new work.
        let after = on_b
            .start_task("slow_compute", json!({"seconds": 0.1}))
            .await;
        let after = wait_terminal(&on_b, &after, Duration::from_secs(60)).await;
        assert_eq!(status(&after), "completed", "{after:#}");
    })
    .await;
}
