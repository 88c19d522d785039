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
