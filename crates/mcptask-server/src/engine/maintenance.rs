//! Background upkeep: owner heartbeat, recovery of orphaned tasks, TTL expiry,
//! purging, and the backstop re-check for lost wake-ups, each in its own loop. Every step is also
//! callable by hand through [`Maintenance`], which is how tests drive them
//! with a manual clock.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use mcptask_core::StoreError;
use mcptask_core::server::retention;
use tokio_util::sync::CancellationToken;

use super::RuntimeInner;
use super::executor::panic_text;

/// Owner rows are pruned this many lease lengths after their last heartbeat,
/// long after recovery has claimed anything they held.
const OWNER_ROWS_KEPT_FOR_LEASES: i64 = 10;
/// Shortest period of any maintenance loop, whatever the settings say.
const MIN_PERIOD_MS: i64 = 10;

/// Manual access to the maintenance steps of a runtime; see
/// [`TaskRuntime::maintenance`](crate::TaskRuntime::maintenance).
#[derive(Clone)]
pub struct Maintenance {
    pub(crate) rt: Arc<RuntimeInner>,
}

impl Maintenance {
    /// Extend this process's owner lease. If the previous lease had already
    /// lapsed, tasks may have been taken over: local work that lost its claim
    /// is stopped.
    pub async fn heartbeat_once(&self) -> Result<(), StoreError> {
        let rt = &self.rt;
        let now = rt.clock.now_ms();
        let last = rt.last_heartbeat_ok.load(Ordering::SeqCst);
        rt.store
            .heartbeat(&rt.owner, now, rt.config.lease_ms)
            .await?;
        rt.last_heartbeat_ok.store(now, Ordering::SeqCst);
        if now - last >= rt.config.lease_ms {
            tracing::warn!(
                lapsed_ms = now - last,
                "owner lease had lapsed; checking for lost tasks"
            );
            for id in rt.local.ids() {
                rt.refresh_local(&id).await;
            }
        }
        Ok(())
    }

    /// Claim tasks whose owner's lease lapsed and apply each tool's interrupt
    /// policy; first retry the tasks an earlier pass claimed while their tool
    /// was not known yet ([`Lookup::NotYet`](crate::tool::Lookup::NotYet)).
    /// Returns how many were claimed or retried.
    pub async fn recover_once(&self) -> Result<usize, StoreError> {
        let rt = &self.rt;
        let mut total = rt.retry_deferred().await;
        loop {
            let now = rt.clock.now_ms();
            let claimed = rt
                .store
                .claim_orphans(&rt.owner, now, rt.config.batch_size)
                .await?;
            let n = claimed.len();
            total += n;
            for record in claimed {
                tracing::info!(task_id = %record.id, tool = %record.tool, "recovered task from a lapsed owner");
                rt.adopt(record).await;
            }
            if (n as i64) < rt.config.batch_size {
                break;
            }
        }
        let before = rt.clock.now_ms() - OWNER_ROWS_KEPT_FOR_LEASES * rt.config.lease_ms;
        rt.store.prune_owners(before).await?;
        Ok(total)
    }

    /// Fail live tasks past their TTL and purge rows past retention.
    /// Returns `(expired, purged)`.
    pub async fn sweep_once(&self) -> Result<(usize, u64), StoreError> {
        let rt = &self.rt;
        let mut expired = 0;
        loop {
            let now = rt.clock.now_ms();
            let batch = rt
                .store
                .expire_overdue(
                    now,
                    rt.config.batch_size,
                    purge_at_once_expired(now, rt.config.retention_ms),
                )
                .await?;
            expired += batch.len();
            for task in &batch {
                rt.feed.publish(&task.task_id);
                if task.owner.as_deref() == Some(&rt.owner) {
                    rt.local.stop(&task.task_id);
                }
            }
            if (batch.len() as i64) < rt.config.batch_size {
                break;
            }
            // Each batch is its own statement: let the heartbeat and the
            // requests waiting for the writer in between.
            tokio::task::yield_now().await;
        }
        let mut purged = 0;
        loop {
            let n = rt
                .store
                .purge(rt.clock.now_ms(), rt.config.batch_size)
                .await?;
            purged += n;
            if (n as i64) < rt.config.batch_size {
                break;
            }
            tokio::task::yield_now().await;
        }
        Ok((expired, purged))
    }

    /// Re-read recent signals for tasks this process runs (answers,
    /// cancellations, expiry) in case a wake-up was lost.
    pub async fn backstop_once(&self) -> Result<usize, StoreError> {
        let rt = &self.rt;
        let since = rt.clock.now_ms() - rt.config.backstop_window_ms;
        let signals = rt.store.signals_since(&rt.owner, since).await?;
        let mut acted = 0;
        for s in signals {
            if s.status.is_terminal() {
                rt.local.stop(&s.task_id);
            } else {
                if s.cancel_requested {
                    rt.local.cancel(&s.task_id);
                }
                rt.local.wake(&s.task_id);
            }
            acted += 1;
        }
        Ok(acted)
    }
}

fn every(ms: i64) -> tokio::time::Interval {
    let mut i = tokio::time::interval(Duration::from_millis(ms.max(MIN_PERIOD_MS) as u64));
    i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    i
}

/// Run `step` every `period_ms` until `stop` fires. A step that fails or
/// panics is logged and tried again on the next tick: upkeep never dies.
fn spawn_loop<F, Fut>(name: &'static str, period_ms: i64, stop: CancellationToken, step: F)
where
    F: Fn() -> Fut + Send + 'static,
    Fut: Future<Output = Result<(), StoreError>> + Send + 'static,
{
    tokio::spawn(async move {
        let mut tick = every(period_ms);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            let outcome = tokio::select! {
                _ = stop.cancelled() => return,
                r = AssertUnwindSafe(step()).catch_unwind() => r,
            };
            match outcome {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::warn!(step = name, error = %e, "maintenance step failed; will retry on the next tick")
                }
                Err(panic) => {
                    tracing::error!(step = name, panic = %panic_text(&panic), "maintenance step panicked; will retry on the next tick")
                }
            }
        }
    });
}

/// Run every maintenance step, each in its own loop on its own cadence, so a
/// long step (a purge backlog, a slow recovery) never delays another: above
/// all, never the heartbeat that keeps this process's tasks its own.
///
/// Recovery stops when shutdown begins (a draining process must not take on
/// other replicas' tasks); the heartbeat, the sweep and the backstop run until
/// the drain ends, so the work still running keeps its lease and still hears
/// of answers and cancellations.
pub(crate) fn spawn_loops(rt: Arc<RuntimeInner>) {
    let cfg = rt.config.clone();
    let m = Maintenance { rt: rt.clone() };
    let draining = rt.shutdown.clone();
    let stopped = rt.stopped.clone();
    let step = |f: fn(Maintenance) -> BoxFuture<'static, Result<(), StoreError>>| {
        let m = m.clone();
        move || f(m.clone())
    };
    spawn_loop(
        "heartbeat",
        cfg.heartbeat_every_ms(),
        stopped.clone(),
        step(|m| Box::pin(async move { m.heartbeat_once().await })),
    );
    spawn_loop(
        "recovery",
        cfg.recovery_every_ms,
        draining.clone(),
        step(|m| Box::pin(async move { m.recover_once().await.map(|_| ()) })),
    );
    retry_deferred_when_tools_change(rt.clone(), draining);
    spawn_loop(
        "sweep",
        cfg.sweep_every_ms,
        stopped.clone(),
        step(|m| Box::pin(async move { m.sweep_once().await.map(|_| ()) })),
    );
    spawn_loop(
        "backstop",
        cfg.backstop_every_ms,
        stopped,
        step(|m| Box::pin(async move { m.backstop_once().await.map(|_| ()) })),
    );
}

/// Retry the tasks recovery deferred (their tool not known yet) as soon as
/// the tool source's list changes, not a recovery period later: a proxy
/// restarted under an interrupted call lists its upstream in the
/// background, and the call is settled or rerun the moment the upstream
/// answers.
fn retry_deferred_when_tools_change(rt: Arc<RuntimeInner>, stop: CancellationToken) {
    let mut changed = rt.source.changed();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                r = changed.changed() => if r.is_err() { return },
            }
            if let Err(panic) = AssertUnwindSafe(rt.retry_deferred()).catch_unwind().await {
                tracing::error!(panic = %panic_text(&panic), "retrying deferred tasks panicked; the recovery loop retries them");
            }
        }
    });
}

/// Tasks the sweep fails are past their deadline: retained from now on.
fn purge_at_once_expired(now: i64, retention_ms: i64) -> i64 {
    retention::purge_at(Some(now), now, retention_ms).unwrap_or(now)
}
