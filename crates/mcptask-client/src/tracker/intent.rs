//! What the application asks of a task: cancel it, answer its input requests.
//! Both are stored first (durable intents) and carried out by the workers.

use std::collections::BTreeMap;

use mcptask_core::client::{AnswerResult, RemoteTaskRecord};
use serde_json::Value;

use super::{Tracker, TrackerError};

impl Tracker {
    /// Durable intent to cancel; the cancel worker sends `tasks/cancel` and the
    /// task settles with what the server reports.
    pub async fn cancel(&self, id: &str) -> Result<RemoteTaskRecord, TrackerError> {
        let record = self
            .inner
            .store
            .request_cancel(id, self.inner.clock.now_ms())
            .await?
            .ok_or_else(|| TrackerError::NotFound(id.to_string()))?;
        self.inner.wakers.cancel.notify_one();
        self.inner.wakers.notify.notify_one();
        self.inner.changed(id);
        Ok(record)
    }

    /// Answer outstanding input requests; each key is answered once and sent
    /// with `tasks/update` by the update worker.
    pub async fn answer(
        &self,
        id: &str,
        answers: BTreeMap<String, Value>,
    ) -> Result<AnswerResult, TrackerError> {
        let limits = self.inner.config.policy.limits;
        for (key, value) in &answers {
            limits
                .check_input_response(value)
                .map_err(|why| TrackerError::InvalidInput(format!("answer {key:?} {why}")))?;
        }
        let answers: Vec<(String, Value)> = answers.into_iter().collect();
        let result = self
            .inner
            .store
            .answer_inputs(id, &answers, self.inner.clock.now_ms())
            .await?
            .ok_or_else(|| TrackerError::NotFound(id.to_string()))?;
        if !result.applied.is_empty() {
            self.inner.wakers.update.notify_one();
            self.inner.wakers.notify.notify_one();
            self.inner.changed(id);
        }
        Ok(result)
    }
}
