//! Who is calling: the caller every face (REST, dashboard, MCP front) acts
//! for, decided once by the HTTP layer and read by the faces.

/// A request for another principal than the caller's own, made without an
/// operator's token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NotAllowed(pub String);

/// Who is calling.
#[derive(Debug, Clone)]
pub struct Caller {
    /// Tasks are scoped to this principal (a principal token).
    pub principal: Option<String>,
    /// An operator token (or no auth): sees every task.
    pub operator: bool,
}

impl Caller {
    /// Whether this caller may see a task bound to `principal`.
    pub fn may_see(&self, principal: Option<&str>) -> bool {
        self.operator || self.principal.as_deref() == principal
    }

    /// The principal a request acts for. An operator may name any principal
    /// (or none); a principal token acts for itself, and naming anyone else
    /// is refused rather than silently ignored, so a caller never mistakes
    /// its own tasks for someone else's.
    pub fn acting_for(&self, requested: Option<String>) -> Result<Option<String>, NotAllowed> {
        if self.operator {
            return Ok(requested);
        }
        match requested {
            Some(other) if Some(&other) != self.principal.as_ref() => Err(NotAllowed(format!(
                "this token acts for principal {:?} only; {other:?} needs an operator token",
                self.principal.as_deref().unwrap_or_default()
            ))),
            _ => Ok(self.principal.clone()),
        }
    }
}
