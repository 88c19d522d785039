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
