//! The one redaction rule: what a caller is told of a failure whose own
//! text is for the operator only.
//!
//! A store's driver error names tables, statements, constraints and file
//! paths; an upstream's transport error names hosts, ports and commands; an
//! internal error names whatever broke. None of that is the caller's
//! business, and some of it helps an attacker. So every face (the MCP
//! front, the REST API, the CLI, the agent tools, `/readyz`, the server
//! runtime) tells the caller only a message written for it, by kind of
//! failure, with an incident id; the full text goes to the log under the
//! same id, where an operator finds it.
//!
//! ```
//! use mcptask_core::redact::{Internal, Redacted};
//! let r = Redacted::new(Internal::Store);
//! assert!(r.message().starts_with("the task store is unavailable or busy; retry later"));
//! assert!(r.message().contains(&r.incident));
//! ```

/// What kind of internal failure a caller is told about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Internal {
    /// The task store failed (unreachable, busy, refused, corrupt data).
    Store,
    /// An upstream server could not be reached or talked to.
    Upstream,
    /// Anything else that should not have happened.
    Bug,
}

impl Internal {
    /// The message a caller gets for this kind of failure.
    pub fn public_message(self) -> &'static str {
        match self {
            Internal::Store => "the task store is unavailable or busy; retry later",
            Internal::Upstream => "the upstream server could not be reached; retry later",
            Internal::Bug => "internal error",
        }
    }
}

/// A failure as its caller hears of it: its kind and an incident id that
/// finds the logged text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redacted {
    /// What kind of failure it was.
    pub kind: Internal,
    /// Names the failure's log line (8 hex digits, random).
    pub incident: String,
}

impl Redacted {
    /// A fresh incident of `kind`.
    pub fn new(kind: Internal) -> Self {
        Self {
            kind,
            incident: uuid::Uuid::new_v4().simple().to_string()[..8].to_string(),
        }
    }

    /// The caller's message: the kind's message and the incident id.
    pub fn message(&self) -> String {
        format!(
            "{} (incident {})",
            self.kind.public_message(),
            self.incident
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incidents_are_distinct_and_named_in_the_message() {
        let a = Redacted::new(Internal::Bug);
        let b = Redacted::new(Internal::Bug);
        assert_ne!(a.incident, b.incident);
        assert_eq!(a.incident.len(), 8);
        assert_eq!(
            a.message(),
            format!("internal error (incident {})", a.incident)
        );
    }
}
