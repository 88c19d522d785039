//! What an rmcp server imports from `rmcp::task_manager` is here under the
//! same names, and means the same on a durable manager: rmcp's defaults are
//! a task's defaults, and a `TaskExit` is spelled as the `ErrorData` a
//! `#[tool]` returns.

use mcptask_server::task_manager::{
    DEFAULT_POLL_INTERVAL_MS, DEFAULT_TASK_TTL_MS, TaskExit, TaskManager, TaskOptions, cancelled,
    current_timestamp, exit_error,
};
use mcptask_testkit::TestDatabase;
use rmcp::ErrorData;
use rmcp::model::{CallToolResult, ContentBlock};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcps_task_defaults_and_helpers_hold_on_the_durable_manager() {
    // rmcp's names, not copies of them.
    assert_eq!(DEFAULT_TASK_TTL_MS, rmcp::task_manager::DEFAULT_TASK_TTL_MS);
    assert_eq!(
        DEFAULT_POLL_INTERVAL_MS,
        rmcp::task_manager::DEFAULT_POLL_INTERVAL_MS
    );

    let db = TestDatabase::sqlite();
    let tasks = TaskManager::open(db.server_tasks().await)
        .await
        .expect("open the manager");
    let before = current_timestamp();
    let task = tasks
        .spawn(TaskOptions::default(), |ctx| {
            Box::pin(async move {
                ctx.set_status_message("done soon").await?;
                Ok::<_, TaskExit>(CallToolResult::success(vec![ContentBlock::text("ok")]))
            })
        })
        .await
        .expect("spawn");
    // A task made with rmcp's default options gets rmcp's defaults.
    assert_eq!(task.ttl_ms, Some(DEFAULT_TASK_TTL_MS));
    assert_eq!(task.poll_interval_ms, Some(DEFAULT_POLL_INTERVAL_MS));
    // `current_timestamp` is RFC 3339 UTC, as the task's `createdAt` (to
    // the second: the two write fractions differently).
    assert!(
        task.created_at[..19] >= before[..19],
        "{} is not after {before}",
        task.created_at
    );

    // A `TaskExit` as a `#[tool]` returns it.
    assert_eq!(exit_error(TaskExit::Cancelled), cancelled());
    let refused = ErrorData::invalid_params("no such file", None);
    assert_eq!(exit_error(TaskExit::Error(refused.clone())), refused);
    tasks.shutdown().await;
}

/// A closure registered under a name runs on the arguments its task
/// stores; a name never registered is refused before any task exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registered_closure_runs_on_its_arguments_and_an_unknown_name_is_refused() {
    let db = TestDatabase::sqlite();
    let tasks = TaskManager::builder(db.server_tasks().await)
        .rerunnable("double", |_ctx, arguments| {
            Box::pin(async move {
                let n = arguments.get("n").and_then(|n| n.as_i64()).unwrap_or(0);
                Ok::<_, TaskExit>(CallToolResult::success(vec![ContentBlock::text(
                    (2 * n).to_string(),
                )]))
            })
        })
        .open()
        .await
        .expect("open the manager");
    let arguments = serde_json::json!({"n": 21}).as_object().cloned().unwrap();
    let task = tasks
        .spawn_rerunnable(TaskOptions::default(), "double", arguments.clone())
        .await
        .expect("spawn a registered closure");
    let done = mcptask_testkit::with_deadline(std::time::Duration::from_secs(30), async {
        loop {
            let seen = tasks.get_task(&task.task_id).await.expect("tasks/get");
            if seen.task.status != rmcp::model::TaskStatus::Working {
                return seen;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    let wire = serde_json::to_value(&done).unwrap();
    assert_eq!(wire["result"]["content"][0]["text"], "42", "{wire}");

    let refused = tasks
        .spawn_rerunnable(TaskOptions::default(), "triple", arguments)
        .await
        .expect_err("not registered");
    assert_eq!(refused.code, rmcp::model::ErrorCode::INVALID_PARAMS);
    assert!(
        refused.message.contains("\"triple\""),
        "{}",
        refused.message
    );
}
