//! Identifier generation.
//!
//! Task ids are bearer-token-like (the spec requires them to be unguessable):
//! 122 random bits from a UUIDv4, rendered without dashes so they are header-safe
//! for `Mcp-Name` and never need the base64 sentinel encoding.

/// A fresh, unguessable task id (32 lowercase hex characters).
///
/// ```
/// let id = mcptask_core::ids::new_task_id();
/// assert_eq!(id.len(), 32);
/// assert_ne!(id, mcptask_core::ids::new_task_id());
/// ```
pub fn new_task_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// A fresh owner id for one process incarnation: readable prefix plus random
/// suffix so a restarted process never inherits its predecessor's claims.
///
/// ```
/// let owner = mcptask_core::ids::new_owner_id("server");
/// assert!(owner.starts_with("server-"));
/// ```
pub fn new_owner_id(role: &str) -> String {
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!("{role}-{}-{}", std::process::id(), &random[..12])
}

/// A local id for a tracked remote task (`rt_` + 32 hex characters).
///
/// ```
/// assert!(mcptask_core::ids::new_local_task_id().starts_with("rt_"));
/// ```
pub fn new_local_task_id() -> String {
    format!("rt_{}", uuid::Uuid::new_v4().simple())
}

/// A uniformly distributed number in `[0, 1)` (for scheduling jitter).
///
/// ```
/// let u = mcptask_core::ids::random_unit();
/// assert!((0.0..1.0).contains(&u));
/// ```
pub fn random_unit() -> f64 {
    // The low 64 bits of a v4 UUID start with the two fixed variant bits
    // (`10`); only the 62 below them are random.
    let bits = (uuid::Uuid::new_v4().as_u128() as u64) & ((1 << 62) - 1);
    (bits >> 9) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression: the variant bits once pinned every value into [0.5, 0.75).
    #[test]
    fn random_unit_covers_the_unit_interval() {
        let samples: Vec<f64> = (0..10_000).map(|_| random_unit()).collect();
        assert!(samples.iter().all(|u| (0.0..1.0).contains(u)));
        let min = samples.iter().cloned().fold(f64::INFINITY, f64::min);
        let max = samples.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        assert!(min < 0.05 && max > 0.95, "min {min}, max {max}");
        let below_half = samples.iter().filter(|u| **u < 0.5).count();
        assert!(
            (4_000..6_000).contains(&below_half),
            "{below_half} of 10000 below 0.5"
        );
    }
}
