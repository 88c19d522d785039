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

/// A fresh claim token: a new one is minted for every claim so a stale claim
/// generation can never pass a fence check.
pub fn new_claim_token() -> String {
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
    let bits = uuid::Uuid::new_v4().as_u128() as u64 >> 11;
    bits as f64 / (1u64 << 53) as f64
}
