//! Store writes made on behalf of running work, retried through outages.
//!
//! A task's work must not fail because the database blinked: its writes are
//! retried with capped backoff while the error is transient
//! ([`StoreError::is_transient`]) and the runtime is up. A permanent error (the
//! database refused the write: a constraint, data it cannot store) would be
//! refused again, so it ends the one operation at once with an error the
//! work can return as is. The database's own text stays in the server log:
//! the error reaches the client as the task's result.
//!
//! The runtime's first heartbeat, before there is a runtime, is retried the
//! same way for a bounded time ([`register_owner`]).

use std::future::Future;
use std::time::Duration;

use mcptask_core::StoreError;
use mcptask_core::store::ServerTaskStore;
use rmcp::ErrorData;

use super::RuntimeInner;
use crate::tool::TaskExit;

/// Wait before the first retry.
const FIRST_RETRY_DELAY: Duration = Duration::from_millis(50);
/// Longest wait between two retries.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(5);

impl RuntimeInner {
    /// Run a store operation, retrying transient failures with capped backoff
    /// until it succeeds or the runtime shuts down.
    pub(crate) async fn retrying<T, F, Fut>(&self, what: &str, op: F) -> Result<T, TaskExit>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let mut delay = FIRST_RETRY_DELAY;
        loop {
            match op().await {
                Err(e) if e.is_transient() && self.loops_stopped() => {
                    tracing::warn!(error = %e, what, "store write failed during shutdown; giving up");
                    return Err(TaskExit::Error(store_failure(what, &e)));
                }
                Ok(v) => return Ok(v),
                Err(e) if e.is_transient() => {
                    tracing::warn!(error = %e, what, "store write failed; retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        _ = self.stopped.cancelled() => {}
                    }
                    delay = (delay * 2).min(MAX_RETRY_DELAY);
                }
                Err(e) => return Err(TaskExit::Error(store_failure(what, &e))),
            }
        }
    }
}

/// The error a store failure ends an operation with, as the tool (and, through
/// the task's result, the client) sees it: what failed and why in general
/// terms, never the database's text, which is logged here instead.
pub(crate) fn store_failure(what: &str, e: &StoreError) -> ErrorData {
    let message = match e {
        StoreError::Invalid(why) => format!("{what}: {why}"),
        StoreError::Database(_) => {
            format!("{what}: the task store is unavailable (see the server log)")
        }
        _ => {
            tracing::error!(error = %e, what, "the task store refused a write; not retrying");
            format!(
                "{what}: the task store refused the write with a permanent error (see the server log)"
            )
        }
    };
    ErrorData::internal_error(message, None)
}

/// How long `RuntimeBuilder::start` waits for a database it cannot reach.
/// A process started while its database restarts would otherwise exit and
/// rely on whatever restarts it.
const START_STORE_WAIT: Duration = Duration::from_secs(30);

/// The first heartbeat of `RuntimeBuilder::start`, retried (100 ms doubling
/// to 2 s) while the error is transient and [`START_STORE_WAIT`] has not
/// passed. There is no runtime yet, so no shutdown to watch: the deadline
/// bounds it instead. Returns the time it succeeded at.
pub(super) async fn register_owner(
    store: &dyn ServerTaskStore,
    clock: &dyn mcptask_core::clock::Clock,
    owner: &str,
    lease_ms: i64,
) -> Result<i64, StoreError> {
    let give_up = tokio::time::Instant::now() + START_STORE_WAIT;
    let mut pause = Duration::from_millis(100);
    loop {
        let now = clock.now_ms();
        match store.heartbeat(owner, now, lease_ms).await {
            Ok(_) => return Ok(now),
            Err(e) if e.is_transient() && tokio::time::Instant::now() + pause < give_up => {
                tracing::warn!(error = %e, retry_in_ms = pause.as_millis() as u64,
                    "the task store is unreachable at start; waiting for it");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(2));
            }
            Err(e) => return Err(e),
        }
    }
}
