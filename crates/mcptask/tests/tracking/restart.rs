//! Acceptance "Restart": tasks survive a SIGKILL of the server process.
//!
//! A demo server runs a long `slow_compute` (interrupt policy Fail) and a
//! `countdown` (policy Rerun) whose go/no-go question has been answered; the
//! process is killed with SIGKILL (no shutdown, no lease release) and a new
//! process is started on the same database. The new process must serve every
//! task at once from the store, fail the `slow_compute` honestly as
//! interrupted, rerun the countdown (attempt 2) without asking the answered
//! question again, and still show tasks that finished before the crash.

use std::time::Duration;

use mcptask_testkit::mcp::wire;
use mcptask_testkit::{
    DemoServer, FAST_RECOVERY, TestDatabase, input_keys, is_terminal, poll_task, result_text,
    status, wait_terminal, with_deadline,
};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_on_sqlite_keeps_every_task() {
    let db = TestDatabase::sqlite();
    with_deadline(Duration::from_secs(300), restart_scenario(&db)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_on_postgres_keeps_every_task() {
    let Some(db) = TestDatabase::postgres().await else {
        eprintln!("restart_on_postgres_keeps_every_task: SKIPPED (no PostgreSQL, see above)");
        return;
    };
    with_deadline(Duration::from_secs(300), restart_scenario(&db)).await;
}

/// The acceptance scenario on one database.
async fn restart_scenario(db: &TestDatabase) {
    let backend = db.backend;
    let mut first = DemoServer::start_named("first server", &db.url, FAST_RECOVERY).await;
    let client = first.client().await;

    // A task that finishes before the crash.
    let early = client
        .start_task("slow_compute", json!({"seconds": 0.1, "label": "early"}))
        .await;
    let early_done = wait_terminal(&client, &early, Duration::from_secs(60)).await;
    assert_eq!(
        status(&early_done),
        "completed",
        "[{backend}] early task: {early_done:#}"
    );
    assert_eq!(
        result_text(&early_done),
        "early: computed in 0.1s",
        "[{backend}]"
    );

    // Work in flight at the crash.
    let slow = client
        .start_task("slow_compute", json!({"seconds": 60}))
        .await;
    // 4 s: the second half (2 s) is still counting when the process is killed,
    // which happens right after the answer is acknowledged.
    let countdown = client.start_task("countdown", json!({"seconds": 4})).await;
    let asked = poll_task(
        &client,
        &countdown,
        Duration::from_secs(60),
        |w| {
            assert!(
                !is_terminal(w),
                "[{backend}] countdown ended before asking: {w:#}"
            )
        },
        |w| status(w) == "input_required",
    )
    .await;
    assert_eq!(input_keys(&asked), ["go_no_go"], "[{backend}] {asked:#}");
    let slow_before = wire(&client.get(&slow).await.expect("tasks/get slow_compute"));
    assert_eq!(
        status(&slow_before),
        "working",
        "[{backend}] {slow_before:#}"
    );

    client
        .update(
            &countdown,
            json!({"go_no_go": {"action": "accept", "content": {"go": true}}}),
        )
        .await
        .expect("answer go_no_go");
    first.kill().await;
    drop(client);

    let second = DemoServer::start_named("second server", &db.url, FAST_RECOVERY).await;
    let client = second.client().await;

    // Durable: every id resolves at once on the new process, before any recovery.
    let slow_now = wire(
        &client
            .get(&slow)
            .await
            .expect("tasks/get slow_compute after restart"),
    );
    assert!(
        matches!(status(&slow_now), "working" | "failed"),
        "[{backend}] slow_compute right after restart: {slow_now:#}"
    );
    let countdown_now = wire(
        &client
            .get(&countdown)
            .await
            .expect("tasks/get countdown after restart"),
    );
    assert_eq!(
        status(&countdown_now),
        "working",
        "[{backend}] the answered countdown right after restart: {countdown_now:#}"
    );
    let early_now = wire(
        &client
            .get(&early)
            .await
            .expect("tasks/get early task after restart"),
    );
    assert_eq!(status(&early_now), "completed", "[{backend}] {early_now:#}");
    assert_eq!(
        early_now["result"], early_done["result"],
        "[{backend}] the result of a finished task must survive the restart"
    );

    // Interrupt policy Fail: an honest failure mentioning the interruption.
    let slow_end = wait_terminal(&client, &slow, Duration::from_secs(60)).await;
    assert_eq!(status(&slow_end), "failed", "[{backend}] {slow_end:#}");
    let message = slow_end["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.to_lowercase().contains("interrupted"),
        "[{backend}] the error must say the task was interrupted: {slow_end:#}"
    );
    assert!(
        slow_end.get("result").is_none(),
        "[{backend}] a failed task has no result: {slow_end:#}"
    );

    // Interrupt policy Rerun: attempt 2 finishes with the stored answer and
    // never asks the answered question again.
    let countdown_end = poll_task(
        &client,
        &countdown,
        Duration::from_secs(90),
        |w| {
            assert_ne!(
                status(w),
                "input_required",
                "[{backend}] the rerun asked an already answered question again: {w:#}"
            )
        },
        is_terminal,
    )
    .await;
    assert_eq!(
        status(&countdown_end),
        "completed",
        "[{backend}] {countdown_end:#}"
    );
    let text = result_text(&countdown_end);
    assert!(
        text.contains("(attempt 2)"),
        "[{backend}] expected a second attempt: {text:?}"
    );
    assert!(
        text.starts_with("Launched"),
        "[{backend}] the stored answer (go) must be used: {text:?}"
    );

    // Settled tasks stay settled.
    let early_last = wire(&client.get(&early).await.expect("tasks/get early task"));
    assert_eq!(early_last["result"], early_done["result"], "[{backend}]");
}
