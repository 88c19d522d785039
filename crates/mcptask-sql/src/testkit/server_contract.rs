//! The server-task store contract: every backend must pass every case.
//!
//! Each case takes a fresh, migrated, empty store. `tests/server_store_contract.rs`
//! runs all of them against SQLite and a real PostgreSQL.

use std::sync::Arc;

use mcptask_core::TaskStatus;
use mcptask_core::server::{CancelOutcome, Fence, InputState, NewServerTask, Outcome};
use mcptask_core::store::ServerTaskStore;
use serde_json::json;

const T0: i64 = 1_800_000_000_000;
const LEASE: i64 = 10_000;
const RETENTION: i64 = 60_000;

/// The purge time the runtime would pass for `task` settled at `now`.
fn purge_at(task: &NewServerTask, now: i64) -> Option<i64> {
    mcptask_core::server::retention::purge_at(
        task.ttl_ms.map(|ttl| task.created_at + ttl),
        now,
        RETENTION,
    )
}

fn new_task(id: &str, owner: &str, ttl_ms: Option<i64>) -> NewServerTask {
    NewServerTask {
        id: id.to_string(),
        principal: Some("alice".into()),
        tool: "slow".into(),
        arguments: json!({"n": 1, "nested": {"s": "é"}}),
        call_inputs: Some(json!({"user_name": {"action": "accept"}})),
        created_at: T0,
        ttl_ms,
        poll_interval_ms: Some(500),
        status_message: Some("queued".into()),
        owner: owner.to_string(),
        claim_token: format!("tok-{id}-{owner}"),
    }
}

fn fence_of(t: &NewServerTask) -> Fence {
    Fence {
        task_id: t.id.clone(),
        owner: t.owner.clone(),
        token: t.claim_token.clone(),
    }
}

async fn create(store: &dyn ServerTaskStore, t: &NewServerTask) {
    store.heartbeat(&t.owner, T0, LEASE).await.unwrap();
    store.create_tasks(std::slice::from_ref(t)).await.unwrap();
}

async fn status(store: &dyn ServerTaskStore, id: &str) -> TaskStatus {
    store.get_task(id).await.unwrap().unwrap().record.status
}

pub async fn create_then_get_round_trips(store: Arc<dyn ServerTaskStore>) {
    let t = new_task("t1", "A", Some(30_000));
    create(&*store, &t).await;
    let view = store
        .get_task("t1")
        .await
        .unwrap()
        .expect("created task must resolve");
    let r = view.record.clone();
    assert_eq!(r.id, "t1");
    assert_eq!(r.principal.as_deref(), Some("alice"));
    assert_eq!(r.tool, "slow");
    assert_eq!(r.arguments, t.arguments);
    assert_eq!(r.call_inputs, t.call_inputs);
    assert_eq!(r.status, TaskStatus::Working);
    assert_eq!(r.status_message.as_deref(), Some("queued"));
    assert_eq!((r.created_at, r.updated_at), (T0, T0));
    assert_eq!(r.ttl_ms, Some(30_000));
    assert_eq!(r.expires_at(), Some(T0 + 30_000));
    assert_eq!(r.poll_interval_ms, Some(500));
    assert_eq!(r.attempt, 1);
    assert!(!r.cancel_requested);
    assert_eq!(r.fence(), Some(fence_of(&t)));
    assert_eq!((r.result, r.error, r.purge_at), (None, None, None));
    assert!(view.input_requests.is_empty());
    assert_eq!(
        view.record,
        t.clone().into_record(),
        "the store reads back what the runtime assumes"
    );
    assert!(store.get_task("nope").await.unwrap().is_none());
}

pub async fn batch_create_is_one_unit(store: Arc<dyn ServerTaskStore>) {
    store.heartbeat("A", T0, LEASE).await.unwrap();
    let batch: Vec<_> = (0..50)
        .map(|i| new_task(&format!("b{i}"), "A", None))
        .collect();
    store.create_tasks(&batch).await.unwrap();
    for t in &batch {
        assert!(store.get_task(&t.id).await.unwrap().is_some());
    }
    // A duplicate id fails the whole batch and leaves no partial rows.
    let dup = vec![new_task("fresh", "A", None), new_task("b0", "A", None)];
    assert!(store.create_tasks(&dup).await.is_err());
    assert!(store.get_task("fresh").await.unwrap().is_none());
}

pub async fn fenced_writes_need_the_current_claim(store: Arc<dyn ServerTaskStore>) {
    let t = new_task("t1", "A", None);
    create(&*store, &t).await;
    let good = fence_of(&t);
    let stale_token = Fence {
        token: "other".into(),
        ..good.clone()
    };
    let other_owner = Fence {
        owner: "B".into(),
        ..good.clone()
    };
    for bad in [&stale_token, &other_owner] {
        assert!(
            !store
                .set_status_message(bad, Some("x"), T0 + 1)
                .await
                .unwrap()
        );
        assert!(
            store
                .request_inputs(bad, &[("k".into(), json!({}))], T0 + 1)
                .await
                .unwrap()
                .is_none()
        );
        assert!(store.begin_rerun(bad, T0 + 1).await.unwrap().is_none());
        let done = Outcome::Completed {
            result: json!({"content": []}),
        };
        assert!(
            !store
                .finish(bad, &done, T0 + 1, Some(T0 + 1 + RETENTION))
                .await
                .unwrap()
        );
    }
    let r = store.get_task("t1").await.unwrap().unwrap().record;
    assert_eq!(r.status, TaskStatus::Working);
    assert_eq!(r.status_message.as_deref(), Some("queued"));
    assert_eq!(r.attempt, 1);
    assert!(
        store
            .input_states("t1", &["k".into()])
            .await
            .unwrap()
            .is_empty()
    );

    assert!(
        store
            .set_status_message(&good, Some("step 2"), T0 + 2)
            .await
            .unwrap()
    );
    let r = store.get_task("t1").await.unwrap().unwrap().record;
    assert_eq!(r.status_message.as_deref(), Some("step 2"));
    assert_eq!(r.updated_at, T0 + 2);
}

pub async fn takeover_fences_out_the_old_owner(store: Arc<dyn ServerTaskStore>) {
    let t = new_task("t1", "A", None);
    create(&*store, &t).await;
    let old = fence_of(&t);
    store.heartbeat("B", T0, LEASE).await.unwrap();
    // A's lease is still valid: nothing to claim.
    assert!(
        store
            .claim_orphans("B", T0 + LEASE - 1, 10)
            .await
            .unwrap()
            .is_empty()
    );
    // A stops heartbeating; B takes over after the lease.
    let claimed = store.claim_orphans("B", T0 + LEASE + 1, 10).await.unwrap();
    assert_eq!(claimed.len(), 1);
    let new = claimed[0].fence().unwrap();
    assert_eq!(new.owner, "B");
    assert_ne!(new.token, old.token);
    assert_eq!(claimed[0].attempt, 1);

    // Every write by the old claim is dropped.
    assert!(
        !store
            .set_status_message(&old, Some("stale"), T0 + LEASE + 2)
            .await
            .unwrap()
    );
    assert!(
        store
            .request_inputs(&old, &[("k".into(), json!({}))], T0 + LEASE + 2)
            .await
            .unwrap()
            .is_none()
    );
    let stale_done = Outcome::Completed {
        result: json!({"content": [{"type": "text", "text": "stale"}]}),
    };
    assert!(
        !store
            .finish(
                &old,
                &stale_done,
                T0 + LEASE + 2,
                Some(T0 + LEASE + 2 + RETENTION)
            )
            .await
            .unwrap()
    );
    assert_eq!(status(&*store, "t1").await, TaskStatus::Working);

    // A second claim generation by the same owner also fences the first.
    store.release_owner("B", T0 + LEASE + 3).await.unwrap();
    store.heartbeat("C", T0 + LEASE + 3, LEASE).await.unwrap();
    let again = store.claim_orphans("C", T0 + LEASE + 4, 10).await.unwrap();
    assert_eq!(again.len(), 1);
    assert!(
        !store
            .finish(
                &new,
                &stale_done,
                T0 + LEASE + 5,
                Some(T0 + LEASE + 5 + RETENTION)
            )
            .await
            .unwrap()
    );
    let current = again[0].fence().unwrap();
    let done = Outcome::Completed {
        result: json!({"content": []}),
    };
    assert!(
        store
            .finish(
                &current,
                &done,
                T0 + LEASE + 6,
                Some(T0 + LEASE + 6 + RETENTION)
            )
            .await
            .unwrap()
    );
    assert_eq!(status(&*store, "t1").await, TaskStatus::Completed);
}

pub async fn claims_skip_live_owners_terminal_tasks_and_respect_limits(
    store: Arc<dyn ServerTaskStore>,
) {
    store.heartbeat("dead", T0, LEASE).await.unwrap();
    store.heartbeat("alive", T0, 10 * LEASE).await.unwrap();
    let dead: Vec<_> = (0..5)
        .map(|i| new_task(&format!("d{i}"), "dead", None))
        .collect();
    let alive: Vec<_> = (0..3)
        .map(|i| new_task(&format!("a{i}"), "alive", None))
        .collect();
    store.create_tasks(&dead).await.unwrap();
    store.create_tasks(&alive).await.unwrap();
    let done = Outcome::Completed {
        result: json!({"content": []}),
    };
    assert!(
        store
            .finish(&fence_of(&dead[0]), &done, T0 + 1, Some(T0 + 1 + RETENTION))
            .await
            .unwrap()
    );

    let now = T0 + LEASE + 1;
    store.heartbeat("me", now, LEASE).await.unwrap();
    let first = store.claim_orphans("me", now, 2).await.unwrap();
    assert_eq!(first.len(), 2);
    let second = store.claim_orphans("me", now, 10).await.unwrap();
    assert_eq!(
        second.len(),
        2,
        "only the 4 live tasks of the dead owner are orphans"
    );
    let mut ids: Vec<_> = first.iter().chain(&second).map(|r| r.id.clone()).collect();
    ids.sort();
    assert_eq!(ids, ["d1", "d2", "d3", "d4"]);
    assert!(store.claim_orphans("me", now, 10).await.unwrap().is_empty());
    // The dead owner now owns no live task and can be pruned; the live one stays.
    assert_eq!(store.prune_owners(now).await.unwrap(), 1);
    assert!(store.claim_orphans("me", now, 10).await.unwrap().is_empty());
}

pub async fn concurrent_claimers_never_share_a_task(store: Arc<dyn ServerTaskStore>) {
    store.heartbeat("dead", T0, LEASE).await.unwrap();
    let tasks: Vec<_> = (0..60)
        .map(|i| new_task(&format!("c{i:02}"), "dead", None))
        .collect();
    store.create_tasks(&tasks).await.unwrap();
    let now = T0 + LEASE + 1;
    let mut handles = Vec::new();
    for w in 0..6 {
        let store = store.clone();
        handles.push(tokio::spawn(async move {
            let me = format!("w{w}");
            store.heartbeat(&me, now, LEASE).await.unwrap();
            let mut mine = Vec::new();
            loop {
                let got = store.claim_orphans(&me, now, 7).await.unwrap();
                if got.is_empty() {
                    break;
                }
                mine.extend(got.into_iter().map(|r| r.id));
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

pub async fn terminal_states_are_absorbing(store: Arc<dyn ServerTaskStore>) {
    let t = new_task("t1", "A", Some(1_000));
    create(&*store, &t).await;
    let f = fence_of(&t);
    store
        .request_inputs(
            &f,
            &[("k".into(), json!({"method": "elicitation/create"}))],
            T0 + 1,
        )
        .await
        .unwrap();
    let failed = Outcome::failed(-32603, "boom");
    assert!(
        store
            .finish(&f, &failed, T0 + 2, Some(T0 + 2 + RETENTION))
            .await
            .unwrap()
    );
    let again = Outcome::Completed {
        result: json!({"content": []}),
    };
    assert!(
        !store
            .finish(&f, &again, T0 + 3, Some(T0 + 3 + RETENTION))
            .await
            .unwrap()
    );
    assert!(
        !store
            .finish(
                &f,
                &Outcome::Cancelled { message: None },
                T0 + 3,
                Some(T0 + 3 + RETENTION)
            )
            .await
            .unwrap()
    );
    assert_eq!(
        store.request_cancel("t1", T0 + 4).await.unwrap(),
        CancelOutcome::AlreadyTerminal
    );
    let answer = store
        .answer_inputs("t1", &[("k".into(), json!({"action": "accept"}))], T0 + 5)
        .await
        .unwrap();
    assert!(answer.found && answer.applied.is_empty());
    assert_eq!(answer.ignored, ["k"]);
    assert!(
        store
            .expire_overdue(T0 + 10_000, 100, T0 + 10_000 + RETENTION)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        !store
            .set_status_message(&f, Some("late"), T0 + 6)
            .await
            .unwrap()
    );
    let view = store.get_task("t1").await.unwrap().unwrap();
    assert_eq!(view.record.status, TaskStatus::Failed);
    assert_eq!(
        view.record.error,
        Some(json!({"code": -32603, "message": "boom"}))
    );
    assert_eq!(view.record.status_message.as_deref(), Some("boom"));
    assert!(
        view.input_requests.is_empty(),
        "a terminal task has no outstanding inputs"
    );
}

pub async fn input_keys_are_answered_once_and_never_reissued(store: Arc<dyn ServerTaskStore>) {
    let t = new_task("t1", "A", None);
    create(&*store, &t).await;
    let f = fence_of(&t);
    let ra = json!({"method": "elicitation/create", "params": {"message": "a?"}});
    let rb = json!({"method": "elicitation/create", "params": {"message": "b?"}});
    let states = store
        .request_inputs(
            &f,
            &[("a".into(), ra.clone()), ("b".into(), rb.clone())],
            T0 + 1,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        states,
        vec![
            ("a".into(), InputState::Pending),
            ("b".into(), InputState::Pending)
        ]
    );
    let view = store.get_task("t1").await.unwrap().unwrap();
    assert_eq!(view.record.status, TaskStatus::InputRequired);
    assert_eq!(
        view.input_requests,
        vec![("a".into(), ra.clone()), ("b".into(), rb.clone())]
    );

    // Partial answer: stays input_required with only b outstanding; unknown keys ignored.
    let out = store
        .answer_inputs(
            "t1",
            &[
                ("a".into(), json!({"action": "accept", "content": {"x": 1}})),
                ("zzz".into(), json!({})),
            ],
            T0 + 2,
        )
        .await
        .unwrap();
    assert_eq!(out.applied, ["a"]);
    assert_eq!(out.ignored, ["zzz"]);
    assert_eq!(out.owner.as_deref(), Some("A"));
    let view = store.get_task("t1").await.unwrap().unwrap();
    assert_eq!(view.record.status, TaskStatus::InputRequired);
    assert_eq!(view.input_requests, vec![("b".into(), rb.clone())]);

    // A second answer to a is ignored and does not overwrite the first.
    let out = store
        .answer_inputs("t1", &[("a".into(), json!({"action": "decline"}))], T0 + 3)
        .await
        .unwrap();
    assert_eq!(out.ignored, ["a"]);
    let out = store
        .answer_inputs("t1", &[("b".into(), json!({"action": "accept"}))], T0 + 4)
        .await
        .unwrap();
    assert_eq!(out.applied, ["b"]);
    assert_eq!(status(&*store, "t1").await, TaskStatus::Working);

    // Asking for an answered key again replays the stored answer and does not reissue it.
    let states = store
        .request_inputs(&f, &[("a".into(), ra.clone())], T0 + 5)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        states,
        vec![(
            "a".into(),
            InputState::Answered(json!({"action": "accept", "content": {"x": 1}}))
        )]
    );
    let view = store.get_task("t1").await.unwrap().unwrap();
    assert_eq!(view.record.status, TaskStatus::Working);
    assert!(view.input_requests.is_empty());
    assert_eq!(
        store
            .input_states("t1", &["b".into(), "never".into()])
            .await
            .unwrap(),
        vec![(
            "b".into(),
            InputState::Answered(json!({"action": "accept"}))
        )]
    );
    // Answers to unknown tasks report not found.
    assert!(
        !store
            .answer_inputs("nope", &[("a".into(), json!({}))], T0)
            .await
            .unwrap()
            .found
    );
}

pub async fn racing_answers_apply_exactly_once(store: Arc<dyn ServerTaskStore>) {
    let t = new_task("t1", "A", None);
    create(&*store, &t).await;
    let f = fence_of(&t);
    let keys: Vec<(String, serde_json::Value)> =
        (0..8).map(|i| (format!("k{i}"), json!({"i": i}))).collect();
    store
        .request_inputs(&f, &keys, T0 + 1)
        .await
        .unwrap()
        .unwrap();
    // Many "replicas" answer the same key and different keys at once.
    let mut handles = Vec::new();
    for r in 0..16 {
        let store = store.clone();
        handles.push(tokio::spawn(async move {
            let key = format!("k{}", r % 8);
            store
                .answer_inputs("t1", &[(key, json!({"replica": r}))], T0 + 2 + r)
                .await
                .unwrap()
                .applied
                .len()
        }));
    }
    let mut applied = 0;
    for h in handles {
        applied += h.await.unwrap();
    }
    assert_eq!(
        applied, 8,
        "each key is applied exactly once across replicas"
    );
    let view = store.get_task("t1").await.unwrap().unwrap();
    assert_eq!(
        view.record.status,
        TaskStatus::Working,
        "no key is outstanding any more"
    );
    assert!(view.input_requests.is_empty());
}

pub async fn cancel_sets_a_durable_flag_and_signals(store: Arc<dyn ServerTaskStore>) {
    let t = new_task("t1", "A", None);
    create(&*store, &t).await;
    assert_eq!(
        store.request_cancel("nope", T0).await.unwrap(),
        CancelOutcome::NotFound
    );
    assert!(store.signals_since("A", T0 + 5).await.unwrap().is_empty());
    assert_eq!(
        store.request_cancel("t1", T0 + 5).await.unwrap(),
        CancelOutcome::Requested {
            owner: Some("A".into())
        }
    );
    let r = store.get_task("t1").await.unwrap().unwrap().record;
    assert!(r.cancel_requested);
    assert_eq!(r.status, TaskStatus::Working, "cancellation is cooperative");
    let signals = store.signals_since("A", T0 + 5).await.unwrap();
    assert_eq!(signals.len(), 1);
    assert!(signals[0].cancel_requested);
    assert_eq!(signals[0].task_id, "t1");
    assert!(store.signals_since("A", T0 + 6).await.unwrap().is_empty());
    assert!(store.signals_since("B", 0).await.unwrap().is_empty());
    // Idempotent while live.
    assert!(matches!(
        store.request_cancel("t1", T0 + 7).await.unwrap(),
        CancelOutcome::Requested { .. }
    ));
    let f = fence_of(&t);
    assert!(
        store
            .finish(
                &f,
                &Outcome::Cancelled {
                    message: Some("stopped".into())
                },
                T0 + 8,
                Some(T0 + 8 + RETENTION)
            )
            .await
            .unwrap()
    );
    assert_eq!(status(&*store, "t1").await, TaskStatus::Cancelled);
    // The owner settling its own task is not a signal to itself: the backstop
    // re-check stays proportional to real signals, not to throughput.
    assert!(store.signals_since("A", T0 + 8).await.unwrap().is_empty());
}

pub async fn ttl_expiry_then_retention_then_purge(store: Arc<dyn ServerTaskStore>) {
    let short = new_task("short", "A", Some(1_000));
    let long = new_task("long", "A", Some(100_000));
    let forever = new_task("forever", "A", None);
    for t in [&short, &long, &forever] {
        create(&*store, t).await;
    }
    store
        .request_inputs(
            &fence_of(&short),
            &[("q".into(), json!({"method": "roots/list"}))],
            T0 + 1,
        )
        .await
        .unwrap();
    assert!(
        store
            .expire_overdue(T0 + 999, 100, T0 + 999 + RETENTION)
            .await
            .unwrap()
            .is_empty()
    );
    let expired = store
        .expire_overdue(T0 + 1_000, 100, T0 + 1_000 + RETENTION)
        .await
        .unwrap();
    assert_eq!(expired.len(), 1);
    assert_eq!(expired[0].task_id, "short");
    assert_eq!(expired[0].owner.as_deref(), Some("A"));
    let r = store.get_task("short").await.unwrap().unwrap().record;
    assert_eq!(r.status, TaskStatus::Failed);
    assert_eq!(r.error, Some(mcptask_core::server::expired_error()));
    assert_eq!(r.purge_at, Some(T0 + 1_000 + RETENTION));
    assert!(
        !store
            .finish(
                &fence_of(&short),
                &Outcome::Completed { result: json!({}) },
                T0 + 1_001,
                Some(T0 + 1_001 + RETENTION)
            )
            .await
            .unwrap()
    );
    assert_eq!(store.signals_since("A", T0 + 1_000).await.unwrap().len(), 1);

    // Completed tasks with a TTL become purgeable after max(created + ttl, now) + retention.
    let done = Outcome::Completed {
        result: json!({"content": []}),
    };
    assert!(
        store
            .finish(
                &fence_of(&long),
                &done,
                T0 + 2_000,
                purge_at(&long, T0 + 2_000)
            )
            .await
            .unwrap()
    );
    assert_eq!(
        store
            .get_task("long")
            .await
            .unwrap()
            .unwrap()
            .record
            .purge_at,
        Some(T0 + 100_000 + RETENTION)
    );
    assert!(
        store
            .finish(
                &fence_of(&forever),
                &done,
                T0 + 2_000,
                purge_at(&forever, T0 + 2_000)
            )
            .await
            .unwrap()
    );
    assert_eq!(
        store
            .get_task("forever")
            .await
            .unwrap()
            .unwrap()
            .record
            .purge_at,
        None
    );

    assert_eq!(
        store.purge(T0 + 1_000 + RETENTION - 1, 100).await.unwrap(),
        0
    );
    assert_eq!(store.purge(T0 + 1_000 + RETENTION, 100).await.unwrap(), 1);
    assert!(store.get_task("short").await.unwrap().is_none());
    assert!(
        store
            .input_states("short", &["q".into()])
            .await
            .unwrap()
            .is_empty(),
        "inputs go with the task"
    );
    assert_eq!(store.purge(i64::MAX / 2, 100).await.unwrap(), 1);
    assert!(
        store.get_task("forever").await.unwrap().is_some(),
        "ttlMs null is never purged"
    );
}

pub async fn expiry_and_purge_are_batched(store: Arc<dyn ServerTaskStore>) {
    store.heartbeat("A", T0, LEASE).await.unwrap();
    let tasks: Vec<_> = (0..25)
        .map(|i| new_task(&format!("e{i:02}"), "A", Some(10 + i)))
        .collect();
    store.create_tasks(&tasks).await.unwrap();
    let first = store
        .expire_overdue(T0 + 1_000, 10, T0 + 1_000)
        .await
        .unwrap();
    assert_eq!(first.len(), 10);
    let mut ids: Vec<_> = first.iter().map(|e| e.task_id.clone()).collect();
    ids.sort();
    let earliest: Vec<_> = (0..10).map(|i| format!("e{i:02}")).collect();
    assert_eq!(ids, earliest, "earliest expiries go first");
    assert_eq!(
        store
            .expire_overdue(T0 + 1_000, 100, T0 + 1_000)
            .await
            .unwrap()
            .len(),
        15
    );
    assert_eq!(store.purge(T0 + 1_000, 10).await.unwrap(), 10);
    assert_eq!(store.purge(T0 + 1_000, 100).await.unwrap(), 15);
}

pub async fn rerun_increments_attempt_and_keeps_answers(store: Arc<dyn ServerTaskStore>) {
    let t = new_task("t1", "A", None);
    create(&*store, &t).await;
    let f = fence_of(&t);
    store
        .request_inputs(
            &f,
            &[
                ("name".into(), json!({"m": 1})),
                ("later".into(), json!({"m": 2})),
            ],
            T0 + 1,
        )
        .await
        .unwrap();
    store
        .answer_inputs(
            "t1",
            &[("name".into(), json!({"action": "accept"}))],
            T0 + 2,
        )
        .await
        .unwrap();
    store.heartbeat("B", T0 + LEASE + 1, LEASE).await.unwrap();
    let claimed = store.claim_orphans("B", T0 + LEASE + 1, 10).await.unwrap();
    let nf = claimed[0].fence().unwrap();
    assert_eq!(
        store.begin_rerun(&nf, T0 + LEASE + 2).await.unwrap(),
        Some(2)
    );
    assert_eq!(
        store.begin_rerun(&f, T0 + LEASE + 2).await.unwrap(),
        None,
        "old claim cannot rerun"
    );
    let states = store
        .request_inputs(&nf, &[("name".into(), json!({"m": 1}))], T0 + LEASE + 3)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        states,
        vec![(
            "name".into(),
            InputState::Answered(json!({"action": "accept"}))
        )]
    );
    let view = store.get_task("t1").await.unwrap().unwrap();
    assert_eq!(view.record.attempt, 2);
    assert_eq!(
        view.record.status,
        TaskStatus::InputRequired,
        "the unanswered key stays outstanding"
    );
    assert_eq!(view.input_requests.len(), 1);
}

pub async fn signals_reach_listeners_when_supported(store: Arc<dyn ServerTaskStore>) {
    use futures::StreamExt;
    let Some(mut stream) = store.listen_signals().await.unwrap() else {
        return; // Backend without push: the periodic backstop is the only path.
    };
    let t = new_task("t1", "A", None);
    create(&*store, &t).await;
    store.request_cancel("t1", T0 + 1).await.unwrap();
    let got = tokio::time::timeout(std::time::Duration::from_secs(10), stream.next())
        .await
        .expect("a NOTIFY must arrive")
        .expect("stream open");
    assert_eq!(got, "t1");
}

/// Every contract case, by name, for the test macro.
#[macro_export]
macro_rules! server_contract_cases {
    ($m:ident) => {
        $m!(
            create_then_get_round_trips,
            batch_create_is_one_unit,
            fenced_writes_need_the_current_claim,
            takeover_fences_out_the_old_owner,
            claims_skip_live_owners_terminal_tasks_and_respect_limits,
            concurrent_claimers_never_share_a_task,
            terminal_states_are_absorbing,
            input_keys_are_answered_once_and_never_reissued,
            racing_answers_apply_exactly_once,
            cancel_sets_a_durable_flag_and_signals,
            ttl_expiry_then_retention_then_purge,
            expiry_and_purge_are_batched,
            rerun_increments_attempt_and_keeps_answers,
            signals_reach_listeners_when_supported
        );
    };
}
