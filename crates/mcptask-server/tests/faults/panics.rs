//! Panics in tool code, wherever they happen (the synchronous part of the
//! handler before its first `.await`, after an `.await`, in a preflight, in
//! a rerun started by recovery) end the one task `failed` with the panic's
//! message, or answer the one call with an error; the runtime lives on.

use std::sync::Arc;
use std::time::Duration;

use mcptask_core::ManualClock;
use mcptask_server::{
    DurableTaskServer, InterruptPolicy, Preflight, TaskExit, TaskTool, ToolRegistry,
};
use mcptask_testkit::mcp::{Lifecycle, TestClient};
use rmcp::model::{CallToolResult, ContentBlock, TaskStatus, Tool};
use serde_json::{Value, json};

use crate::support::*;
use mcptask_testkit::fixtures::server::{
    Gate, LEASE, config, eventually, registry, runtime_with, status_is,
};

fn schema() -> Arc<rmcp::model::JsonObject> {
    Arc::new(Default::default())
}

fn ok(text: &str) -> Result<CallToolResult, TaskExit> {
    Ok(CallToolResult::success(vec![ContentBlock::text(text)]))
}

/// The shared tools plus: `panic_sync` (panics before returning its future),
/// `panic_async` (panics after an await), `panic_preflight`, and
/// `panic_on_rerun` (holds on attempt 1, panics synchronously on attempt 2).
fn tools(gate: &Gate) -> ToolRegistry {
    let mut r = registry(gate);
    r.register(TaskTool::new(
        Tool::new("panic_sync", "panics at once", schema()),
        |call| {
            if !call.arguments.contains_key("calm") {
                panic!("sync boom");
            }
            async { ok("calm") }
        },
    ));
    r.register(TaskTool::new(
        Tool::new("panic_async", "panics later", schema()),
        |_call| async {
            tokio::task::yield_now().await;
            panic!("async boom");
        },
    ));
    r.register(
        TaskTool::new(
            Tool::new("panic_preflight", "panics in preflight", schema()),
            |_call| async { ok("unreachable") },
        )
        .preflight(|_, _| -> Preflight { panic!("preflight boom") }),
    );
    let g = gate.clone();
    r.register(
        TaskTool::new(
            Tool::new("panic_on_rerun", "panics when rerun", schema()),
            move |call| {
                if call.ctx.attempt() > 1 {
                    panic!("rerun boom");
                }
                let g = g.clone();
                async move {
                    let mut rx = g.0.subscribe();
                    let _ = rx.wait_for(|r| *r >= 1).await;
                    ok("first attempt")
                }
            },
        )
        .interrupt(InterruptPolicy::Rerun),
    );
    r
}

fn error_message(v: &Value) -> String {
    v["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

mcptask_testkit::on_both_backends! {
    async fn handler_panic_anywhere_task_failed(db: TestDatabase) {
        let clock = ManualClock::new(1_800_000_000_000);
        let gate = Gate::new();
        let rt = runtime_with(db.server_tasks().await, &clock, tools(&gate), config(), "A").await;
        let tasks = client(&rt).await;

        for (tool, text) in [("panic_sync", "sync boom"), ("panic_async", "async boom")] {
            let id = tokio::time::timeout(WAIT, tasks.start_task(tool, json!({})))
                .await
                .unwrap_or_else(|_| panic!("{tool}: tools/call was never answered"));
            let done = tasks.wait_terminal(&id, WAIT).await;
            let v = mcptask_testkit::mcp::wire(&done);
            assert_eq!(v["status"], "failed", "{tool}: {v}");
            assert_eq!(error_message(&v), format!("tool panicked: {text}"), "{tool}");
        }

        // A preflight panic answers that call with an error; the session lives on.
        let e = tokio::time::timeout(WAIT, tasks.call("panic_preflight", json!({})))
            .await
            .expect("the preflight call was answered")
            .unwrap_err();
        assert!(e.to_string().contains("preflight boom"), "{e}");

        // Without the tasks extension the tool runs inline: the panic is the call's error.
        let inline = TestClient::in_process(
            DurableTaskServer::new(rt.clone()),
            Lifecycle::Modern { tasks: false },
        )
        .await;
        let e = tokio::time::timeout(WAIT, inline.call("panic_sync", json!({})))
            .await
            .expect("the inline call was answered")
            .unwrap_err();
        assert!(e.to_string().contains("tool panicked: sync boom"), "{e}");
        let calm = inline.call("panic_sync", json!({"calm": true})).await.unwrap();
        assert!(format!("{calm:?}").contains("calm"));

        // The runtime is intact: another task runs to the end.
        let id = tasks.start_task("echo", json!({"after": "panics"})).await;
        tasks.wait_status(&id, TaskStatus::Completed, WAIT).await;
        tasks.close().await;
        inline.close().await;
    }

    /// The rerun's synchronous panic happens inside recovery (the maintenance
    /// step): recovery completes, and the task fails with the panic's message.
    async fn rerun_panic_in_recovery_task_failed(db: TestDatabase) {
        let clock = ManualClock::new(1_800_000_000_000);
        let gate = Gate::new();
        let a = runtime_with(db.server_tasks().await, &clock, tools(&gate), config(), "A").await;
        let id = a
            .create_task(mcptask_testkit::fixtures::server::request("panic_on_rerun", json!({})))
            .await
            .unwrap()
            .task_id;
        let b = runtime_with(db.server_tasks().await, &clock, tools(&gate), config(), "B").await;
        clock.advance(LEASE + 1);
        b.maintenance().heartbeat_once().await.unwrap();
        let recovered = tokio::spawn({
            let b = b.clone();
            async move { b.maintenance().recover_once().await }
        })
        .await
        .expect("recovery must not panic");
        assert_eq!(recovered.unwrap(), 1);
        let v = eventually(&b, &id, "failed", status_is("failed")).await;
        assert_eq!(error_message(&v), "tool panicked: rerun boom");
        // Recovery keeps working afterwards.
        assert_eq!(b.maintenance().recover_once().await.unwrap(), 0);
        gate.release(1);
        tokio::time::sleep(Duration::from_millis(50)).await;
        let v = eventually(&b, &id, "still failed", status_is("failed")).await;
        assert_eq!(error_message(&v), "tool panicked: rerun boom");
    }
}
