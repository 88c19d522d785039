//! Every state change of a tracked remote task, as pure functions.
//!
//! The stores lock the current row, call one of these, and write the result
//! back with a fenced UPDATE; so both backends share one state machine, and it
//! is tested here without a database.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::{
    AnswerResult, EventKind, FailureKind, NewRemoteTask, Observation, Phase, RemoteSnapshot,
    RemoteTaskRecord, TrackerPolicy,
};
use crate::TaskStatus;
use crate::payload::truncate_text;

/// The new state of a task plus what else to write with it.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// The task as stored.
    pub record: RemoteTaskRecord,
    /// New events, already numbered (`record.event_version` is the last one).
    pub events: Vec<(i64, EventKind, Value)>,
    /// Input keys seen for the first time (stored once; never replaced).
    pub new_inputs: Vec<(String, Value)>,
    /// Keys whose answers the server acknowledged.
    pub sent_keys: Vec<String>,
    /// Keys asked again (an answer refused, or re-asked after it was
    /// accepted): the stored answer is cleared so the key can be answered
    /// anew, and the request replaced by this one.
    pub reopened: Vec<(String, Value)>,
}

impl Change {
    fn of(record: RemoteTaskRecord) -> Self {
        Change {
            record,
            events: Vec::new(),
            new_inputs: Vec::new(),
            sent_keys: Vec::new(),
            reopened: Vec::new(),
        }
    }

    fn emit(&mut self, kind: EventKind, now: i64) {
        let r = &mut self.record;
        r.event_version += 1;
        if r.next_notify_at.is_none() {
            r.next_notify_at = Some(now);
        }
        let data = event_data(r, kind);
        self.events.push((r.event_version, kind, data));
    }
}

/// What an event tells the application about the task.
pub fn event_data(r: &RemoteTaskRecord, kind: EventKind) -> Value {
    let mut data = json!({
        "taskId": r.id,
        "kind": kind.as_str(),
        "status": r.status.as_str(),
        "server": r.server,
        "tool": r.tool,
        "principal": r.principal,
        "conversation": r.conversation,
        "callId": r.call_id,
        "correlation": r.correlation,
    });
    let obj = data.as_object_mut().expect("object literal");
    if let Some(m) = &r.status_message {
        obj.insert("statusMessage".into(), json!(m));
    }
    match r.status {
        TaskStatus::InputRequired => {
            let map: serde_json::Map<String, Value> = r
                .input_requests
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            obj.insert("inputRequests".into(), Value::Object(map));
        }
        TaskStatus::Completed => {
            obj.insert("result".into(), r.result.clone().unwrap_or(Value::Null));
            obj.insert("resultTruncated".into(), json!(r.result_truncated));
        }
        TaskStatus::Failed => {
            obj.insert("error".into(), r.error.clone().unwrap_or(Value::Null));
        }
        _ => {}
    }
    if kind == EventKind::Degraded {
        obj.insert("consecutiveErrors".into(), json!(r.consecutive_errors));
        obj.insert("lastError".into(), json!(r.last_error));
    }
    data
}

fn clear_claim(r: &mut RemoteTaskRecord) {
    r.claim_owner = None;
    r.claim_token = None;
    r.claim_expires_at = None;
}

fn settle(r: &mut RemoteTaskRecord, now: i64) {
    r.completed_at = Some(now);
    r.next_poll_at = None;
    r.next_cancel_at = None;
    r.next_update_at = None;
    r.input_requests.clear();
}

/// The JSON-RPC-shaped error mcptask stores when it settles a task itself.
pub fn local_error(kind: FailureKind, message: &str) -> Value {
    json!({"code": -32603, "message": message, "data": {"source": "mcptask", "reason": kind.as_str()}})
}

fn fail_locally(
    change: &mut Change,
    kind: FailureKind,
    message: &str,
    now: i64,
    policy: &TrackerPolicy,
) {
    let message = truncate_text(message, policy.limits.max_message_bytes);
    let r = &mut change.record;
    r.status = TaskStatus::Failed;
    r.error = Some(local_error(kind, &message));
    r.status_message = Some(message);
    r.result = None;
    settle(r, now);
    change.emit(EventKind::Status, now);
}

fn ttl_elapsed(r: &RemoteTaskRecord, now: i64, policy: &TrackerPolicy) -> bool {
    r.remote_expires_at()
        .is_some_and(|e| e.saturating_add(policy.ttl_grace_ms) <= now)
}

/// Since when the server has given no good answer for this task: its last
/// snapshot, its last acknowledged cancel, or its creation.
fn error_streak_start(r: &RemoteTaskRecord) -> i64 {
    [r.last_polled_at, r.cancel_sent_at]
        .into_iter()
        .flatten()
        .fold(r.created_at, i64::max)
}

/// Whether applying `observation` to `current` makes mcptask stop tracking a
/// task whose work may still be running on its server (the error budget ran
/// out, its TTL passed without a terminal status, or the server broke the
/// protocol). The worker then sends the server a best-effort `tasks/cancel`,
/// so that giving up locally does not leave the remote work running unseen.
pub fn abandons_remote(
    current: &RemoteTaskRecord,
    phase: Phase,
    observation: &Observation,
    now: i64,
    policy: &TrackerPolicy,
) -> bool {
    if current.is_terminal() || phase == Phase::Cancel {
        return false;
    }
    let after = observe(current, phase, observation, now, policy, 0.5, 0).record;
    let reason = after
        .error
        .as_ref()
        .filter(|e| e["data"]["source"] == "mcptask")
        .and_then(|e| e["data"]["reason"].as_str());
    after.status == TaskStatus::Failed
        && matches!(
            reason,
            Some("error_budget" | "ttl_elapsed" | "protocol_violation")
        )
}

fn schedule_poll(r: &RemoteTaskRecord, now: i64, policy: &TrackerPolicy, jitter: f64) -> i64 {
    now + policy.poll.interval_ms(
        r.poll_interval_ms,
        r.status == TaskStatus::InputRequired,
        jitter,
    )
}

/// What applying a snapshot changed.
struct Absorbed {
    status_changed: bool,
    /// New outstanding input keys appeared.
    new_keys: bool,
    /// The work started again (a later attempt than any seen).
    rerun: bool,
}

/// Apply a snapshot's fields.
fn absorb(change: &mut Change, s: &RemoteSnapshot, policy: &TrackerPolicy) -> Absorbed {
    let r = &mut change.record;
    let rerun = s.attempt.is_some_and(|a| a > r.attempt);
    if let Some(attempt) = s.attempt {
        // Never backwards: a replica's stale read cannot undo a rerun seen.
        r.attempt = r.attempt.max(attempt);
    }
    let status = s.status.unwrap_or(r.status);
    let status_changed = status != r.status;
    r.status = status;
    r.status_message = s
        .status_message
        .as_deref()
        .map(|m| truncate_text(m, policy.limits.max_message_bytes));
    if s.remote_created_at.is_some() {
        r.remote_created_at = s.remote_created_at;
    }
    r.ttl_ms = s.ttl_ms;
    r.poll_interval_ms = s.poll_interval_ms;
    let before: BTreeSet<&String> = r.input_requests.iter().map(|(k, _)| k).collect();
    let after: BTreeSet<&String> = s.input_requests.iter().map(|(k, _)| k).collect();
    let keys_changed = before != after;
    let new_inputs: Vec<(String, Value)> = s
        .input_requests
        .iter()
        .filter(|(k, _)| !before.contains(k))
        .cloned()
        .collect();
    r.input_requests = if status == TaskStatus::InputRequired {
        s.input_requests.clone()
    } else {
        Vec::new()
    };
    change.new_inputs = new_inputs;
    match status {
        TaskStatus::Completed => {
            r.result = s.result.clone();
            r.result_truncated = s.result_truncated;
            r.error = None;
        }
        TaskStatus::Failed => {
            r.error = s.error.clone();
            r.result = None;
        }
        _ => {}
    }
    Absorbed {
        status_changed,
        new_keys: keys_changed && !s.input_requests.is_empty(),
        rerun,
    }
}

/// The row (and first event) for a newly recorded handle.
pub fn new_record(task: &NewRemoteTask, policy: &TrackerPolicy, jitter: f64) -> Change {
    let now = task.created_at;
    let r = RemoteTaskRecord {
        id: task.id.clone(),
        server: task.server.clone(),
        server_hash: task.server_hash.clone(),
        remote_task_id: task.remote_task_id.clone(),
        driver: task.driver.clone(),
        face: task.face,
        principal: task.principal.clone(),
        conversation: task.conversation.clone(),
        call_id: task.call_id.clone(),
        correlation: task.correlation.clone(),
        tool: task.tool.clone(),
        arguments: task.arguments.clone(),
        trace: task.trace.clone(),
        status: TaskStatus::Working,
        status_message: None,
        input_requests: Vec::new(),
        result: None,
        result_truncated: false,
        error: None,
        remote_created_at: None,
        ttl_ms: None,
        poll_interval_ms: None,
        created_at: now,
        updated_at: now,
        completed_at: None,
        next_poll_at: None,
        last_polled_at: None,
        poll_count: 0,
        consecutive_errors: 0,
        last_error: None,
        cancel_requested_at: None,
        cancel_sent_at: None,
        next_cancel_at: None,
        cancel_attempts: 0,
        next_update_at: None,
        claim_owner: None,
        claim_token: None,
        claim_expires_at: None,
        event_version: 0,
        delivered_version: 0,
        next_notify_at: None,
        notify_attempts: 0,
        last_notify_error: None,
        dead_letters: 0,
        attempt: 1,
    };
    let mut change = Change::of(r);
    absorb(&mut change, &task.snapshot, policy);
    if change.record.status.is_terminal() {
        settle(&mut change.record, now);
    } else {
        change.record.next_poll_at = Some(schedule_poll(&change.record, now, policy, jitter));
    }
    change.emit(EventKind::Created, now);
    change
}

/// Apply what a phase worker observed for a task it claimed.
///
/// `unsent_answers` counts answers stored locally that are still not
/// acknowledged once this observation's keys are marked sent (answers the
/// application gave while a `tasks/update` was in flight): they keep the update
/// phase due.
pub fn observe(
    current: &RemoteTaskRecord,
    phase: Phase,
    observation: &Observation,
    now: i64,
    policy: &TrackerPolicy,
    jitter: f64,
    unsent_answers: usize,
) -> Change {
    let mut change = Change::of(current.clone());
    clear_claim(&mut change.record);
    if current.is_terminal() {
        return change;
    }
    change.record.updated_at = now;
    match observation {
        Observation::Released => {}
        Observation::Deferred { delay_ms } => {
            let r = &mut change.record;
            let at = now + (*delay_ms).max(1);
            let due = match phase {
                Phase::Poll => &mut r.next_poll_at,
                Phase::Cancel => &mut r.next_cancel_at,
                Phase::Update => &mut r.next_update_at,
            };
            *due = Some(due.map_or(at, |d| d.max(at)));
        }
        Observation::Permanent { kind, message } => {
            fail_locally(&mut change, *kind, message, now, policy)
        }
        Observation::Snapshot(s) => {
            let r = &mut change.record;
            r.last_polled_at = Some(now);
            r.consecutive_errors = 0;
            r.last_error = None;
            let Absorbed {
                status_changed,
                new_keys,
                rerun,
            } = absorb(&mut change, s, policy);
            if rerun {
                // In the timeline before what the rerun did next, saying
                // which attempt, run by which process: the progress after
                // it is the new attempt's. (The rerun may have finished
                // before this poll, its status message gone: the event
                // carries its own.)
                change.emit(EventKind::Rerun, now);
                let attempt = change.record.attempt;
                let by = s.attempt_by.as_deref().unwrap_or("another process");
                if let Some((_, _, data)) = change.events.last_mut()
                    && let Some(data) = data.as_object_mut()
                {
                    data.insert("attempt".into(), json!(attempt));
                    data.insert(
                        "statusMessage".into(),
                        json!(crate::attempt::rerun_message(attempt, by)),
                    );
                }
            }
            let r = &mut change.record;
            if r.status.is_terminal() {
                settle(r, now);
                change.emit(EventKind::Status, now);
                return change;
            }
            if ttl_elapsed(r, now, policy) {
                let msg = "the task's TTL elapsed on the server without a terminal status";
                fail_locally(&mut change, FailureKind::TtlElapsed, msg, now, policy);
                return change;
            }
            r.next_poll_at = Some(schedule_poll(r, now, policy, jitter));
            if status_changed {
                change.emit(EventKind::Status, now);
            } else if new_keys {
                change.emit(EventKind::InputRequired, now);
            }
        }
        Observation::Transient(error) => {
            let error = truncate_text(error, policy.limits.max_message_bytes);
            let r = &mut change.record;
            r.consecutive_errors += 1;
            r.last_error = Some(error.clone());
            if phase == Phase::Cancel {
                r.cancel_attempts += 1;
            }
            if ttl_elapsed(r, now, policy) {
                let msg =
                    format!("the task's TTL elapsed while the server was unreachable: {error}");
                fail_locally(&mut change, FailureKind::TtlElapsed, &msg, now, policy);
                return change;
            }
            if phase == Phase::Cancel && r.cancel_attempts >= policy.max_cancel_attempts {
                // The server may still finish the task (a result nobody
                // must lose), so it is followed to the end its server gives
                // it, never recorded `cancelled` on our word alone; a server
                // that answers nothing at all is bounded by the error budget
                // and the TTL like any other.
                let msg = format!(
                    "cancellation could not be delivered after {} attempts; \
                     the task is followed to its end: {error}",
                    r.cancel_attempts
                );
                r.last_error = Some(truncate_text(&msg, policy.limits.max_message_bytes));
                r.next_cancel_at = None;
                r.next_poll_at = Some(now);
                change.emit(EventKind::Degraded, now);
                return change;
            }
            let failing_for = now - error_streak_start(r);
            if failing_for > policy.error_budget_ms {
                let msg = format!(
                    "gave up after {} consecutive errors over {}s (error budget {}s); \
                     a best-effort tasks/cancel is sent: {error}",
                    r.consecutive_errors,
                    failing_for / 1000,
                    policy.error_budget_ms / 1000
                );
                fail_locally(&mut change, FailureKind::ErrorBudget, &msg, now, policy);
                return change;
            }
            let retry_at = now + policy.backoff.delay_ms(r.consecutive_errors - 1);
            match phase {
                Phase::Poll => r.next_poll_at = Some(retry_at),
                Phase::Cancel => r.next_cancel_at = Some(retry_at),
                Phase::Update => r.next_update_at = Some(retry_at),
            }
            if r.consecutive_errors == policy.degraded_after {
                change.emit(EventKind::Degraded, now);
            }
        }
        Observation::CancelAcked => {
            let r = &mut change.record;
            r.cancel_attempts += 1;
            r.cancel_sent_at = Some(now);
            r.next_cancel_at = None;
            r.consecutive_errors = 0;
            r.last_error = None;
            // Keep observing: the server decides how the task ends.
            r.next_poll_at = Some(now);
        }
        Observation::UpdateRejected { keys, message } => {
            let r = &mut change.record;
            r.next_update_at = (unsent_answers > 0).then_some(now);
            r.consecutive_errors = 0;
            r.last_error = None;
            // The next poll says whether the server still asks, and how.
            r.next_poll_at = Some(now);
            let reason = format!("the server refused the answer: {message}");
            reopen(&mut change, keys, &reason, now, policy);
        }
        Observation::UpdateAcked { keys } => {
            let r = &mut change.record;
            r.next_update_at = (unsent_answers > 0).then_some(now);
            r.consecutive_errors = 0;
            r.last_error = None;
            r.next_poll_at = Some(now);
            change.sent_keys = keys.clone();
        }
    }
    change
}

/// Clear the answers of `keys` so they can be given again, and tell the
/// application (an `input_required` event naming the keys and why) while the
/// task still asks for them. Keys the task no longer lists are cleared
/// silently: nothing will resend a refused answer the server stopped asking for.
fn reopen(change: &mut Change, keys: &[String], reason: &str, now: i64, policy: &TrackerPolicy) {
    let r = &change.record;
    let mut asked = Vec::new();
    for key in keys {
        match r.input_requests.iter().find(|(k, _)| k == key) {
            Some((_, request)) => {
                asked.push(key.clone());
                change.reopened.push((key.clone(), request.clone()));
            }
            None => change.reopened.push((key.clone(), Value::Null)),
        }
    }
    if asked.is_empty() || r.status != TaskStatus::InputRequired {
        return;
    }
    change.emit(EventKind::InputRequired, now);
    if let Some((_, _, data)) = change.events.last_mut()
        && let Some(obj) = data.as_object_mut()
    {
        obj.insert("reopenedKeys".into(), json!(asked));
        obj.insert(
            "reopenedReason".into(),
            json!(truncate_text(reason, policy.limits.max_message_bytes)),
        );
    }
}

/// After a poll: keys the server still lists although it acknowledged their
/// answers (`acked`: key and acknowledgement time) are asked again, and the
/// task must not wait forever on an answer the server will not use. The
/// acknowledgement is eventually consistent (a server may list a key for a
/// moment after accepting its answer), so a key counts as re-asked only when a
/// poll at least one input-required poll interval after the acknowledgement
/// still lists it.
pub fn reopen_reasked(
    change: &mut Change,
    acked: &[(String, i64)],
    now: i64,
    policy: &TrackerPolicy,
) {
    let r = &change.record;
    if r.status != TaskStatus::InputRequired {
        return;
    }
    let grace = policy.poll.input_required_min_ms.max(0);
    let keys: Vec<String> = acked
        .iter()
        .filter(|(key, sent_at)| {
            sent_at.saturating_add(grace) <= now && r.input_requests.iter().any(|(k, _)| k == key)
        })
        .map(|(key, _)| key.clone())
        .collect();
    if keys.is_empty() {
        return;
    }
    let reason = "the server asked again for input it had accepted an answer to";
    reopen(change, &keys, reason, now, policy);
}

/// Record the application's intent to cancel. `None` when there is nothing to
/// do (terminal, or already requested: a repeat must not disturb a cancel in flight).
pub fn request_cancel(current: &RemoteTaskRecord, now: i64) -> Option<Change> {
    if current.is_terminal() || current.cancel_requested_at.is_some() {
        return None;
    }
    let mut change = Change::of(current.clone());
    let r = &mut change.record;
    r.cancel_requested_at = Some(now);
    r.next_cancel_at = Some(now);
    r.updated_at = now;
    change.emit(EventKind::CancelRequested, now);
    Some(change)
}

/// Store the application's answers to outstanding input requests.
/// `answered` holds keys answered before (each key is answered once).
pub fn answer_inputs(
    current: &RemoteTaskRecord,
    answered: &BTreeSet<String>,
    answers: &[(String, Value)],
    now: i64,
) -> (Option<Change>, AnswerResult) {
    let mut result = AnswerResult::default();
    if current.is_terminal() {
        result.ignored = answers.iter().map(|(k, _)| k.clone()).collect();
        return (None, result);
    }
    let outstanding: BTreeSet<&String> = current.input_requests.iter().map(|(k, _)| k).collect();
    for (key, _) in answers {
        if outstanding.contains(key) && !answered.contains(key) && !result.applied.contains(key) {
            result.applied.push(key.clone());
        } else {
            result.ignored.push(key.clone());
        }
    }
    if result.applied.is_empty() {
        return (None, result);
    }
    let mut change = Change::of(current.clone());
    let r = &mut change.record;
    r.updated_at = now;
    r.next_update_at = Some(now);
    change.emit(EventKind::Answered, now);
    (Some(change), result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn policy() -> TrackerPolicy {
        TrackerPolicy {
            poll: crate::policy::PollPolicy {
                jitter_permille: 0,
                ..Default::default()
            },
            error_budget_ms: 30_000,
            max_cancel_attempts: 2,
            degraded_after: 2,
            ..Default::default()
        }
    }

    fn snapshot(status: TaskStatus) -> RemoteSnapshot {
        RemoteSnapshot {
            status: Some(status),
            poll_interval_ms: Some(2_000),
            remote_created_at: Some(0),
            ttl_ms: Some(600_000),
            input_requests: if status == TaskStatus::InputRequired {
                vec![("k".into(), json!({"method": "elicitation/create"}))]
            } else {
                vec![]
            },
            result: (status == TaskStatus::Completed).then(|| json!({"content": []})),
            error: (status == TaskStatus::Failed).then(|| json!({"code": -1, "message": "x"})),
            ..Default::default()
        }
    }

    fn fresh() -> RemoteTaskRecord {
        new_record(
            &NewRemoteTask {
                id: "rt_1".into(),
                server: "s".into(),
                server_hash: "h".into(),
                remote_task_id: "r1".into(),
                driver: Default::default(),
                face: None,
                principal: None,
                conversation: None,
                call_id: None,
                correlation: None,
                tool: "t".into(),
                arguments: None,
                trace: None,
                snapshot: snapshot(TaskStatus::Working),
                created_at: 1_000,
            },
            &policy(),
            0.5,
        )
        .record
    }

    /// A deferred call moves only its own phase, by the delay, and counts
    /// as no error.
    #[test]
    fn a_deferred_call_is_due_again_after_the_delay_without_an_error() {
        let mut r = fresh();
        r.next_poll_at = Some(1_000);
        r.consecutive_errors = 2;
        let c = observe(
            &r,
            Phase::Poll,
            &Observation::Deferred { delay_ms: 200 },
            1_000,
            &policy(),
            0.5,
            0,
        );
        assert_eq!(c.record.next_poll_at, Some(1_200));
        assert_eq!(c.record.consecutive_errors, 2);
        assert!(c.events.is_empty());
        assert!(c.record.claim_owner.is_none());
    }

    /// A later attempt is told once, as a `rerun` event saying which
    /// attempt and which process, even when the rerun already finished; a
    /// replica's stale read of an earlier attempt never takes it back.
    #[test]
    fn a_rerun_is_one_event_with_its_attempt_and_process() {
        let poll = |r: &RemoteTaskRecord, s: RemoteSnapshot, now| {
            observe(
                r,
                Phase::Poll,
                &Observation::Snapshot(s),
                now,
                &policy(),
                0.5,
                0,
            )
        };
        let attempt = |n: i64, status| RemoteSnapshot {
            attempt: Some(n),
            attempt_by: Some("slot1.b".into()),
            ..snapshot(status)
        };
        let first = poll(&fresh(), attempt(1, TaskStatus::Working), 2_000);
        assert!(first.events.is_empty(), "attempt 1 is no news");
        let rerun = poll(&first.record, attempt(2, TaskStatus::Completed), 3_000);
        let kinds: Vec<EventKind> = rerun.events.iter().map(|(_, k, _)| *k).collect();
        assert_eq!(kinds, vec![EventKind::Rerun, EventKind::Status]);
        let data = &rerun.events[0].2;
        assert_eq!(data["attempt"], 2);
        let said = data["statusMessage"].as_str().unwrap();
        assert!(said.contains("attempt 2 by slot1.b"), "{said}");
        let mut live = first.record.clone();
        live.attempt = 2;
        let stale = poll(&live, attempt(1, TaskStatus::Working), 4_000);
        assert!(stale.events.is_empty());
        assert_eq!(stale.record.attempt, 2, "never backwards");
        let same = poll(&live, attempt(2, TaskStatus::Working), 5_000);
        assert!(same.events.is_empty(), "told once");
    }

    #[test]
    fn new_handles_are_scheduled_and_announced() {
        let r = fresh();
        assert_eq!(r.next_poll_at, Some(3_000));
        assert_eq!((r.event_version, r.next_notify_at), (1, Some(1_000)));
    }

    #[test]
    fn snapshot_resets_errors_and_honours_the_interval() {
        let mut r = fresh();
        r.consecutive_errors = 2;
        let c = observe(
            &r,
            Phase::Poll,
            &Observation::Snapshot(snapshot(TaskStatus::Working)),
            5_000,
            &policy(),
            0.5,
            0,
        );
        assert_eq!(c.record.consecutive_errors, 0);
        assert_eq!(c.record.next_poll_at, Some(7_000));
        assert!(c.events.is_empty(), "nothing changed, nothing to tell");
    }

    #[test]
    fn input_required_records_keys_once_and_slows_polling() {
        let r = fresh();
        let c = observe(
            &r,
            Phase::Poll,
            &Observation::Snapshot(snapshot(TaskStatus::InputRequired)),
            5_000,
            &policy(),
            0.5,
            0,
        );
        assert_eq!(c.new_inputs.len(), 1);
        assert_eq!(c.record.next_poll_at, Some(5_000 + 5_000));
        assert_eq!(c.events.len(), 1);
        let again = observe(
            &c.record,
            Phase::Poll,
            &Observation::Snapshot(snapshot(TaskStatus::InputRequired)),
            9_000,
            &policy(),
            0.5,
            0,
        );
        assert!(
            again.new_inputs.is_empty(),
            "keys are deduplicated across polls"
        );
        assert!(again.events.is_empty());
    }

    #[test]
    fn transient_errors_back_off_degrade_then_exhaust_the_budget() {
        let p = policy();
        let mut r = fresh();
        let mut delays = vec![];
        let mut kinds = vec![];
        for i in 0..4 {
            let c = observe(
                &r,
                Phase::Poll,
                &Observation::Transient("refused".into()),
                10_000 * (i + 1),
                &p,
                0.5,
                0,
            );
            kinds.extend(c.events.iter().map(|e| e.1));
            r = c.record;
            if let Some(at) = r.next_poll_at {
                delays.push(at - 10_000 * (i + 1));
            }
        }
        assert_eq!(delays, vec![1_000, 2_000, 4_000]);
        assert_eq!(kinds, vec![EventKind::Degraded, EventKind::Status]);
        assert_eq!(r.status, TaskStatus::Failed);
        assert_eq!(r.error.as_ref().unwrap()["data"]["reason"], "error_budget");
        assert_eq!(r.next_poll_at, None);
    }

    #[test]
    fn a_long_outage_within_the_budget_is_retried_however_many_errors() {
        let p = TrackerPolicy {
            poll: policy().poll,
            backoff: crate::policy::Backoff {
                base_ms: 100,
                max_ms: 100,
            },
            ..Default::default()
        };
        let mut r = fresh();
        r.ttl_ms = None;
        for _ in 0..1_000 {
            let now = r.next_poll_at.unwrap();
            let obs = Observation::Transient("HTTP 503".into());
            assert!(!abandons_remote(&r, Phase::Poll, &obs, now, &p));
            r = observe(&r, Phase::Poll, &obs, now, &p, 0.5, 0).record;
            assert_eq!(r.status, TaskStatus::Working, "failed at {now}: {r:#?}");
        }
        assert_eq!(r.consecutive_errors, 1_000);
        let late = 1_000 + p.error_budget_ms + 1;
        let obs = Observation::Transient("HTTP 503".into());
        assert!(abandons_remote(&r, Phase::Poll, &obs, late, &p));
        let c = observe(&r, Phase::Poll, &obs, late, &p, 0.5, 0);
        assert_eq!(c.record.error.unwrap()["data"]["reason"], "error_budget");
    }

    #[test]
    fn the_budget_counts_from_the_last_good_answer() {
        let p = policy();
        let mut r = fresh();
        r.last_polled_at = Some(50_000);
        let obs = Observation::Transient("down".into());
        let c = observe(
            &r,
            Phase::Poll,
            &obs,
            50_000 + p.error_budget_ms,
            &p,
            0.5,
            0,
        );
        assert_eq!(c.record.status, TaskStatus::Working);
        let c = observe(
            &r,
            Phase::Poll,
            &obs,
            50_001 + p.error_budget_ms,
            &p,
            0.5,
            0,
        );
        assert_eq!(c.record.status, TaskStatus::Failed);
        assert!(!abandons_remote(
            &r,
            Phase::Cancel,
            &obs,
            50_001 + p.error_budget_ms,
            &p
        ));
        let gone = Observation::Permanent {
            kind: FailureKind::NotFound,
            message: "gone".into(),
        };
        assert!(!abandons_remote(&r, Phase::Poll, &gone, 60_000, &p));
    }

    #[test]
    fn ttl_backstop_fails_a_task_the_server_never_settles() {
        let r = fresh();
        let late = 600_000 + policy().ttl_grace_ms;
        let c = observe(
            &r,
            Phase::Poll,
            &Observation::Snapshot(snapshot(TaskStatus::Working)),
            late,
            &policy(),
            0.5,
            0,
        );
        assert_eq!(c.record.status, TaskStatus::Failed);
        assert_eq!(c.record.error.unwrap()["data"]["reason"], "ttl_elapsed");
    }

    #[test]
    fn cancel_is_requested_once_then_observed() {
        let r = fresh();
        let c = request_cancel(&r, 2_000).unwrap();
        assert!(
            request_cancel(&c.record, 2_001).is_none(),
            "a repeat changes nothing"
        );
        let acked = observe(
            &c.record,
            Phase::Cancel,
            &Observation::CancelAcked,
            2_500,
            &policy(),
            0.5,
            0,
        );
        assert_eq!(
            acked.record.status,
            TaskStatus::Working,
            "the server decides the outcome"
        );
        assert_eq!(acked.record.next_poll_at, Some(2_500));
        assert_eq!(acked.record.next_cancel_at, None);
    }

    #[test]
    fn answers_given_during_an_update_keep_the_phase_due() {
        let r = observe(
            &fresh(),
            Phase::Poll,
            &Observation::Snapshot(snapshot(TaskStatus::InputRequired)),
            5_000,
            &policy(),
            0.5,
            0,
        )
        .record;
        let acked = Observation::UpdateAcked {
            keys: vec!["k".into()],
        };
        assert_eq!(
            observe(&r, Phase::Update, &acked, 6_000, &policy(), 0.5, 0)
                .record
                .next_update_at,
            None
        );
        assert_eq!(
            observe(&r, Phase::Update, &acked, 6_000, &policy(), 0.5, 1)
                .record
                .next_update_at,
            Some(6_000)
        );
    }

    #[test]
    fn a_refused_answer_reopens_the_key_and_polls_at_once() {
        let asked = observe(
            &fresh(),
            Phase::Poll,
            &Observation::Snapshot(snapshot(TaskStatus::InputRequired)),
            5_000,
            &policy(),
            0.5,
            0,
        )
        .record;
        let refused = Observation::UpdateRejected {
            keys: vec!["k".into(), "gone".into()],
            message: "bad answer".into(),
        };
        let c = observe(&asked, Phase::Update, &refused, 6_000, &policy(), 0.5, 0);
        assert_eq!(c.record.status, TaskStatus::InputRequired, "not a failure");
        assert_eq!(
            (c.record.next_poll_at, c.record.next_update_at),
            (Some(6_000), None)
        );
        assert_eq!(c.record.consecutive_errors, 0);
        assert_eq!(
            c.reopened,
            vec![
                ("k".to_string(), json!({"method": "elicitation/create"})),
                ("gone".to_string(), Value::Null)
            ]
        );
        assert_eq!(c.events.len(), 1);
        let (_, kind, data) = &c.events[0];
        assert_eq!(*kind, EventKind::InputRequired);
        assert_eq!(data["reopenedKeys"], json!(["k"]));
        assert!(
            data["reopenedReason"]
                .as_str()
                .unwrap()
                .contains("bad answer")
        );
        // Other answers stored meanwhile keep the update phase due.
        let c = observe(&asked, Phase::Update, &refused, 6_000, &policy(), 0.5, 1);
        assert_eq!(c.record.next_update_at, Some(6_000));
    }

    #[test]
    fn a_key_still_listed_after_its_answer_was_accepted_is_reopened_after_one_interval() {
        let p = policy();
        let asked = observe(
            &fresh(),
            Phase::Poll,
            &Observation::Snapshot(snapshot(TaskStatus::InputRequired)),
            5_000,
            &p,
            0.5,
            0,
        )
        .record;
        let again = Observation::Snapshot(snapshot(TaskStatus::InputRequired));
        let acked = [("k".to_string(), 6_000)];
        // Right after the acknowledgement: the server may not show it yet.
        let mut c = observe(&asked, Phase::Poll, &again, 6_001, &p, 0.5, 0);
        reopen_reasked(&mut c, &acked, 6_001, &p);
        assert!(c.reopened.is_empty() && c.events.is_empty());
        // One input-required interval later it still asks: asked again.
        let later = 6_000 + p.poll.input_required_min_ms;
        let mut c = observe(&asked, Phase::Poll, &again, later, &p, 0.5, 0);
        reopen_reasked(&mut c, &acked, later, &p);
        assert_eq!(c.reopened.len(), 1);
        assert_eq!(c.events[0].1, EventKind::InputRequired);
        // A task that moved on reopens nothing.
        let mut c = observe(
            &asked,
            Phase::Poll,
            &Observation::Snapshot(snapshot(TaskStatus::Working)),
            later,
            &p,
            0.5,
            0,
        );
        reopen_reasked(&mut c, &acked, later, &p);
        assert!(c.reopened.is_empty());
    }

    #[test]
    fn stored_error_texts_are_bounded() {
        let p = policy();
        let huge = "e".repeat(50_000);
        let c = observe(
            &fresh(),
            Phase::Poll,
            &Observation::Transient(huge.clone()),
            2_000,
            &p,
            0.5,
            0,
        );
        assert!(c.record.last_error.unwrap().len() <= p.limits.max_message_bytes + 16);
        let perm = Observation::Permanent {
            kind: FailureKind::ProtocolViolation,
            message: huge,
        };
        let c = observe(&fresh(), Phase::Poll, &perm, 2_000, &p, 0.5, 0);
        let message = c.record.error.unwrap()["message"].as_str().unwrap().len();
        assert!(message <= p.limits.max_message_bytes + 16);
        assert!(c.record.status_message.unwrap().len() <= p.limits.max_message_bytes + 16);
    }

    /// Two failed cancels (the test policy's bound), then the next poll.
    fn cancel_given_up(r: &RemoteTaskRecord) -> RemoteTaskRecord {
        let down = Observation::Transient("down".into());
        let r = request_cancel(r, 2_000).unwrap().record;
        let c1 = observe(&r, Phase::Cancel, &down, 3_000, &policy(), 0.5, 0);
        assert_eq!(c1.record.next_cancel_at, Some(4_000));
        let c2 = observe(&c1.record, Phase::Cancel, &down, 5_000, &policy(), 0.5, 0);
        assert!(!c2.record.status.is_terminal(), "{:?}", c2.record.status);
        assert_eq!(c2.record.next_cancel_at, None, "no more cancel attempts");
        assert_eq!(c2.record.next_poll_at, Some(5_000));
        assert!(
            c2.record
                .last_error
                .as_deref()
                .unwrap()
                .contains("followed to its end")
        );
        let kinds: Vec<_> = c2.events.iter().map(|e| e.1).collect();
        assert_eq!(kinds, vec![EventKind::Degraded]);
        c2.record
    }

    #[test]
    fn undeliverable_cancel_follows_the_task_to_the_servers_end() {
        // The server answers polls but not cancels: what it reports wins.
        let r = cancel_given_up(&fresh());
        let done = Observation::Snapshot(snapshot(TaskStatus::Completed));
        let c = observe(&r, Phase::Poll, &done, 6_000, &policy(), 0.5, 0);
        assert_eq!(c.record.status, TaskStatus::Completed);
        // Nor does a failed poll settle it (the error budget and the TTL
        // do, as for any task).
        let mut r = r;
        r.last_polled_at = Some(3_500);
        let down = Observation::Transient("down".into());
        let c = observe(&r, Phase::Poll, &down, 6_000, &policy(), 0.5, 0);
        assert!(!c.record.status.is_terminal(), "{:?}", c.record.status);
    }

    #[test]
    fn undeliverable_cancel_on_a_silent_server_ends_by_the_error_budget() {
        // Nothing reaches the server after the cancel either: the task is
        // not called cancelled (the server may have finished it), it fails
        // with the reason once the error budget is spent.
        let r = cancel_given_up(&fresh());
        let down = Observation::Transient("still down".into());
        let c = observe(&r, Phase::Poll, &down, 6_000, &policy(), 0.5, 0);
        assert!(!c.record.status.is_terminal(), "{:?}", c.record.status);
        let late = 1_000 + policy().error_budget_ms + 1;
        let c = observe(&c.record, Phase::Poll, &down, late, &policy(), 0.5, 0);
        assert_eq!(c.record.status, TaskStatus::Failed);
        assert_eq!(c.record.error.unwrap()["data"]["reason"], "error_budget");
    }

    #[test]
    fn answers_only_for_outstanding_keys_once() {
        let r = observe(
            &fresh(),
            Phase::Poll,
            &Observation::Snapshot(snapshot(TaskStatus::InputRequired)),
            5_000,
            &policy(),
            0.5,
            0,
        )
        .record;
        let answers = vec![
            ("k".to_string(), json!({"action": "accept"})),
            ("nope".to_string(), json!({})),
        ];
        let (c, res) = answer_inputs(&r, &BTreeSet::new(), &answers, 6_000);
        assert_eq!(res.applied, ["k"]);
        assert_eq!(res.ignored, ["nope"]);
        assert_eq!(c.unwrap().record.next_update_at, Some(6_000));
        let answered: BTreeSet<String> = ["k".to_string()].into();
        let (c, res) = answer_inputs(&r, &answered, &answers, 7_000);
        assert!(c.is_none());
        assert_eq!(res.ignored.len(), 2);
    }

    fn any_observation() -> impl Strategy<Value = (Phase, Observation)> {
        let status = prop_oneof![
            Just(TaskStatus::Working),
            Just(TaskStatus::InputRequired),
            Just(TaskStatus::Completed),
            Just(TaskStatus::Failed),
            Just(TaskStatus::Cancelled),
        ];
        let phase = prop_oneof![Just(Phase::Poll), Just(Phase::Cancel), Just(Phase::Update)];
        let obs = prop_oneof![
            status.prop_map(|s| Observation::Snapshot(snapshot(s))),
            Just(Observation::Transient("boom".into())),
            Just(Observation::CancelAcked),
            Just(Observation::UpdateAcked {
                keys: vec!["k".into()]
            }),
            Just(Observation::Released),
            Just(Observation::Deferred { delay_ms: 50 }),
            Just(Observation::UpdateRejected {
                keys: vec!["k".into()],
                message: "invalid".into()
            }),
            Just(Observation::Permanent {
                kind: FailureKind::ProtocolViolation,
                message: "bad".into()
            }),
        ];
        (phase, obs)
    }

    proptest! {
        /// Whatever happens, terminal is absorbing, claims are cleared, event
        /// versions grow by one, and a live task always has a next poll.
        #[test]
        fn the_state_machine_holds_its_invariants(steps in proptest::collection::vec(any_observation(), 1..40)) {
            let p = policy();
            let mut r = fresh();
            let mut now = 1_000;
            for (phase, obs) in steps {
                now += 500;
                r.claim_owner = Some("w".into());
                r.claim_token = Some("t".into());
                let before = r.clone();
                let c = observe(&r, phase, &obs, now, &p, 0.5, 0);
                prop_assert!(c.record.claim_token.is_none());
                if before.is_terminal() {
                    prop_assert_eq!(c.record.status, before.status);
                    prop_assert_eq!(&c.record.result, &before.result);
                    prop_assert!(c.events.is_empty());
                }
                let mut v = before.event_version;
                for (version, _, _) in &c.events {
                    v += 1;
                    prop_assert_eq!(*version, v);
                }
                prop_assert_eq!(c.record.event_version, v);
                if c.record.is_terminal() {
                    prop_assert!(c.record.next_poll_at.is_none() && c.record.completed_at.is_some());
                } else if !matches!(obs, Observation::Released) {
                    let due = [c.record.next_poll_at, c.record.next_cancel_at, c.record.next_update_at];
                    prop_assert!(due.iter().any(Option::is_some), "a live task must stay scheduled: {:?}", c.record);
                }
                r = c.record;
            }
        }
    }
}
