//! Which MCP protocol revision a peer speaks, compared in one place.
//!
//! Revisions are dates (`YYYY-MM-DD`), so their order is their text's. The
//! tasks extension (SEP-2663) and stateless requests begin with
//! [`TASKS_REVISION`]. Every "is this peer modern?" question in mcptask is
//! [`Era::of`] (or [`is_modern`], its yes/no form): the era of a caller's
//! request, of a session, and of an upstream server as it was met.
//!
//! ```
//! use mcptask_core::protocol::{Era, is_modern};
//! assert!(is_modern("2026-07-28"));
//! assert!(is_modern("2027-01-01"));
//! assert!(!is_modern("2025-11-25"));
//! assert!(!is_modern(""));
//! assert_eq!(Era::of("2026-07-28"), Era::Stateless);
//! assert_eq!(Era::of("2025-11-25"), Era::Session);
//! ```

use serde::{Deserialize, Serialize};

/// The first revision with the tasks extension and stateless requests.
pub const TASKS_REVISION: &str = "2026-07-28";

/// Most input rounds (SEP-2322: a `tools/call` answered with
/// `InputRequiredResult`, then called again with the answers) one call takes
/// before mcptask gives up on it: a server that keeps asking is broken, and
/// every face (the tracker's calls, the synchronous driver, the CLI's
/// prompts) stops at the same count.
pub const MAX_INPUT_ROUNDS: usize = 10;

/// How a peer speaking a revision is met and spoken to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Era {
    /// Before [`TASKS_REVISION`]: met with the `initialize` handshake; its
    /// requests belong to the session it opened (and SEP-1686's tasks live
    /// there).
    Session,
    /// [`TASKS_REVISION`] or later: met with `server/discover`, and every
    /// request stands alone (its revision, client and capabilities in its
    /// own `_meta`), so a call can be relayed as it was sent.
    Stateless,
}

impl Era {
    /// The era of the revision a peer agreed to speak: for a server, the
    /// one of the `supportedVersions` its `server/discover` answer names
    /// that mcptask chose, or the one its `initialize` answer names (a
    /// server that does not know `server/discover`). What the server says
    /// decides, never how it was asked: a server of the new era that also
    /// answers `initialize` is of the new era. An unknown or empty revision
    /// is of the session era (the handshake is what every older peer knows).
    pub fn of(revision: &str) -> Era {
        if is_revision_date(revision) && revision >= TASKS_REVISION {
            Era::Stateless
        } else {
            Era::Session
        }
    }

    /// Whether a peer of this era keeps no session (2026-07-28 or later).
    pub fn is_stateless(self) -> bool {
        self == Era::Stateless
    }
}

/// Whether `text` reads `YYYY-MM-DD`: only then does its order as text
/// say which revision came first.
fn is_revision_date(text: &str) -> bool {
    text.len() == TASKS_REVISION.len()
        && text.bytes().enumerate().all(|(i, b)| match i {
            4 | 7 => b == b'-',
            _ => b.is_ascii_digit(),
        })
}

/// Whether `version` is [`TASKS_REVISION`] or later ([`Era::of`] is
/// [`Era::Stateless`]).
pub fn is_modern(version: &str) -> bool {
    Era::of(version).is_stateless()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_era_follows_the_revision_date() {
        assert_eq!(Era::of("2026-07-28"), Era::Stateless);
        assert_eq!(Era::of("2031-01-01"), Era::Stateless);
        assert_eq!(Era::of("2025-11-25"), Era::Session);
        assert_eq!(Era::of("2024-11-05"), Era::Session);
        // Not a revision date: the handshake every older peer knows.
        assert_eq!(Era::of(""), Era::Session);
        assert_eq!(Era::of("2026-07-28-draft"), Era::Session);
        assert_eq!(Era::of("DRAFT-2026"), Era::Session);
    }
}
