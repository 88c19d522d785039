//! The JSON shapes of the API (camelCase, RFC 3339 times).

use mcptask_client::{DeadLetter, RemoteInput, RemoteTaskRecord, TaskEvent};
use mcptask_core::outcome::Outcome;
use mcptask_core::time::to_rfc3339;
use serde_json::{Value, json};

fn time(ms: Option<i64>) -> Value {
    ms.map_or(Value::Null, |t| json!(to_rfc3339(t)))
}

/// A task in lists and live updates.
pub fn summary(r: &RemoteTaskRecord, operator: bool) -> Value {
    let outcome = Outcome::of_call(r.status, r.result.as_ref());
    let mut v = json!({
        "id": r.id,
        "server": r.server,
        "tool": r.tool,
        "driver": r.driver.as_str(),
        "face": r.face.map(|f| f.as_str()),
        "status": r.status.as_str(),
        "statusMessage": r.status_message,
        "principal": r.principal,
        "conversation": r.conversation,
        "callId": r.call_id,
        "correlation": r.correlation,
        "createdAt": to_rfc3339(r.created_at),
        "updatedAt": to_rfc3339(r.updated_at),
        "completedAt": time(r.completed_at),
        "cancelRequested": r.cancel_requested_at.is_some(),
        // Completed, but the tool said it failed (`isError`): lists show it
        // without the result.
        "toolError": outcome == Some(Outcome::ToolError),
        // How it ended (null while live): `tool_error` apart from
        // `completed`, though the wire status of both is `completed`.
        "outcome": outcome.map(Outcome::as_str),
        // Which run of its work (1, then one more per rerun after an
        // interruption).
        "attempt": r.attempt,
        "pollCount": r.poll_count,
        "consecutiveErrors": r.consecutive_errors,
        "lastError": r.last_error,
        "inputRequests": r.input_requests.iter().map(|(k, v)| (k.clone(), v.clone())).collect::<serde_json::Map<_, _>>(),
    });
    // The upstream's task id is a bearer-like secret of the upstream's; a
    // call run here has none of its own (see `detail` for SEP-1686).
    if operator && !r.driver.is_local() {
        v["remoteTaskId"] = json!(r.remote_task_id);
    }
    v
}

/// One task with everything the detail view needs.
pub fn detail(
    r: &RemoteTaskRecord,
    inputs: &[RemoteInput],
    timeline: &[TaskEvent],
    operator: bool,
    upstream_task: Option<&str>,
) -> Value {
    let mut v = summary(r, operator);
    let obj = v.as_object_mut().expect("summary is an object");
    if operator && let Some(id) = upstream_task {
        obj.insert("remoteTaskId".into(), json!(id));
    }
    obj.insert(
        "arguments".into(),
        r.arguments.clone().unwrap_or(Value::Null),
    );
    obj.insert("result".into(), r.result.clone().unwrap_or(Value::Null));
    obj.insert("resultTruncated".into(), json!(r.result_truncated));
    obj.insert("error".into(), r.error.clone().unwrap_or(Value::Null));
    obj.insert("ttlMs".into(), json!(r.ttl_ms));
    obj.insert("pollIntervalMs".into(), json!(r.poll_interval_ms));
    obj.insert("lastPolledAt".into(), time(r.last_polled_at));
    obj.insert("nextPollAt".into(), time(r.next_poll_at));
    obj.insert("cancelRequestedAt".into(), time(r.cancel_requested_at));
    obj.insert("cancelSentAt".into(), time(r.cancel_sent_at));
    obj.insert(
        "inputs".into(),
        Value::Array(
            inputs
                .iter()
                .map(|i| {
                    json!({
                        "key": i.key,
                        "request": i.request,
                        "answered": i.response.is_some(),
                        "response": i.response,
                        "firstSeenAt": to_rfc3339(i.first_seen_at),
                        "answeredAt": time(i.answered_at),
                        "sentAt": time(i.sent_at),
                    })
                })
                .collect(),
        ),
    );
    obj.insert(
        "timeline".into(),
        Value::Array(timeline.iter().map(event).collect()),
    );
    obj.insert(
        "notifications".into(),
        json!({
            "eventVersion": r.event_version,
            "deliveredVersion": r.delivered_version,
            "deadLetters": r.dead_letters,
            "lastError": r.last_notify_error,
        }),
    );
    v
}

/// A timeline entry / streamed event.
pub fn event(e: &TaskEvent) -> Value {
    let mut view = json!({
        "idempotencyKey": e.idempotency_key(),
        "taskId": e.task_id,
        "version": e.version,
        "kind": e.kind.as_str(),
        "status": e.status.as_str(),
        "occurredAt": to_rfc3339(e.occurred_at),
        "statusMessage": e.data.get("statusMessage"),
    });
    // A rerun says which attempt it started.
    if let Some(attempt) = e.data.get("attempt") {
        view["attempt"] = attempt.clone();
    }
    view
}

/// An event a notify target gave up on.
pub fn dead_letter(d: &DeadLetter) -> Value {
    json!({
        "taskId": d.task_id,
        "version": d.version,
        "idempotencyKey": format!("{}:{}", d.task_id, d.version),
        "target": d.target,
        "error": d.error,
        "deadAt": to_rfc3339(d.dead_at),
    })
}
