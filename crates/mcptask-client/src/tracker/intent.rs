//! What the application asks of a task: cancel it, answer its input requests.
//! Both are stored first (durable intents) and carried out by the workers.

use std::collections::{BTreeMap, BTreeSet};

use mcptask_core::client::{AnswerResult, RemoteTaskRecord};
use mcptask_core::elicit::check_answer;
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
    ///
    /// Each answer to a key still waiting for one is checked against its
    /// request first ([`check_answer`]): if any does not fit, nothing is
    /// stored and [`TrackerError::AnswerRejected`] names the key and field.
    /// Keys not asked (or already answered) are left to the store, which
    /// reports them as ignored.
    pub async fn answer(
        &self,
        id: &str,
        answers: BTreeMap<String, Value>,
    ) -> Result<AnswerResult, TrackerError> {
        self.check_sizes(&answers)?;
        self.check_answers(id, &answers).await?;
        self.store_answers(id, answers).await
    }

    /// Store answers for delivery as given, without checking them against
    /// their questions: for a proxy relaying its own client's answers, which
    /// the server judges (size limits still apply).
    pub async fn relay_answers(
        &self,
        id: &str,
        answers: BTreeMap<String, Value>,
    ) -> Result<AnswerResult, TrackerError> {
        self.check_sizes(&answers)?;
        self.store_answers(id, answers).await
    }

    fn check_sizes(&self, answers: &BTreeMap<String, Value>) -> Result<(), TrackerError> {
        let limits = self.inner.config.policy.limits;
        for (key, value) in answers {
            limits
                .check_input_response(value)
                .map_err(|why| TrackerError::InvalidInput(format!("answer {key:?} {why}")))?;
        }
        Ok(())
    }

    async fn store_answers(
        &self,
        id: &str,
        answers: BTreeMap<String, Value>,
    ) -> Result<AnswerResult, TrackerError> {
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

    /// Refuse answers that do not fit their open requests. Keys are never
    /// reissued with another request, so the requests read here are the
    /// ones the store will match the answers to.
    async fn check_answers(
        &self,
        id: &str,
        answers: &BTreeMap<String, Value>,
    ) -> Result<(), TrackerError> {
        let record = self
            .inner
            .store
            .get_remote(id)
            .await?
            .ok_or_else(|| TrackerError::NotFound(id.to_string()))?;
        if record.is_terminal() {
            return Ok(());
        }
        let answered: BTreeSet<String> = self
            .inner
            .store
            .remote_inputs(id)
            .await?
            .into_iter()
            .filter(|i| i.response.is_some())
            .map(|i| i.key)
            .collect();
        for (key, request) in &record.input_requests {
            let Some(answer) = answers.get(key) else {
                continue;
            };
            if answered.contains(key) {
                continue;
            }
            check_answer(request, answer).map_err(|e| TrackerError::rejected(key, e))?;
        }
        Ok(())
    }
}
