//! Shared fixtures: stores on both backends, a manual clock and gated test tools.

#![allow(dead_code)]

use std::sync::Arc;

use mcptask_core::store::ServerTaskStore;
use mcptask_core::{ManualClock, SharedClock};
use mcptask_server::CreateRequest;
use mcptask_server::input::{accepted, elicit_form};
use mcptask_server::{
    InterruptPolicy, RuntimeConfig, TaskExit, TaskRuntime, TaskSupport, TaskTool, ToolRegistry,
};
use rmcp::model::{CallToolResult, ContentBlock, Tool};
use serde_json::{Value, json};
use tokio::sync::watch;

pub const LEASE: i64 = 10_000;
pub const RETENTION: i64 = 60_000;

/// The database a test runs on (SQLite or PostgreSQL).
pub use mcptask_sql::testkit::TestDatabase as Backend;

/// Releases gated work: `release(n)` lets attempts up to `n` finish.
#[derive(Clone)]
pub struct Gate(pub Arc<watch::Sender<i64>>);

impl Gate {
    pub fn new() -> Self {
        Gate(Arc::new(watch::channel(0).0))
    }
    pub fn release(&self, attempt: i64) {
        self.0.send_replace(attempt);
    }
    pub async fn wait(&self, attempt: i64) {
        let mut rx = self.0.subscribe();
        let _ = rx.wait_for(|released| *released >= attempt).await;
    }
}

fn empty_schema() -> Arc<rmcp::model::JsonObject> {
    Arc::new(rmcp::model::JsonObject::new())
}

fn text(s: String) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(s)])
}

/// Tools: `echo` (immediate), `hold` (until cancelled or the gate opens; Fail),
/// `ask` (asks "q", then waits for the gate; Rerun), `ask_fail` (same with Fail),
/// `required` (task-only echo).
pub fn registry(gate: &Gate) -> ToolRegistry {
    let mut r = ToolRegistry::new();
    r.register(TaskTool::new(
        Tool::new("echo", "echo", empty_schema()),
        |call| async move { Ok(text(format!("echo {}", Value::Object(call.arguments)))) },
    ));
    let g = gate.clone();
    r.register(TaskTool::new(Tool::new("hold", "hold", empty_schema()), move |call| {
        let g = g.clone();
        async move {
            tokio::select! {
                _ = call.ctx.cancelled() => Err(TaskExit::Cancelled),
                _ = g.wait(call.ctx.attempt()) => Ok(text(format!("held attempt {}", call.ctx.attempt()))),
            }
        }
    }));
    for (name, policy) in [
        ("ask", InterruptPolicy::Rerun),
        ("ask_fail", InterruptPolicy::Fail),
    ] {
        let g = gate.clone();
        r.register(
            TaskTool::new(Tool::new(name, "ask", empty_schema()), move |call| {
                let g = g.clone();
                async move {
                    let req = elicit_form(
                        "q?",
                        json!({"type": "object", "properties": {"v": {"type": "string"}}}),
                    )
                    .map_err(|e| {
                        TaskExit::Error(rmcp::ErrorData::internal_error(e.to_string(), None))
                    })?;
                    let answer = call.ctx.request_input("q", req).await?;
                    let v = accepted(&answer)
                        .and_then(|c| c.get("v"))
                        .and_then(Value::as_str)
                        .unwrap_or("?")
                        .to_string();
                    call.ctx.set_status_message(format!("got {v}")).await?;
                    tokio::select! {
                        _ = call.ctx.cancelled() => return Err(TaskExit::Cancelled),
                        _ = g.wait(call.ctx.attempt()) => {}
                    }
                    Ok(text(format!("answer {v} attempt {}", call.ctx.attempt())))
                }
            })
            .interrupt(policy),
        );
    }
    r.register(
        TaskTool::new(
            Tool::new("required", "required", empty_schema()),
            |_call| async move { Ok(text("required done".into())) },
        )
        .support(TaskSupport::Required),
    );
    r
}

pub fn config() -> RuntimeConfig {
    RuntimeConfig {
        lease_ms: LEASE,
        retention_ms: RETENTION,
        default_ttl_ms: Some(3_600_000),
        background: false,
        ..Default::default()
    }
}

pub async fn runtime(
    store: Arc<dyn ServerTaskStore>,
    clock: &ManualClock,
    gate: &Gate,
    owner: &str,
) -> TaskRuntime {
    runtime_with(store, clock, registry(gate), config(), owner).await
}

pub async fn runtime_with(
    store: Arc<dyn ServerTaskStore>,
    clock: &ManualClock,
    registry: ToolRegistry,
    config: RuntimeConfig,
    owner: &str,
) -> TaskRuntime {
    let clock: SharedClock = Arc::new(clock.clone());
    TaskRuntime::builder(store, registry)
        .clock(clock)
        .config(config)
        .owner_id(owner)
        .start()
        .await
        .expect("start runtime")
}

pub fn request(tool: &str, args: Value) -> CreateRequest {
    CreateRequest {
        tool: tool.into(),
        arguments: args.as_object().cloned().unwrap_or_default(),
        ..Default::default()
    }
}

/// Poll the runtime until `pred` holds for the task (work runs on tokio tasks).
pub async fn eventually(
    rt: &TaskRuntime,
    id: &str,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    for _ in 0..400 {
        let t = rt.get_task(id, None).await.expect("get task");
        let v = serde_json::to_value(rmcp::model::GetTaskResult::new(t)).unwrap();
        if pred(&v) {
            return v;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let t = rt.get_task(id, None).await.unwrap();
    panic!("task {id} never became {what}; last: {t:?}");
}

pub fn status_is(s: &'static str) -> impl Fn(&Value) -> bool {
    move |v| v["status"] == s
}

/// The text of a completed task's first content block.
pub fn wire_text(result: &rmcp::model::GetTaskResult) -> String {
    let v = serde_json::to_value(result).expect("serialize GetTaskResult");
    v["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}
