//! The TTL rule is absorbing: a task past its TTL reads `failed`, and work
//! that finishes after the deadline (before any sweep) leaves it `failed`.

use std::time::Duration;

use mcptask_core::ManualClock;
use rmcp::model::TaskStatus;
use serde_json::json;

use crate::support::*;
use mcptask_testkit::fixtures::server::{Gate, config, registry, runtime_with};
use mcptask_testkit::mcp::wire;

mcptask_testkit::on_both_backends! {
    async fn late_finish_after_ttl_stays_failed(db: TestDatabase) {
        let clock = ManualClock::new(1_800_000_000_000);
        let gate = Gate::new();
        let mut cfg = config();
        cfg.default_ttl_ms = Some(5_000);
        let rt = runtime_with(db.server_tasks().await, &clock, registry(&gate), cfg, "A").await;
        let tasks = client(&rt).await;
        let id = tasks.start_task("hold", json!({})).await;
        clock.advance(5_000);
        let seen = tasks.get(&id).await.unwrap();
        assert_eq!(seen.task.status(), TaskStatus::Failed, "past its TTL it reads failed");

        // The work finishes now, before any sweep ran.
        gate.release(1);
        until("the late work ended", || async { !rt.is_running_here(&id) }).await;
        for _ in 0..3 {
            let t = tasks.get(&id).await.unwrap();
            let v = wire(&t);
            assert_eq!(v["status"], "failed", "{v}");
            assert!(v["error"]["message"].as_str().unwrap().contains("expired"), "{v}");
            assert!(v.get("result").is_none(), "{v}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // The sweep has nothing left to do: the finish settled it as expired.
        assert_eq!(rt.maintenance().sweep_once().await.unwrap().0, 0);
        tasks.close().await;
    }
}
