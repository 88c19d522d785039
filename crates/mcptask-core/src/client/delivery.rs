//! Per-target delivery of a task's events: what falls behind, what is given
//! up on, and the time budget that decides it.
//!
//! The outbox cursor of a task (`delivered_version`) moves past an event once
//! every notify target either accepted it or took it over in a *lag* row of
//! its own (`(task, target)` behind from a version). A failing target thus
//! never holds the others back: they keep receiving in order while the lag
//! row is retried with backoff. An event a target cannot take within the
//! budget (counted from the event, or from a redrive) becomes a dead letter of
//! that target; a redrive turns dead letters back into a lag row.

use serde::Serialize;

use super::{Fence, TaskEvent};

/// A target that did not take a task's events from `from_version` on: the
/// redelivery worker catches it up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetLag {
    /// The notify target's name.
    pub target: String,
    /// The first version the target has not received.
    pub from_version: i64,
    /// Why it failed, when it was tried.
    pub error: Option<String>,
    /// When to try again (epoch ms).
    pub retry_at: i64,
}

/// One event a target gave up on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeadLetter {
    /// The task concerned.
    pub task_id: String,
    /// The event's version.
    pub version: i64,
    /// The notify target that could not take it.
    pub target: String,
    /// The last delivery error.
    pub error: String,
    /// When it was given up on (epoch ms).
    pub dead_at: i64,
}

/// Which dead letters to list or redrive (every set field must match).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeadLetterFilter {
    /// Only this task's.
    pub task_id: Option<String>,
    /// Only this target's.
    pub target: Option<String>,
}

/// A `(task, target)` behind the outbox, claimed for redelivery.
#[derive(Debug, Clone, PartialEq)]
pub struct LagClaim {
    /// The task, the claim owner and its token.
    pub fence: Fence,
    /// The notify target to catch up.
    pub target: String,
    /// The first version the target has not received.
    pub next_version: i64,
    /// Failed attempts of the oldest pending event so far.
    pub attempts: i64,
    /// The budget of each event runs from `max(occurred_at, budget_from)`.
    pub budget_from: i64,
    /// The target's pending events, oldest first.
    pub events: Vec<TaskEvent>,
}

/// The redelivery worker's result for one lag claim.
#[derive(Debug, Clone, PartialEq)]
pub struct LagResult {
    /// The claim this result belongs to.
    pub fence: Fence,
    /// The notify target.
    pub target: String,
    /// The first version still pending for the target after this attempt
    /// (one past the last delivered or dead-lettered event).
    pub next_version: i64,
    /// Events given up on in this attempt.
    pub dead: Vec<DeadLetter>,
    /// Set when the event at `next_version` failed: error and next attempt time.
    pub failure: Option<(String, i64)>,
    /// Shutdown: give the claim back untouched.
    pub released: bool,
}

/// When a target stops retrying an event: `budget_ms` after the later of the
/// event's time and the last redrive.
///
/// ```
/// use mcptask_core::client::delivery::give_up_at;
/// assert_eq!(give_up_at(1_000, 0, 500), 1_500);
/// assert_eq!(give_up_at(1_000, 9_000, 500), 9_500, "a redrive restarts the budget");
/// ```
pub fn give_up_at(occurred_at: i64, budget_from: i64, budget_ms: i64) -> i64 {
    occurred_at
        .max(budget_from)
        .saturating_add(budget_ms.max(0))
}

#[cfg(test)]
mod tests {
    use super::give_up_at;

    #[test]
    fn the_budget_never_ends_before_the_event() {
        assert_eq!(give_up_at(10, 0, -5), 10);
        assert_eq!(give_up_at(i64::MAX - 1, 0, 10), i64::MAX);
    }
}
