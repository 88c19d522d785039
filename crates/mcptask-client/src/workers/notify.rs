//! The notify phases. The outbox worker claims tasks with undelivered events
//! and hands each event, in version order, to every target at once; a target
//! that fails (or is known to be failing) takes the rest of the task's events
//! over in a lag row, so the others never wait for it, and the outbox moves
//! on. The redelivery worker claims due lag rows and catches each target up
//! in order, within the time budget of each event; what a target cannot take
//! becomes its dead letter (`mcptask_core::client::delivery`).

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use futures::future::join_all;
use futures::stream::FuturesUnordered;
use mcptask_core::StoreError;
use mcptask_core::client::delivery::{DeadLetter, LagClaim, LagResult, TargetLag, give_up_at};
use mcptask_core::client::{NotifyClaim, NotifyResult, TaskEvent};

use crate::notify::NotifyError;
use crate::shared::Inner;

fn count(outcome: &'static str, n: u64) {
    metrics::counter!("mcptask_notifications_total", "outcome" => outcome).increment(n);
}

/// Claim and deliver one outbox batch. Returns how many tasks were claimed.
pub(super) async fn run(inner: &Arc<Inner>) -> Result<usize, StoreError> {
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
                        lagged: Vec::new(),
                        dead: Vec::new(),
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
    if results.iter().any(|r| !r.lagged.is_empty()) {
        inner.wakers.notify.notify_one();
    }
    Ok(n)
}

/// What one target made of a task's claimed events.
enum TargetOutcome {
    Done {
        dead: Vec<DeadLetter>,
    },
    Behind {
        dead: Vec<DeadLetter>,
        lag: TargetLag,
    },
}

/// Deliver one task's pending events to every target, each in version order.
async fn deliver(inner: &Arc<Inner>, claim: &NotifyClaim) -> NotifyResult {
    let mut result = NotifyResult {
        fence: claim.fence.clone(),
        delivered_through: claim.events.last().map_or(0, |e| e.version),
        dead_lettered: Vec::new(),
        failure: None,
        released: false,
        lagged: Vec::new(),
        dead: Vec::new(),
    };
    let Some(first) = claim.events.first() else {
        return result;
    };
    let targets = inner.targets();
    let outcomes = join_all(targets.list.iter().map(|target| async move {
        let now = inner.clock.now_ms();
        if claim.lagging.contains(&target.name) {
            // Its lag row covers these versions too: keep the target in order.
            return TargetOutcome::Behind {
                dead: Vec::new(),
                lag: TargetLag {
                    target: target.name.clone(),
                    from_version: first.version,
                    error: None,
                    retry_at: now,
                },
            };
        }
        if let Some(until) = target.down_until(now) {
            return TargetOutcome::Behind {
                dead: Vec::new(),
                lag: TargetLag {
                    target: target.name.clone(),
                    from_version: first.version,
                    error: None,
                    retry_at: until,
                },
            };
        }
        let mut dead = Vec::new();
        for event in &claim.events {
            match target.notifier.deliver(event).await {
                Ok(()) => count("delivered", 1),
                Err(NotifyError::Permanent(e)) => {
                    dead.push(dead_letter(inner, event, &target.name, e));
                }
                Err(NotifyError::Transient(e)) => {
                    count("retry", 1);
                    let retry_at = inner.clock.now_ms() + inner.config.policy.backoff.delay_ms(0);
                    target.mark_down(retry_at);
                    tracing::info!(target = %target.name, task_id = %event.task_id, version = event.version, error = %e, "delivery failed; the target falls behind and is retried");
                    return TargetOutcome::Behind {
                        dead,
                        lag: TargetLag {
                            target: target.name.clone(),
                            from_version: event.version,
                            error: Some(e),
                            retry_at,
                        },
                    };
                }
            }
        }
        TargetOutcome::Done { dead }
    }))
    .await;
    for outcome in outcomes {
        match outcome {
            TargetOutcome::Done { dead } => result.dead.extend(dead),
            TargetOutcome::Behind { dead, lag } => {
                result.dead.extend(dead);
                result.lagged.push(lag);
            }
        }
    }
    result.dead_lettered = result.dead.iter().map(|d| d.version).collect();
    result
}

fn dead_letter(inner: &Inner, event: &TaskEvent, target: &str, error: String) -> DeadLetter {
    count("dead_letter", 1);
    tracing::warn!(target = %target, task_id = %event.task_id, version = event.version, error = %error, "event dead-lettered");
    DeadLetter {
        task_id: event.task_id.clone(),
        version: event.version,
        target: target.to_string(),
        error,
        dead_at: inner.clock.now_ms(),
    }
}

/// Claim due lag rows and catch their targets up. Returns how many were claimed.
pub(super) async fn redeliver(inner: &Arc<Inner>) -> Result<usize, StoreError> {
    let now = inner.clock.now_ms();
    let claims = inner
        .store
        .claim_redeliveries(
            &inner.owner,
            now,
            inner.config.lease_ms,
            inner.config.batch_size,
            inner.config.notify_batch_events,
            &inner.targets().names(),
        )
        .await?;
    if claims.is_empty() {
        return Ok(0);
    }
    let n = claims.len();
    // Targets in parallel; one target's rows one after another, so a target
    // that is down costs one failed attempt per pass, not one per task.
    let mut by_target: BTreeMap<String, Vec<LagClaim>> = BTreeMap::new();
    for claim in claims {
        by_target
            .entry(claim.target.clone())
            .or_default()
            .push(claim);
    }
    let results: Vec<LagResult> = join_all(by_target.into_values().map(|claims| {
        let inner = inner.clone();
        async move {
            let mut failed: Option<String> = None;
            let mut results = Vec::with_capacity(claims.len());
            for claim in &claims {
                let r = tokio::select! {
                    r = catch_up(&inner, claim, &mut failed) => r,
                    _ = inner.abort.cancelled() => released(claim),
                };
                results.push(r);
            }
            results
        }
    }))
    .await
    .into_iter()
    .flatten()
    .collect();
    inner
        .store
        .finish_redeliveries(&results, inner.clock.now_ms())
        .await?;
    Ok(n)
}

fn released(claim: &LagClaim) -> LagResult {
    LagResult {
        fence: claim.fence.clone(),
        target: claim.target.clone(),
        next_version: claim.next_version,
        dead: Vec::new(),
        failure: None,
        released: true,
    }
}

/// Deliver one lag row's events in order. `failed` carries the error of this
/// pass's failed attempt to the same target: later events are then not
/// tried again now, only given up on when past their budget.
async fn catch_up(inner: &Arc<Inner>, claim: &LagClaim, failed: &mut Option<String>) -> LagResult {
    let policy = &inner.config.policy;
    let mut result = LagResult {
        dead: Vec::new(),
        released: false,
        ..released(claim)
    };
    let targets = inner.targets();
    let Some(target) = targets.get(&claim.target) else {
        return released(claim);
    };
    for event in &claim.events {
        let now = inner.clock.now_ms();
        let out_of_budget = now
            >= give_up_at(
                event.occurred_at,
                claim.budget_from,
                policy.notify_budget_ms,
            );
        let error = match failed.as_ref() {
            Some(e) => e.clone(),
            None => match target.notifier.deliver(event).await {
                Ok(()) => {
                    count("delivered", 1);
                    target.mark_up();
                    result.next_version = event.version + 1;
                    continue;
                }
                Err(NotifyError::Permanent(e)) => {
                    result.dead.push(dead_letter(inner, event, &target.name, e));
                    result.next_version = event.version + 1;
                    continue;
                }
                Err(NotifyError::Transient(e)) => {
                    *failed = Some(e.clone());
                    e
                }
            },
        };
        if out_of_budget {
            result
                .dead
                .push(dead_letter(inner, event, &target.name, error));
            result.next_version = event.version + 1;
            continue;
        }
        count("retry", 1);
        let tried = if event.version == claim.next_version {
            claim.attempts
        } else {
            0
        };
        let retry_at = inner.clock.now_ms() + policy.backoff.delay_ms(tried);
        target.mark_down(retry_at);
        result.failure = Some((error, retry_at));
        break;
    }
    result
}
