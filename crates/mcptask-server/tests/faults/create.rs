//! Work starts from the commit, not from the caller's future: a create whose
//! caller goes away after its row is committed still runs.

use mcptask_core::ManualClock;
use mcptask_core::store::ServerTaskStore;
use rmcp::model::TaskStatus;
use serde_json::json;

use crate::support::*;
use mcptask_testkit::fixtures::server::{
    Gate, config, eventually, registry, request, runtime_with, status_is,
};

mcptask_testkit::on_both_backends! {
    async fn caller_dropped_after_commit_work_runs(db: TestDatabase) {
        let clock = ManualClock::new(1_800_000_000_000);
        let store = Interposed::new(db.server_tasks().await, Pause::new());
        let rt = runtime_with(
            store.clone() as std::sync::Arc<dyn ServerTaskStore>,
            &clock,
            registry(&Gate::new()),
            config(),
            "A",
        )
        .await;
        let committed = store.hook.committed.clone();
        let create = rt.create_task(request("echo", json!({"n": 1})));
        tokio::select! {
            r = create => panic!("the create returned before its commit was released: {r:?}"),
            _ = committed.notified() => {} // committed: the caller goes away now
        }
        store.hook.resume.send_replace(true);
        let ids = store.hook.created();
        assert_eq!(ids.len(), 1);
        let v = eventually(&rt, &ids[0], "completed", status_is("completed")).await;
        assert_eq!(v["result"]["content"][0]["text"], "echo {\"n\":1}");
        assert_eq!(rt.get_task(&ids[0], None).await.unwrap().status(), TaskStatus::Completed);
        assert_eq!(rt.running_count(), 0);
    }
}
