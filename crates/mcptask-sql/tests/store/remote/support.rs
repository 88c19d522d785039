//! Fixtures and helpers shared by the contract cases.
pub(crate) use std::sync::Arc;

pub(crate) use mcptask_core::TaskStatus;
pub(crate) use mcptask_core::client::{
    Applied, ClaimedTask, Cursor, EventKind, FailureKind, Fence, InsertOutcome, ListFilter,
    NewRemoteTask, NotifyClaim, NotifyResult, Observation, Phase, RemoteDriver, RemoteSnapshot,
    RemoteTaskRecord, TaskEvent, TrackerPolicy,
};
pub(crate) use mcptask_core::store::RemoteTaskStore;
pub(crate) use serde_json::{Value, json};

pub(crate) const T0: i64 = 1_800_000_000_000;
pub(crate) const LEASE: i64 = 30_000;

/// The default policy without poll jitter: a 1 s interval is exactly 1 s.
pub(crate) fn policy() -> TrackerPolicy {
    let mut p = TrackerPolicy::default();
    p.poll.jitter_permille = 0;
    p
}

pub(crate) fn snapshot(status: TaskStatus) -> RemoteSnapshot {
    RemoteSnapshot {
        status: Some(status),
        poll_interval_ms: Some(1_000),
        ..Default::default()
    }
}

pub(crate) fn request_for(key: &str) -> Value {
    json!({"method": "elicitation/create", "params": {"message": format!("{key}?")}})
}

pub(crate) fn input_snapshot(keys: &[&str]) -> RemoteSnapshot {
    RemoteSnapshot {
        input_requests: keys
            .iter()
            .map(|k| (k.to_string(), request_for(k)))
            .collect(),
        ..snapshot(TaskStatus::InputRequired)
    }
}

pub(crate) fn done_result() -> Value {
    json!({"content": [{"type": "text", "text": "done"}]})
}

pub(crate) fn completed_snapshot() -> RemoteSnapshot {
    RemoteSnapshot {
        result: Some(done_result()),
        status_message: Some("all done".into()),
        ..snapshot(TaskStatus::Completed)
    }
}

pub(crate) fn new_task(id: &str, remote_id: &str) -> NewRemoteTask {
    NewRemoteTask {
        face: None,
        id: id.to_string(),
        server: "srv".into(),
        server_hash: "h1".into(),
        remote_task_id: remote_id.to_string(),
        driver: Default::default(),
        principal: None,
        conversation: None,
        call_id: None,
        correlation: None,
        tool: "slow".into(),
        arguments: None,
        trace: None,
        snapshot: snapshot(TaskStatus::Working),
        created_at: T0,
    }
}

pub(crate) async fn insert(store: &dyn RemoteTaskStore, task: &NewRemoteTask) -> RemoteTaskRecord {
    match store.insert_remote(task, &policy()).await.unwrap() {
        InsertOutcome::Inserted(r) => *r,
        InsertOutcome::AlreadyTracked(r) => panic!("{} was already tracked as {}", task.id, r.id),
    }
}

pub(crate) async fn get(store: &dyn RemoteTaskStore, id: &str) -> RemoteTaskRecord {
    store
        .get_remote(id)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{id} must be tracked"))
}

pub(crate) async fn events(store: &dyn RemoteTaskStore, id: &str) -> Vec<TaskEvent> {
    store.remote_events(id, 0, 1_000).await.unwrap()
}

pub(crate) fn versions(events: &[TaskEvent]) -> Vec<i64> {
    events.iter().map(|e| e.version).collect()
}

pub(crate) fn ids(tasks: &[ClaimedTask]) -> Vec<&str> {
    tasks.iter().map(|t| t.record.id.as_str()).collect()
}

pub(crate) fn applied(task: &ClaimedTask, phase: Phase, observation: Observation) -> Applied {
    Applied {
        fence: task.fence.clone(),
        phase,
        observation,
        jitter: 0.5,
    }
}

pub(crate) async fn apply_one(store: &dyn RemoteTaskStore, entry: Applied, now: i64) -> bool {
    let done = store
        .apply_remote(std::slice::from_ref(&entry), &policy(), now)
        .await
        .unwrap();
    assert_eq!(done.len(), 1);
    done[0]
}

pub(crate) async fn claim(
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

pub(crate) async fn claim_one(
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

pub(crate) async fn claim_notify(
    store: &dyn RemoteTaskStore,
    owner: &str,
    now: i64,
) -> Vec<NotifyClaim> {
    store
        .claim_notifications(owner, now, LEASE, 100, 100)
        .await
        .unwrap()
}

pub(crate) fn delivered(claim: &NotifyClaim, through: i64) -> NotifyResult {
    NotifyResult {
        fence: claim.fence.clone(),
        delivered_through: through,
        dead_lettered: Vec::new(),
        failure: None,
        released: false,
        lagged: Vec::new(),
        dead: Vec::new(),
    }
}

pub(crate) async fn finish_one(
    store: &dyn RemoteTaskStore,
    result: NotifyResult,
    now: i64,
) -> bool {
    let done = store
        .finish_notifications(std::slice::from_ref(&result), now)
        .await
        .unwrap();
    assert_eq!(done.len(), 1);
    done[0]
}

/// Insert `id`, claim it for poll at `now` and apply an `input_required`
/// snapshot with `keys` (events: v1 created, v2 status).
pub(crate) async fn input_required_task(
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
