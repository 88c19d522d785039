//! The claim phases' work: claim due tasks in one statement, make their
//! remote calls concurrently (at most `max_in_flight` at once), and apply the
//! results in fenced transactions of at most `apply_batch` entries.
//!
//! The background loop ([`pipeline`]) applies results as their calls end and
//! claims more work as soon as call slots free up, so one slow or hung server
//! costs its own tasks a call timeout but never holds back the results, or
//! the next polls, of tasks on other servers; its claim and apply statements
//! run beside the calls instead of between them. [`run`] is the one-batch
//! step of the manual [`Workers`](super::Workers), claim then calls then
//! apply.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::future::{BoxFuture, OptionFuture};
use mcptask_core::client::{
    Applied, ClaimedTask, Observation, Phase, RemoteTaskRecord, transition,
};
use mcptask_core::{StoreError, TaskStatus, ids};
use tokio::task::JoinSet;

use super::{calls, resolve};
use crate::shared::Inner;

/// A claimed task and what its call observed.
type Done = (ClaimedTask, Observation);

/// Claim, call and apply one batch of `phase`. Returns how many tasks were claimed.
pub(super) async fn run(inner: &Arc<Inner>, phase: Phase) -> Result<usize, StoreError> {
    let claimed = claim(inner, phase, inner.config.batch_size).await?;
    if claimed.is_empty() {
        return Ok(0);
    }
    let n = claimed.len();
    let done: Vec<Done> = futures::stream::iter(claimed)
        .map(|c| call(inner.clone(), phase, c))
        .buffer_unordered(inner.config.max_in_flight.max(1))
        .collect()
        .await;
    finish(inner, phase, done, false).await?;
    Ok(n)
}

/// Run `phase` until shutdown: keep up to `max_in_flight` calls going,
/// apply results as they come in, claim due work whenever slots are free.
///
/// Claims, calls and applies overlap: a claim statement and an apply
/// transaction each run beside the calls and beside each other, so
/// throughput is bounded by the slowest of the three rather than by their
/// sum. At most one claim and one apply run at a time; results that end
/// while an apply runs wait for the next one, which takes them all. No more
/// is claimed while a full window of results waits for the store, so a slow
/// store cannot let claims run ahead of their leases.
pub(super) async fn pipeline(inner: Arc<Inner>, phase: Phase) {
    let wake = inner.wakers.phase(phase);
    let slots = inner.config.max_in_flight.max(1);
    let batch = inner.config.batch_size.max(1) as usize;
    // After a result, claim again only once this many slots are free (or at
    // the next wake-up or idle tick), so a trickle of results does not turn
    // into a claim statement per result.
    let refill = batch.min(slots).div_ceil(4);
    let mut calls: JoinSet<Done> = JoinSet::new();
    let mut claiming: Option<Stage<Claimed>> = None;
    let mut applying: Option<Stage<Option<i64>>> = None;
    let mut pending: Vec<Done> = Vec::new();
    let mut claim_now = true;
    // When to claim again if nothing else wakes the phase: the idle tick, or
    // sooner when the store says a task falls due before it.
    let mut tick = NextClaim::new(tokio::time::Instant::now() + inner.config.idle_tick);
    // Whether the last claim found less than it asked for: only then does
    // the next due time matter (a saturated phase claims as slots free up),
    // so only then does an apply ask the store for it.
    let mut caught_up = false;
    loop {
        let stopping = inner.shutdown.is_cancelled();
        if applying.is_none() && !pending.is_empty() {
            let done = std::mem::take(&mut pending);
            applying = Some(Stage::start(
                done.len(),
                apply_stage(inner.clone(), phase, done, caught_up),
            ));
        }
        let backlog = applying.as_ref().map_or(0, |a| a.rows);
        if claim_now && !stopping && claiming.is_none() && calls.len() < slots && backlog < slots {
            let want = (slots - calls.len()).min(batch);
            claiming = Some(Stage::start(want, claim_stage(inner.clone(), phase, want)));
            claim_now = false;
        }
        if stopping && calls.is_empty() && claiming.is_none() && applying.is_none() {
            return;
        }
        // A wake-up during a claim is kept (`claim_now`): that claim may have
        // read the due rows before the woken task became due.
        let room = !stopping && calls.len() < slots;
        tokio::select! {
            Some((want, claimed, due)) = OptionFuture::from(claiming.as_mut().map(|c| &mut c.work)), if claiming.is_some() => {
                claiming = None;
                tick.claimed(next_tick(&inner, due));
                match claimed {
                    Ok(claimed) => {
                        // A full claim means more is due: claim again at once.
                        caught_up = claimed.len() < want;
                        claim_now |= !caught_up;
                        for c in claimed {
                            calls.spawn(call(inner.clone(), phase, c));
                        }
                    }
                    Err(e) => {
                        tracing::warn!(phase = phase.as_str(), error = %e, "claim failed; retrying after a pause");
                    }
                }
            }
            Some(due) = OptionFuture::from(applying.as_mut().map(|a| &mut a.work)), if applying.is_some() => {
                applying = None;
                // The rows just written may fall due before the current tick.
                tick.applied(next_tick(&inner, due), claiming.is_some());
            }
            joined = calls.join_next(), if !calls.is_empty() => {
                let mut next = joined;
                while let Some(result) = next {
                    match result {
                        Ok(d) => pending.push(d),
                        // The claim lapses and the task is claimed again.
                        Err(e) => tracing::error!(phase = phase.as_str(), error = %e, "a remote call panicked"),
                    }
                    next = calls.try_join_next();
                }
                claim_now |= slots - calls.len() >= refill || calls.is_empty();
            }
            _ = wake.notified(), if room => claim_now = true,
            _ = tokio::time::sleep_until(tick.at), if room => {
                claim_now = true;
                tick.idle(tokio::time::Instant::now() + inner.config.idle_tick);
            }
            _ = inner.shutdown.cancelled(), if !stopping => {}
        }
    }
}

/// When the pipeline claims again without a wake-up.
///
/// A claim that found nothing more reports when the next task falls due as
/// it read the store; an apply reports when the rows it just wrote fall
/// due. The two run side by side, so a claim may have read a row before an
/// apply that finished first rescheduled it: the sooner time such an apply
/// reported is kept when that claim ends, never overwritten by the claim's
/// older view. (It was overwritten: a task whose poll was applied while a
/// claim ran waited for the idle tick, 60 s by default, instead of its
/// 50 ms poll interval; seen on PostgreSQL, where claims and applies run
/// on separate connections at once.)
#[derive(Debug)]
struct NextClaim {
    at: tokio::time::Instant,
    /// The soonest time an apply reported while a claim ran.
    during_claim: Option<tokio::time::Instant>,
}

impl NextClaim {
    fn new(at: tokio::time::Instant) -> Self {
        Self {
            at,
            during_claim: None,
        }
    }

    /// A claim ended, reporting `at` from what it read.
    fn claimed(&mut self, at: tokio::time::Instant) {
        self.at = match self.during_claim.take() {
            Some(applied) => at.min(applied),
            None => at,
        };
    }

    /// An apply ended, reporting `at`; `claim_running`: a claim runs now.
    fn applied(&mut self, at: tokio::time::Instant, claim_running: bool) {
        self.at = self.at.min(at);
        if claim_running {
            self.during_claim = Some(self.during_claim.map_or(at, |t| t.min(at)));
        }
    }

    /// The time came: nothing is known to fall due before `at`.
    fn idle(&mut self, at: tokio::time::Instant) {
        self.at = at;
    }
}

/// What a claim stage hands back: how many it asked for, what it got, and
/// (after a claim that found less than it wanted) when the next task falls due.
type Claimed = (usize, Result<Vec<ClaimedTask>, StoreError>, Option<i64>);

/// The shortest wait before claiming again: claims for tasks falling due
/// close together are made as one.
const MIN_WAIT: Duration = Duration::from_millis(10);

/// When to claim next without a wake-up: when the next task falls due (at
/// least [`MIN_WAIT`] from now), at the latest after the idle tick.
fn next_tick(inner: &Inner, due: Option<i64>) -> tokio::time::Instant {
    let idle = inner.config.idle_tick;
    let wait = match due {
        Some(at) => {
            let ms = (at - inner.clock.now_ms()).max(0) as u64;
            Duration::from_millis(ms).clamp(MIN_WAIT.min(idle), idle)
        }
        None => idle,
    };
    tokio::time::Instant::now() + wait
}

/// A store statement running beside the calls, and how many rows it covers.
struct Stage<T> {
    rows: usize,
    work: BoxFuture<'static, T>,
}

impl<T> Stage<T> {
    fn start(rows: usize, work: impl Future<Output = T> + Send + 'static) -> Self {
        Stage {
            rows,
            work: Box::pin(work),
        }
    }
}

async fn claim_stage(inner: Arc<Inner>, phase: Phase, want: usize) -> Claimed {
    let claimed = claim(&inner, phase, want as i64).await;
    // Nothing more is due now: ask when something will be.
    let due = match &claimed {
        Ok(c) if c.len() < want => next_due(&inner, phase).await,
        _ => None,
    };
    (want, claimed, due)
}

/// Apply, then say when the phase's next task falls due (the rows written
/// were rescheduled; a claim running beside this apply could not see that).
async fn apply_stage(
    inner: Arc<Inner>,
    phase: Phase,
    done: Vec<Done>,
    ask_next_due: bool,
) -> Option<i64> {
    if let Err(e) = finish(&inner, phase, done, true).await {
        tracing::warn!(phase = phase.as_str(), error = %e, "applying results failed; the claims lapse and are retried");
    }
    if ask_next_due {
        next_due(&inner, phase).await
    } else {
        None
    }
}

/// When the phase's next task falls due, if the store knows (an index seek;
/// a failure only means waiting for the idle tick).
async fn next_due(inner: &Inner, phase: Phase) -> Option<i64> {
    inner
        .store
        .next_due(phase, inner.clock.now_ms())
        .await
        .unwrap_or(None)
}

async fn claim(
    inner: &Arc<Inner>,
    phase: Phase,
    limit: i64,
) -> Result<Vec<ClaimedTask>, StoreError> {
    let claimed = inner
        .store
        .claim_remote(
            phase,
            &inner.owner,
            inner.clock.now_ms(),
            inner.config.lease_ms,
            limit,
        )
        .await?;
    if !claimed.is_empty() {
        metrics::counter!("mcptask_claims_total", "phase" => phase.as_str())
            .increment(claimed.len() as u64);
    }
    Ok(claimed)
}

/// The call for one claimed task. Bounded by the claim's lease as a whole
/// (connect plus call) so a result always comes back while the claim holds;
/// cut short at the shutdown deadline (the claim is then released).
async fn call(inner: Arc<Inner>, phase: Phase, claimed: ClaimedTask) -> Done {
    // A server at its cap: this task waits its turn (no call, no error).
    let cap = (!claimed.record.driver.is_local())
        .then(|| inner.servers.get(&claimed.record.server))
        .flatten()
        .and_then(|(def, _)| def.max_in_flight);
    let _slot = match cap {
        Some(cap) => match inner
            .server_slots
            .try_take(&claimed.record.server, phase.as_str(), cap)
        {
            Some(slot) => Some(slot),
            None => {
                metrics::counter!("mcptask_deferred_calls_total", "phase" => phase.as_str())
                    .increment(1);
                let delay_ms = crate::slots::DEFER_MS;
                return (claimed, Observation::Deferred { delay_ms });
            }
        },
        None => None,
    };
    let bound = Duration::from_millis((inner.config.lease_ms.max(1) as u64) * 9 / 10);
    let observation = tokio::select! {
        o = tokio::time::timeout(bound, calls::observe(&inner, phase, &claimed)) => o.unwrap_or_else(|_| {
            Observation::Transient(format!("no answer within {bound:?} (the claim's lease)"))
        }),
        _ = inner.abort.cancelled() => Observation::Released,
    };
    (claimed, observation)
}

/// Apply what the calls observed, then act on it: ask the input resolver,
/// and send a best-effort `tasks/cancel` for tasks given up locally.
/// `detach` runs the resolver off the caller (the pipeline must not wait for
/// application code).
async fn finish(
    inner: &Arc<Inner>,
    phase: Phase,
    done: Vec<Done>,
    detach: bool,
) -> Result<(), StoreError> {
    if done.is_empty() {
        return Ok(());
    }
    let now = inner.clock.now_ms();
    let applied: Vec<Applied> = done
        .iter()
        .map(|(c, observation)| Applied {
            fence: c.fence.clone(),
            phase,
            observation: observation.clone(),
            jitter: ids::random_unit(),
        })
        .collect();
    let ok = apply(inner, &applied, &done).await?;
    for ((claimed, observation), ok) in done.into_iter().zip(ok) {
        if !ok {
            continue;
        }
        if transition::abandons_remote(
            &claimed.record,
            phase,
            &observation,
            now,
            &inner.config.policy,
        ) {
            cancel_abandoned(inner, &claimed.record);
        } else if let Observation::Snapshot(s) = &observation
            && s.status.is_some_and(|s| s.is_terminal())
        {
            // The call ended upstream: nothing more is sent for it.
            inner.identities.forget(&claimed.record.id);
        }
        if inner.resolver.is_some()
            && let Observation::Snapshot(s) = observation
            && s.status == Some(TaskStatus::InputRequired)
        {
            if detach {
                let inner2 = inner.clone();
                inner.loops.spawn(async move {
                    resolve::ask_resolver(&inner2, &claimed, &s).await;
                });
            } else {
                resolve::ask_resolver(inner, &claimed, &s).await;
            }
        }
    }
    Ok(())
}

/// The tracker stopped tracking a task whose work may still run on its
/// server: ask the server once to cancel it, off the worker, bounded by the
/// connect and call timeouts. Best effort: the server may well be the reason
/// the task was given up.
fn cancel_abandoned(inner: &Arc<Inner>, record: &RemoteTaskRecord) {
    let inner2 = inner.clone();
    let record = record.clone();
    inner.loops.spawn(async move {
        let outcome = tokio::select! {
            o = calls::cancel_best_effort(&inner2, &record) => o,
            _ = inner2.abort.cancelled() => Err("shutting down".to_string()),
        };
        // Nothing more is sent for it.
        inner2.identities.forget(&record.id);
        let label = if outcome.is_ok() { "sent" } else { "failed" };
        metrics::counter!("mcptask_abandon_cancels_total", "outcome" => label).increment(1);
        match outcome {
            Ok(()) => tracing::info!(task_id = %record.id, server = %record.server, "task given up locally; tasks/cancel sent to its server"),
            Err(e) => tracing::info!(task_id = %record.id, server = %record.server, error = %e, "task given up locally; best-effort tasks/cancel failed"),
        }
    });
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
        Observation::Released | Observation::Deferred { .. } => false,
        _ => true,
    }
}

/// Apply results in transactions of at most `apply_batch` entries; says
/// which were applied (a lost claim's result is dropped).
async fn apply(
    inner: &Arc<Inner>,
    applied: &[Applied],
    done: &[Done],
) -> Result<Vec<bool>, StoreError> {
    let policy = &inner.config.policy;
    let mut all = Vec::with_capacity(applied.len());
    for (chunk, claimed) in applied
        .chunks(inner.config.apply_batch.max(1))
        .zip(done.chunks(inner.config.apply_batch.max(1)))
    {
        let results = inner
            .store
            .apply_remote(chunk, policy, inner.clock.now_ms())
            .await?;
        for ((entry, (c, _)), ok) in chunk.iter().zip(claimed).zip(&results) {
            if *ok {
                if visible_change(&c.record, &entry.observation) {
                    inner.changed(&entry.fence.task_id);
                }
            } else {
                metrics::counter!("mcptask_stale_claims_total").increment(1);
                tracing::info!(task_id = %entry.fence.task_id, "claim lost before its result was applied; result dropped");
            }
        }
        all.extend(results);
    }
    inner.wakers.notify.notify_one();
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::NextClaim;
    use std::time::Duration;
    use tokio::time::Instant;

    #[test]
    fn an_apply_that_ends_during_a_claim_keeps_its_sooner_time() {
        let now = Instant::now();
        let idle = now + Duration::from_secs(60);
        let soon = now + Duration::from_millis(50);
        let mut next = NextClaim::new(idle);
        // The apply rescheduled its row for 50 ms from now while a claim
        // that read the store before it was still running ...
        next.applied(soon, true);
        // ... and that claim saw nothing due.
        next.claimed(idle);
        assert_eq!(next.at, soon);
        // Once kept, it is forgotten: the next claim's view stands.
        next.idle(idle);
        next.claimed(now + Duration::from_secs(1));
        assert_eq!(next.at, now + Duration::from_secs(1));
    }

    #[test]
    fn an_apply_with_no_claim_running_only_brings_the_time_forward() {
        let now = Instant::now();
        let mut next = NextClaim::new(now + Duration::from_secs(60));
        next.applied(now + Duration::from_secs(90), false);
        assert_eq!(next.at, now + Duration::from_secs(60));
        next.applied(now + Duration::from_millis(10), false);
        assert_eq!(next.at, now + Duration::from_millis(10));
        next.claimed(now + Duration::from_secs(5));
        assert_eq!(
            next.at,
            now + Duration::from_secs(5),
            "no apply ran during that claim"
        );
    }
}
