//! How a stored task reads to a client at a given time.
//!
//! The TTL sweep marks overdue tasks `failed` only when it runs, but what a
//! client sees must not depend on sweep timing or on which replica answers:
//! a live task past its deadline already reads as `failed` (expired), exactly
//! as the sweep will write it, except that it reads as having expired at its
//! deadline.

use std::borrow::Cow;

use serde_json::Value;

use super::{
    EXPIRED_MESSAGE, Outcome, ServerTaskRecord, ServerTaskState, expired_error, expired_outcome,
};
use crate::TaskStatus;

/// `record` as a reader sees it at `now`: unchanged, unless it is live and
/// past its TTL, in which case it reads `failed` with the expiry error,
/// updated at its deadline.
///
/// ```
/// use mcptask_core::server::{NewServerTask, reading::seen_at};
/// use mcptask_core::TaskStatus;
/// let record = NewServerTask {
///     id: "t".into(), principal: None, tool: "x".into(), arguments: serde_json::json!({}),
///     call_inputs: None, created_at: 0, ttl_ms: Some(1_000), poll_interval_ms: None,
///     status_message: None, owner: "A".into(), claim_token: "k".into(),
///     driver: None, driver_state: None, call_row: None,
/// }.into_record();
/// assert_eq!(seen_at(&record, 999).status, TaskStatus::Working);
/// let late = seen_at(&record, 1_000);
/// assert_eq!((late.status, late.updated_at), (TaskStatus::Failed, 1_000));
/// ```
pub fn seen_at(record: &ServerTaskRecord, now: i64) -> Cow<'_, ServerTaskRecord> {
    if !record.is_overdue(now) {
        return Cow::Borrowed(record);
    }
    let mut seen = record.clone();
    expire(
        Reading {
            status: &mut seen.status,
            message: &mut seen.status_message,
            result: &mut seen.result,
            error: &mut seen.error,
            updated_at: &mut seen.updated_at,
        },
        record.expires_at(),
        now,
    );
    Cow::Owned(seen)
}

/// [`seen_at`] for the narrower [`ServerTaskState`] that `tasks/get` reads:
/// the same rule, applied in place.
///
/// ```
/// use mcptask_core::server::{NewServerTask, ServerTaskState, ServerTaskView, reading::state_seen_at};
/// use mcptask_core::TaskStatus;
/// let record = NewServerTask {
///     id: "t".into(), principal: None, tool: "x".into(), arguments: serde_json::json!({}),
///     call_inputs: None, created_at: 0, ttl_ms: Some(1_000), poll_interval_ms: None,
///     status_message: None, owner: "A".into(), claim_token: "k".into(),
///     driver: None, driver_state: None, call_row: None,
/// }.into_record();
/// let state = ServerTaskState::of(&ServerTaskView { record, input_requests: vec![] });
/// assert_eq!(state_seen_at(state.clone(), 999).status, TaskStatus::Working);
/// let late = state_seen_at(state, 1_000);
/// assert_eq!((late.status, late.updated_at), (TaskStatus::Failed, 1_000));
/// ```
pub fn state_seen_at(mut state: ServerTaskState, now: i64) -> ServerTaskState {
    if state.is_overdue(now) {
        let expires_at = state.expires_at();
        expire(
            Reading {
                status: &mut state.status,
                message: &mut state.status_message,
                result: &mut state.result,
                error: &mut state.error,
                updated_at: &mut state.updated_at,
            },
            expires_at,
            now,
        );
    }
    state
}

/// The fields expiry changes in what a reader sees.
struct Reading<'a> {
    status: &'a mut TaskStatus,
    message: &'a mut Option<String>,
    result: &'a mut Option<Value>,
    error: &'a mut Option<Value>,
    updated_at: &'a mut i64,
}

/// How an overdue task reads: `failed` with the expiry error, updated at its
/// deadline.
fn expire(reading: Reading<'_>, expires_at: Option<i64>, now: i64) {
    *reading.status = TaskStatus::Failed;
    *reading.message = Some(EXPIRED_MESSAGE.to_string());
    *reading.result = None;
    *reading.error = Some(expired_error());
    *reading.updated_at = expires_at.unwrap_or(now);
}

/// What a fenced finish of a task expiring at `expires_at` stores at `now`:
/// `outcome`, unless the task is past its TTL, in which case it already reads
/// `failed` ([`seen_at`]) and must stay so. Terminal is absorbing as readers
/// see it: work that finishes after the deadline but before the sweep cannot
/// turn an expired task `completed`.
///
/// ```
/// use mcptask_core::server::{Outcome, expired_outcome, reading::settles_as};
/// let done = Outcome::Completed { result: serde_json::json!({"content": []}) };
/// assert_eq!(settles_as(Some(1_000), done.clone(), 999), done);
/// assert_eq!(settles_as(Some(1_000), done.clone(), 1_000), expired_outcome());
/// assert_eq!(settles_as(None, done.clone(), i64::MAX), done);
/// ```
pub fn settles_as(expires_at: Option<i64>, outcome: Outcome, now: i64) -> Outcome {
    if expires_at.is_some_and(|e| e <= now) {
        expired_outcome()
    } else {
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::NewServerTask;
    use proptest::prelude::*;
    use serde_json::json;

    fn record(status: TaskStatus, created_at: i64, ttl_ms: Option<i64>) -> ServerTaskRecord {
        let mut r = NewServerTask {
            id: "t".into(),
            principal: Some("alice".into()),
            tool: "x".into(),
            arguments: json!({}),
            call_inputs: None,
            created_at,
            ttl_ms,
            poll_interval_ms: Some(500),
            status_message: Some("crunching".into()),
            owner: "A".into(),
            claim_token: "k".into(),
            driver: None,
            driver_state: None,
            call_row: None,
        }
        .into_record();
        r.status = status;
        if status == TaskStatus::Completed {
            r.result = Some(json!({"content": []}));
        }
        r
    }

    #[test]
    fn a_live_task_before_its_deadline_reads_as_stored() {
        let r = record(TaskStatus::InputRequired, 0, Some(1_000));
        assert!(matches!(seen_at(&r, 999), Cow::Borrowed(_)));
    }

    #[test]
    fn a_live_task_past_its_deadline_reads_expired_at_the_deadline() {
        let r = record(TaskStatus::Working, 100, Some(1_000));
        let seen = seen_at(&r, 50_000);
        assert_eq!(seen.status, TaskStatus::Failed);
        assert_eq!(seen.updated_at, 1_100);
        assert_eq!(seen.status_message.as_deref(), Some(EXPIRED_MESSAGE));
        assert_eq!(seen.error, Some(expired_error()));
        assert_eq!(
            (seen.ttl_ms, seen.poll_interval_ms),
            (Some(1_000), Some(500))
        );
    }

    #[test]
    fn settled_and_unlimited_tasks_never_read_expired() {
        let done = record(TaskStatus::Completed, 0, Some(10));
        assert_eq!(*seen_at(&done, 1_000_000), done);
        let forever = record(TaskStatus::Working, 0, None);
        assert_eq!(*seen_at(&forever, i64::MAX), forever);
    }

    fn status() -> impl Strategy<Value = TaskStatus> {
        prop_oneof![
            Just(TaskStatus::Working),
            Just(TaskStatus::InputRequired),
            Just(TaskStatus::Completed),
            Just(TaskStatus::Failed),
            Just(TaskStatus::Cancelled),
        ]
    }

    fn outcome() -> impl Strategy<Value = Outcome> {
        prop_oneof![
            Just(Outcome::Completed {
                result: json!({"content": []})
            }),
            Just(Outcome::failed(-32000, "boom")),
            Just(Outcome::Cancelled { message: None }),
        ]
    }

    proptest! {
        /// Whatever a finish stores, the task reads the same before and after
        /// it once past its TTL: `failed`, expired.
        #[test]
        fn a_finish_never_changes_how_an_expired_task_reads(
            created in 0i64..1_000_000,
            ttl in proptest::option::of(0i64..1_000_000),
            now in 0i64..3_000_000,
            outcome in outcome(),
        ) {
            let r = record(TaskStatus::Working, created, ttl);
            let before = seen_at(&r, now).into_owned();
            let stored = settles_as(r.expires_at(), outcome.clone(), now);
            if r.is_overdue(now) {
                prop_assert_eq!(stored.status(), before.status);
                prop_assert_eq!(stored, expired_outcome());
            } else {
                prop_assert_eq!(stored, outcome);
            }
        }

        /// `tasks/get`'s narrow read expires exactly as the whole record does.
        #[test]
        fn the_state_reads_as_its_record_does(
            status in status(),
            created in 0i64..1_000_000,
            ttl in proptest::option::of(0i64..1_000_000),
            now in 0i64..3_000_000,
        ) {
            let r = record(status, created, ttl);
            let inputs = vec![("k".to_string(), json!({"method": "elicitation/create"}))];
            let view = |record: ServerTaskRecord| crate::server::ServerTaskView {
                record,
                input_requests: inputs.clone(),
            };
            let state = state_seen_at(ServerTaskState::of(&view(r.clone())), now);
            prop_assert_eq!(state, ServerTaskState::of(&view(seen_at(&r, now).into_owned())));
        }

        #[test]
        fn reading_is_the_stored_row_or_the_sweeps_verdict(
            status in status(),
            created in 0i64..1_000_000,
            ttl in proptest::option::of(0i64..1_000_000),
            now in 0i64..3_000_000,
        ) {
            let r = record(status, created, ttl);
            let seen = seen_at(&r, now).into_owned();
            // Nothing reads as overdue, and reading twice changes nothing.
            prop_assert!(!seen.is_overdue(now));
            prop_assert_eq!(&*seen_at(&seen, now), &seen);
            if r.is_overdue(now) {
                prop_assert_eq!(seen.status, TaskStatus::Failed);
                prop_assert_eq!(Some(seen.updated_at), r.expires_at());
                prop_assert!(seen.updated_at <= now);
                prop_assert_eq!(seen.error, Some(expired_error()));
                // Identity, timing hints and ownership are untouched.
                prop_assert_eq!((&seen.id, seen.created_at, seen.ttl_ms), (&r.id, r.created_at, r.ttl_ms));
                prop_assert_eq!(&seen.principal, &r.principal);
            } else {
                prop_assert_eq!(seen, r);
            }
        }
    }
}
