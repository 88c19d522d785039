//! The audit trail: one entry per call that ended or was refused, whatever
//! the face and whether it was kept: who called what, how it ended, why it
//! failed (a short stable class, never an error's text) and how long it
//! took. Arguments and results are not part of an entry.
//!
//! The store keeps entries in [`AuditStore`]; the retention rule is
//! [`purge_before`], defined here once.
//!
//! ```
//! use mcptask_core::audit::{AuditCursor, purge_before};
//! let day = 86_400_000;
//! assert_eq!(purge_before(40 * day, 30 * day), 10 * day);
//! let c = AuditCursor { at_ms: 42, seq: 7 };
//! assert_eq!(AuditCursor::decode(&c.encode()), Some(c));
//! assert_eq!(AuditCursor::decode("7"), None);
//! ```

use async_trait::async_trait;

use crate::StoreError;
use crate::call::Face;
use crate::outcome::Outcome;

/// One call's end, or one refusal, as the trail records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEvent {
    /// When it ended (epoch ms).
    pub at_ms: i64,
    /// The kept call's id (`None`: an answer relayed synchronously, or a
    /// refusal; nothing was kept).
    pub call_id: Option<String>,
    /// Who called (`None`: anonymous).
    pub principal: Option<String>,
    /// Through which face.
    pub face: Face,
    /// The server, as the gateway knows it (a name it does not know is
    /// recorded as `(other)`, never a caller's text).
    pub server: String,
    /// The tool, bounded the same way.
    pub tool: String,
    /// The driver that ran it (`pass_through`, `sep2663`, …; `none` for a
    /// refusal).
    pub driver: String,
    /// How it ended.
    pub outcome: Outcome,
    /// Why it did not complete, as a short stable word (`unknown_tool`,
    /// `rate_limited`, `timeout`, `remote_error`, …); `None` when it
    /// completed or was cancelled.
    pub error_class: Option<String>,
    /// From the request to its end (ms).
    pub duration_ms: i64,
    /// The virtual server it came through (`/mcp/<name>`), if any.
    pub via: Option<String>,
}

/// A stored entry: the event and its place in the trail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRecord {
    /// The store's sequence number (unique, rising).
    pub seq: i64,
    /// What was recorded.
    pub event: AuditEvent,
}

impl AuditRecord {
    /// The cursor that lists what comes after this entry (older ones).
    pub fn cursor(&self) -> AuditCursor {
        AuditCursor {
            at_ms: self.event.at_ms,
            seq: self.seq,
        }
    }
}

/// Which entries a listing returns (every `None` matches all).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditFilter {
    /// Only this principal's entries.
    pub principal: Option<String>,
    /// Only calls of this server.
    pub server: Option<String>,
    /// Only calls of this tool.
    pub tool: Option<String>,
    /// Only calls that ended this way.
    pub outcome: Option<Outcome>,
    /// Only entries at or after this time (epoch ms).
    pub since_ms: Option<i64>,
    /// Only entries before this time (epoch ms).
    pub until_ms: Option<i64>,
}

/// Where a page of the trail (newest first) ends: the next page holds the
/// entries strictly older than it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditCursor {
    /// The last entry's time.
    pub at_ms: i64,
    /// The last entry's sequence number.
    pub seq: i64,
}

impl AuditCursor {
    /// The opaque text form APIs hand out.
    pub fn encode(&self) -> String {
        format!("{}.{}", self.at_ms, self.seq)
    }

    /// Parse [`AuditCursor::encode`]'s form; `None` when malformed.
    pub fn decode(text: &str) -> Option<AuditCursor> {
        let (at, seq) = text.split_once('.')?;
        Some(AuditCursor {
            at_ms: at.parse().ok()?,
            seq: seq.parse().ok()?,
        })
    }
}

/// The retention rule: at `now_ms`, entries older than the returned time
/// are purged (`retention_ms` after they were recorded).
pub fn purge_before(now_ms: i64, retention_ms: i64) -> i64 {
    now_ms.saturating_sub(retention_ms.max(0))
}

/// Durable storage of the audit trail, shared by every replica on the store.
#[async_trait]
pub trait AuditStore: Send + Sync + 'static {
    /// Append `events`, in one transaction.
    async fn append_audit(&self, events: &[AuditEvent]) -> Result<(), StoreError>;

    /// The entries that match `filter`, newest first, strictly after
    /// `after` when given, at most `limit`.
    async fn list_audit(
        &self,
        filter: &AuditFilter,
        after: Option<&AuditCursor>,
        limit: i64,
    ) -> Result<Vec<AuditRecord>, StoreError>;

    /// Delete at most `limit` entries recorded before `before`, oldest
    /// first; returns how many were deleted.
    async fn purge_audit(&self, before: i64, limit: i64) -> Result<u64, StoreError>;
}
