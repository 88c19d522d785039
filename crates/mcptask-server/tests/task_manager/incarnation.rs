//! The `rmcp_task_server` example with the runtime's own settings (a 30 s
//! owner lease), as real processes: killed and restarted at once on the same
//! store, it adopts its previous incarnation's work at once (a named tool's
//! task runs again, a closure's is answered `failed`) instead of waiting out
//! the lease; a closure registered under a name reruns at once with the
//! answers it had; two processes at once on one store each hold their own slot
//! and never adopt each other's live work.

use std::time::{Duration, Instant};

use mcptask_core::store::ServerTaskStore;
use mcptask_testkit::mcp::TestClient;
use mcptask_testkit::{TestDatabase, with_deadline};
use rmcp::model::{GetTaskResult, TaskStatus};
use serde_json::json;

use crate::example::{Server, WAIT, result_text};

/// What "at once" is held to, measured from before the restarted process
/// is spawned (its start, the store's opening and the adoption included):
/// the bound issue 44 sets, far below the 30 s owner lease a restart used
/// to wait out.
const AT_ONCE: Duration = Duration::from_secs(2);

/// How long the restarted process is given before the test fails: past
/// [`AT_ONCE`] so the time is measured and printed, short of the lease so
/// the old wait fails here rather than passing late.
const GIVE_UP: Duration = Duration::from_secs(15);

fn status_message(t: &GetTaskResult) -> String {
    t.task.task.status_message.clone().unwrap_or_default()
}

/// Poll the store until `task` runs again, then read it through `client`:
/// its attempt is past 1 and that attempt's work has set a status message
/// starting with `prefix` (a rerun starts with the runtime's own status
/// message, written with the new attempt, so such a message comes from the
/// new run), or it settled. `store` is opened before the restart, so the
/// time measured is the server's.
async fn wait_rerun(
    store: &dyn ServerTaskStore,
    client: &TestClient,
    task: &str,
    prefix: &str,
) -> GetTaskResult {
    let deadline = Instant::now() + GIVE_UP;
    loop {
        let record = store
            .get_task(task)
            .await
            .expect("read the task")
            .expect("the task exists")
            .record;
        if record.status.is_terminal()
            || (record.attempt > 1
                && record
                    .status_message
                    .as_deref()
                    .is_some_and(|m| m.starts_with(prefix)))
        {
            return client.get(task).await.expect("tasks/get");
        }
        assert!(
            Instant::now() < deadline,
            "task {task} did not run again within {GIVE_UP:?}: {record:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The owner and attempt a task has in the store right now.
async fn owner_and_attempt(db: &TestDatabase, task_id: &str) -> (String, i64) {
    let view = db
        .server_tasks()
        .await
        .get_task(task_id)
        .await
        .expect("read the task")
        .expect("the task exists");
    (
        view.record.owner.clone().unwrap_or_default(),
        view.record.attempt,
    )
}

mcptask_testkit::on_both_backends! {
    async fn a_restarted_process_adopts_its_previous_work_at_once(db: TestDatabase) {
        with_deadline(Duration::from_secs(180), async {
            let mut first = Server::start("rmcp_task_server (first)", &db.url).await;
            let client = first.client().await;
            let closure = client
                .start_task("slow_sum", json!({"a": 2, "b": 3, "seconds": 600}))
                .await;
            let named = client
                .start_task("slow_compute", json!({"seconds": 600, "label": "resumed"}))
                .await;
            // Both are working when the process dies without a word.
            client
                .wait_for(&named, WAIT, |t| status_message(t) == "resumed: 600s left")
                .await;
            client
                .wait_for(&closure, WAIT, |t| status_message(t) == "adding slowly")
                .await;
            client.close().await;
            first.process.kill().await;

            let store = db.server_tasks().await;
            let restart = Instant::now();
            let second = Server::start("rmcp_task_server (restarted)", &db.url).await;
            let ready = restart.elapsed();
            let client = second.client().await;
            let ((failed, failed_after), (rerun, rerun_after)) = tokio::join!(
                async {
                    let t = client.wait_terminal(&closure, GIVE_UP).await;
                    (t, restart.elapsed())
                },
                async {
                    let t = wait_rerun(&*store, &client, &named, "resumed: ").await;
                    (t, restart.elapsed())
                },
            );
            eprintln!(
                "[{}] restart: process ready after {ready:?}; closure task failed after {failed_after:?}; named task running again after {rerun_after:?}",
                db.backend
            );
            assert_eq!(failed.task.status(), TaskStatus::Failed, "{failed:?}");
            let error = mcptask_testkit::mcp::wire(&failed)["error"]["message"].to_string();
            assert!(error.contains("interrupted"), "the closure task fails honestly: {error}");
            assert_eq!(rerun.task.status(), TaskStatus::Working, "{rerun:?}");
            assert!(
                failed_after < AT_ONCE && rerun_after < AT_ONCE,
                "adopted only {failed_after:?} (failed) and {rerun_after:?} (rerun) after the restart; log:\n{}",
                second.process.log()
            );
            let (owner, attempt) = owner_and_attempt(&db, &named).await;
            assert!(owner.starts_with("slot0."), "the restart took the dead process's slot: {owner}");
            assert_eq!(attempt, 2);
        })
        .await;
    }

    /// rmcp's style of task, a closure, made rerunnable by registering it
    /// under a name when the manager is built (`approved_sum`): after a
    /// `kill -9` and an immediate restart its task runs again at once, the
    /// approval given before the crash answered again without asking, and
    /// it finishes with the sum.
    async fn a_registered_closure_reruns_at_once_with_its_answers(db: TestDatabase) {
        with_deadline(Duration::from_secs(180), async {
            let mut first = Server::start("rmcp_task_server (first)", &db.url).await;
            let client = first.client().await;
            let task = client
                .start_task("approved_sum", json!({"a": 2, "b": 3, "seconds": 600}))
                .await;
            client.wait_status(&task, TaskStatus::InputRequired, WAIT).await;
            client
                .update(&task, json!({"approve": {"action": "accept", "content": {"approve": true}}}))
                .await
                .expect("tasks/update");
            client
                .wait_for(&task, WAIT, |t| status_message(t) == "approved; adding")
                .await;
            client.close().await;
            first.process.kill().await;

            let store = db.server_tasks().await;
            let restart = Instant::now();
            let second = Server::start("rmcp_task_server (restarted)", &db.url).await;
            let client = second.client().await;
            let rerun = wait_rerun(&*store, &client, &task, "approved; adding").await;
            let after = restart.elapsed();
            eprintln!("[{}] registered closure running again {after:?} after the restart", db.backend);
            // Working on attempt 2 means the approval was answered from the
            // store: the rerun never went back to input_required.
            assert_eq!(rerun.task.status(), TaskStatus::Working, "{rerun:?}");
            assert!(after < AT_ONCE, "rerun only {after:?} after the restart; log:\n{}", second.process.log());
            assert_eq!(owner_and_attempt(&db, &task).await.1, 2);
            client.cancel(&task).await.expect("tasks/cancel");
            let cancelled = client.wait_terminal(&task, WAIT).await;
            assert_eq!(cancelled.task.status(), TaskStatus::Cancelled, "{cancelled:?}");
        })
        .await;
    }

    async fn two_live_processes_hold_their_own_slots_and_keep_their_own_work(db: TestDatabase) {
        with_deadline(Duration::from_secs(180), async {
            let a = Server::start("rmcp_task_server (a)", &db.url).await;
            let at_a = a.client().await;
            let closure = at_a
                .start_task("slow_sum", json!({"a": 2, "b": 3, "seconds": 8}))
                .await;
            let named = at_a
                .start_task("slow_compute", json!({"seconds": 8, "label": "a's"}))
                .await;
            at_a.wait_for(&named, WAIT, |t| status_message(t).starts_with("a's: "))
                .await;
            at_a.wait_for(&closure, WAIT, |t| status_message(t) == "adding slowly")
                .await;
            let (a_owner, _) = owner_and_attempt(&db, &named).await;

            // b starts while a's work runs: its first recovery pass runs at
            // once, and a task created at b names b's own slot.
            let b = Server::start("rmcp_task_server (b)", &db.url).await;
            let at_b = b.client().await;
            let own = at_b
                .start_task("slow_sum", json!({"a": 1, "b": 1, "seconds": 2}))
                .await;
            let (b_owner, _) = owner_and_attempt(&db, &own).await;
            assert!(a_owner.starts_with("slot0."), "a holds the first slot: {a_owner}");
            assert!(b_owner.starts_with("slot1."), "b holds a slot of its own: {b_owner}");
            assert_eq!(result_text(&at_b.wait_terminal(&own, WAIT).await), "2");

            // a's tasks finish at a, on their first attempt, read through b.
            let sum = at_b.wait_terminal(&closure, WAIT).await;
            assert_eq!(sum.task.status(), TaskStatus::Completed, "{sum:?}");
            assert_eq!(result_text(&sum), "5");
            let computed = at_b.wait_terminal(&named, WAIT).await;
            assert_eq!(computed.task.status(), TaskStatus::Completed, "{computed:?}");
            assert_eq!(result_text(&computed), "a's: computed in 8s");
            for task in [&closure, &named] {
                assert_eq!(owner_and_attempt(&db, task).await, (a_owner.clone(), 1));
            }
        })
        .await;
    }
}
