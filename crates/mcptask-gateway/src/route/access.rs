//! What a caller may see and use, for every kind of request the faces relay:
//! the policy in force ([`mcptask_core::access`]) asked about one [`Item`],
//! and the caller's place under its fair limits. Every path asks here: the
//! tool calls and listings ([`super::decide`], [`super::visible`]) and the
//! front's prompts, resources and completions ([`Access`]); nothing else
//! reads the policy, a virtual server's selection or the limiter.

use std::sync::Arc;

use mcptask_core::access::Policy;
pub use mcptask_core::access::{Item, Kind};

use crate::auth::Caller;
use crate::calls::{Admitted, Calls};
use crate::failure::Failure;

/// Whether `caller` may see and use `item` under `policy`, and, for a
/// caller that came through a virtual server, whether the item is in its
/// selection (`crate::virtual_server`): outside it, an item reads as one
/// that does not exist, as one the policy hides does.
fn permitted(policy: &Policy, caller: &Caller, item: Item<'_>) -> bool {
    allows(policy, &caller.access(), item)
        && caller.through.as_ref().is_none_or(|v| v.selects(item))
}

/// Whether `policy` lets `who` (a caller as the policy selects it: its
/// principal, scopes and claims) see and use `item`: the policy's own rule,
/// for views that judge callers not present (`GET /api/v1/policy`).
pub fn allows(policy: &Policy, who: &mcptask_core::access::Caller<'_>, item: Item<'_>) -> bool {
    policy.permits(who, item)
}

/// Whether `caller` may see and use `item` (the policy in force now).
pub fn sees(calls: &Calls, caller: &Caller, item: Item<'_>) -> bool {
    permitted(&calls.policy(), caller, item)
}

/// A place for one request of `caller` under its fair limits, the same
/// limits whatever the request's kind (a call, a listing, a read); a caller
/// over them is held a while (`calls::tarpit`) and refused.
pub async fn admit(calls: &Calls, caller: &Caller) -> Result<Admitted, Failure> {
    calls
        .limiter
        .admit_or_hold(caller.principal.as_deref())
        .await
        .map_err(Failure::RateLimited)
}

/// One request of a caller, admitted under its fair limits, and the policy
/// in force when it came (one policy for the whole request, even if a
/// reload lands meanwhile). Dropping it ends the request's time in flight.
pub struct Access<'a> {
    caller: &'a Caller,
    policy: Arc<Policy>,
    _admitted: Admitted,
}

impl<'a> Access<'a> {
    /// Admit a request of `caller` under its fair limits (`route::admit`).
    pub async fn admit(calls: &Calls, caller: &'a Caller) -> Result<Self, Failure> {
        let admitted = admit(calls, caller).await?;
        Ok(Access {
            caller,
            policy: calls.policy(),
            _admitted: admitted,
        })
    }

    /// Whether this caller may see and use `item`: an item it may not reads
    /// as one that does not exist (unlisted, and refused as unknown).
    pub fn sees(&self, item: Item<'_>) -> bool {
        permitted(&self.policy, self.caller, item)
    }
}
