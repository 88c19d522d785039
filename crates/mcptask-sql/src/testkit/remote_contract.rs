//! The remote-task store contract: every backend must pass every case.
//!
//! Each case takes a fresh, migrated, empty store. `tests/remote_store_contract.rs`
//! runs all of them against SQLite and a real PostgreSQL. Times are explicit
//! (`now` arguments) and poll jitter is zero, so every schedule is exact.

use std::sync::Arc;

use mcptask_core::TaskStatus;
use mcptask_core::client::{
    Applied, ClaimedTask, Cursor, EventKind, FailureKind, Fence, InsertOutcome, ListFilter,
    NewRemoteTask, NotifyClaim, NotifyResult, Observation, Phase, RemoteSnapshot, RemoteTaskRecord,
    TaskEvent, TrackerPolicy,
};
use mcptask_core::store::RemoteTaskStore;
use serde_json::{Value, json};

const T0: i64 = 1_800_000_000_000;
const LEASE: i64 = 30_000;

/// The default policy without poll jitter: a 1 s interval is exactly 1 s.
pub fn policy() -> TrackerPolicy {
    let mut p = TrackerPolicy::default();
    p.poll.jitter_permille = 0;
    p
}

fn snapshot(status: TaskStatus) -> RemoteSnapshot {
    RemoteSnapshot {
        status: Some(status),
        poll_interval_ms: Some(1_000),
        ..Default::default()
    }
}

fn request_for(key: &str) -> Value {
    json!({"method": "elicitation/create", "params": {"message": format!("{key}?")}})
}

fn input_snapshot(keys: &[&str]) -> RemoteSnapshot {
    RemoteSnapshot {
        input_requests: keys
            .iter()
            .map(|k| (k.to_string(), request_for(k)))
            .collect(),
        ..snapshot(TaskStatus::InputRequired)
    }
}

fn done_result() -> Value {
    json!({"content": [{"type": "text", "text": "done"}]})
}

fn completed_snapshot() -> RemoteSnapshot {
    RemoteSnapshot {
        result: Some(done_result()),
        status_message: Some("all done".into()),
        ..snapshot(TaskStatus::Completed)
    }
}

fn new_task(id: &str, remote_id: &str) -> NewRemoteTask {
    NewRemoteTask {
        id: id.to_string(),
        server: "srv".into(),
        server_hash: "h1".into(),
        remote_task_id: remote_id.to_string(),
        principal: None,
        conversation: None,
        call_id: None,
        correlation: None,
        tool: "slow".into(),
        arguments: None,
        snapshot: snapshot(TaskStatus::Working),
        created_at: T0,
    }
}

async fn insert(store: &dyn RemoteTaskStore, task: &NewRemoteTask) -> RemoteTaskRecord {
    match store.insert_remote(task, &policy()).await.unwrap() {
        InsertOutcome::Inserted(r) => *r,
        InsertOutcome::AlreadyTracked(r) => panic!("{} was already tracked as {}", task.id, r.id),
    }
}

async fn get(store: &dyn RemoteTaskStore, id: &str) -> RemoteTaskRecord {
    store
        .get_remote(id)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{id} must be tracked"))
}

async fn events(store: &dyn RemoteTaskStore, id: &str) -> Vec<TaskEvent> {
    store.remote_events(id, 0, 1_000).await.unwrap()
}

fn versions(events: &[TaskEvent]) -> Vec<i64> {
    events.iter().map(|e| e.version).collect()
}

fn ids(tasks: &[ClaimedTask]) -> Vec<&str> {
    tasks.iter().map(|t| t.record.id.as_str()).collect()
}

fn applied(task: &ClaimedTask, phase: Phase, observation: Observation) -> Applied {
    Applied {
        fence: task.fence.clone(),
        phase,
        observation,
        jitter: 0.5,
    }
}

async fn apply_one(store: &dyn RemoteTaskStore, entry: Applied, now: i64) -> bool {
    let done = store
        .apply_remote(std::slice::from_ref(&entry), &policy(), now)
        .await
        .unwrap();
    assert_eq!(done.len(), 1);
    done[0]
}

async fn claim(
    store: &dyn RemoteTaskStore,
    phase: Phase,
    owner: &str,
    now: i64,
    limit: i64,
) -> Vec<ClaimedTask> {
    store
        .claim_remote(phase, owner, now, LEASE, limit)
        .await
        .unwrap()
}

async fn claim_one(
    store: &dyn RemoteTaskStore,
    phase: Phase,
    owner: &str,
    now: i64,
) -> ClaimedTask {
    let mut got = claim(store, phase, owner, now, 100).await;
    assert_eq!(
        got.len(),
        1,
        "expected exactly one {phase:?} claim at {now}: {:?}",
        ids(&got)
    );
    got.remove(0)
}

async fn claim_notify(store: &dyn RemoteTaskStore, owner: &str, now: i64) -> Vec<NotifyClaim> {
    store
        .claim_notifications(owner, now, LEASE, 100, 100)
        .await
        .unwrap()
}

fn delivered(claim: &NotifyClaim, through: i64) -> NotifyResult {
    NotifyResult {
        fence: claim.fence.clone(),
        delivered_through: through,
        dead_lettered: Vec::new(),
        failure: None,
        released: false,
    }
}

async fn finish_one(store: &dyn RemoteTaskStore, result: NotifyResult, now: i64) -> bool {
    let done = store
        .finish_notifications(std::slice::from_ref(&result), now)
        .await
        .unwrap();
    assert_eq!(done.len(), 1);
    done[0]
}

/// Insert `id`, claim it for poll at `now` and apply an `input_required`
/// snapshot with `keys` (events: v1 created, v2 status).
async fn input_required_task(
    store: &dyn RemoteTaskStore,
    id: &str,
    keys: &[&str],
    now: i64,
) -> RemoteTaskRecord {
    insert(store, &new_task(id, &format!("remote-{id}"))).await;
    let c = claim_one(store, Phase::Poll, "setup", now).await;
    let obs = Observation::Snapshot(input_snapshot(keys));
    assert!(apply_one(store, applied(&c, Phase::Poll, obs), now).await);
    let r = get(store, id).await;
    assert_eq!(r.status, TaskStatus::InputRequired);
    r
}

pub async fn insert_then_get_round_trips(store: Arc<dyn RemoteTaskStore>) {
    let mut t = new_task("rt_1", "r-1");
    t.conversation = Some("conv-1".into());
    t.call_id = Some("call-1".into());
    t.correlation = Some(json!({"app": "x", "n": 1, "s": "é"}));
    t.arguments = Some(json!({"q": "weather", "nested": [1, 2]}));
    t.snapshot = RemoteSnapshot {
        status: Some(TaskStatus::Working),
        status_message: Some("queued".into()),
        remote_created_at: Some(T0 - 5),
        ttl_ms: Some(600_000),
        poll_interval_ms: Some(2_000),
        ..Default::default()
    };
    let inserted = insert(&*store, &t).await;
    let r = get(&*store, "rt_1").await;
    assert_eq!(r, inserted, "insert returns exactly what is stored");
    assert_eq!(
        (
            r.server.as_str(),
            r.server_hash.as_str(),
            r.remote_task_id.as_str()
        ),
        ("srv", "h1", "r-1")
    );
    assert_eq!(r.principal, None, "anonymous round-trips as None");
    assert_eq!(r.conversation.as_deref(), Some("conv-1"));
    assert_eq!(r.call_id.as_deref(), Some("call-1"));
    assert_eq!(r.correlation, t.correlation);
    assert_eq!(r.tool, "slow");
    assert_eq!(r.arguments, t.arguments);
    assert_eq!(r.status, TaskStatus::Working);
    assert_eq!(r.status_message.as_deref(), Some("queued"));
    assert_eq!(
        (r.remote_created_at, r.ttl_ms, r.poll_interval_ms),
        (Some(T0 - 5), Some(600_000), Some(2_000))
    );
    assert_eq!((r.created_at, r.updated_at, r.completed_at), (T0, T0, None));
    assert_eq!(
        r.next_poll_at,
        Some(T0 + 2_000),
        "the server's interval, no jitter"
    );
    assert_eq!((r.next_cancel_at, r.next_update_at), (None, None));
    assert_eq!(
        (r.poll_count, r.consecutive_errors, r.cancel_attempts),
        (0, 0, 0)
    );
    assert_eq!(
        (
            &r.claim_owner,
            &r.claim_token,
            r.claim_expires_at,
            &r.claim_phase
        ),
        (&None, &None, None, &None)
    );
    assert_eq!(
        (r.event_version, r.delivered_version, r.next_notify_at),
        (1, 0, Some(T0))
    );
    assert_eq!((r.notify_attempts, r.dead_letters), (0, 0));
    assert!(r.input_requests.is_empty() && r.result.is_none() && !r.result_truncated);

    let evs = events(&*store, "rt_1").await;
    assert_eq!(evs.len(), 1);
    let e = &evs[0];
    assert_eq!(
        (
            e.task_id.as_str(),
            e.version,
            e.kind,
            e.status,
            e.occurred_at
        ),
        ("rt_1", 1, EventKind::Created, TaskStatus::Working, T0)
    );
    assert_eq!(e.idempotency_key(), "rt_1:1");
    assert_eq!(e.data["taskId"], "rt_1");
    assert_eq!(e.data["kind"], "created");
    assert_eq!(e.data["correlation"], t.correlation.clone().unwrap());
    assert!(store.remote_events("rt_1", 1, 10).await.unwrap().is_empty());
    assert!(store.remote_events("rt_1", 0, 0).await.unwrap().is_empty());
    assert!(store.remote_inputs("rt_1").await.unwrap().is_empty());
    assert!(store.get_remote("nope").await.unwrap().is_none());
    assert!(store.remote_events("nope", 0, 10).await.unwrap().is_empty());

    // A handle that starts in input_required records its keys at once.
    let mut t2 = new_task("rt_2", "r-2");
    t2.principal = Some("alice".into());
    t2.snapshot = input_snapshot(&["b", "a"]);
    let r2 = insert(&*store, &t2).await;
    assert_eq!(get(&*store, "rt_2").await, r2);
    assert_eq!(r2.principal.as_deref(), Some("alice"));
    assert_eq!(r2.status, TaskStatus::InputRequired);
    assert_eq!(
        r2.input_requests, t2.snapshot.input_requests,
        "reported order kept"
    );
    assert_eq!(
        r2.next_poll_at,
        Some(T0 + 5_000),
        "input_required polls no faster than its floor"
    );
    let inputs = store.remote_inputs("rt_2").await.unwrap();
    let keys: Vec<_> = inputs.iter().map(|i| i.key.as_str()).collect();
    assert_eq!(keys, ["a", "b"], "ordered by first_seen_at, then key");
    assert_eq!(inputs[0].request, request_for("a"));
    assert_eq!(inputs[0].first_seen_at, T0);
    assert_eq!(
        (
            &inputs[0].response,
            inputs[0].answered_at,
            inputs[0].sent_at
        ),
        (&None, None, None)
    );

    // A handle that is already terminal is settled and never polled.
    let mut t3 = new_task("rt_3", "r-3");
    t3.snapshot = completed_snapshot();
    let r3 = insert(&*store, &t3).await;
    assert_eq!(get(&*store, "rt_3").await, r3);
    assert_eq!(r3.status, TaskStatus::Completed);
    assert_eq!(r3.result, Some(done_result()));
    assert_eq!((r3.completed_at, r3.next_poll_at), (Some(T0), None));
    assert_eq!(r3.event_version, 1);
    assert_eq!(
        events(&*store, "rt_3").await[0].status,
        TaskStatus::Completed
    );
}

pub async fn duplicate_handles_keep_the_tracked_row(store: Arc<dyn RemoteTaskStore>) {
    let first = insert(&*store, &new_task("rt_1", "r-1")).await;
    let mut dup = new_task("rt_2", "r-1");
    dup.tool = "other".into();
    dup.snapshot = completed_snapshot();
    dup.created_at = T0 + 10;
    match store.insert_remote(&dup, &policy()).await.unwrap() {
        InsertOutcome::AlreadyTracked(r) => assert_eq!(*r, first),
        other => panic!("a duplicate handle must keep the tracked row: {other:?}"),
    }
    assert_eq!(
        get(&*store, "rt_1").await,
        first,
        "the tracked row is untouched"
    );
    assert!(store.get_remote("rt_2").await.unwrap().is_none());
    assert_eq!(versions(&events(&*store, "rt_1").await), [1]);
    assert!(events(&*store, "rt_2").await.is_empty());

    // The same remote id for another principal or another server is another task.
    let mut bob = new_task("rt_3", "r-1");
    bob.principal = Some("bob".into());
    insert(&*store, &bob).await;
    let mut elsewhere = new_task("rt_4", "r-1");
    elsewhere.server = "srv2".into();
    insert(&*store, &elsewhere).await;
    let mut bob_again = new_task("rt_5", "r-1");
    bob_again.principal = Some("bob".into());
    let outcome = store.insert_remote(&bob_again, &policy()).await.unwrap();
    assert!(matches!(outcome, InsertOutcome::AlreadyTracked(_)));
    assert_eq!(outcome.record().id, "rt_3");

    // A duplicate local id for a new handle is an error and writes nothing.
    assert!(
        store
            .insert_remote(&new_task("rt_1", "r-9"), &policy())
            .await
            .is_err()
    );
    assert_eq!(get(&*store, "rt_1").await, first);
    assert_eq!(versions(&events(&*store, "rt_1").await), [1]);
    insert(&*store, &new_task("rt_6", "r-9")).await;
}

pub async fn list_filters_and_keyset_pagination(store: Arc<dyn RemoteTaskStore>) {
    let mut tasks = Vec::new();
    for i in 0..25i64 {
        let mut t = new_task(&format!("rt_{i:02}"), &format!("r-{i}"));
        // 20 share one created_at (ties are broken by id), 5 are newer.
        t.created_at = if i < 20 { T0 } else { T0 + i };
        t.server = if i % 2 == 0 { "even" } else { "odd" }.into();
        t.principal = (i % 3 == 0).then(|| "alice".to_string());
        t.conversation = (i % 5 == 0).then(|| "c5".to_string());
        if i % 4 == 0 {
            t.snapshot = completed_snapshot();
        }
        insert(&*store, &t).await;
        tasks.push(t);
    }
    let expect = |keep: &dyn Fn(&NewRemoteTask) -> bool| -> Vec<String> {
        let mut v: Vec<&NewRemoteTask> = tasks.iter().filter(|t| keep(t)).collect();
        v.sort_by(|a, b| (b.created_at, &b.id).cmp(&(a.created_at, &a.id)));
        v.into_iter().map(|t| t.id.clone()).collect()
    };
    let completed = |t: &NewRemoteTask| t.snapshot.status == Some(TaskStatus::Completed);
    let cases: Vec<(ListFilter, Vec<String>)> = vec![
        (ListFilter::default(), expect(&|_| true)),
        (
            ListFilter {
                status: Some(TaskStatus::Completed),
                ..Default::default()
            },
            expect(&completed),
        ),
        (
            ListFilter {
                active_only: true,
                ..Default::default()
            },
            expect(&|t| !completed(t)),
        ),
        (
            ListFilter {
                server: Some("odd".into()),
                ..Default::default()
            },
            expect(&|t| t.server == "odd"),
        ),
        (
            ListFilter {
                principal: Some("alice".into()),
                ..Default::default()
            },
            expect(&|t| t.principal.as_deref() == Some("alice")),
        ),
        (
            ListFilter {
                conversation: Some("c5".into()),
                ..Default::default()
            },
            expect(&|t| t.conversation.as_deref() == Some("c5")),
        ),
        (
            ListFilter {
                server: Some("even".into()),
                active_only: true,
                ..Default::default()
            },
            expect(&|t| t.server == "even" && !completed(t)),
        ),
        (
            ListFilter {
                status: Some(TaskStatus::Failed),
                ..Default::default()
            },
            Vec::new(),
        ),
    ];
    for (filter, expected) in cases {
        for page in [1, 4, 7, 100] {
            let mut seen: Vec<String> = Vec::new();
            let mut cursor: Option<Cursor> = None;
            loop {
                let got = store
                    .list_remote(&filter, cursor.as_ref(), page)
                    .await
                    .unwrap();
                assert!(got.len() as i64 <= page);
                let Some(last) = got.last() else { break };
                // Through the opaque text form, as an API would.
                let next = Cursor {
                    created_at: last.created_at,
                    id: last.id.clone(),
                };
                cursor = Cursor::decode(&next.encode());
                assert_eq!(cursor.as_ref(), Some(&next));
                seen.extend(got.into_iter().map(|r| r.id));
            }
            assert_eq!(seen, expected, "filter {filter:?}, page size {page}");
        }
    }
    let all = store
        .list_remote(&ListFilter::default(), None, 100)
        .await
        .unwrap();
    assert_eq!(all[0], get(&*store, "rt_24").await, "rows decode fully");
    assert!(
        store
            .list_remote(&ListFilter::default(), None, 0)
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn claims_respect_due_times_leases_terminal_rows_and_limits(
    store: Arc<dyn RemoteTaskStore>,
) {
    for (i, interval) in [1_000, 2_000, 3_000, 4_000].into_iter().enumerate() {
        let mut t = new_task(&format!("p{i}"), &format!("r-{i}"));
        t.snapshot.poll_interval_ms = Some(interval);
        insert(&*store, &t).await;
    }
    let mut done = new_task("done", "r-done");
    done.snapshot = completed_snapshot();
    insert(&*store, &done).await;

    assert!(
        claim(&*store, Phase::Poll, "w1", T0 + 999, 10)
            .await
            .is_empty(),
        "nothing due yet"
    );
    let now = T0 + 2_500;
    let first = claim(&*store, Phase::Poll, "w1", now, 1).await;
    assert_eq!(ids(&first), ["p0"], "earliest due first, limit respected");
    let c = &first[0];
    assert_eq!(
        c.fence,
        Fence {
            task_id: "p0".into(),
            owner: "w1".into(),
            token: c.record.claim_token.clone().unwrap()
        }
    );
    assert_eq!(c.fence.token.len(), 32);
    assert!(c.fence.token.chars().all(|ch| ch.is_ascii_hexdigit()));
    assert_eq!(c.record.claim_owner.as_deref(), Some("w1"));
    assert_eq!(c.record.claim_expires_at, Some(now + LEASE));
    assert_eq!(c.record.claim_phase.as_deref(), Some("poll"));
    assert_eq!(c.record.poll_count, 1, "a poll claim counts a poll");
    assert!(c.answers.is_empty());
    assert_eq!(
        get(&*store, "p0").await,
        c.record,
        "the claim is what is stored"
    );

    let second = claim(&*store, Phase::Poll, "w2", now, 10).await;
    assert_eq!(ids(&second), ["p1"], "p0 is leased; p2 and p3 are not due");
    assert_ne!(second[0].fence.token, c.fence.token);
    // No phase but poll has anything due.
    assert!(
        claim(&*store, Phase::Cancel, "w2", T0 + 10_000, 10)
            .await
            .is_empty()
    );
    assert!(
        claim(&*store, Phase::Update, "w2", T0 + 10_000, 10)
            .await
            .is_empty()
    );

    // Leases hold up to and including their expiry.
    let edge = claim(&*store, Phase::Poll, "w3", now + LEASE, 10).await;
    assert_eq!(ids(&edge), ["p2", "p3"], "in due order");
    let after = claim(&*store, Phase::Poll, "w3", now + LEASE + 1, 10).await;
    assert_eq!(ids(&after), ["p0", "p1"], "expired leases are reclaimed");
    assert_ne!(
        after[0].fence.token, c.fence.token,
        "a reclaim gets a new token"
    );
    assert_ne!(after[1].fence.token, second[0].fence.token);
    assert_eq!(after[0].record.poll_count, 2);
    assert!(
        claim(&*store, Phase::Poll, "w4", now + 10 * LEASE, 100)
            .await
            .iter()
            .all(|t| t.record.id != "done"),
        "terminal tasks are never claimed"
    );
    assert!(
        claim(&*store, Phase::Poll, "w4", now + 10 * LEASE, 0)
            .await
            .is_empty()
    );
}

pub async fn concurrent_claimers_never_share_a_task(store: Arc<dyn RemoteTaskStore>) {
    for i in 0..60 {
        insert(&*store, &new_task(&format!("c{i:02}"), &format!("r-{i}"))).await;
    }
    let now = T0 + 1_000;
    let mut handles = Vec::new();
    for w in 0..6 {
        let store = store.clone();
        handles.push(tokio::spawn(async move {
            let me = format!("w{w}");
            let mut mine = Vec::new();
            loop {
                let got = store
                    .claim_remote(Phase::Poll, &me, now, LEASE, 7)
                    .await
                    .unwrap();
                if got.is_empty() {
                    break;
                }
                for t in got {
                    assert_eq!(t.fence.owner, me);
                    mine.push(t.record.id);
                }
            }
            mine
        }));
    }
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.await.unwrap());
    }
    all.sort();
    let before = all.len();
    all.dedup();
    assert_eq!(before, all.len(), "a task was claimed twice");
    assert_eq!(all.len(), 60);
}

pub async fn stale_fences_change_nothing_after_a_reclaim(store: Arc<dyn RemoteTaskStore>) {
    insert(&*store, &new_task("t1", "r-1")).await;
    let a = claim_one(&*store, Phase::Poll, "A", T0 + 1_000).await;
    // A's lease lapses; B reclaims with a new token.
    let b = claim_one(&*store, Phase::Poll, "B", T0 + 1_000 + LEASE + 1).await;
    assert_ne!(a.fence.token, b.fence.token);
    let now = T0 + 1_000 + LEASE + 2;
    let stale_observations = || {
        vec![
            (Phase::Poll, Observation::Snapshot(completed_snapshot())),
            (Phase::Poll, Observation::Snapshot(input_snapshot(&["k"]))),
            (Phase::Poll, Observation::Transient("timeout".into())),
            (
                Phase::Poll,
                Observation::Permanent {
                    kind: FailureKind::NotFound,
                    message: "gone".into(),
                },
            ),
            (Phase::Poll, Observation::Released),
            (Phase::Cancel, Observation::CancelAcked),
            (
                Phase::Update,
                Observation::UpdateAcked {
                    keys: vec!["k".into()],
                },
            ),
        ]
    };
    let assert_untouched = |store: Arc<dyn RemoteTaskStore>, stale: ClaimedTask| async move {
        let before = get(&*store, "t1").await;
        let inputs = store.remote_inputs("t1").await.unwrap();
        let evs = events(&*store, "t1").await;
        for (phase, obs) in stale_observations() {
            assert!(
                !apply_one(&*store, applied(&stale, phase, obs.clone()), now).await,
                "a stale fence applied {obs:?}"
            );
        }
        assert_eq!(
            get(&*store, "t1").await,
            before,
            "the whole row is unchanged"
        );
        assert_eq!(store.remote_inputs("t1").await.unwrap(), inputs);
        assert_eq!(events(&*store, "t1").await, evs);
    };
    assert_untouched(store.clone(), a.clone()).await;

    // The same owner claiming again (new token) fences out its own old claim.
    let b2 = claim_one(&*store, Phase::Poll, "B", T0 + 1_000 + 2 * LEASE + 2).await;
    assert_eq!(b2.fence.owner, "B");
    assert_ne!(b2.fence.token, b.fence.token);
    assert_untouched(store.clone(), b.clone()).await;
    assert_untouched(store.clone(), a).await;

    let at = T0 + 1_000 + 2 * LEASE + 3;
    let obs = Observation::Snapshot(snapshot(TaskStatus::Working));
    assert!(apply_one(&*store, applied(&b2, Phase::Poll, obs.clone()), at).await);
    let r = get(&*store, "t1").await;
    assert_eq!(
        (
            r.claim_owner,
            r.claim_token,
            r.claim_expires_at,
            r.claim_phase
        ),
        (None, None, None, None)
    );
    assert_eq!(
        (r.poll_count, r.last_polled_at, r.next_poll_at),
        (3, Some(at), Some(at + 1_000))
    );
    assert!(
        !apply_one(&*store, applied(&b2, Phase::Poll, obs), at + 1).await,
        "a fence is spent once applied"
    );
}

pub async fn terminal_snapshot_settles_the_task(store: Arc<dyn RemoteTaskStore>) {
    insert(&*store, &new_task("t1", "r-1")).await;
    let c = claim_one(&*store, Phase::Poll, "w", T0 + 1_000).await;
    let now = T0 + 1_500;
    let obs = Observation::Snapshot(completed_snapshot());
    assert!(apply_one(&*store, applied(&c, Phase::Poll, obs), now).await);
    let r = get(&*store, "t1").await;
    assert_eq!(r.status, TaskStatus::Completed);
    assert_eq!(r.result, Some(done_result()));
    assert_eq!(r.status_message.as_deref(), Some("all done"));
    assert_eq!(
        (r.completed_at, r.updated_at, r.last_polled_at),
        (Some(now), now, Some(now))
    );
    assert_eq!(
        (r.next_poll_at, r.next_cancel_at, r.next_update_at),
        (None, None, None)
    );
    assert_eq!(
        (
            &r.claim_owner,
            &r.claim_token,
            r.claim_expires_at,
            &r.claim_phase
        ),
        (&None, &None, None, &None)
    );
    assert_eq!(r.event_version, 2);
    let evs = store.remote_events("t1", 1, 10).await.unwrap();
    assert_eq!(evs.len(), 1);
    assert_eq!(
        (
            evs[0].version,
            evs[0].kind,
            evs[0].status,
            evs[0].occurred_at
        ),
        (2, EventKind::Status, TaskStatus::Completed, now)
    );
    assert_eq!(evs[0].data["result"], done_result());
    for phase in [Phase::Poll, Phase::Cancel, Phase::Update] {
        assert!(
            claim(&*store, phase, "w", now + 100 * LEASE, 10)
                .await
                .is_empty()
        );
    }
    // Terminal is absorbing: a cancel intent changes nothing.
    assert_eq!(
        store.request_remote_cancel("t1", now + 1).await.unwrap(),
        Some(r.clone())
    );
    assert_eq!(get(&*store, "t1").await, r);
}

pub async fn apply_batches_apply_exactly_the_good_entries(store: Arc<dyn RemoteTaskStore>) {
    for i in 0..4 {
        insert(&*store, &new_task(&format!("b{i}"), &format!("r-{i}"))).await;
    }
    let claims = claim(&*store, Phase::Poll, "w", T0 + 1_000, 10).await;
    assert_eq!(ids(&claims), ["b0", "b1", "b2", "b3"]);
    let now = T0 + 1_200;
    let completed = Observation::Snapshot(completed_snapshot());
    let stale_token = Applied {
        fence: Fence {
            token: "not-the-token".into(),
            ..claims[1].fence.clone()
        },
        ..applied(&claims[1], Phase::Poll, completed.clone())
    };
    let wrong_owner = Applied {
        fence: Fence {
            owner: "intruder".into(),
            ..claims[2].fence.clone()
        },
        ..applied(&claims[2], Phase::Poll, completed.clone())
    };
    let unknown = Applied {
        fence: Fence {
            task_id: "nope".into(),
            ..claims[0].fence.clone()
        },
        ..applied(&claims[0], Phase::Poll, completed.clone())
    };
    let batch = vec![
        applied(&claims[0], Phase::Poll, completed.clone()),
        stale_token,
        applied(
            &claims[3],
            Phase::Poll,
            Observation::Snapshot(input_snapshot(&["k"])),
        ),
        unknown,
        wrong_owner,
        // The first entry spent this fence.
        applied(
            &claims[0],
            Phase::Poll,
            Observation::Transient("late".into()),
        ),
    ];
    let done = store.apply_remote(&batch, &policy(), now).await.unwrap();
    assert_eq!(done, [true, false, true, false, false, false]);
    let b0 = get(&*store, "b0").await;
    assert_eq!(
        (b0.status, b0.consecutive_errors),
        (TaskStatus::Completed, 0)
    );
    let b3 = get(&*store, "b3").await;
    assert_eq!(b3.status, TaskStatus::InputRequired);
    assert_eq!(store.remote_inputs("b3").await.unwrap().len(), 1);
    assert_eq!(
        get(&*store, "b1").await,
        claims[1].record,
        "stale entry changed nothing"
    );
    assert_eq!(
        get(&*store, "b2").await,
        claims[2].record,
        "foreign entry changed nothing"
    );
    assert!(events(&*store, "nope").await.is_empty());
    // The real fences still work.
    let retry = vec![
        applied(&claims[1], Phase::Poll, completed.clone()),
        applied(&claims[2], Phase::Poll, Observation::Released),
    ];
    assert_eq!(
        store.apply_remote(&retry, &policy(), now).await.unwrap(),
        [true, true]
    );
    assert!(
        store
            .apply_remote(&[], &policy(), now)
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn input_keys_are_deduplicated_across_snapshots(store: Arc<dyn RemoteTaskStore>) {
    let t1 = T0 + 1_100;
    let r = input_required_task(&*store, "t1", &["b", "a"], t1).await;
    assert_eq!(r.next_poll_at, Some(t1 + 5_000));
    assert_eq!(versions(&events(&*store, "t1").await), [1, 2]);
    let inputs = store.remote_inputs("t1").await.unwrap();
    assert_eq!(
        inputs.iter().map(|i| i.key.as_str()).collect::<Vec<_>>(),
        ["a", "b"]
    );
    assert!(inputs.iter().all(|i| i.first_seen_at == t1));

    // The same keys again (one with a different request): nothing new is
    // stored, the first request wins, nothing to announce.
    let t2 = t1 + 5_000;
    let c = claim_one(&*store, Phase::Poll, "w", t2).await;
    let mut same = input_snapshot(&["b", "a"]);
    same.input_requests[1].1 =
        json!({"method": "elicitation/create", "params": {"message": "changed"}});
    assert!(
        apply_one(
            &*store,
            applied(&c, Phase::Poll, Observation::Snapshot(same)),
            t2
        )
        .await
    );
    assert_eq!(store.remote_inputs("t1").await.unwrap(), inputs);
    assert_eq!(get(&*store, "t1").await.event_version, 2);

    // A new key joins: stored once, announced once.
    let t3 = t2 + 5_000;
    let c = claim_one(&*store, Phase::Poll, "w", t3).await;
    let more = Observation::Snapshot(input_snapshot(&["a", "b", "c"]));
    assert!(apply_one(&*store, applied(&c, Phase::Poll, more), t3).await);
    let inputs = store.remote_inputs("t1").await.unwrap();
    assert_eq!(
        inputs.iter().map(|i| i.key.as_str()).collect::<Vec<_>>(),
        ["a", "b", "c"]
    );
    assert_eq!(inputs[0].request, request_for("a"));
    assert_eq!(inputs[2].first_seen_at, t3);
    let evs = store.remote_events("t1", 2, 10).await.unwrap();
    assert_eq!(evs.len(), 1);
    assert_eq!((evs[0].version, evs[0].kind), (3, EventKind::InputRequired));
    assert_eq!(get(&*store, "t1").await.input_requests.len(), 3);
}

pub async fn answers_are_stored_once_for_outstanding_keys(store: Arc<dyn RemoteTaskStore>) {
    input_required_task(&*store, "t1", &["a", "b"], T0 + 1_100).await;
    let now = T0 + 2_000;
    let accept = json!({"action": "accept", "content": {"x": 1}});
    let res = store
        .store_answers(
            "t1",
            &[
                ("a".into(), accept.clone()),
                ("zzz".into(), json!({})),
                ("a".into(), json!({"action": "decline"})),
            ],
            now,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(res.stored, ["a"]);
    assert_eq!(res.ignored, ["zzz", "a"]);
    let inputs = store.remote_inputs("t1").await.unwrap();
    assert_eq!(
        (
            &inputs[0].key,
            &inputs[0].response,
            inputs[0].answered_at,
            inputs[0].sent_at
        ),
        (&"a".to_string(), &Some(accept.clone()), Some(now), None)
    );
    assert_eq!(inputs[1].response, None);
    let r = get(&*store, "t1").await;
    assert_eq!(
        (r.next_update_at, r.updated_at, r.event_version),
        (Some(now), now, 3)
    );
    let evs = store.remote_events("t1", 2, 10).await.unwrap();
    assert_eq!(
        (evs[0].kind, evs[0].occurred_at),
        (EventKind::Answered, now)
    );

    // A second answer to `a` is ignored and does not overwrite the first.
    let res = store
        .store_answers(
            "t1",
            &[
                ("a".into(), json!({"action": "decline"})),
                ("b".into(), json!({"action": "accept"})),
            ],
            now + 1,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (res.stored, res.ignored),
        (vec!["b".to_string()], vec!["a".to_string()])
    );
    assert_eq!(
        store.remote_inputs("t1").await.unwrap()[0].response,
        Some(accept)
    );
    // Nothing new to store: nothing changes.
    let before = get(&*store, "t1").await;
    let res = store
        .store_answers("t1", &[("b".into(), json!({}))], now + 2)
        .await
        .unwrap()
        .unwrap();
    assert!(res.stored.is_empty());
    assert_eq!(get(&*store, "t1").await, before);
    assert!(
        store
            .store_answers("nope", &[("a".into(), json!({}))], now)
            .await
            .unwrap()
            .is_none()
    );

    // A terminal task takes no answers.
    input_required_task(&*store, "t2", &["k"], T0 + 1_100).await;
    let due = claim(&*store, Phase::Poll, "w", T0 + 6_100, 10).await;
    let c = due.iter().find(|c| c.record.id == "t2").unwrap();
    let obs = Observation::Snapshot(completed_snapshot());
    assert!(apply_one(&*store, applied(c, Phase::Poll, obs), T0 + 6_100).await);
    let res = store
        .store_answers("t2", &[("k".into(), json!({}))], T0 + 6_200)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((res.stored.len(), res.ignored.len()), (0, 1));
    assert_eq!(store.remote_inputs("t2").await.unwrap()[0].response, None);
}

pub async fn racing_answers_are_stored_exactly_once(store: Arc<dyn RemoteTaskStore>) {
    let keys: Vec<String> = (0..8).map(|i| format!("k{i}")).collect();
    let key_refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    input_required_task(&*store, "t1", &key_refs, T0 + 1_100).await;
    // Many "replicas" answer the same key and different keys at once.
    let mut handles = Vec::new();
    for r in 0..16i64 {
        let store = store.clone();
        handles.push(tokio::spawn(async move {
            let key = format!("k{}", r % 8);
            store
                .store_answers("t1", &[(key, json!({"replica": r}))], T0 + 2_000 + r)
                .await
                .unwrap()
                .unwrap()
                .stored
                .len()
        }));
    }
    let mut stored = 0;
    for h in handles {
        stored += h.await.unwrap();
    }
    assert_eq!(stored, 8, "each key is stored exactly once across replicas");
    for (i, input) in store.remote_inputs("t1").await.unwrap().iter().enumerate() {
        let replica = input.response.as_ref().unwrap()["replica"]
            .as_i64()
            .unwrap();
        assert_eq!(
            replica % 8,
            i as i64,
            "key {} has another key's answer",
            input.key
        );
    }
    let answered = events(&*store, "t1")
        .await
        .iter()
        .filter(|e| e.kind == EventKind::Answered)
        .count();
    assert_eq!(answered, 8);
    assert_eq!(get(&*store, "t1").await.event_version, 10);
}

pub async fn update_claims_carry_unsent_answers_until_acked(store: Arc<dyn RemoteTaskStore>) {
    input_required_task(&*store, "t1", &["a", "b", "c"], T0 + 1_100).await;
    let ans = |k: &str| json!({"action": "accept", "content": {"key": k}});
    store
        .store_answers("t1", &[("a".into(), ans("a"))], T0 + 2_000)
        .await
        .unwrap();
    let u = claim_one(&*store, Phase::Update, "w", T0 + 2_000).await;
    assert_eq!(u.answers, vec![("a".to_string(), ans("a"))]);
    assert_eq!(u.record.claim_phase.as_deref(), Some("update"));
    assert_eq!(u.record.poll_count, 1, "only poll claims count polls");

    // `b` is answered while the update is in flight: the claim stays valid.
    let res = store
        .store_answers("t1", &[("b".into(), ans("b"))], T0 + 2_100)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(res.stored, ["b"]);
    assert_eq!(
        get(&*store, "t1").await.claim_token,
        Some(u.fence.token.clone())
    );

    let acked = Observation::UpdateAcked {
        keys: vec!["a".into()],
    };
    assert!(apply_one(&*store, applied(&u, Phase::Update, acked), T0 + 2_200).await);
    let inputs = store.remote_inputs("t1").await.unwrap();
    assert_eq!(
        (inputs[0].sent_at, inputs[1].sent_at),
        (Some(T0 + 2_200), None)
    );
    let r = get(&*store, "t1").await;
    assert_eq!(
        r.next_poll_at,
        Some(T0 + 2_200),
        "poll right after an update"
    );
    assert!(r.next_update_at.is_some(), "b still has to be sent");

    let u2 = claim_one(&*store, Phase::Update, "w", T0 + 2_300).await;
    assert_eq!(
        u2.answers,
        vec![("b".to_string(), ans("b"))],
        "a is not sent twice"
    );
    let acked = Observation::UpdateAcked {
        keys: vec!["b".into()],
    };
    assert!(apply_one(&*store, applied(&u2, Phase::Update, acked), T0 + 2_400).await);
    let r = get(&*store, "t1").await;
    assert_eq!(r.next_update_at, None);
    assert!(
        claim(&*store, Phase::Update, "w", T0 + 100 * LEASE, 10)
            .await
            .is_empty()
    );
    let inputs = store.remote_inputs("t1").await.unwrap();
    assert_eq!(inputs[1].sent_at, Some(T0 + 2_400));
    assert_eq!(
        (inputs[2].response.as_ref(), inputs[2].sent_at),
        (None, None)
    );
}

pub async fn cancel_intent_is_idempotent_and_keeps_claims(store: Arc<dyn RemoteTaskStore>) {
    insert(&*store, &new_task("t1", "r-1")).await;
    assert!(
        store
            .request_remote_cancel("nope", T0)
            .await
            .unwrap()
            .is_none()
    );
    let p = claim_one(&*store, Phase::Poll, "w", T0 + 1_000).await;
    let r = store
        .request_remote_cancel("t1", T0 + 1_100)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (r.cancel_requested_at, r.next_cancel_at),
        (Some(T0 + 1_100), Some(T0 + 1_100))
    );
    assert_eq!(
        r.status,
        TaskStatus::Working,
        "the server decides how the task ends"
    );
    assert_eq!(
        (
            &r.claim_owner,
            &r.claim_token,
            r.claim_expires_at,
            &r.claim_phase
        ),
        (
            &p.record.claim_owner,
            &p.record.claim_token,
            p.record.claim_expires_at,
            &p.record.claim_phase
        ),
        "an active claim is not disturbed"
    );
    assert_eq!(get(&*store, "t1").await, r);
    let evs = store.remote_events("t1", 1, 10).await.unwrap();
    assert_eq!(
        (evs[0].version, evs[0].kind),
        (2, EventKind::CancelRequested)
    );

    // A repeat changes nothing.
    assert_eq!(
        store.request_remote_cancel("t1", T0 + 1_200).await.unwrap(),
        Some(r.clone())
    );
    assert_eq!(get(&*store, "t1").await, r);
    assert_eq!(versions(&events(&*store, "t1").await), [1, 2]);

    // The cancel phase waits for the poll claim, which is still valid.
    assert!(
        claim(&*store, Phase::Cancel, "c", T0 + 1_300, 10)
            .await
            .is_empty()
    );
    let obs = Observation::Snapshot(snapshot(TaskStatus::Working));
    assert!(apply_one(&*store, applied(&p, Phase::Poll, obs), T0 + 1_400).await);
    assert_eq!(
        get(&*store, "t1").await.next_cancel_at,
        Some(T0 + 1_100),
        "the intent survives a poll"
    );

    let c = claim_one(&*store, Phase::Cancel, "c", T0 + 1_500).await;
    assert_eq!(c.record.claim_phase.as_deref(), Some("cancel"));
    assert_eq!(c.record.poll_count, 1);
    assert!(
        apply_one(
            &*store,
            applied(&c, Phase::Cancel, Observation::CancelAcked),
            T0 + 1_600
        )
        .await
    );
    let r = get(&*store, "t1").await;
    assert_eq!(
        (
            r.cancel_sent_at,
            r.next_cancel_at,
            r.cancel_attempts,
            r.next_poll_at
        ),
        (Some(T0 + 1_600), None, 1, Some(T0 + 1_600))
    );
    assert_eq!(r.status, TaskStatus::Working);
    assert!(
        claim(&*store, Phase::Cancel, "c", T0 + 100 * LEASE, 10)
            .await
            .is_empty()
    );

    // The server reports the outcome on the next poll.
    let p = claim_one(&*store, Phase::Poll, "w", T0 + 1_600).await;
    let obs = Observation::Snapshot(snapshot(TaskStatus::Cancelled));
    assert!(apply_one(&*store, applied(&p, Phase::Poll, obs), T0 + 1_700).await);
    let settled = get(&*store, "t1").await;
    assert_eq!(settled.status, TaskStatus::Cancelled);
    assert_eq!(
        store.request_remote_cancel("t1", T0 + 1_800).await.unwrap(),
        Some(settled)
    );
}

pub async fn transient_errors_back_off_and_degrade(store: Arc<dyn RemoteTaskStore>) {
    insert(&*store, &new_task("t1", "r-1")).await;
    let mut now = T0 + 1_000;
    let mut delays = Vec::new();
    for _ in 0..3 {
        let c = claim_one(&*store, Phase::Poll, "w", now).await;
        let obs = Observation::Transient("connection refused".into());
        assert!(apply_one(&*store, applied(&c, Phase::Poll, obs), now).await);
        let r = get(&*store, "t1").await;
        let next = r.next_poll_at.unwrap();
        delays.push(next - now);
        now = next;
    }
    assert_eq!(delays, [1_000, 2_000, 4_000]);
    let r = get(&*store, "t1").await;
    assert_eq!(
        (r.consecutive_errors, r.last_error.as_deref()),
        (3, Some("connection refused"))
    );
    let evs = store.remote_events("t1", 1, 10).await.unwrap();
    assert_eq!(evs.len(), 1);
    assert_eq!(
        (evs[0].kind, evs[0].data["consecutiveErrors"].as_i64()),
        (EventKind::Degraded, Some(3))
    );
    assert!(
        claim(&*store, Phase::Poll, "w", now - 1, 10)
            .await
            .is_empty(),
        "backing off"
    );
    let c = claim_one(&*store, Phase::Poll, "w", now).await;
    let obs = Observation::Snapshot(snapshot(TaskStatus::Working));
    assert!(apply_one(&*store, applied(&c, Phase::Poll, obs), now).await);
    let r = get(&*store, "t1").await;
    assert_eq!(
        (r.consecutive_errors, r.last_error),
        (0, None),
        "a snapshot resets the errors"
    );
}

pub async fn released_claims_count_nothing(store: Arc<dyn RemoteTaskStore>) {
    insert(&*store, &new_task("t1", "r-1")).await;
    // Work claim: handed back untouched, claimable again at once.
    let c = claim_one(&*store, Phase::Poll, "w", T0 + 1_000).await;
    assert!(
        apply_one(
            &*store,
            applied(&c, Phase::Poll, Observation::Released),
            T0 + 1_200
        )
        .await
    );
    let r = get(&*store, "t1").await;
    assert_eq!(
        (
            r.claim_owner,
            r.claim_token,
            r.claim_expires_at,
            r.claim_phase
        ),
        (None, None, None, None)
    );
    assert_eq!(
        (
            r.next_poll_at,
            r.consecutive_errors,
            r.poll_count,
            r.event_version
        ),
        (c.record.next_poll_at, 0, 1, 1)
    );
    claim_one(&*store, Phase::Poll, "w2", T0 + 1_200).await;

    // Notify claim: released without counting an attempt.
    let n = claim_notify(&*store, "n", T0 + 1_000).await;
    assert_eq!(n.len(), 1);
    let release = NotifyResult {
        released: true,
        ..delivered(&n[0], 1)
    };
    assert!(finish_one(&*store, release, T0 + 1_100).await);
    let r = get(&*store, "t1").await;
    assert_eq!(
        (
            r.notify_attempts,
            &r.last_notify_error,
            r.delivered_version,
            r.next_notify_at
        ),
        (0, &None, 0, Some(T0))
    );
    let again = claim_notify(&*store, "m", T0 + 1_100).await;
    assert_eq!(again.len(), 1);
    assert_eq!(
        (again[0].attempts, versions(&again[0].events)),
        (0, vec![1])
    );
}

pub async fn notifications_are_delivered_in_version_order(store: Arc<dyn RemoteTaskStore>) {
    input_required_task(&*store, "t1", &["k"], T0 + 1_100).await;
    store.request_remote_cancel("t1", T0 + 1_200).await.unwrap();
    assert_eq!(store.notification_backlog().await.unwrap(), 3);
    let now = T0 + 2_000;
    let claims = store
        .claim_notifications("n", now, LEASE, 10, 2)
        .await
        .unwrap();
    assert_eq!(claims.len(), 1);
    let n = &claims[0];
    assert_eq!(
        (n.fence.task_id.as_str(), n.fence.owner.as_str()),
        ("t1", "n")
    );
    assert!(!n.fence.token.is_empty());
    assert_eq!(n.attempts, 0);
    assert_eq!(
        versions(&n.events),
        [1, 2],
        "oldest first, at most max_events"
    );
    assert_eq!(
        (n.events[0].kind, n.events[1].kind, n.events[1].status),
        (
            EventKind::Created,
            EventKind::Status,
            TaskStatus::InputRequired
        )
    );
    assert!(
        claim_notify(&*store, "m", now).await.is_empty(),
        "the notify lease is held"
    );

    assert!(finish_one(&*store, delivered(n, 2), now + 10).await);
    let r = get(&*store, "t1").await;
    assert_eq!(
        (r.delivered_version, r.next_notify_at, r.notify_attempts),
        (2, Some(now + 10), 0),
        "more events pending: due again now"
    );
    assert_eq!(store.notification_backlog().await.unwrap(), 1);
    let claims = claim_notify(&*store, "m", now + 10).await;
    assert_eq!(versions(&claims[0].events), [3]);
    assert_eq!(claims[0].events[0].kind, EventKind::CancelRequested);
    assert!(finish_one(&*store, delivered(&claims[0], 3), now + 20).await);
    let r = get(&*store, "t1").await;
    assert_eq!((r.delivered_version, r.next_notify_at), (3, None));
    assert_eq!(store.notification_backlog().await.unwrap(), 0);
    assert!(
        claim_notify(&*store, "m", now + 100 * LEASE)
            .await
            .is_empty()
    );
    assert!(
        store
            .finish_notifications(&[], now)
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn failed_notifications_back_off_then_dead_letter(store: Arc<dyn RemoteTaskStore>) {
    insert(&*store, &new_task("t1", "r-1")).await;
    store.request_remote_cancel("t1", T0 + 100).await.unwrap();
    let fail = |n: &NotifyClaim, through: i64, error: &str, retry_at: i64| NotifyResult {
        failure: Some((error.to_string(), retry_at)),
        ..delivered(n, through)
    };
    let n = claim_notify(&*store, "n", T0 + 1_000).await;
    assert_eq!((n[0].attempts, versions(&n[0].events)), (0, vec![1, 2]));
    assert!(
        finish_one(
            &*store,
            fail(&n[0], 0, "webhook 503", T0 + 6_000),
            T0 + 1_000
        )
        .await
    );
    let r = get(&*store, "t1").await;
    assert_eq!(
        (
            r.notify_attempts,
            r.last_notify_error.as_deref(),
            r.next_notify_at,
            r.delivered_version
        ),
        (1, Some("webhook 503"), Some(T0 + 6_000), 0)
    );
    assert!(
        claim_notify(&*store, "n", T0 + 5_999).await.is_empty(),
        "backing off"
    );
    let n = claim_notify(&*store, "n", T0 + 6_000).await;
    assert_eq!((n[0].attempts, versions(&n[0].events)), (1, vec![1, 2]));
    assert!(
        finish_one(
            &*store,
            fail(&n[0], 0, "webhook 503", T0 + 16_000),
            T0 + 6_000
        )
        .await
    );
    assert_eq!(get(&*store, "t1").await.notify_attempts, 2);

    // v1 is given up on; v2 then fails for the first time.
    let n = claim_notify(&*store, "n", T0 + 16_000).await;
    assert_eq!(n[0].attempts, 2);
    let result = NotifyResult {
        dead_lettered: vec![1],
        ..fail(&n[0], 1, "timeout", T0 + 20_000)
    };
    assert!(finish_one(&*store, result, T0 + 16_000).await);
    let r = get(&*store, "t1").await;
    assert_eq!(
        (
            r.delivered_version,
            r.dead_letters,
            r.notify_attempts,
            r.next_notify_at
        ),
        (1, 1, 1, Some(T0 + 20_000)),
        "attempts count per event: the new head has failed once"
    );
    assert_eq!(r.last_notify_error.as_deref(), Some("timeout"));
    let n = claim_notify(&*store, "n", T0 + 20_000).await;
    assert_eq!(
        (n[0].attempts, versions(&n[0].events)),
        (1, vec![2]),
        "dead letters are skipped"
    );
    assert!(finish_one(&*store, delivered(&n[0], 2), T0 + 20_000).await);
    let r = get(&*store, "t1").await;
    assert_eq!(
        (
            r.delivered_version,
            r.dead_letters,
            r.notify_attempts,
            &r.last_notify_error,
            r.next_notify_at
        ),
        (2, 1, 0, &None, None)
    );
    assert_eq!(store.notification_backlog().await.unwrap(), 0);
    assert_eq!(
        versions(&events(&*store, "t1").await),
        [1, 2],
        "the timeline keeps every event"
    );
}

pub async fn stale_notify_fences_cannot_finish(store: Arc<dyn RemoteTaskStore>) {
    insert(&*store, &new_task("t1", "r-1")).await;
    // The notify lease is independent of the work claim.
    let p = claim_one(&*store, Phase::Poll, "w", T0 + 1_000).await;
    let n1 = claim_notify(&*store, "n1", T0 + 1_000).await.remove(0);
    assert!(
        claim_notify(&*store, "n2", T0 + 1_000 + LEASE)
            .await
            .is_empty(),
        "lease holds"
    );
    let n2 = claim_notify(&*store, "n2", T0 + 1_000 + LEASE + 1)
        .await
        .remove(0);
    assert_ne!(n2.fence.token, n1.fence.token);
    assert_eq!(n2.attempts, 0, "an expired notify lease is no failure");
    let before = get(&*store, "t1").await;
    let now = T0 + 1_000 + LEASE + 2;
    let stale_results = |n: &NotifyClaim| {
        vec![
            delivered(n, 1),
            NotifyResult {
                failure: Some(("x".into(), now + 5)),
                ..delivered(n, 0)
            },
            NotifyResult {
                released: true,
                ..delivered(n, 0)
            },
        ]
    };
    let done = store
        .finish_notifications(&stale_results(&n1), now)
        .await
        .unwrap();
    assert_eq!(done, [false, false, false]);
    assert_eq!(get(&*store, "t1").await, before);

    // Same owner, new token: the old token is stale too.
    let n2b = claim_notify(&*store, "n2", T0 + 1_000 + 2 * LEASE + 2)
        .await
        .remove(0);
    assert_eq!(n2b.fence.owner, "n2");
    assert_ne!(n2b.fence.token, n2.fence.token);
    let done = store
        .finish_notifications(&stale_results(&n2), now)
        .await
        .unwrap();
    assert_eq!(done, [false, false, false]);
    assert_eq!(get(&*store, "t1").await, before);

    let batch = vec![delivered(&n1, 1), delivered(&n2b, 1), delivered(&n2, 1)];
    let done = store.finish_notifications(&batch, now).await.unwrap();
    assert_eq!(done, [false, true, false]);
    assert_eq!(get(&*store, "t1").await.delivered_version, 1);
    let obs = Observation::Snapshot(snapshot(TaskStatus::Working));
    assert!(
        apply_one(&*store, applied(&p, Phase::Poll, obs), now).await,
        "notify claims leave the work claim alone"
    );
}

pub async fn events_recorded_during_a_notify_claim_stay_pending(store: Arc<dyn RemoteTaskStore>) {
    insert(&*store, &new_task("t1", "r-1")).await;
    insert(&*store, &new_task("t2", "r-2")).await;
    let claims = claim_notify(&*store, "n", T0 + 1_000).await;
    assert_eq!(claims.len(), 2);
    // New events while both deliveries are in flight.
    store.request_remote_cancel("t1", T0 + 1_100).await.unwrap();
    store.request_remote_cancel("t2", T0 + 1_100).await.unwrap();
    let fail = NotifyResult {
        failure: Some(("refused".into(), T0 + 9_000)),
        ..delivered(&claims[1], 0)
    };
    let done = store
        .finish_notifications(&[delivered(&claims[0], 1), fail], T0 + 1_200)
        .await
        .unwrap();
    assert_eq!(done, [true, true]);
    let r1 = get(&*store, "t1").await;
    assert_eq!(
        (r1.delivered_version, r1.event_version, r1.next_notify_at),
        (1, 2, Some(T0 + 1_200)),
        "the newer event is due now"
    );
    let r2 = get(&*store, "t2").await;
    assert_eq!(
        (r2.delivered_version, r2.next_notify_at),
        (0, Some(T0 + 9_000))
    );
    let claims = claim_notify(&*store, "n", T0 + 1_200).await;
    assert_eq!(claims.len(), 1);
    assert_eq!(
        (
            claims[0].fence.task_id.as_str(),
            versions(&claims[0].events)
        ),
        ("t1", vec![2])
    );
    // Reporting more than was recorded cannot skip events that do not exist yet.
    assert!(finish_one(&*store, delivered(&claims[0], 99), T0 + 1_300).await);
    let r1 = get(&*store, "t1").await;
    assert_eq!((r1.delivered_version, r1.next_notify_at), (2, None));
    assert_eq!(
        store.notification_backlog().await.unwrap(),
        2,
        "t1 has none pending, t2 two"
    );
}

pub async fn counts_and_backlog(store: Arc<dyn RemoteTaskStore>) {
    let zero: Vec<(TaskStatus, i64)> = TaskStatus::ALL.iter().map(|s| (*s, 0)).collect();
    assert_eq!(store.remote_counts().await.unwrap(), zero);
    assert_eq!(store.notification_backlog().await.unwrap(), 0);
    insert(&*store, &new_task("w1", "r-w1")).await;
    insert(&*store, &new_task("w2", "r-w2")).await;
    let mut i1 = new_task("i1", "r-i1");
    i1.snapshot = input_snapshot(&["k"]);
    insert(&*store, &i1).await;
    let mut c1 = new_task("c1", "r-c1");
    c1.snapshot = completed_snapshot();
    insert(&*store, &c1).await;
    let mut f1 = new_task("f1", "r-f1");
    f1.snapshot = RemoteSnapshot {
        error: Some(json!({"code": -1, "message": "x"})),
        ..snapshot(TaskStatus::Failed)
    };
    insert(&*store, &f1).await;
    store.request_remote_cancel("w1", T0 + 1).await.unwrap();
    assert_eq!(
        store.remote_counts().await.unwrap(),
        vec![
            (TaskStatus::Working, 2),
            (TaskStatus::InputRequired, 1),
            (TaskStatus::Completed, 1),
            (TaskStatus::Failed, 1),
            (TaskStatus::Cancelled, 0),
        ]
    );
    assert_eq!(store.notification_backlog().await.unwrap(), 6);
    let claims = claim_notify(&*store, "n", T0 + 10).await;
    let c1_claim = claims.iter().find(|c| c.fence.task_id == "c1").unwrap();
    assert!(finish_one(&*store, delivered(c1_claim, 1), T0 + 20).await);
    assert_eq!(store.notification_backlog().await.unwrap(), 5);
}

/// Every contract case, by name, for the test macro.
#[macro_export]
macro_rules! remote_contract_cases {
    ($m:ident) => {
        $m!(
            insert_then_get_round_trips,
            duplicate_handles_keep_the_tracked_row,
            list_filters_and_keyset_pagination,
            claims_respect_due_times_leases_terminal_rows_and_limits,
            concurrent_claimers_never_share_a_task,
            stale_fences_change_nothing_after_a_reclaim,
            terminal_snapshot_settles_the_task,
            apply_batches_apply_exactly_the_good_entries,
            input_keys_are_deduplicated_across_snapshots,
            answers_are_stored_once_for_outstanding_keys,
            racing_answers_are_stored_exactly_once,
            update_claims_carry_unsent_answers_until_acked,
            cancel_intent_is_idempotent_and_keeps_claims,
            transient_errors_back_off_and_degrade,
            released_claims_count_nothing,
            notifications_are_delivered_in_version_order,
            failed_notifications_back_off_then_dead_letter,
            stale_notify_fences_cannot_finish,
            events_recorded_during_a_notify_claim_stay_pending,
            counts_and_backlog
        );
    };
}
