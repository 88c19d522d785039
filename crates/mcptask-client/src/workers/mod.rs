//! The background workers that carry tracked tasks to a terminal state.
//!
//! Three claim phases share one work claim per task: **poll** (`tasks/get`),
//! **cancel** (`tasks/cancel` for a durable cancel intent) and **update**
//! (`tasks/update` with stored answers); **notify** has a claim of its own and
//! delivers the outbox. Each claim phase runs as one pipeline per process:
//! claim due tasks in one statement, make the remote calls concurrently,
//! apply results in fenced transactions as their calls end, and claim more as
//! call slots free up, so a slow server never holds back the others; the
//! claim and apply statements run beside the calls and beside each other
//! (`batch`, `calls`). Notify runs in batches (`notify`). What each
//! result does to the task is decided by `mcptask_core::client::transition`;
//! the workers only observe and classify.

mod batch;
mod calls;
mod loops;
mod maintenance;
mod notify;
mod resolve;

use std::sync::Arc;

use mcptask_core::StoreError;
use mcptask_core::client::Phase;

pub(crate) use loops::spawn_all;

use crate::shared::Inner;

/// Manual access to the worker steps, for tests that drive a tracker started
/// with `background: false` (often with a manual clock).
#[derive(Clone)]
pub struct Workers {
    pub(crate) inner: Arc<Inner>,
}

impl Workers {
    /// Claim one batch for `phase`, run it and apply the results. Returns how
    /// many tasks were claimed.
    pub async fn run_once(&self, phase: Phase) -> Result<usize, StoreError> {
        batch::run(&self.inner, phase).await
    }

    /// Claim one batch of pending notifications and deliver them.
    pub async fn notify_once(&self) -> Result<usize, StoreError> {
        notify::run(&self.inner).await
    }

    /// Claim one batch of lag rows (targets behind an outbox) and catch them up.
    pub async fn redeliver_once(&self) -> Result<usize, StoreError> {
        notify::redeliver(&self.inner).await
    }

    /// Purge settled tasks past their retention; returns how many.
    pub async fn purge_once(&self) -> Result<u64, StoreError> {
        maintenance::purge(&self.inner).await
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
            round += self.redeliver_once().await?;
            total += round;
            if round == 0 {
                break;
            }
        }
        Ok(total)
    }
}
