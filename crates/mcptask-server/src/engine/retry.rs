//! Store writes made on behalf of running work, retried through outages.
//!
//! A task's work must not fail because the database blinked: its writes are
//! retried with capped backoff while the error is transient and the runtime
//! is up. Anything else ends the work with an error it can return as is.

use std::future::Future;
use std::time::Duration;

use mcptask_core::StoreError;
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
                Ok(v) => return Ok(v),
                Err(e) if e.is_transient() && !self.shutdown.is_cancelled() => {
                    tracing::warn!(error = %e, what, "store write failed; retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        _ = self.shutdown.cancelled() => {}
                    }
                    delay = (delay * 2).min(MAX_RETRY_DELAY);
                }
                Err(e) => {
                    return Err(TaskExit::Error(ErrorData::internal_error(
                        format!("task store unavailable ({what}): {e}"),
                        None,
                    )));
                }
            }
        }
    }
}
