//! A durable MCP task server: one task tool on a SQLite store, served over
//! stdio.
//!
//! ```sh
//! cargo run -p mcptask-server --example durable_server                  # tasks in ./durable_server.db
//! cargo run -p mcptask-server --example durable_server -- sqlite:/tmp/tasks.db
//! ```
//!
//! The server speaks MCP on stdin/stdout (its few log lines go to stderr), so
//! an MCP client runs it as a child process. The tracker example does exactly
//! that:
//!
//! ```sh
//! cargo build --examples
//! cargo run -p mcptask-client --example track_task
//! ```
//!
//! The tool, `slow_square` (`{"n": 12, "seconds": 5}`), counts down for
//! `seconds` with a status message, then answers `n²`; `tasks/cancel` stops it
//! early. A request that declares the tasks extension gets its task handle at
//! once, and the task row is committed before that handle is sent. Kill the
//! process mid-task and start it again on the same store: `tasks/get` still
//! knows the task, and once the dead process's owner lease has lapsed the new
//! one runs the tool again (`InterruptPolicy::Rerun`; the default, `Fail`,
//! would report an honest `failed` instead).

use std::sync::Arc;
use std::time::Duration;

use mcptask_server::{
    DurableTaskServer, InterruptPolicy, TaskExit, TaskRuntime, TaskTool, ToolRegistry,
};
use rmcp::ServiceExt;
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool};
use serde_json::{Value, json};

/// `slow_square`: a task tool that takes a while, reports progress and can be
/// cancelled.
fn slow_square() -> TaskTool {
    let schema: JsonObject = serde_json::from_value(json!({
        "type": "object",
        "properties": {
            "n": {"type": "integer"},
            "seconds": {"type": "integer", "minimum": 0, "maximum": 3600}
        },
        "required": ["n"]
    }))
    .expect("an object schema");
    let tool = Tool::new("slow_square", "Square a number, slowly.", Arc::new(schema));
    TaskTool::new(tool, |call| async move {
        let n = call.arguments.get("n").and_then(Value::as_i64).unwrap_or(0);
        let seconds = call.arguments.get("seconds").and_then(Value::as_u64);
        for left in (1..=seconds.unwrap_or(5).min(3600)).rev() {
            call.ctx
                .set_status_message(format!("squaring {n}: {left}s left"))
                .await?;
            tokio::select! {
                _ = call.ctx.cancelled() => return Err(TaskExit::Cancelled),
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
        let square = n.saturating_mul(n);
        Ok(CallToolResult::success(vec![ContentBlock::text(format!(
            "{n}² = {square}"
        ))]))
    })
    .interrupt(InterruptPolicy::Rerun)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "sqlite:durable_server.db".into());
    // Opens (creating the file if needed) and migrates the store.
    let store = mcptask_sql::open(&url).await?;
    let mut tools = ToolRegistry::new();
    tools.register(slow_square());
    let runtime = TaskRuntime::builder(store.server_tasks(), tools)
        .start()
        .await?;
    eprintln!("durable_server: serving slow_square over stdio; tasks in {url}");

    // One MCP session on stdin/stdout; it ends when the client goes away.
    // A client that closes stdin before initializing (the test command's
    // smoke run, with stdin at end of file) ends the session too.
    match DurableTaskServer::new(runtime.clone())
        .serve(rmcp::transport::stdio())
        .await
    {
        Ok(session) => {
            session.waiting().await?;
        }
        Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => {
            eprintln!("durable_server: the client left before initializing");
        }
        Err(e) => return Err(e.into()),
    }

    // Running tasks get two seconds to finish; then they stop and the owner
    // lease is given up, so the next process on this store recovers them.
    runtime.shutdown(Duration::from_secs(2)).await;
    Ok(())
}
