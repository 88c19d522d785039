//! Tracker push against a real server over Streamable HTTP that serves task
//! status notifications, with the tracker's store on SQLite and PostgreSQL:
//! with a 60 s poll interval, tasks still follow the server within seconds,
//! a lost stream is reopened (and every task polled once), and a push that
//! lands while its task's poll is in flight is not lost.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use mcptask_client::{CallOptions, CallOutcome, ServerDef, Tracker, TrackerConfig};
use mcptask_core::client::delivery::{DeadLetter, DeadLetterFilter, LagClaim, LagResult};
use mcptask_core::client::{
    AnswerResult, Applied, ClaimedTask, Cursor, InsertOutcome, ListFilter, NewRemoteTask,
    NotifyClaim, NotifyResult, Observation, Phase, RemoteInput, RemoteTaskRecord, TaskEvent,
    TrackerPolicy,
};
use mcptask_core::store::{RemoteTaskStore, ServerTaskStore};
use mcptask_core::{StoreError, TaskStatus};
use mcptask_testkit::TestDatabase;
use mcptask_testkit::fixtures::client::*;
use mcptask_testkit::tracker::fast_config;
use serde_json::{Value, json};
use tokio::sync::watch;

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
/// The stream's catch-up poll of `id` happened and the next poll is far off.
/// (The schedule set at creation is far off too: without the first check, a
/// catch-up poll still to come could hit the stopped server, and its retry
/// settle the task before the tracker subscribed again.)
async fn catch_up_poll_done(tracker: &Tracker, id: &str) -> bool {
    let r = tracker.get(id).await.unwrap();
    let now = mcptask_core::Clock::now_ms(&mcptask_core::SystemClock);
    r.last_polled_at.is_some() && r.next_poll_at.is_some_and(|at| at - now > POLL_MS / 2)
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
async fn pushed_changes_settle_long_before_the_next_poll(backend: TestDatabase) {
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
async fn push_keeps_up_with_tasks_started_one_after_another(backend: TestDatabase) {
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
async fn a_lost_stream_is_reopened_and_its_tasks_polled(backend: TestDatabase) {
    let mut server = RemoteServer::start_with_push(Some(600_000)).await;
    let tracker = tracker(&backend, &server, slow_poll_config()).await;
    let hold = start_task(&tracker, "hold").await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while listens(&server) == 0 {
        assert!(Instant::now() < deadline, "the tracker never subscribed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Let the first stream's own catch-up poll happen (the next poll is then
    // far off), so only a new subscription can explain what follows.
    while !catch_up_poll_done(&tracker, &hold.id).await {
        assert!(Instant::now() < deadline, "the catch-up poll never came");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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
async fn a_server_without_push_is_polled_as_before(backend: TestDatabase) {
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

/// The tracker's store, with one poll result held back: the first apply of a
/// poll that read `working` after [`HeldPoll::arm`] waits until its task has
/// settled on the server and a push about it has reached the store. That is
/// the moment a push lands while a poll is in flight, made certain.
struct HeldPoll {
    inner: Arc<dyn RemoteTaskStore>,
    /// The server's own store, to tell when the held task settled there.
    server: Arc<dyn ServerTaskStore>,
    armed: AtomicBool,
    /// The task whose poll result is held back, once one is.
    held: watch::Sender<Option<String>>,
    /// Set by the first push for the held task seen after it settled.
    released: watch::Sender<bool>,
    /// Listings of tasks so far (the push listener's rescans among them).
    lists: AtomicUsize,
}

impl HeldPoll {
    fn new(inner: Arc<dyn RemoteTaskStore>, server: Arc<dyn ServerTaskStore>) -> Arc<Self> {
        Arc::new(HeldPoll {
            inner,
            server,
            armed: AtomicBool::new(false),
            held: watch::channel(None).0,
            released: watch::channel(false).0,
            lists: AtomicUsize::new(0),
        })
    }

    fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }

    /// The task whose poll result is now held back.
    async fn holding(&self) -> String {
        let mut held = self.held.subscribe();
        let id = tokio::time::timeout(Duration::from_secs(20), held.wait_for(Option::is_some))
            .await
            .expect("no poll read `working` within 20 s")
            .expect("the store lives")
            .clone();
        id.unwrap()
    }

    async fn settled_on_server(&self, id: &str) -> bool {
        let Ok(Some(local)) = self.inner.get_remote(id).await else {
            return false;
        };
        matches!(
            self.server.get_task(&local.remote_task_id).await,
            Ok(Some(view)) if view.record.status.is_terminal()
        )
    }
}

#[async_trait]
impl RemoteTaskStore for HeldPoll {
    async fn apply_remote(
        &self,
        results: &[Applied],
        policy: &TrackerPolicy,
        now: i64,
    ) -> Result<Vec<bool>, StoreError> {
        let read_working = results.iter().find(|a| {
            a.phase == Phase::Poll
                && matches!(&a.observation, Observation::Snapshot(s) if s.status == Some(TaskStatus::Working))
        });
        let mut now = now;
        if let Some(entry) = read_working
            && self.armed.swap(false, Ordering::SeqCst)
        {
            let mut released = self.released.subscribe();
            self.held.send_replace(Some(entry.fence.task_id.clone()));
            let _ = released.wait_for(|r| *r).await;
            now = mcptask_core::Clock::now_ms(&mcptask_core::SystemClock);
        }
        self.inner.apply_remote(results, policy, now).await
    }

    async fn expedite_poll(&self, id: &str, now: i64) -> Result<bool, StoreError> {
        let took = self.inner.expedite_poll(id, now).await?;
        // The push that follows the task's end on the server finds it
        // settled there (the change is published after its commit).
        let held = self.held.borrow().as_deref() == Some(id);
        if held && self.settled_on_server(id).await {
            self.released.send_replace(true);
        }
        Ok(took)
    }

    // Everything else as the real store does it.

    async fn insert_remote(
        &self,
        task: &NewRemoteTask,
        policy: &TrackerPolicy,
    ) -> Result<InsertOutcome, StoreError> {
        self.inner.insert_remote(task, policy).await
    }

    async fn get_remote(&self, id: &str) -> Result<Option<RemoteTaskRecord>, StoreError> {
        self.inner.get_remote(id).await
    }

    async fn remote_inputs(&self, id: &str) -> Result<Vec<RemoteInput>, StoreError> {
        self.inner.remote_inputs(id).await
    }

    async fn remote_events(
        &self,
        id: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<TaskEvent>, StoreError> {
        self.inner.remote_events(id, after, limit).await
    }

    async fn list_remote(
        &self,
        filter: &ListFilter,
        after: Option<&Cursor>,
        limit: i64,
    ) -> Result<Vec<RemoteTaskRecord>, StoreError> {
        self.lists.fetch_add(1, Ordering::SeqCst);
        self.inner.list_remote(filter, after, limit).await
    }

    async fn request_cancel(
        &self,
        id: &str,
        now: i64,
    ) -> Result<Option<RemoteTaskRecord>, StoreError> {
        self.inner.request_cancel(id, now).await
    }

    async fn answer_inputs(
        &self,
        id: &str,
        answers: &[(String, Value)],
        now: i64,
    ) -> Result<Option<AnswerResult>, StoreError> {
        self.inner.answer_inputs(id, answers, now).await
    }

    async fn next_due(&self, phase: Phase, now: i64) -> Result<Option<i64>, StoreError> {
        self.inner.next_due(phase, now).await
    }

    async fn claim_remote(
        &self,
        phase: Phase,
        owner: &str,
        now: i64,
        lease_ms: i64,
        limit: i64,
    ) -> Result<Vec<ClaimedTask>, StoreError> {
        self.inner
            .claim_remote(phase, owner, now, lease_ms, limit)
            .await
    }

    async fn claim_notifications(
        &self,
        owner: &str,
        now: i64,
        lease_ms: i64,
        limit: i64,
        max_events: i64,
    ) -> Result<Vec<NotifyClaim>, StoreError> {
        self.inner
            .claim_notifications(owner, now, lease_ms, limit, max_events)
            .await
    }

    async fn finish_notifications(
        &self,
        results: &[NotifyResult],
        now: i64,
    ) -> Result<Vec<bool>, StoreError> {
        self.inner.finish_notifications(results, now).await
    }

    async fn remote_counts(&self) -> Result<Vec<(TaskStatus, i64)>, StoreError> {
        self.inner.remote_counts().await
    }

    async fn notification_backlog(&self) -> Result<i64, StoreError> {
        self.inner.notification_backlog().await
    }

    async fn claim_redeliveries(
        &self,
        owner: &str,
        now: i64,
        lease_ms: i64,
        limit: i64,
        max_events: i64,
        targets: &[String],
    ) -> Result<Vec<LagClaim>, StoreError> {
        self.inner
            .claim_redeliveries(owner, now, lease_ms, limit, max_events, targets)
            .await
    }

    async fn finish_redeliveries(
        &self,
        results: &[LagResult],
        now: i64,
    ) -> Result<Vec<bool>, StoreError> {
        self.inner.finish_redeliveries(results, now).await
    }

    async fn dead_letters(
        &self,
        filter: &DeadLetterFilter,
        limit: i64,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        self.inner.dead_letters(filter, limit).await
    }

    async fn dead_letter_count(&self) -> Result<i64, StoreError> {
        self.inner.dead_letter_count().await
    }

    async fn redrive_dead_letters(
        &self,
        filter: &DeadLetterFilter,
        now: i64,
        limit: i64,
    ) -> Result<i64, StoreError> {
        self.inner.redrive_dead_letters(filter, now, limit).await
    }

    async fn purge_remote(&self, settled_before: i64, limit: i64) -> Result<u64, StoreError> {
        self.inner.purge_remote(settled_before, limit).await
    }
}

/// A task ends on its server while the tracker's poll of it is in flight
/// (the poll read `working`; the push saying it ended arrives before that
/// poll's result is applied). The tracker must poll it again at once, not a
/// whole poll interval later. Another task (waiting for an answer) keeps the
/// stream open, as a stream whose every task ended would be reopened, and
/// its tasks polled, anyway.
async fn a_push_during_a_poll_is_not_lost(backend: TestDatabase) {
    let server = RemoteServer::start_with_push(Some(600_000)).await;
    let server_store = mcptask_sql::open(&server.store_url)
        .await
        .unwrap()
        .server_tasks();
    let store = HeldPoll::new(backend.remote_tasks().await, server_store.clone());
    let mut config = slow_poll_config();
    // The held poll's claim must still be live when the push comes.
    config.lease_ms = 30_000;
    let tracker = Tracker::builder(store.clone())
        .server(ServerDef::http("remote", server.url()))
        .config(config)
        .start()
        .await
        .unwrap();
    ask_learned_by_push(&tracker, "the task keeping the stream open").await;

    store.arm();
    let hold = start_task(&tracker, "hold").await;
    // The new stream's first poll of `hold` read `working`; hold its result.
    assert_eq!(store.holding().await, hold.id);
    // The task ends on the server (as if another client cancelled it).
    server_store
        .request_cancel(
            &hold.remote_task_id,
            mcptask_core::Clock::now_ms(&mcptask_core::SystemClock),
        )
        .await
        .unwrap();
    let ended = Instant::now();
    let done = until(&tracker, &hold.id, "cancelled", |r| r.status.is_terminal()).await;
    assert_eq!(done.status, TaskStatus::Cancelled, "{done:#?}");
    assert!(
        *store.released.borrow(),
        "the push came while the poll was held"
    );
    assert!(
        ended.elapsed() < Duration::from_millis(POLL_MS as u64 / 2),
        "polled again at once, not at the next scheduled poll ({:?})",
        ended.elapsed()
    );
    tracker.shutdown(Duration::from_secs(2)).await;
}

/// More tasks live than one stream watches (the server's newest 1,024): a
/// change of an older one (here an answer to its question) must not
/// make the listener list the server's live tasks again. It did, once per
/// change, so past 1,024 live tasks the changes polls brought cost a read of
/// 1,024 rows each (most of the gateway's CPU in the live-calls benchmark).
async fn tasks_beyond_a_full_stream_cost_no_listing_each(backend: TestDatabase) {
    const OLD: usize = 16;
    const NEWER: usize = 1_024 + 32;
    let server = RemoteServer::start_with_push(Some(600_000)).await;
    let server_store = mcptask_sql::open(&server.store_url)
        .await
        .unwrap()
        .server_tasks();
    let store = HeldPoll::new(backend.remote_tasks().await, server_store);
    // A stream of 1,024 tasks is read by the server before it is
    // acknowledged, and a thousand creates run at once: on a loaded machine
    // either can take longer than the fast tests' 2 s bounds.
    let mut config = slow_poll_config();
    config.call_timeout = Duration::from_secs(30);
    config.connect_timeout = Duration::from_secs(30);
    config.lease_ms = 60_000;
    let tracker = Tracker::builder(store.clone())
        .server(ServerDef::http("remote", server.url()))
        .config(config)
        .start()
        .await
        .unwrap();
    // The oldest tasks ask a question (learned while a stream covers them);
    // then a full stream of newer ones leaves them out.
    let mut old = Vec::with_capacity(OLD);
    for _ in 0..OLD {
        let id = start_task(&tracker, "ask").await.id;
        until(&tracker, &id, "input_required", |r| {
            r.status == TaskStatus::InputRequired
        })
        .await;
        old.push(id);
    }
    for _ in 0..NEWER / 16 {
        let batch = (0..16).map(|_| start_task(&tracker, "hold"));
        futures::future::join_all(batch).await;
    }
    // A newest task opens a new stream: once the server has that request,
    // the listener follows a full stream of the newest tasks.
    let newest_covered = || async {
        let before = listens(&server);
        start_task(&tracker, "hold").await;
        let deadline = Instant::now() + Duration::from_secs(120);
        while listens(&server) <= before {
            assert!(
                Instant::now() < deadline,
                "no new stream for the newest task"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    newest_covered().await;
    let lists_before = store.lists.load(Ordering::SeqCst);
    // The answers reach the server only after the test: each task stays live
    // (answered, not yet updated) while the listener hears of its change.
    server.mangle.lock().unwrap().insert(
        "tasks/update".into(),
        Mangle::Delay(Duration::from_secs(600)),
    );
    for id in &old {
        let answer = json!({"action": "accept", "content": {"v": "blue"}});
        tracker
            .answer(id, BTreeMap::from([("q".into(), answer)]))
            .await
            .unwrap();
    }
    // A listing per change shows within the window (the old listener made 3
    // in it, each reading 1,024 rows); a periodic rescan (every 10 s) may
    // fall in it, no more.
    let listed = || store.lists.load(Ordering::SeqCst) - lists_before;
    let window = Instant::now() + Duration::from_secs(5);
    while Instant::now() < window && listed() <= 1 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let lists = listed();
    assert!(
        lists <= 1,
        "{lists} listings of the live tasks for {OLD} changes of tasks no stream covers"
    );
    tracker.shutdown(Duration::from_secs(2)).await;
}

mcptask_testkit::on_both_backends! {
    tasks_beyond_a_full_stream_cost_no_listing_each => super::tasks_beyond_a_full_stream_cost_no_listing_each;
    pushed_changes_settle_long_before_the_next_poll => super::pushed_changes_settle_long_before_the_next_poll;
    push_keeps_up_with_tasks_started_one_after_another => super::push_keeps_up_with_tasks_started_one_after_another;
    a_lost_stream_is_reopened_and_its_tasks_polled => super::a_lost_stream_is_reopened_and_its_tasks_polled;
    a_server_without_push_is_polled_as_before => super::a_server_without_push_is_polled_as_before;
    a_push_during_a_poll_is_not_lost => super::a_push_during_a_poll_is_not_lost;
}
