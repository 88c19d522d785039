//! SQLite's WAL is checkpointed in the background, not inside a request's
//! commit: the writer's automatic checkpoint is only a backstop at a much
//! larger WAL, and the store keeps the WAL short on its own.

use mcptask_core::server::NewServerTask;
use mcptask_core::store::ServerTaskStore;
use serde_json::json;

/// A batch of tasks with large arguments: about 200 KiB of rows.
fn batch(n: usize) -> Vec<NewServerTask> {
    let padding = "x".repeat(4_000);
    (0..50)
        .map(|i| NewServerTask {
            call_row: None,
            id: format!("t-{n}-{i}"),
            principal: None,
            tool: "slow".into(),
            arguments: json!({"padding": padding}),
            call_inputs: None,
            created_at: 1,
            ttl_ms: None,
            poll_interval_ms: None,
            status_message: None,
            owner: "A".into(),
            claim_token: "k".into(),
            driver: None,
            driver_state: None,
        })
        .collect()
}

#[tokio::test]
async fn the_wal_is_checkpointed_in_the_background() {
    let (store, dir) = mcptask_testkit::db::fresh_sqlite().await;
    let backstop: i64 = sqlx::query_scalar("PRAGMA wal_autocheckpoint")
        .fetch_one(store.writer_pool())
        .await
        .unwrap();
    assert_eq!(
        backstop, 10_000,
        "the writer checkpoints only as a backstop"
    );

    // About 6 MiB in 30 commits. SQLite's own automatic checkpoint (at
    // 1,000 pages) would let the WAL reach 4 MiB; the background task,
    // given a few of its periods between commits, keeps it to a few batches.
    let tasks = store.clone();
    for n in 0..30 {
        tasks.create_tasks(&batch(n)).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    let wal = std::fs::metadata(dir.path().join("test.db-wal"))
        .map(|m| m.len())
        .unwrap_or(0);
    assert!(
        wal < 2 * 1024 * 1024,
        "the WAL grew to {wal} bytes: nothing checkpointed it in the background"
    );
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM server_tasks")
        .fetch_one(store.writer_pool())
        .await
        .unwrap();
    assert_eq!(stored, 30 * 50);
    store.close().await;
}
