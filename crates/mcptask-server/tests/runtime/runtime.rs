//! The runtime against real stores, with time moved by hand.

use std::time::Duration;

use mcptask_core::ManualClock;
use mcptask_server::TaskError;
use mcptask_testkit::TestDatabase;
use mcptask_testkit::fixtures::server::*;
use serde_json::json;

const ANSWER: &str = r#"{"q": {"action": "accept", "content": {"v": "blue"}}}"#;

fn answer() -> rmcp::model::InputResponses {
    serde_json::from_str(ANSWER).unwrap()
}

async fn fail_policy_reports_interruption(backend: TestDatabase) {
    let clock = ManualClock::new(1_800_000_000_000);
    let gate = Gate::new();
    let a = runtime(backend.server_tasks().await, &clock, &gate, "A").await;
    let task = a.create_task(request("hold", json!({}))).await.unwrap();
    let id = task.task_id;
    eventually(&a, &id, "working", status_is("working")).await;

    // A stops heartbeating (it "died"); B starts and recovers after the lease.
    let b = runtime(backend.server_tasks().await, &clock, &gate, "B").await;
    assert_eq!(
        b.maintenance().recover_once().await.unwrap(),
        0,
        "A's lease is still valid"
    );
    clock.advance(LEASE + 1);
    b.maintenance().heartbeat_once().await.unwrap();
    assert_eq!(b.maintenance().recover_once().await.unwrap(), 1);
    let v = eventually(&b, &id, "failed", status_is("failed")).await;
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("interrupted"),
        "{v}"
    );
    assert_eq!(v["error"]["data"]["attempt"], 1);

    // A's work, still alive in this process, finishes late: its write is fenced out.
    gate.release(1);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let v = eventually(&a, &id, "still failed", status_is("failed")).await;
    assert!(v.get("result").is_none());
}

async fn rerun_policy_replays_answers(backend: TestDatabase) {
    let clock = ManualClock::new(1_800_000_000_000);
    let gate = Gate::new();
    let a = runtime(backend.server_tasks().await, &clock, &gate, "A").await;
    let id = a
        .create_task(request("ask", json!({})))
        .await
        .unwrap()
        .task_id;
    let v = eventually(&a, &id, "input_required", status_is("input_required")).await;
    assert!(
        v["inputRequests"]["q"]["method"] == "elicitation/create",
        "{v}"
    );
    a.update_task(&id, None, answer()).await.unwrap();
    eventually(&a, &id, "working with the answer", |v| {
        v["statusMessage"] == "got blue"
    })
    .await;

    let b = runtime(backend.server_tasks().await, &clock, &gate, "B").await;
    clock.advance(LEASE + 1);
    b.maintenance().heartbeat_once().await.unwrap();
    assert_eq!(b.maintenance().recover_once().await.unwrap(), 1);
    assert!(b.is_running_here(&id));
    // The rerun asks "q" again: it gets the stored answer at once, so the task
    // never shows input_required again.
    for _ in 0..20 {
        let t = b.get_task(&id, None).await.unwrap();
        assert_eq!(t.status(), rmcp::model::TaskStatus::Working);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    gate.release(2);
    let v = eventually(&b, &id, "completed", status_is("completed")).await;
    assert_eq!(v["result"]["content"][0]["text"], "answer blue attempt 2");
    gate.release(1); // A's stale attempt finishes too late to matter.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let v = eventually(&b, &id, "completed", status_is("completed")).await;
    assert_eq!(v["result"]["content"][0]["text"], "answer blue attempt 2");
}

async fn cancel_request_reaches_an_orphan(backend: TestDatabase) {
    let clock = ManualClock::new(1_800_000_000_000);
    let gate = Gate::new();
    let a = runtime(backend.server_tasks().await, &clock, &gate, "A").await;
    let id = a
        .create_task(request("ask", json!({})))
        .await
        .unwrap()
        .task_id;
    eventually(&a, &id, "input_required", status_is("input_required")).await;
    a.shutdown(Duration::from_millis(50)).await; // releases A's lease at once
    let b = runtime(backend.server_tasks().await, &clock, &gate, "B").await;
    b.cancel_task(&id, None).await.unwrap();
    assert_eq!(b.maintenance().recover_once().await.unwrap(), 1);
    let v = eventually(&b, &id, "cancelled", status_is("cancelled")).await;
    assert!(v.get("inputRequests").is_none());
}

async fn ttl_expiry_retention_and_purge(backend: TestDatabase) {
    let clock = ManualClock::new(1_800_000_000_000);
    let gate = Gate::new();
    let mut cfg = config();
    cfg.default_ttl_ms = Some(5_000);
    let rt = runtime_with(
        backend.server_tasks().await,
        &clock,
        registry(&gate),
        cfg,
        "A",
    )
    .await;
    let id = rt
        .create_task(request("hold", json!({})))
        .await
        .unwrap()
        .task_id;
    let t = rt.get_task(&id, None).await.unwrap();
    assert_eq!(t.task.ttl_ms, Some(5_000));
    clock.advance(4_999);
    assert_eq!(
        rt.get_task(&id, None).await.unwrap().status(),
        rmcp::model::TaskStatus::Working
    );
    clock.advance(1);
    // Reads reflect the TTL even before the sweep writes it.
    let v = serde_json::to_value(rmcp::model::GetTaskResult::new(
        rt.get_task(&id, None).await.unwrap(),
    ))
    .unwrap();
    assert_eq!(v["status"], "failed");
    assert!(v["error"]["message"].as_str().unwrap().contains("expired"));
    assert_eq!(rt.maintenance().sweep_once().await.unwrap(), (1, 0));
    for _ in 0..100 {
        if !rt.is_running_here(&id) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!rt.is_running_here(&id), "expired work is stopped");
    clock.advance(RETENTION - 1);
    assert!(
        rt.get_task(&id, None).await.is_ok(),
        "kept for the retention window"
    );
    clock.advance(1);
    assert!(
        matches!(rt.get_task(&id, None).await, Err(TaskError::NotFound)),
        "past retention reads as gone"
    );
    assert_eq!(rt.maintenance().sweep_once().await.unwrap(), (0, 1));
    assert!(matches!(
        rt.get_task(&id, None).await,
        Err(TaskError::NotFound)
    ));
}

async fn unlimited_ttl_is_kept(backend: TestDatabase) {
    let clock = ManualClock::new(1_800_000_000_000);
    let gate = Gate::new();
    let mut cfg = config();
    cfg.default_ttl_ms = None;
    let rt = runtime_with(
        backend.server_tasks().await,
        &clock,
        registry(&gate),
        cfg,
        "A",
    )
    .await;
    let id = rt
        .create_task(request("echo", json!({"x": 1})))
        .await
        .unwrap()
        .task_id;
    let v = eventually(&rt, &id, "completed", status_is("completed")).await;
    assert!(v["ttlMs"].is_null());
    clock.advance(10 * 365 * 24 * 3_600_000);
    rt.maintenance().sweep_once().await.unwrap();
    assert!(rt.get_task(&id, None).await.is_ok());
}

async fn principals_are_isolated(backend: TestDatabase) {
    let clock = ManualClock::new(1_800_000_000_000);
    let gate = Gate::new();
    let rt = runtime(backend.server_tasks().await, &clock, &gate, "A").await;
    let mut req = request("ask", json!({}));
    req.principal = Some("alice".into());
    let id = rt.create_task(req).await.unwrap().task_id;
    eventually_as(&rt, &id, Some("alice")).await;
    for who in [Some("bob"), None] {
        let e = rt.get_task(&id, who).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            rt.get_task("no-such-task", who)
                .await
                .unwrap_err()
                .to_string()
        );
        assert!(matches!(
            rt.update_task(&id, who, answer()).await,
            Err(TaskError::NotFound)
        ));
        assert!(matches!(
            rt.cancel_task(&id, who).await,
            Err(TaskError::NotFound)
        ));
    }
    let t = rt.get_task(&id, Some("alice")).await.unwrap();
    assert_eq!(
        t.status(),
        rmcp::model::TaskStatus::InputRequired,
        "bob's answer and cancel did nothing"
    );
    rt.update_task(&id, Some("alice"), answer()).await.unwrap();
    gate.release(1);
    for _ in 0..400 {
        if rt.get_task(&id, Some("alice")).await.unwrap().status()
            == rmcp::model::TaskStatus::Completed
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("alice's task did not complete");
}

async fn eventually_as(rt: &mcptask_server::TaskRuntime, id: &str, who: Option<&str>) {
    for _ in 0..400 {
        if rt.get_task(id, who).await.unwrap().status() == rmcp::model::TaskStatus::InputRequired {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never input_required");
}

async fn update_from_another_replica_wakes_the_work(backend: TestDatabase) {
    let clock = ManualClock::new(1_800_000_000_000);
    let gate = Gate::new();
    gate.release(1);
    let a = runtime(backend.server_tasks().await, &clock, &gate, "A").await;
    let b = runtime(backend.server_tasks().await, &clock, &gate, "B").await;
    let id = a
        .create_task(request("ask", json!({})))
        .await
        .unwrap()
        .task_id;
    eventually(&a, &id, "input_required", status_is("input_required")).await;
    b.update_task(&id, None, answer()).await.unwrap();
    // The answer is visible at once on any replica: the task no longer waits
    // for input. (On PostgreSQL the NOTIFY can wake A fast enough for the
    // task to have completed already.)
    let after = b.get_task(&id, None).await.unwrap().status();
    assert!(
        matches!(
            after,
            rmcp::model::TaskStatus::Working | rmcp::model::TaskStatus::Completed
        ),
        "the answer is visible at once on any replica, got {after:?}"
    );
    if backend.backend == "sqlite" {
        // No push channel: A's work learns of the answer from its backstop.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_ne!(
            a.get_task(&id, None).await.unwrap().status(),
            rmcp::model::TaskStatus::Completed
        );
        assert!(a.maintenance().backstop_once().await.unwrap() >= 1);
    }
    // On PostgreSQL the NOTIFY wakes A without any backstop.
    let v = eventually(&a, &id, "completed", status_is("completed")).await;
    assert_eq!(v["result"]["content"][0]["text"], "answer blue attempt 1");
}

async fn cancel_from_another_replica_stops_the_work(backend: TestDatabase) {
    let clock = ManualClock::new(1_800_000_000_000);
    let gate = Gate::new();
    let a = runtime(backend.server_tasks().await, &clock, &gate, "A").await;
    let b = runtime(backend.server_tasks().await, &clock, &gate, "B").await;
    let id = a
        .create_task(request("hold", json!({})))
        .await
        .unwrap()
        .task_id;
    b.cancel_task(&id, None).await.unwrap();
    if backend.backend == "sqlite" {
        a.maintenance().backstop_once().await.unwrap();
    }
    let v = eventually(&a, &id, "cancelled", status_is("cancelled")).await;
    assert!(v["statusMessage"].as_str().unwrap().contains("Cancelled"));
    // Cancelling a terminal task is an idempotent no-op.
    b.cancel_task(&id, None).await.unwrap();
    assert_eq!(
        a.get_task(&id, None).await.unwrap().status(),
        rmcp::model::TaskStatus::Cancelled
    );
}

async fn keys_are_never_reissued_and_bad_answers_rejected(backend: TestDatabase) {
    let clock = ManualClock::new(1_800_000_000_000);
    let gate = Gate::new();
    let rt = runtime(backend.server_tasks().await, &clock, &gate, "A").await;
    let id = rt
        .create_task(request("ask", json!({})))
        .await
        .unwrap()
        .task_id;
    eventually(&rt, &id, "input_required", status_is("input_required")).await;
    // Non-object answers and unknown tasks are refused; unknown keys ignored.
    let bad: rmcp::model::InputResponses = serde_json::from_value(json!({"q": "yes"})).unwrap();
    assert!(matches!(
        rt.update_task(&id, None, bad).await,
        Err(TaskError::InvalidParams(_))
    ));
    let unknown: rmcp::model::InputResponses =
        serde_json::from_value(json!({"zzz": {"action": "accept"}})).unwrap();
    rt.update_task(&id, None, unknown).await.unwrap();
    assert!(matches!(
        rt.update_task("nope", None, answer()).await,
        Err(TaskError::NotFound)
    ));
    rt.update_task(&id, None, answer()).await.unwrap();
    eventually(&rt, &id, "working", |v| v["statusMessage"] == "got blue").await;
    // A second, different answer to the same key changes nothing.
    let other: rmcp::model::InputResponses =
        serde_json::from_value(json!({"q": {"action": "accept", "content": {"v": "red"}}}))
            .unwrap();
    rt.update_task(&id, None, other).await.unwrap();
    gate.release(1);
    let v = eventually(&rt, &id, "completed", status_is("completed")).await;
    assert_eq!(v["result"]["content"][0]["text"], "answer blue attempt 1");
}

async fn oversized_arguments_are_refused_without_a_row(backend: TestDatabase) {
    let clock = ManualClock::new(1_800_000_000_000);
    let gate = Gate::new();
    let mut cfg = config();
    cfg.limits.max_arguments_bytes = 1_000;
    let rt = runtime_with(
        backend.server_tasks().await,
        &clock,
        registry(&gate),
        cfg,
        "A",
    )
    .await;
    let ok = rt
        .create_task(request("hold", json!({"x": "a"})))
        .await
        .unwrap()
        .task_id;
    let err = rt
        .create_task(request("echo", json!({"blob": "x".repeat(2_000)})))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("at most 1000"), "{err}");
    assert!(matches!(
        rt.create_task(request("nope", json!({}))).await,
        Err(TaskError::UnknownTool(_))
    ));
    assert_eq!(rt.running_count(), 1);
    rt.cancel_task(&ok, None).await.unwrap();
    eventually(&rt, &ok, "cancelled", status_is("cancelled")).await;
}

async fn shutdown_drains_then_hands_over(backend: TestDatabase) {
    let clock = ManualClock::new(1_800_000_000_000);
    let gate = Gate::new();
    let a = runtime(backend.server_tasks().await, &clock, &gate, "A").await;
    let quick = a
        .create_task(request("echo", json!({})))
        .await
        .unwrap()
        .task_id;
    let stuck = a
        .create_task(request("hold", json!({})))
        .await
        .unwrap()
        .task_id;
    let started = std::time::Instant::now();
    a.shutdown(Duration::from_millis(200)).await;
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "shutdown never hangs"
    );
    assert!(matches!(
        a.create_task(request("echo", json!({}))).await,
        Err(TaskError::ShuttingDown)
    ));
    let b = runtime(backend.server_tasks().await, &clock, &gate, "B").await;
    assert_eq!(
        b.get_task(&quick, None).await.unwrap().status(),
        rmcp::model::TaskStatus::Completed
    );
    // No waiting for a lease: the released owner's task is recovered at once.
    assert_eq!(b.maintenance().recover_once().await.unwrap(), 1);
    eventually(&b, &stuck, "failed", status_is("failed")).await;
}

/// A source whose tools arrive after the runtime started: `NotYet` until the
/// first listing is published.
struct LateSource {
    tools: std::sync::RwLock<Option<mcptask_server::ToolRegistry>>,
    version: tokio::sync::watch::Sender<u64>,
}

impl LateSource {
    fn new() -> std::sync::Arc<Self> {
        std::sync::Arc::new(LateSource {
            tools: std::sync::RwLock::new(None),
            version: tokio::sync::watch::channel(0).0,
        })
    }
    fn publish(&self, registry: mcptask_server::ToolRegistry) {
        *self.tools.write().unwrap() = Some(registry);
        self.version.send_modify(|v| *v += 1);
    }
}

impl mcptask_server::ToolSource for LateSource {
    fn lookup(&self, name: &str) -> mcptask_server::Lookup {
        match &*self.tools.read().unwrap() {
            None => mcptask_server::Lookup::NotYet,
            Some(r) => mcptask_server::ToolSource::lookup(r, name),
        }
    }
    fn definitions(&self) -> Vec<rmcp::model::Tool> {
        self.tools
            .read()
            .unwrap()
            .as_ref()
            .map(|r| r.definitions())
            .unwrap_or_default()
    }
    fn changed(&self) -> tokio::sync::watch::Receiver<u64> {
        self.version.subscribe()
    }
}

async fn source_runtime(
    store: std::sync::Arc<dyn mcptask_core::store::ServerTaskStore>,
    clock: &ManualClock,
    source: std::sync::Arc<LateSource>,
    owner: &str,
) -> mcptask_server::TaskRuntime {
    let shared: mcptask_core::SharedClock = std::sync::Arc::new(clock.clone());
    mcptask_server::TaskRuntime::builder_with_source(store, source)
        .clock(shared)
        .config(config())
        .owner_id(owner)
        .start()
        .await
        .expect("start runtime")
}

/// A `hold` that finishes at once and is rerun after an interruption.
fn quick_hold() -> mcptask_server::ToolRegistry {
    let mut r = mcptask_server::ToolRegistry::new();
    r.register(
        mcptask_server::TaskTool::new(
            rmcp::model::Tool::new("hold", "hold", std::sync::Arc::new(Default::default())),
            |call| async move {
                Ok(rmcp::model::CallToolResult::success(vec![
                    rmcp::model::ContentBlock::text(format!(
                        "rerun attempt {}",
                        call.ctx.attempt()
                    )),
                ]))
            },
        )
        .interrupt(mcptask_server::InterruptPolicy::Rerun),
    );
    r
}

async fn recovery_waits_for_a_tool_not_known_yet(backend: TestDatabase) {
    let clock = ManualClock::new(1_800_000_000_000);
    let gate = Gate::new();
    let a = runtime(backend.server_tasks().await, &clock, &gate, "A").await;
    let id = a
        .create_task(request("hold", json!({})))
        .await
        .unwrap()
        .task_id;
    eventually(&a, &id, "working", status_is("working")).await;

    // A dies; B starts before its source has listed any tool.
    let source = LateSource::new();
    let b = source_runtime(backend.server_tasks().await, &clock, source.clone(), "B").await;
    clock.advance(LEASE + 1);
    b.maintenance().heartbeat_once().await.unwrap();
    assert_eq!(b.maintenance().recover_once().await.unwrap(), 1);
    // Not failed "tool not available", not running: left for a later pass.
    let t = b.get_task(&id, None).await.unwrap();
    assert_eq!(t.status(), rmcp::model::TaskStatus::Working, "{t:?}");
    assert!(!b.is_running_here(&id));
    // Another pass while the tool is still unknown changes nothing.
    b.maintenance().recover_once().await.unwrap();
    assert_eq!(
        b.get_task(&id, None).await.unwrap().status(),
        rmcp::model::TaskStatus::Working
    );

    // The tool appears: the next pass recovers the task under B's policy (rerun).
    source.publish(quick_hold());
    assert_eq!(b.maintenance().recover_once().await.unwrap(), 1);
    let v = eventually(&b, &id, "completed", status_is("completed")).await;
    assert_eq!(v["result"]["content"][0]["text"], "rerun attempt 2", "{v}");
}

async fn recovery_fails_a_task_whose_tool_is_unknown(backend: TestDatabase) {
    let clock = ManualClock::new(1_800_000_000_000);
    let gate = Gate::new();
    let a = runtime(backend.server_tasks().await, &clock, &gate, "A").await;
    let id = a
        .create_task(request("hold", json!({})))
        .await
        .unwrap()
        .task_id;
    eventually(&a, &id, "working", status_is("working")).await;
    // B's source has listed its tools, and `hold` is not among them.
    let source = LateSource::new();
    source.publish(mcptask_server::ToolRegistry::new());
    let b = source_runtime(backend.server_tasks().await, &clock, source, "B").await;
    clock.advance(LEASE + 1);
    b.maintenance().heartbeat_once().await.unwrap();
    assert_eq!(b.maintenance().recover_once().await.unwrap(), 1);
    let v = eventually(&b, &id, "failed", status_is("failed")).await;
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not available"),
        "{v}"
    );
}

async fn a_changing_source_changes_the_served_tools(backend: TestDatabase) {
    let clock = ManualClock::new(1_800_000_000_000);
    let source = LateSource::new();
    let rt = source_runtime(backend.server_tasks().await, &clock, source.clone(), "A").await;
    let mut changed = rt.tools().changed();
    assert!(rt.tools().definitions().is_empty());
    assert!(matches!(
        rt.create_task(request("hold", json!({}))).await,
        Err(TaskError::UnknownTool(_))
    ));

    source.publish(quick_hold());
    assert!(changed.has_changed().unwrap(), "the change is announced");
    changed.borrow_and_update();
    let names: Vec<_> = rt
        .tools()
        .definitions()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    assert_eq!(names, ["hold"]);
    // The MCP handler serves what the source serves now.
    let server = mcptask_server::DurableTaskServer::new(rt.clone());
    assert!(rmcp::ServerHandler::get_tool(&server, "hold").is_some());
    let id = rt
        .create_task(request("hold", json!({})))
        .await
        .unwrap()
        .task_id;
    let v = eventually(&rt, &id, "completed", status_is("completed")).await;
    assert_eq!(v["result"]["content"][0]["text"], "rerun attempt 1", "{v}");

    // The tool goes away: listed no more, and new calls are refused.
    source.publish(mcptask_server::ToolRegistry::new());
    assert!(changed.has_changed().unwrap());
    assert!(rt.tools().definitions().is_empty());
    assert!(rmcp::ServerHandler::get_tool(&server, "hold").is_none());
    assert!(matches!(
        rt.create_task(request("hold", json!({}))).await,
        Err(TaskError::UnknownTool(_))
    ));
}

async fn a_registry_is_a_source_that_never_changes(backend: TestDatabase) {
    let clock = ManualClock::new(1_800_000_000_000);
    let gate = Gate::new();
    let rt = runtime(backend.server_tasks().await, &clock, &gate, "A").await;
    let changed = rt.tools().changed();
    let listed: Vec<_> = rt
        .tools()
        .definitions()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    let registered: Vec<_> = rt
        .registry()
        .definitions()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    assert_eq!(listed, registered);
    assert!(matches!(
        rt.tools().lookup("echo"),
        mcptask_server::Lookup::Found(_)
    ));
    assert!(matches!(
        rt.tools().lookup("nope"),
        mcptask_server::Lookup::Unknown
    ));
    assert!(!changed.has_changed().unwrap());
}

/// `stateful` (Rerun): saves what it saw, asks "q" and withdraws it when the
/// gate opens for its attempt, then waits; a rerun returns the saved state.
/// `big_state`: tries to save more than the payload limit.
fn stateful_tools(gate: &Gate) -> mcptask_server::ToolRegistry {
    let mut r = mcptask_server::ToolRegistry::new();
    let g = gate.clone();
    r.register(
        mcptask_server::TaskTool::new(
            rmcp::model::Tool::new(
                "stateful",
                "stateful",
                std::sync::Arc::new(Default::default()),
            ),
            move |call| {
                let g = g.clone();
                async move {
                    let ctx = &call.ctx;
                    let seen = ctx.state();
                    ctx.save_state(json!({"attempt": ctx.attempt(), "seen": seen}))
                        .await?;
                    assert_eq!(
                        ctx.state(),
                        Some(json!({"attempt": ctx.attempt(), "seen": seen}))
                    );
                    if ctx.attempt() == 1 {
                        let req = mcptask_server::input::elicit_form(
                            "q?",
                            json!({"type": "object", "properties": {"v": {"type": "string"}}}),
                        )
                        .unwrap();
                        tokio::select! {
                            _ = ctx.request_input("q", req) => {}
                            _ = g.wait(1) => ctx.withdraw_inputs(&["q".to_string()]).await?,
                        }
                        ctx.set_status_message("question withdrawn").await?;
                        ctx.cancelled().await;
                        return Err(mcptask_server::TaskExit::Cancelled);
                    }
                    Ok(rmcp::model::CallToolResult::success(vec![
                        rmcp::model::ContentBlock::text(format!(
                            "saw {}",
                            seen.unwrap_or_default()
                        )),
                    ]))
                }
            },
        )
        .interrupt(mcptask_server::InterruptPolicy::Rerun),
    );
    r.register(mcptask_server::TaskTool::new(
        rmcp::model::Tool::new("big_state", "big", std::sync::Arc::new(Default::default())),
        |call| async move {
            call.ctx
                .save_state(json!({"blob": "x".repeat(4096)}))
                .await?;
            Ok(rmcp::model::CallToolResult::success(vec![]))
        },
    ));
    r
}

async fn task_state_survives_a_rerun_and_questions_can_be_withdrawn(backend: TestDatabase) {
    let clock = ManualClock::new(1_800_000_000_000);
    let gate = Gate::new();
    let small = mcptask_server::RuntimeConfig {
        limits: mcptask_core::payload::PayloadLimits {
            max_arguments_bytes: 1024,
            ..Default::default()
        },
        ..config()
    };
    let a = runtime_with(
        backend.server_tasks().await,
        &clock,
        stateful_tools(&gate),
        small.clone(),
        "A",
    )
    .await;
    let id = a
        .create_task(request("stateful", json!({})))
        .await
        .unwrap()
        .task_id;
    eventually(&a, &id, "input_required", status_is("input_required")).await;
    // The question becomes moot: it is withdrawn and the task works again.
    gate.release(1);
    let v = eventually(&a, &id, "working without questions", |v| {
        v["statusMessage"] == "question withdrawn"
    })
    .await;
    assert_eq!(v["status"], "working", "{v}");
    assert!(v.get("inputRequests").is_none(), "{v}");

    // A dies: the rerun on B reads the state attempt 1 saved.
    let b = runtime_with(
        backend.server_tasks().await,
        &clock,
        stateful_tools(&gate),
        small,
        "B",
    )
    .await;
    clock.advance(LEASE + 1);
    b.maintenance().heartbeat_once().await.unwrap();
    assert_eq!(b.maintenance().recover_once().await.unwrap(), 1);
    let v = eventually(&b, &id, "completed", status_is("completed")).await;
    assert_eq!(
        v["result"]["content"][0]["text"], r#"saw {"attempt":1,"seen":null}"#,
        "{v}"
    );

    // State beyond the payload limit is refused with a clear error.
    let big = b
        .create_task(request("big_state", json!({})))
        .await
        .unwrap()
        .task_id;
    let v = eventually(&b, &big, "failed", status_is("failed")).await;
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("task state is"),
        "{v}"
    );
}

async fn tasks_are_listed_per_principal(backend: TestDatabase) {
    let clock = ManualClock::new(1_800_000_000_000);
    let gate = Gate::new();
    let rt = runtime(backend.server_tasks().await, &clock, &gate, "A").await;
    let mut alice = Vec::new();
    for _ in 0..3 {
        let mut req = request("hold", json!({}));
        req.principal = Some("alice".into());
        alice.push(rt.create_task(req).await.unwrap().task_id);
        clock.advance(1);
    }
    let mut req = request("echo", json!({}));
    req.principal = Some("bob".into());
    let bob = rt.create_task(req).await.unwrap().task_id;
    for _ in 0..400 {
        let t = rt.get_task(&bob, Some("bob")).await.unwrap();
        if t.status() == rmcp::model::TaskStatus::Completed {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let (first, next) = rt.list_tasks(Some("alice"), false, None, 2).await.unwrap();
    let (second, last) = rt
        .list_tasks(Some("alice"), false, next.as_ref(), 2)
        .await
        .unwrap();
    assert!(last.is_none());
    let listed: Vec<_> = first
        .iter()
        .chain(&second)
        .map(|t| t.task_id.clone())
        .collect();
    alice.reverse();
    assert_eq!(listed, alice, "newest first, each once");

    let (bobs, _) = rt.list_tasks(Some("bob"), false, None, 10).await.unwrap();
    assert_eq!(bobs.len(), 1);
    assert_eq!(bobs[0].task_id, bob);
    let (live, _) = rt.list_tasks(Some("bob"), true, None, 10).await.unwrap();
    assert!(live.is_empty(), "bob's only task is settled");
    let (anonymous, _) = rt.list_tasks(None, false, None, 10).await.unwrap();
    assert!(anonymous.is_empty());
}

async fn a_deferred_task_cancelled_meanwhile_settles_cancelled(backend: TestDatabase) {
    let clock = ManualClock::new(1_800_000_000_000);
    let gate = Gate::new();
    let a = runtime(backend.server_tasks().await, &clock, &gate, "A").await;
    let id = a
        .create_task(request("hold", json!({})))
        .await
        .unwrap()
        .task_id;
    eventually(&a, &id, "working", status_is("working")).await;
    let source = LateSource::new();
    let b = source_runtime(backend.server_tasks().await, &clock, source.clone(), "B").await;
    clock.advance(LEASE + 1);
    b.maintenance().heartbeat_once().await.unwrap();
    assert_eq!(b.maintenance().recover_once().await.unwrap(), 1);
    assert_eq!(
        b.get_task(&id, None).await.unwrap().status(),
        rmcp::model::TaskStatus::Working
    );
    // Cancelled while it waits for its tool: the next pass re-reads it and
    // settles it cancelled, without running the (now known) tool.
    b.cancel_task(&id, None).await.unwrap();
    source.publish(quick_hold());
    b.maintenance().recover_once().await.unwrap();
    let v = eventually(&b, &id, "cancelled", status_is("cancelled")).await;
    assert!(v.get("result").is_none(), "{v}");
    assert!(!b.is_running_here(&id));
}

mcptask_testkit::on_both_backends! {
    fail_policy_reports_interruption => super::fail_policy_reports_interruption;
    rerun_policy_replays_answers => super::rerun_policy_replays_answers;
    cancel_request_reaches_an_orphan => super::cancel_request_reaches_an_orphan;
    ttl_expiry_retention_and_purge => super::ttl_expiry_retention_and_purge;
    unlimited_ttl_is_kept => super::unlimited_ttl_is_kept;
    principals_are_isolated => super::principals_are_isolated;
    update_from_another_replica_wakes_the_work => super::update_from_another_replica_wakes_the_work;
    cancel_from_another_replica_stops_the_work => super::cancel_from_another_replica_stops_the_work;
    keys_are_never_reissued_and_bad_answers_rejected => super::keys_are_never_reissued_and_bad_answers_rejected;
    oversized_arguments_are_refused_without_a_row => super::oversized_arguments_are_refused_without_a_row;
    shutdown_drains_then_hands_over => super::shutdown_drains_then_hands_over;
    recovery_waits_for_a_tool_not_known_yet => super::recovery_waits_for_a_tool_not_known_yet;
    recovery_fails_a_task_whose_tool_is_unknown => super::recovery_fails_a_task_whose_tool_is_unknown;
    a_changing_source_changes_the_served_tools => super::a_changing_source_changes_the_served_tools;
    a_registry_is_a_source_that_never_changes => super::a_registry_is_a_source_that_never_changes;
    task_state_survives_a_rerun_and_questions_can_be_withdrawn => super::task_state_survives_a_rerun_and_questions_can_be_withdrawn;
    tasks_are_listed_per_principal => super::tasks_are_listed_per_principal;
    a_deferred_task_cancelled_meanwhile_settles_cancelled => super::a_deferred_task_cancelled_meanwhile_settles_cancelled;
}
