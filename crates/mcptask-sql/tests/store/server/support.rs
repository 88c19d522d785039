//! Fixtures and helpers shared by the contract cases.
pub(crate) use std::sync::Arc;

pub(crate) use mcptask_core::TaskStatus;
pub(crate) use mcptask_core::server::{CancelOutcome, Fence, InputState, NewServerTask, Outcome};
pub(crate) use mcptask_core::store::ServerTaskStore;
pub(crate) use serde_json::json;

pub(crate) const T0: i64 = 1_800_000_000_000;
pub(crate) const LEASE: i64 = 10_000;
pub(crate) const RETENTION: i64 = 60_000;

/// The purge time the runtime would pass for `task` settled at `now`.
pub(crate) fn purge_at(task: &NewServerTask, now: i64) -> Option<i64> {
    mcptask_core::server::retention::purge_at(
        task.ttl_ms.map(|ttl| task.created_at + ttl),
        now,
        RETENTION,
    )
}

pub(crate) fn new_task(id: &str, owner: &str, ttl_ms: Option<i64>) -> NewServerTask {
    NewServerTask {
        call_row: None,
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
        driver: None,
        driver_state: None,
    }
}

pub(crate) fn fence_of(t: &NewServerTask) -> Fence {
    Fence {
        task_id: t.id.clone(),
        owner: t.owner.clone(),
        token: t.claim_token.clone(),
    }
}

pub(crate) async fn create(store: &dyn ServerTaskStore, t: &NewServerTask) {
    store.heartbeat(&t.owner, T0, LEASE).await.unwrap();
    store.create_tasks(std::slice::from_ref(t)).await.unwrap();
}

pub(crate) async fn status(store: &dyn ServerTaskStore, id: &str) -> TaskStatus {
    store.get_task(id).await.unwrap().unwrap().record.status
}
