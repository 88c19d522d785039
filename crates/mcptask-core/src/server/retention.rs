//! When a settled server task stops being readable and may be purged.

/// The purge time of a task settled at `settled_at`: `retention_ms` after the
/// later of its TTL deadline and the settlement. A task with an unlimited TTL
/// (`expires_at = None`) is kept until a client no longer needs it, which the
/// server cannot know: it is never purged.
///
/// ```
/// use mcptask_core::server::retention::purge_at;
/// // Settled before its deadline: readable until the deadline, then retained.
/// assert_eq!(purge_at(Some(10_000), 4_000, 500), Some(10_500));
/// // Settled after it (e.g. failed by the TTL sweep): retained from settlement.
/// assert_eq!(purge_at(Some(10_000), 12_000, 500), Some(12_500));
/// assert_eq!(purge_at(None, 12_000, 500), None);
/// ```
pub fn purge_at(expires_at: Option<i64>, settled_at: i64, retention_ms: i64) -> Option<i64> {
    expires_at.map(|deadline| deadline.max(settled_at).saturating_add(retention_ms.max(0)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn never_before_the_deadline_nor_the_settlement(
            deadline in 0i64..1_000_000_000_000,
            settled in 0i64..1_000_000_000_000,
            retention in 0i64..1_000_000_000,
        ) {
            let p = purge_at(Some(deadline), settled, retention).unwrap();
            prop_assert!(p >= deadline + retention);
            prop_assert!(p >= settled + retention);
            prop_assert!(p == deadline.max(settled) + retention);
        }
    }
}
