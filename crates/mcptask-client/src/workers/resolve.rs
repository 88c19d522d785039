//! Asking the application's [`InputResolver`](crate::InputResolver) about a
//! task's outstanding input requests after a poll found them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use mcptask_core::client::{ClaimedTask, RemoteSnapshot};
use mcptask_core::elicit::check_answer;
use serde_json::Value;

use crate::resolver::InputContext;
use crate::shared::Inner;

/// Ask the resolver about outstanding keys that have no local answer yet, and
/// store what it answers (the update worker sends it).
pub(super) async fn ask_resolver(
    inner: &Arc<Inner>,
    claimed: &ClaimedTask,
    snapshot: &RemoteSnapshot,
) {
    let Some(resolver) = &inner.resolver else {
        return;
    };
    let r = &claimed.record;
    // The resolver runs off the poll pipeline, so the task's next poll can
    // find the same questions before this one has stored its answers.
    let Some(_asking) = Asking::start(inner, &r.id) else {
        return;
    };
    let answered: BTreeSet<String> = match inner.store.remote_inputs(&r.id).await {
        Ok(inputs) => inputs
            .into_iter()
            .filter(|i| i.response.is_some())
            .map(|i| i.key)
            .collect(),
        Err(e) => {
            tracing::warn!(task_id = %r.id, error = %e, "cannot read inputs for the resolver");
            return;
        }
    };
    let mut answers: BTreeMap<String, Value> = BTreeMap::new();
    for (key, request) in &snapshot.input_requests {
        if answered.contains(key) {
            continue;
        }
        let answer = resolver
            .resolve(InputContext {
                task_id: Some(&r.id),
                server: &r.server,
                tool: &r.tool,
                principal: r.principal.as_deref(),
                key,
                request,
            })
            .await;
        let Some(a) = answer.filter(Value::is_object) else {
            continue;
        };
        // A resolver's answer that does not fit the question would make the
        // tool act on garbage: the question stays open for a person instead.
        if let Err(e) = check_answer(request, &a) {
            tracing::warn!(task_id = %r.id, key = %key, error = %e,
                "the input resolver's answer does not fit the question; leaving it open");
            continue;
        }
        answers.insert(key.clone(), a);
    }
    if answers.is_empty() {
        return;
    }
    let answers: Vec<(String, Value)> = answers.into_iter().collect();
    match inner
        .store
        .answer_inputs(&r.id, &answers, inner.clock.now_ms())
        .await
    {
        Ok(_) => {
            inner.wakers.update.notify_one();
            inner.changed(&r.id);
        }
        Err(e) => tracing::warn!(task_id = %r.id, error = %e, "cannot store resolver answers"),
    }
}

/// A task's resolver round in progress: at most one per task in this
/// process; over when dropped.
struct Asking<'a> {
    inner: &'a Inner,
    task_id: &'a str,
}

impl<'a> Asking<'a> {
    fn start(inner: &'a Inner, task_id: &'a str) -> Option<Self> {
        let fresh = inner
            .resolving
            .lock()
            .expect("resolving lock")
            .insert(task_id.to_string());
        // Lazily: an `Asking` made and dropped here would end the round in
        // progress.
        fresh.then(|| Asking { inner, task_id })
    }
}

impl Drop for Asking<'_> {
    fn drop(&mut self) {
        self.inner
            .resolving
            .lock()
            .expect("resolving lock")
            .remove(self.task_id);
    }
}
