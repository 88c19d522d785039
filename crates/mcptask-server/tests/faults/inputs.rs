//! An input key names one question for the task's whole life: asking it again
//! with a different request is the tool's error, not the old answer.

use std::sync::Arc;

use mcptask_core::ManualClock;
use mcptask_server::input::elicit_form;
use mcptask_server::{TaskExit, TaskTool};
use rmcp::model::{CallToolResult, ContentBlock, TaskStatus, Tool};
use serde_json::json;

use crate::support::*;
use mcptask_testkit::fixtures::server::{Gate, config, registry, runtime_with};
use mcptask_testkit::mcp::wire;

fn form(message: &str) -> rmcp::model::InputRequest {
    elicit_form(
        message,
        json!({"type": "object", "properties": {"v": {"type": "string"}}}),
    )
    .expect("form request")
}

mcptask_testkit::on_both_backends! {
    async fn key_reasked_with_other_request_tool_error(db: TestDatabase) {
        let clock = ManualClock::new(1_800_000_000_000);
        let mut tools = registry(&Gate::new());
        tools.register(TaskTool::new(
            Tool::new("reask", "asks q twice", Arc::new(Default::default())),
            |call| async move {
                call.ctx.request_input("q", form("colour?")).await?;
                // Same key, same question: the stored answer (the rerun case).
                call.ctx.request_input("q", form("colour?")).await?;
                // Same key, another question: refused.
                let second = call.ctx.request_input("q", form("shape?")).await?;
                Ok::<_, TaskExit>(CallToolResult::success(vec![ContentBlock::text(format!(
                    "second answer {second}"
                ))]))
            },
        ));
        let rt = runtime_with(db.server_tasks().await, &clock, tools, config(), "A").await;
        let tasks = client(&rt).await;
        let id = tasks.start_task("reask", json!({})).await;
        tasks.wait_status(&id, TaskStatus::InputRequired, WAIT).await;
        tasks
            .update(&id, json!({"q": {"action": "accept", "content": {"v": "blue"}}}))
            .await
            .unwrap();
        let done = tasks.wait_terminal(&id, WAIT).await;
        let v = wire(&done);
        assert_eq!(v["status"], "failed", "{v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains("\"q\"") && message.contains("different request"), "{message}");
        tasks.close().await;
    }
}
