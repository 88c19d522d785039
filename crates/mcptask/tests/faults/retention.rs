//! Retention: a real `mcptask serve` purges settled tasks (with their events
//! and inputs) once `retention_ms` has passed, from its own sweep loop.

use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settled_task_past_retention_purged_live_task_kept() {
    with_deadline(WAIT * 2, async {
        let db = Database::sqlite();
        let server_db = Database::sqlite();
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
