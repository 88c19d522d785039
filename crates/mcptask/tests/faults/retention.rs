//! Retention: a real `mcptask serve` purges settled tasks (with their events
//! and inputs) once `retention_ms` has passed, from its own sweep loop.

use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;

use mcptask_testkit::*;

on_both_stores! {
async fn settled_task_past_retention_purged_live_task_kept(db) {
    with_deadline(WAIT * 2, async {
        let server_db = TestDatabase::sqlite();
        let server = DemoServer::start(&server_db.url, &[]).await;
        let hook = FlakyWebhook::start(HookMode::Accept).await;
        let dir = tempfile::tempdir().expect("temp dir");
        let config = dir.path().join("mcptask.toml");
        let tracker = "poll_default_ms = 100\npoll_min_ms = 50\nidle_tick_ms = 50\n\
                       retention_ms = 1000\npurge_interval_ms = 100";
        std::fs::write(
            &config,
            notify_gateway_config(&db.url, &server.url, &[(&hook.url, 2_000)], tracker),
        )
        .expect("write mcptask.toml");
        let (gateway, url) = LoggedChild::spawn(
            "gateway",
            serve_command(&config),
            GATEWAY_LISTENING,
            Duration::from_secs(60),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        let api = Api::new(url.trim_end_matches('/'), None);
        let live = api.start_task("slow_compute", json!({"seconds": 60})).await;
        let done = api
            .start_task("slow_compute", json!({"seconds": 0.2}))
            .await;
        let id = done["id"].as_str().unwrap();
        let settled = api.wait_status(id, "completed").await;
        let keys: Vec<String> = settled["timeline"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| format!("{id}:{}", e["version"]))
            .collect();
        let seen = Instant::now();
        let deadline = seen + WAIT;
        while api.get(&format!("/api/v1/tasks/{id}")).await.status != 404 {
            assert!(Instant::now() < deadline, "never purged\n{}", gateway.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        eprintln!(
            "retention 1 s: purged {:.2}s after the API saw it settled",
            seen.elapsed().as_secs_f64()
        );
        assert!(hook.missing(&keys).is_empty(), "delivered before the purge");
        let live_id = live["id"].as_str().unwrap();
        assert_eq!(
            api.task(live_id).await["status"],
            "working",
            "live tasks are kept"
        );
        drop((server, server_db));
    })
    .await;
}
}

/// The `tasks/get` (or, with `resultType: "task"`, `tools/call`) answer of a
/// server that hands out the remote id `REUSED`.
fn reused(status: &str, text: Option<&str>) -> serde_json::Value {
    let extra = match text {
        Some(t) => json!({"result": {"content": [{"type": "text", "text": t}]}}),
        None => json!({}),
    };
    task_result(REUSED, status, extra)
}

const REUSED: &str = "reused-task-1";

on_both_stores! {
/// A server that forgets its tasks (a restart of an in-memory task store)
/// and hands out a remote id it used before: the new task is tracked as a
/// new task and gets its own result, never the old one; the old task keeps
/// its result. (The scripted proxy stands in for such a server.)
async fn server_reusing_a_task_id_after_restart_new_task_tracked_as_new(db) {
    with_deadline(WAIT * 2, async {
        let dir = tempfile::tempdir().expect("temp dir");
        let demo_db = format!("sqlite:{}", dir.path().join("server.db").display());
        let demo = DemoServer::start_named("reuse-server", &demo_db, &[]).await;
        let proxy = ScriptedServer::start(&demo.url).await;
        let servers = format!("[[servers]]\nname = \"demo\"\nurl = {:?}\n", proxy.url());
        let (_gateway, api) =
            start_gateway_with("reuse-gateway", dir.path(), &fault_gateway_toml(&db.url, &servers)).await;
        let created = |status| {
            let mut r = reused(status, None);
            r["resultType"] = json!("task");
            Scripted::Result(r)
        };

        // Before the "restart": the id is handed out and the task completes.
        proxy.script(Rule::new("tools/call", 1, created("working")));
        proxy.script(Rule::new("tasks/get", usize::MAX, Scripted::Result(reused("completed", Some("old")))).for_task(REUSED));
        let old = api.start_task("slow_compute", json!({"seconds": 60})).await;
        let old_id = old["id"].as_str().unwrap().to_string();
        let old = api.wait_task(&old_id, "the first task completed", |t| t["status"] == "completed").await;
        assert_eq!(old["remoteTaskId"], REUSED, "{old:#}");

        // After it: the same id again, for new work that runs a while.
        proxy.clear();
        proxy.script(Rule::new("tools/call", 1, created("working")));
        proxy.script(Rule::new("tasks/get", 3, Scripted::Result(reused("working", None))).for_task(REUSED));
        proxy.script(Rule::new("tasks/get", usize::MAX, Scripted::Result(reused("completed", Some("new")))).for_task(REUSED));
        let new = api.start_task("slow_compute", json!({"seconds": 60})).await;
        let new_id = new["id"].as_str().unwrap().to_string();
        assert_ne!(new_id, old_id, "a new task, not the old row: {new:#}");
        assert_ne!(new["status"], "completed", "not handed the old result: {new:#}");
        let new = api.wait_task(&new_id, "the second task completed", |t| t["status"] == "completed").await;
        let text = |t: &serde_json::Value| t["result"]["content"][0]["text"].as_str().unwrap_or_default().to_string();
        assert_eq!(text(&new), "new", "{new:#}");
        assert_eq!(text(&api.task(&old_id).await), "old", "the old task keeps its result");
        let polled_working = proxy
            .seen_method("tasks/get")
            .iter()
            .filter(|s| s.scripted && s.task_id.as_deref() == Some(REUSED))
            .count();
        assert!(polled_working >= 4, "the new task was polled until it completed ({polled_working} polls)");
    })
    .await;
}
}
