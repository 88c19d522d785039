//! Which MCP protocol revision a peer speaks, compared in one place.
//!
//! Revisions are dates (`YYYY-MM-DD`), so their order is their text's. The
//! tasks extension (SEP-2663) and stateless requests begin with
//! [`TASKS_REVISION`]; every "is this peer modern?" question in mcptask is
//! [`is_modern`].
//!
//! ```
//! use mcptask_core::protocol::is_modern;
//! assert!(is_modern("2026-07-28"));
//! assert!(is_modern("2027-01-01"));
//! assert!(!is_modern("2025-11-25"));
//! assert!(!is_modern(""));
//! ```

/// The first revision with the tasks extension and stateless requests.
pub const TASKS_REVISION: &str = "2026-07-28";

/// Most input rounds (SEP-2322: a `tools/call` answered with
/// `InputRequiredResult`, then called again with the answers) one call takes
/// before mcptask gives up on it: a server that keeps asking is broken, and
/// every face (the tracker's calls, the synchronous driver, the CLI's
/// prompts) stops at the same count.
pub const MAX_INPUT_ROUNDS: usize = 10;

/// Whether `version` is [`TASKS_REVISION`] or later.
pub fn is_modern(version: &str) -> bool {
    version.len() == TASKS_REVISION.len() && version >= TASKS_REVISION
}
