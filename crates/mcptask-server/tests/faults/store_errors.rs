//! A permanent database error (here a real constraint planted in the test
//! database) fails the one operation with a clear error instead of being
//! retried forever; the database's own text stays in the server log.

use std::sync::Arc;

use mcptask_core::ManualClock;
use mcptask_server::{TaskExit, TaskTool};
use rmcp::model::{CallToolResult, ContentBlock, Tool};
use serde_json::json;

use crate::support::*;
use mcptask_testkit::fixtures::server::{Gate, config, registry, runtime_with};
use mcptask_testkit::mcp::wire;

/// Refuse a status message `poison` and any result mentioning `poison`:
/// a trigger on SQLite (SQLITE_CONSTRAINT_TRIGGER), a CHECK on PostgreSQL.
fn constraint_sql(backend: &str) -> &'static str {
    match backend {
        "sqlite" => {
            "CREATE TRIGGER no_poison BEFORE UPDATE ON server_tasks
             WHEN NEW.status_message = 'poison' OR NEW.result LIKE '%poison%'
             BEGIN SELECT RAISE(ABORT, 'poisoned value'); END;"
        }
        _ => {
            "ALTER TABLE server_tasks ADD CONSTRAINT no_poison CHECK (
                 status_message IS DISTINCT FROM 'poison'
                 AND (result IS NULL OR result NOT LIKE '%poison%'))"
        }
    }
}

mcptask_testkit::on_both_backends! {
    async fn constraint_violation_fails_operation_not_retried(db: TestDatabase) {
        exec(&db, constraint_sql(db.backend)).await;
        let clock = ManualClock::new(1_800_000_000_000);
        let mut tools = registry(&Gate::new());
        tools.register(TaskTool::new(
            Tool::new("poison_status", "writes a refused status", Arc::new(Default::default())),
            |call| async move {
                call.ctx.set_status_message("poison").await?;
                Ok::<_, TaskExit>(CallToolResult::success(vec![ContentBlock::text("unreachable")]))
            },
        ));
        tools.register(TaskTool::new(
            Tool::new("poison_result", "returns a refused result", Arc::new(Default::default())),
            |_call| async move {
                Ok::<_, TaskExit>(CallToolResult::success(vec![ContentBlock::text("poison")]))
            },
        ));
        let rt = runtime_with(db.server_tasks().await, &clock, tools, config(), "A").await;
        let tasks = client(&rt).await;

        let id = tasks.start_task("poison_status", json!({})).await;
        let v = wire(&tasks.wait_terminal(&id, WAIT).await);
        assert_eq!(v["status"], "failed", "{v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains("set status message") && message.contains("permanent"), "{message}");
        assert!(!message.contains("poisoned value") && !message.contains("no_poison"), "the database's text is not echoed: {message}");

        // The store cannot hold the result itself: the task still ends, failed.
        let id = tasks.start_task("poison_result", json!({})).await;
        let v = wire(&tasks.wait_terminal(&id, WAIT).await);
        assert_eq!(v["status"], "failed", "{v}");
        assert!(v["error"]["message"].as_str().unwrap().contains("refused its outcome"), "{v}");

        // Everything else goes on as usual.
        let id = tasks.start_task("echo", json!({})).await;
        assert_eq!(wire(&tasks.wait_terminal(&id, WAIT).await)["status"], "completed");
        tasks.close().await;
    }
}
