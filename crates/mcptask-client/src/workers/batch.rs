//! One batch of a claim phase: claim due tasks in one statement, make their
//! remote calls concurrently (at most `max_in_flight` at once), then apply the
//! results in fenced transactions of at most `apply_batch` entries.

use std::sync::Arc;

use futures::StreamExt;
use mcptask_core::client::{
    Applied, ClaimedTask, Observation, Phase, RemoteSnapshot, RemoteTaskRecord,
};
use mcptask_core::{StoreError, TaskStatus, ids};

use super::{calls, resolve};
use crate::tracker::Inner;

/// Claim, call and apply one batch of `phase`. Returns how many tasks were claimed.
pub(super) async fn run(inner: &Arc<Inner>, phase: Phase) -> Result<usize, StoreError> {
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
    let mut results = futures::stream::iter(claimed.iter().cloned())
        .map(|c| {
            let inner = inner.clone();
            async move {
                let fence = c.fence.clone();
                let observation = tokio::select! {
                    o = calls::observe(&inner, phase, &c) => o,
                    _ = inner.abort.cancelled() => Observation::Released,
                };
                (fence, c, observation)
            }
        })
        .buffer_unordered(inner.config.max_in_flight.max(1));
    let mut applied = Vec::with_capacity(n);
    let mut asking: Vec<(ClaimedTask, RemoteSnapshot)> = Vec::new();
    while let Some((fence, claimed, observation)) = results.next().await {
        if let Observation::Snapshot(s) = &observation
            && s.status == Some(TaskStatus::InputRequired)
        {
            asking.push((claimed, s.clone()));
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
        for (claimed, s) in asking {
            resolve::ask_resolver(inner, &claimed, &s).await;
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
    inner.wakers.notify.notify_one();
    Ok(())
}
