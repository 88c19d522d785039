//! Tracker push against a real server over Streamable HTTP that serves task
//! status notifications, with the tracker's store on SQLite and PostgreSQL:
//! with a 60 s poll interval, tasks still follow the server within seconds,
//! and a lost stream is reopened (and every task polled once).

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;
use mcptask_client::{CallOptions, CallOutcome, Tracker, TrackerConfig};
use mcptask_core::TaskStatus;
use serde_json::json;

/// The poll interval every test here forces, whatever the server suggests.
const POLL_MS: i64 = 60_000;

/// Fast everything, except that a task is polled once a minute.
fn slow_poll_config() -> TrackerConfig {
    let mut config = fast_config();
    config.policy.poll.default_ms = POLL_MS;
    config.policy.poll.min_ms = POLL_MS;
    config.policy.poll.max_ms = POLL_MS;
    config.policy.poll.input_required_min_ms = POLL_MS;
    config.policy.poll.jitter_permille = 0;
    config.push = true;
    config
}

async fn start_task(tracker: &Tracker, tool: &str) -> mcptask_client::RemoteTaskRecord {
    match tracker
        .call_tool("remote", tool, json!({}), CallOptions::default())
        .await
        .unwrap()
    {
        CallOutcome::Task(t) => *t,
        CallOutcome::Completed(r) => panic!("{tool} completed synchronously: {r:?}"),
    }
}

fn listens(server: &RemoteServer) -> usize {
    server
        .seen
        .lock()
        .unwrap()
        .iter()
        .filter(|(method, _)| method == "subscriptions/listen")
        .count()
}

/// Whether the next scheduled poll of `id` is still far away: a change seen
/// now was pushed, not polled.
async fn next_poll_is_far(tracker: &Tracker, id: &str) -> bool {
    let r = tracker.get(id).await.unwrap();
    let now = mcptask_core::Clock::now_ms(&mcptask_core::SystemClock);
    r.next_poll_at.is_some_and(|at| at - now > POLL_MS / 2)
}

/// Start an `ask` task and wait until the tracker sees its question, which
/// must come long before the next poll (by push).
async fn ask_learned_by_push(tracker: &Tracker, which: &str) -> mcptask_client::RemoteTaskRecord {
    let started = Instant::now();
    let ask = start_task(tracker, "ask").await;
    until(tracker, &ask.id, "input_required", |r| {
        r.status == TaskStatus::InputRequired
    })
    .await;
    assert!(
        started.elapsed() < Duration::from_millis(POLL_MS as u64 / 2),
        "{which}: input_required was learned by push, not by the next poll"
    );
    ask
}

/// Each change of the task (input required, then completed after the answer)
/// reaches the tracker long before its next poll would have.
async fn pushed_changes_settle_long_before_the_next_poll(backend: TrackerBackend) {
    let server = RemoteServer::start_with_push(Some(600_000)).await;
    let tracker = tracker(&backend, &server, slow_poll_config()).await;
    let ask = ask_learned_by_push(&tracker, "the task").await;
    assert!(listens(&server) >= 1, "the tracker subscribed");
    tracker
        .answer(
            &ask.id,
            BTreeMap::from([(
                "q".into(),
                json!({"action": "accept", "content": {"v": "blue"}}),
            )]),
        )
        .await
        .unwrap();
    let answered = Instant::now();
    let done = until(&tracker, &ask.id, "completed", |r| {
        r.status == TaskStatus::Completed
    })
    .await;
    assert!(
        answered.elapsed() < Duration::from_millis(POLL_MS as u64 / 2),
        "settled long before the next poll ({:?} after the answer)",
        answered.elapsed()
    );
    assert_eq!(
        done.result.as_ref().unwrap()["content"][0]["text"],
        "answer blue"
    );
    tracker.shutdown(Duration::from_secs(2)).await;
}

/// One task after another, each cancelled once it asks: every new task is
/// covered by a new stream while the last one's task ends, and push must
/// keep up for all of them (a stream that ended without reporting anything
/// used to switch push off for five minutes).
async fn push_keeps_up_with_tasks_started_one_after_another(backend: TrackerBackend) {
    let server = RemoteServer::start_with_push(Some(600_000)).await;
    let tracker = tracker(&backend, &server, slow_poll_config()).await;
    for i in 0..10 {
        let ask = ask_learned_by_push(&tracker, &format!("task {i}")).await;
        tracker.cancel(&ask.id).await.unwrap();
        until(&tracker, &ask.id, "cancelled", |r| r.status.is_terminal()).await;
    }
    tracker.shutdown(Duration::from_secs(2)).await;
}

/// The server restarts: the stream is lost, the tracker subscribes again
/// (with backoff) and polls its tasks once, so a change made while it was
/// not listening (the restart fails the interrupted task) is still seen
/// long before the next scheduled poll.
async fn a_lost_stream_is_reopened_and_its_tasks_polled(backend: TrackerBackend) {
    let mut server = RemoteServer::start_with_push(Some(600_000)).await;
    let tracker = tracker(&backend, &server, slow_poll_config()).await;
    let hold = start_task(&tracker, "hold").await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while listens(&server) == 0 {
        assert!(Instant::now() < deadline, "the tracker never subscribed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Let the first stream's own catch-up poll happen, so only a new
    // subscription can explain what follows.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(next_poll_is_far(&tracker, &hold.id).await);
    let before = listens(&server);

    server.stop().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.restart().await;

    let done = until(&tracker, &hold.id, "settled after the restart", |r| {
        r.status.is_terminal()
    })
    .await;
    assert!(
        listens(&server) > before,
        "the tracker subscribed again after the restart"
    );
    assert_eq!(done.status, TaskStatus::Failed, "{done:#?}");
    tracker.shutdown(Duration::from_secs(2)).await;
}

/// A server that does not serve task notifications leaves tasks on their
/// poll schedule: nothing breaks, the task settles by polling.
async fn a_server_without_push_is_polled_as_before(backend: TrackerBackend) {
    let server = RemoteServer::start(Some(600_000)).await;
    let mut config = fast_config();
    config.push = true;
    let tracker = tracker(&backend, &server, config).await;
    let quick = start_task(&tracker, "quick").await;
    until(&tracker, &quick.id, "completed", |r| {
        r.status == TaskStatus::Completed
    })
    .await;
    tracker.shutdown(Duration::from_secs(2)).await;
}

mcptask_sql::on_both_backends! {
    pushed_changes_settle_long_before_the_next_poll => super::pushed_changes_settle_long_before_the_next_poll;
    push_keeps_up_with_tasks_started_one_after_another => super::push_keeps_up_with_tasks_started_one_after_another;
    a_lost_stream_is_reopened_and_its_tasks_polled => super::a_lost_stream_is_reopened_and_its_tasks_polled;
    a_server_without_push_is_polled_as_before => super::a_server_without_push_is_polled_as_before;
}
