//! Leases and fencing: the one home of the rules that keep two processes from
//! both acting on the same task.
//!
//! A worker (a server process running a task, or a tracker phase worker)
//! *claims* a task: the row then names the worker as owner together with a
//! token minted for that claim alone. Every write the worker makes afterwards
//! carries a [`Fence`] and is applied only when the row still names that owner
//! and token and the task is still live ([`Fence::admits`]). A takeover by
//! another worker (or a reclaim by the same one) mints a new token, so the
//! older claim's writes change nothing and the writer learns it lost the task.
//!
//! The stores express the same rule in SQL (`mcptask-sql` defines each
//! predicate once); this module is the reference they are tested against.
//!
//! ```
//! use mcptask_core::lease::{self, Fence};
//! use mcptask_core::TaskStatus;
//!
//! let fence = Fence::new("task-1", "worker-a", lease::mint_token());
//! assert!(fence.admits(Some("worker-a"), Some(fence.token.as_str()), TaskStatus::Working));
//! // A reclaim minted a new token: the old fence no longer passes.
//! let newer = lease::mint_token();
//! assert!(!fence.admits(Some("worker-a"), Some(newer.as_str()), TaskStatus::Working));
//! // Terminal tasks take no fenced write at all.
//! assert!(!fence.admits(Some("worker-a"), Some(fence.token.as_str()), TaskStatus::Completed));
//! ```

use crate::TaskStatus;

/// Proof of a claim: the task, the claiming worker and the token minted for
/// this claim. Every claim-owned mutation carries one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Fence {
    /// The claimed task (server task id, or local id of a tracked remote task).
    pub task_id: String,
    /// The worker holding the claim (a process incarnation's owner id).
    pub owner: String,
    /// The token of this claim; a new claim always mints a new one.
    pub token: String,
}

impl Fence {
    /// A fence for `task_id` held by `owner` with `token`.
    pub fn new(
        task_id: impl Into<String>,
        owner: impl Into<String>,
        token: impl Into<String>,
    ) -> Self {
        Fence {
            task_id: task_id.into(),
            owner: owner.into(),
            token: token.into(),
        }
    }

    /// The fenced-update rule: a write under this fence applies only to a live
    /// row that still names this owner and token.
    pub fn admits(&self, owner: Option<&str>, token: Option<&str>, status: TaskStatus) -> bool {
        is_live(status) && self.holds(owner, token)
    }

    /// Whether a row's claim columns name this claim (status aside).
    pub fn holds(&self, owner: Option<&str>, token: Option<&str>) -> bool {
        owner == Some(self.owner.as_str()) && token == Some(self.token.as_str())
    }
}

/// The statuses in which a task still takes claims and fenced writes.
/// Everything else is terminal, and terminal is absorbing.
pub const LIVE_STATUSES: [TaskStatus; 2] = [TaskStatus::Working, TaskStatus::InputRequired];

/// Whether a task in `status` is live (see [`LIVE_STATUSES`]).
///
/// ```
/// use mcptask_core::{lease, TaskStatus};
/// assert!(lease::is_live(TaskStatus::InputRequired));
/// assert!(!lease::is_live(TaskStatus::Cancelled));
/// ```
pub fn is_live(status: TaskStatus) -> bool {
    LIVE_STATUSES.contains(&status)
}

/// A fresh claim token (32 lowercase hex characters, 122 random bits). The
/// only way tokens are made, on both sides and both stores.
///
/// ```
/// let a = mcptask_core::lease::mint_token();
/// assert_eq!(a.len(), 32);
/// assert_ne!(a, mcptask_core::lease::mint_token());
/// ```
pub fn mint_token() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_is_exactly_not_terminal() {
        for status in TaskStatus::ALL {
            assert_eq!(is_live(status), !status.is_terminal(), "{status}");
        }
    }

    #[test]
    fn a_fence_needs_both_owner_and_token() {
        let f = Fence::new("t", "a", "k");
        assert!(f.holds(Some("a"), Some("k")));
        assert!(!f.holds(Some("b"), Some("k")));
        assert!(!f.holds(Some("a"), Some("other")));
        assert!(!f.holds(None, Some("k")));
        assert!(!f.holds(Some("a"), None));
    }
}
