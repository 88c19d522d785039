//! Events a notify target gave up on: listing them, and handing them back
//! to delivery once the target is fixed.

use mcptask_core::client::delivery::{DeadLetter, DeadLetterFilter};

use super::{Tracker, TrackerError};

impl Tracker {
    /// The names of this tracker's notify targets (`subscribe` is the
    /// in-process stream; a webhook is `webhook <url>`).
    pub fn notify_targets(&self) -> Vec<String> {
        self.inner.targets().names()
    }

    /// Replace the application's notifiers (the in-process stream of
    /// `subscribe` stays): events from now on go to `notifiers`. A target
    /// kept under the same name (a webhook whose URL did not change) keeps
    /// its delivery state, lag rows and dead letters; a removed one gets no
    /// more events (its stored lag rows wait, unclaimed, until it is
    /// configured again); a new one gets events from now on.
    pub fn set_notifiers(&self, notifiers: Vec<std::sync::Arc<dyn crate::Notifier>>) {
        let mut targets = self.inner.targets.write().expect("targets lock");
        let mut all: Vec<std::sync::Arc<dyn crate::Notifier>> =
            vec![std::sync::Arc::new(self.inner.channel.clone())];
        all.extend(notifiers);
        *targets = std::sync::Arc::new(crate::notify::Targets::succeeding(all, Some(&targets)));
    }

    /// Dead letters matching `filter`, newest first (at most 1000).
    pub async fn dead_letters(
        &self,
        filter: &DeadLetterFilter,
        limit: i64,
    ) -> Result<Vec<DeadLetter>, TrackerError> {
        Ok(self
            .inner
            .store
            .dead_letters(filter, limit.clamp(1, 1000))
            .await?)
    }

    /// How many dead letters exist (every target, every task).
    pub async fn dead_letter_count(&self) -> Result<i64, TrackerError> {
        Ok(self.inner.store.dead_letter_count().await?)
    }

    /// Deliver the dead letters matching `filter` again, each target from
    /// its oldest dead letter of a task on (events it did receive in between
    /// may repeat: receivers deduplicate), with a fresh retry budget. At most
    /// `limit` `(task, target)` pairs per call. Returns how many dead letters
    /// were handed back.
    pub async fn redrive_dead_letters(
        &self,
        filter: &DeadLetterFilter,
        limit: i64,
    ) -> Result<i64, TrackerError> {
        let now = self.inner.clock.now_ms();
        let n = self
            .inner
            .store
            .redrive_dead_letters(filter, now, limit.clamp(1, 10_000))
            .await?;
        Ok(n)
    }
}
