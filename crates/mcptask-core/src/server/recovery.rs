//! What recovery does with a task whose owner died.
//!
//! A replica that claims an orphaned task must settle it or run it again, and
//! every replica must decide the same way whatever store it runs on. The rule
//! lives here, as one pure function; the runtime only carries the decision out
//! (a fenced `finish`, or `begin_rerun` and a fresh attempt).

use super::{InterruptPolicy, Outcome, ServerTaskRecord, expired_outcome};

/// Status message of a task cancelled while no process was running it.
pub const CANCELLED_WHILE_ORPHANED: &str = "Cancelled while no server process was running it";

/// What to do with a task just claimed from an owner whose lease lapsed.
#[derive(Debug, Clone, PartialEq)]
pub enum Recovery {
    /// Settle the task with this outcome; its work never runs again.
    Settle(Outcome),
    /// Run the tool again from the start as attempt `record.attempt + 1`.
    Rerun,
}

/// Decide the fate of `record`, claimed by recovery at `now`.
///
/// `policy` is the interrupt policy of the task's tool on this server, or
/// `None` when this server does not serve that tool. In order of precedence:
/// a task past its TTL fails as expired; a task whose cancellation was
/// requested is cancelled (nobody is left to observe it); a task whose tool is
/// missing fails; otherwise the tool's policy decides: `Fail` settles it as
/// `failed` with an "interrupted" error, `Rerun` runs it again.
///
/// ```
/// use mcptask_core::server::recovery::{Recovery, decide};
/// use mcptask_core::server::{InterruptPolicy, NewServerTask};
/// let record = NewServerTask {
///     id: "t".into(), principal: None, tool: "x".into(), arguments: serde_json::json!({}),
///     call_inputs: None, created_at: 0, ttl_ms: Some(1_000), poll_interval_ms: None,
///     status_message: None, owner: "A".into(), claim_token: "k".into(),
///     driver: None, driver_state: None, call_row: None,
/// }.into_record();
/// assert_eq!(decide(&record, Some(InterruptPolicy::Rerun), 10), Recovery::Rerun);
/// assert!(matches!(decide(&record, Some(InterruptPolicy::Rerun), 1_000), Recovery::Settle(_)));
/// ```
pub fn decide(record: &ServerTaskRecord, policy: Option<InterruptPolicy>, now: i64) -> Recovery {
    if record.is_overdue(now) {
        return Recovery::Settle(expired_outcome());
    }
    if record.cancel_requested {
        return Recovery::Settle(Outcome::Cancelled {
            message: Some(CANCELLED_WHILE_ORPHANED.into()),
        });
    }
    match policy {
        None => Recovery::Settle(Outcome::failed(
            -32603,
            format!(
                "tool {:?} is not available on the server that recovered this task",
                record.tool
            ),
        )),
        Some(InterruptPolicy::Fail) => Recovery::Settle(interrupted(record.attempt)),
        Some(InterruptPolicy::Rerun) => Recovery::Rerun,
    }
}

/// The honest end of an attempt that stopped with its process.
fn interrupted(attempt: i64) -> Outcome {
    Outcome::Failed {
        error: super::interrupted_error(attempt),
        message: format!(
            "Interrupted: the server process running attempt {attempt} stopped before it finished"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TaskStatus;
    use crate::server::NewServerTask;
    use crate::server::{EXPIRED_MESSAGE, expired_error};
    use proptest::prelude::*;

    fn record(ttl_ms: Option<i64>, cancel_requested: bool, attempt: i64) -> ServerTaskRecord {
        let mut r = NewServerTask {
            id: "t1".into(),
            principal: None,
            tool: "report".into(),
            arguments: serde_json::json!({}),
            call_inputs: None,
            created_at: 1_000,
            ttl_ms,
            poll_interval_ms: None,
            status_message: None,
            owner: "dead".into(),
            claim_token: "k".into(),
            driver: None,
            driver_state: None,
            call_row: None,
        }
        .into_record();
        r.cancel_requested = cancel_requested;
        r.attempt = attempt;
        r
    }

    fn settled(recovery: Recovery) -> Outcome {
        match recovery {
            Recovery::Settle(outcome) => outcome,
            Recovery::Rerun => panic!("expected a settlement"),
        }
    }

    #[test]
    fn overdue_fails_as_expired_even_when_cancelled_or_rerunnable() {
        let r = record(Some(500), true, 1);
        let outcome = settled(decide(&r, Some(InterruptPolicy::Rerun), 1_500));
        assert_eq!(
            outcome,
            Outcome::Failed {
                error: expired_error(),
                message: EXPIRED_MESSAGE.into()
            }
        );
    }

    #[test]
    fn cancel_requested_cancels() {
        let r = record(None, true, 3);
        let outcome = settled(decide(&r, Some(InterruptPolicy::Rerun), 9_999));
        assert_eq!(
            outcome,
            Outcome::Cancelled {
                message: Some(CANCELLED_WHILE_ORPHANED.into())
            }
        );
    }

    #[test]
    fn missing_tool_fails_naming_it() {
        let outcome = settled(decide(&record(None, false, 1), None, 2_000));
        let Outcome::Failed { error, message } = outcome else {
            panic!("expected failed")
        };
        assert_eq!(error["code"], -32603);
        assert!(message.contains("\"report\" is not available"), "{message}");
    }

    #[test]
    fn fail_policy_reports_the_interrupted_attempt() {
        let outcome = settled(decide(
            &record(None, false, 2),
            Some(InterruptPolicy::Fail),
            2_000,
        ));
        let Outcome::Failed { error, message } = outcome else {
            panic!("expected failed")
        };
        assert_eq!(error, crate::server::interrupted_error(2));
        assert_eq!(error["data"]["attempt"], 2);
        assert!(message.starts_with("Interrupted:") && message.contains("attempt 2"));
    }

    #[test]
    fn rerun_policy_reruns() {
        let r = record(Some(10_000), false, 1);
        assert_eq!(
            decide(&r, Some(InterruptPolicy::Rerun), 2_000),
            Recovery::Rerun
        );
    }

    fn policy() -> impl Strategy<Value = Option<InterruptPolicy>> {
        prop_oneof![
            Just(None),
            Just(Some(InterruptPolicy::Fail)),
            Just(Some(InterruptPolicy::Rerun)),
        ]
    }

    proptest! {
        #[test]
        fn reruns_exactly_when_live_uncancelled_and_rerunnable(
            ttl in proptest::option::of(0i64..100_000),
            cancel in any::<bool>(),
            attempt in 1i64..50,
            policy in policy(),
            now in 0i64..200_000,
        ) {
            let r = record(ttl, cancel, attempt);
            let decision = decide(&r, policy, now);
            let should_rerun =
                !r.is_overdue(now) && !cancel && policy == Some(InterruptPolicy::Rerun);
            prop_assert_eq!(decision == Recovery::Rerun, should_rerun);
            if let Recovery::Settle(outcome) = decision {
                // Every settlement is terminal, and only cancellation cancels.
                prop_assert!(outcome.status().is_terminal());
                prop_assert_eq!(
                    outcome.status() == TaskStatus::Cancelled,
                    cancel && !r.is_overdue(now)
                );
                if let Outcome::Failed { error, message } = &outcome {
                    prop_assert_eq!(error["code"].as_i64(), Some(-32603));
                    prop_assert!(!message.is_empty());
                }
            }
        }
    }
}
