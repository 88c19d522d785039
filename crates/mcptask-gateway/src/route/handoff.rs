//! A decision made before rmcp decoded the request (by the front's fast
//! path, which then chose not to relay the bytes), handed to the full way
//! with the request so that the call is decided, and admitted, once.

use std::sync::{Arc, Mutex};

use rmcp::RoleServer;
use rmcp::service::RequestContext;

use super::{Ask, Decided};
use crate::failure::Failure;

/// A decision travelling with its request (in the HTTP request's
/// extensions, which rmcp keeps in the request context).
#[derive(Clone)]
pub struct Handoff {
    ask: Ask,
    decided: Arc<Mutex<Option<Result<Decided, Failure>>>>,
}

impl Handoff {
    /// `decided`, made for a caller that asked `ask`.
    pub fn new(ask: Ask, decided: Result<Decided, Failure>) -> Self {
        Self {
            ask,
            decided: Arc::new(Mutex::new(Some(decided))),
        }
    }

    /// The decision handed with the request of `context`, if it was made
    /// for the same ask (the two read it from the same bytes; a mismatch
    /// would be a bug, and the full way then decides afresh). Taken once.
    pub fn take_from(
        context: &RequestContext<RoleServer>,
        ask: Ask,
    ) -> Option<Result<Decided, Failure>> {
        let handoff = context
            .extensions
            .get::<axum::http::request::Parts>()?
            .extensions
            .get::<Handoff>()?;
        let decided = handoff.decided.lock().expect("handoff lock").take()?;
        (handoff.ask == ask).then_some(decided)
    }
}
