//! The phase workers: poll, cancel, update (sharing one work claim per task)
//! and notify (its own claim). Each phase runs single-flight per process:
//! claim a batch in one statement, make the remote calls concurrently, apply
//! every result in one transaction.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use mcptask_core::client::{
    Applied, ClaimedTask, NotifyClaim, NotifyResult, Observation, Phase, RemoteSnapshot,
    RemoteTaskRecord,
};
use mcptask_core::{StoreError, TaskStatus, ids};
use rmcp::model::{CancelTaskParams, GetTaskParams, InputResponses, UpdateTaskParams};
use serde_json::Value;

use crate::notify::NotifyError;
use crate::remote::{RemoteError, bounded, classify_task_error};
use crate::resolver::InputContext;
use crate::snapshot;
use crate::tracker::Inner;

const PHASES: [Phase; 3] = [Phase::Poll, Phase::Cancel, Phase::Update];

fn wake_index(phase: Phase) -> usize {
    match phase {
        Phase::Poll => 0,
        Phase::Cancel => 1,
        Phase::Update => 2,
    }
}

/// Manual access to the worker steps.
#[derive(Clone)]
pub struct Workers {
    pub(crate) inner: Arc<Inner>,
}

impl Workers {
    /// Claim one batch for `phase`, run it and apply the results. Returns how
    /// many tasks were claimed.
    pub async fn run_once(&self, phase: Phase) -> Result<usize, StoreError> {
        run_phase_batch(&self.inner, phase).await
    }

    /// Claim one batch of pending notifications and deliver them.
    pub async fn notify_once(&self) -> Result<usize, StoreError> {
        run_notify_batch(&self.inner).await
    }

    /// Run every phase until nothing is due now (bounded number of rounds).
    pub async fn drain(&self) -> Result<usize, StoreError> {
        let mut total = 0;
        for _ in 0..100 {
            let mut round = 0;
            for phase in [Phase::Cancel, Phase::Update, Phase::Poll] {
                round += self.run_once(phase).await?;
            }
            round += self.notify_once().await?;
            total += round;
            if round == 0 {
                break;
            }
        }
        Ok(total)
    }
}

pub(crate) fn spawn_all(inner: &Arc<Inner>) {
    for phase in PHASES {
        let inner2 = inner.clone();
        inner.loops.spawn(async move {
            phase_loop(inner2, phase).await;
        });
    }
    let inner2 = inner.clone();
    inner.loops.spawn(async move { notify_loop(inner2).await });
}

async fn idle(inner: &Inner, wake: usize) {
    tokio::select! {
        _ = inner.shutdown.cancelled() => {}
        _ = inner.wake[wake].notified() => {}
        _ = tokio::time::sleep(inner.config.idle_tick) => {}
    }
}

async fn phase_loop(inner: Arc<Inner>, phase: Phase) {
    while !inner.shutdown.is_cancelled() {
        match run_phase_batch(&inner, phase).await {
            Ok(0) => idle(&inner, wake_index(phase)).await,
            Ok(n) if (n as i64) < inner.config.batch_size => idle(&inner, wake_index(phase)).await,
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(phase = phase.as_str(), error = %e, "claim failed; retrying after a pause");
                idle(&inner, wake_index(phase)).await;
            }
        }
    }
}

async fn notify_loop(inner: Arc<Inner>) {
    while !inner.shutdown.is_cancelled() {
        match run_notify_batch(&inner).await {
            Ok(n) if (n as i64) >= inner.config.batch_size => {}
            Ok(_) => idle(&inner, 3).await,
            Err(e) => {
                tracing::warn!(error = %e, "notification claim failed; retrying after a pause");
                idle(&inner, 3).await;
            }
        }
    }
}

async fn run_phase_batch(inner: &Arc<Inner>, phase: Phase) -> Result<usize, StoreError> {
    let now = inner.clock.now_ms();
    let claimed = inner
        .store
        .claim_remote(
            phase,
            &inner.owner,
            now,
            inner.config.lease_ms,
            inner.config.batch_size,
        )
        .await?;
    if claimed.is_empty() {
        return Ok(0);
    }
    let n = claimed.len();
    metrics::counter!("mcptask_claims_total", "phase" => phase.as_str()).increment(n as u64);
    // At most `max_in_flight` remote calls at once; a task whose call never
    // started by the shutdown deadline is released like one cut short.
    let mut calls = futures::stream::iter(claimed.iter().cloned())
        .map(|c| {
            let inner = inner.clone();
            async move {
                let fence = c.fence.clone();
                let observation = tokio::select! {
                    o = work(&inner, phase, &c) => o,
                    _ = inner.abort.cancelled() => Observation::Released,
                };
                (fence, c, observation)
            }
        })
        .buffer_unordered(inner.config.max_in_flight.max(1));
    let mut applied = Vec::with_capacity(n);
    let mut snapshots: Vec<(ClaimedTask, RemoteSnapshot)> = Vec::new();
    while let Some((fence, claimed, observation)) = calls.next().await {
        if let Observation::Snapshot(s) = &observation
            && s.status == Some(TaskStatus::InputRequired)
        {
            snapshots.push((claimed, s.clone()));
        }
        applied.push(Applied {
            fence,
            phase,
            observation,
            jitter: ids::random_unit(),
        });
    }
    apply(inner, &applied, &claimed).await?;
    if inner.resolver.is_some() {
        for (claimed, s) in snapshots {
            resolve_inputs(inner, &claimed, &s).await;
        }
    }
    Ok(n)
}

/// Whether applying `observation` to the claimed `record` can change what an
/// application sees (a poll that found the same state changes nothing visible).
fn visible_change(record: &RemoteTaskRecord, observation: &Observation) -> bool {
    match observation {
        Observation::Snapshot(s) => {
            s.status != Some(record.status)
                || s.status_message != record.status_message
                || s.input_requests
                    .iter()
                    .map(|(k, _)| k)
                    .ne(record.input_requests.iter().map(|(k, _)| k))
        }
        Observation::Released => false,
        _ => true,
    }
}

/// Apply results in transactions of at most `apply_batch` entries.
async fn apply(
    inner: &Arc<Inner>,
    applied: &[Applied],
    claimed: &[ClaimedTask],
) -> Result<(), StoreError> {
    let policy = &inner.config.policy;
    for chunk in applied.chunks(inner.config.apply_batch.max(1)) {
        let results = inner
            .store
            .apply_remote(chunk, policy, inner.clock.now_ms())
            .await?;
        for (entry, ok) in chunk.iter().zip(results) {
            if ok {
                let record = claimed
                    .iter()
                    .find(|c| c.fence == entry.fence)
                    .map(|c| &c.record);
                if record.is_none_or(|r| visible_change(r, &entry.observation)) {
                    inner.changed(&entry.fence.task_id);
                }
            } else {
                metrics::counter!("mcptask_stale_claims_total").increment(1);
                tracing::info!(task_id = %entry.fence.task_id, "claim lost before its result was applied; result dropped");
            }
        }
    }
    inner.wake[3].notify_one();
    Ok(())
}

/// The remote call of one phase for one claimed task, classified.
async fn work(inner: &Arc<Inner>, phase: Phase, claimed: &ClaimedTask) -> Observation {
    let r = &claimed.record;
    let conn = match inner
        .servers
        .connect(&r.server, Some(&r.server_hash), inner.defaults())
        .await
    {
        Ok(c) => c,
        Err(e) => return count(e).observation(),
    };
    let remote_id = r.remote_task_id.clone();
    let started = Instant::now();
    let outcome = match phase {
        Phase::Poll => bounded(
            "tasks/get",
            conn.call_timeout,
            conn.peer.get_task(GetTaskParams::new(remote_id.clone())),
        )
        .await
        .map_err(|e| {
            (
                classify_task_error("tasks/get", &e),
                RemoteError::is_disconnect(&e),
            )
        })
        .and_then(|got| {
            snapshot::from_detailed(&remote_id, &got.task, &inner.config.policy.limits)
                .map(Observation::Snapshot)
                .map_err(|e| (e, false))
        }),
        Phase::Cancel => bounded(
            "tasks/cancel",
            conn.call_timeout,
            conn.peer
                .cancel_task(CancelTaskParams::new(remote_id.clone())),
        )
        .await
        .map(|_| Observation::CancelAcked)
        .map_err(|e| {
            (
                classify_task_error("tasks/cancel", &e),
                RemoteError::is_disconnect(&e),
            )
        }),
        Phase::Update => {
            if claimed.answers.is_empty() {
                Ok(Observation::UpdateAcked { keys: Vec::new() })
            } else {
                let responses: InputResponses = claimed.answers.iter().cloned().collect();
                let keys: Vec<String> = claimed.answers.iter().map(|(k, _)| k.clone()).collect();
                bounded(
                    "tasks/update",
                    conn.call_timeout,
                    conn.peer
                        .update_task(UpdateTaskParams::new(remote_id.clone(), responses)),
                )
                .await
                .map(|_| Observation::UpdateAcked { keys })
                .map_err(|e| {
                    (
                        classify_task_error("tasks/update", &e),
                        RemoteError::is_disconnect(&e),
                    )
                })
            }
        }
    };
    metrics::histogram!("mcptask_remote_call_seconds", "phase" => phase.as_str())
        .record(started.elapsed().as_secs_f64());
    match outcome {
        Ok(o) => {
            inner.servers.report(&r.server, Ok(()));
            o
        }
        Err((e, disconnected)) => {
            if matches!(e, RemoteError::Transient(_)) {
                inner.servers.report(&r.server, Err(&e.to_string()));
            }
            if disconnected {
                conn.discard().await;
            }
            count(e).observation()
        }
    }
}

fn count(e: RemoteError) -> RemoteError {
    let class = match &e {
        RemoteError::Transient(_) | RemoteError::Rpc(_) => "transient",
        RemoteError::NotFound(_) => "not_found",
        RemoteError::Protocol(_) => "protocol",
        RemoteError::ConnectionUnavailable(_) => "connection_unavailable",
    };
    metrics::counter!("mcptask_remote_errors_total", "class" => class).increment(1);
    e
}

/// Ask the resolver about outstanding keys that have no local answer yet.
async fn resolve_inputs(inner: &Arc<Inner>, claimed: &ClaimedTask, snapshot: &RemoteSnapshot) {
    let Some(resolver) = &inner.resolver else {
        return;
    };
    let r = &claimed.record;
    let answered: std::collections::BTreeSet<String> = match inner.store.remote_inputs(&r.id).await
    {
        Ok(inputs) => inputs
            .into_iter()
            .filter(|i| i.response.is_some())
            .map(|i| i.key)
            .collect(),
        Err(e) => {
            tracing::warn!(task_id = %r.id, error = %e, "cannot read inputs for the resolver");
            return;
        }
    };
    let mut answers: BTreeMap<String, Value> = BTreeMap::new();
    for (key, request) in &snapshot.input_requests {
        if answered.contains(key) {
            continue;
        }
        let answer = resolver
            .resolve(InputContext {
                task_id: Some(&r.id),
                server: &r.server,
                tool: &r.tool,
                principal: r.principal.as_deref(),
                key,
                request,
            })
            .await;
        if let Some(a) = answer.filter(Value::is_object) {
            answers.insert(key.clone(), a);
        }
    }
    if answers.is_empty() {
        return;
    }
    let answers: Vec<(String, Value)> = answers.into_iter().collect();
    match inner
        .store
        .store_answers(&r.id, &answers, inner.clock.now_ms())
        .await
    {
        Ok(_) => {
            inner.wake[2].notify_one();
            inner.changed(&r.id);
        }
        Err(e) => tracing::warn!(task_id = %r.id, error = %e, "cannot store resolver answers"),
    }
}

async fn run_notify_batch(inner: &Arc<Inner>) -> Result<usize, StoreError> {
    let now = inner.clock.now_ms();
    let claims = inner
        .store
        .claim_notifications(
            &inner.owner,
            now,
            inner.config.lease_ms,
            inner.config.batch_size,
            inner.config.notify_batch_events,
        )
        .await?;
    if claims.is_empty() {
        return Ok(0);
    }
    let n = claims.len();
    let results: Vec<NotifyResult> = claims
        .into_iter()
        .map(|claim| {
            let inner = inner.clone();
            async move {
                tokio::select! {
                    r = deliver(&inner, &claim) => r,
                    _ = inner.abort.cancelled() => NotifyResult {
                        fence: claim.fence.clone(),
                        delivered_through: 0,
                        dead_lettered: Vec::new(),
                        failure: None,
                        released: true,
                    },
                }
            }
        })
        .collect::<FuturesUnordered<_>>()
        .collect()
        .await;
    let ok = inner
        .store
        .finish_notifications(&results, inner.clock.now_ms())
        .await?;
    for (r, ok) in results.iter().zip(ok) {
        if !ok {
            tracing::info!(task_id = %r.fence.task_id, "notify claim lost; deliveries will repeat (idempotent)");
        }
    }
    Ok(n)
}

/// Deliver one task's pending events in version order; stop at the first failure.
async fn deliver(inner: &Arc<Inner>, claim: &NotifyClaim) -> NotifyResult {
    let policy = &inner.config.policy;
    let mut result = NotifyResult {
        fence: claim.fence.clone(),
        delivered_through: 0,
        dead_lettered: Vec::new(),
        failure: None,
        released: false,
    };
    let mut attempts = claim.attempts;
    for event in &claim.events {
        match inner.notifier.deliver(event).await {
            Ok(()) => {
                metrics::counter!("mcptask_notifications_total", "outcome" => "delivered")
                    .increment(1);
                result.delivered_through = event.version;
                attempts = 0;
            }
            Err(e) => {
                let permanent = matches!(e, NotifyError::Permanent(_));
                attempts += 1;
                if permanent || attempts >= policy.max_notify_attempts {
                    metrics::counter!("mcptask_notifications_total", "outcome" => "dead_letter")
                        .increment(1);
                    tracing::warn!(task_id = %event.task_id, version = event.version, error = %e, "event dead-lettered");
                    result.dead_lettered.push(event.version);
                    result.delivered_through = event.version;
                    attempts = 0;
                    continue;
                }
                metrics::counter!("mcptask_notifications_total", "outcome" => "retry").increment(1);
                let retry_at = inner.clock.now_ms() + policy.backoff.delay_ms(attempts - 1);
                result.failure = Some((e.to_string(), retry_at));
                break;
            }
        }
    }
    result
}
