//! Domain types of the client side: remote tasks a gateway tracks to a
//! terminal state on behalf of an application.
//!
//! All state changes are computed by the pure functions in [`transition`]; the
//! stores only lock the row, call them, and write the result back fenced.

pub mod transition;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::TaskStatus;
pub use crate::lease::Fence;
use crate::payload::PayloadLimits;
use crate::policy::{Backoff, PollPolicy};

/// The work phases that claim remote tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// `tasks/get`.
    Poll,
    /// `tasks/cancel` for a durable cancel intent.
    Cancel,
    /// `tasks/update` with stored answers.
    Update,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Poll => "poll",
            Phase::Cancel => "cancel",
            Phase::Update => "update",
        }
    }
}

/// A normalized, validated `tasks/get` (or `CreateTaskResult`) snapshot.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RemoteSnapshot {
    pub status: Option<TaskStatus>,
    pub status_message: Option<String>,
    pub remote_created_at: Option<i64>,
    pub ttl_ms: Option<i64>,
    pub poll_interval_ms: Option<i64>,
    /// Outstanding `(key, request)` pairs (only when `input_required`).
    pub input_requests: Vec<(String, Value)>,
    pub result: Option<Value>,
    pub result_truncated: bool,
    pub error: Option<Value>,
}

/// A remote task handle about to be recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct NewRemoteTask {
    /// Local id handed to the application.
    pub id: String,
    /// Registry name of the server the task lives on.
    pub server: String,
    /// Hash of the server definition the task was created with.
    pub server_hash: String,
    pub remote_task_id: String,
    pub principal: Option<String>,
    pub conversation: Option<String>,
    pub call_id: Option<String>,
    /// Free-form application data echoed in every event (bounded).
    pub correlation: Option<Value>,
    pub tool: String,
    pub arguments: Option<Value>,
    /// What `CreateTaskResult` (or the first `tasks/get`) said.
    pub snapshot: RemoteSnapshot,
    pub created_at: i64,
}

/// A tracked remote task as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RemoteTaskRecord {
    pub id: String,
    pub server: String,
    pub server_hash: String,
    pub remote_task_id: String,
    pub principal: Option<String>,
    pub conversation: Option<String>,
    pub call_id: Option<String>,
    pub correlation: Option<Value>,
    pub tool: String,
    pub arguments: Option<Value>,
    pub status: TaskStatus,
    pub status_message: Option<String>,
    /// Outstanding input requests as last reported, `[[key, request], …]`.
    pub input_requests: Vec<(String, Value)>,
    pub result: Option<Value>,
    pub result_truncated: bool,
    /// JSON-RPC error object: the server's, or one mcptask wrote when it had to
    /// settle the task locally (then `data.source == "mcptask"`).
    pub error: Option<Value>,
    pub remote_created_at: Option<i64>,
    pub ttl_ms: Option<i64>,
    pub poll_interval_ms: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
    pub completed_at: Option<i64>,
    pub next_poll_at: Option<i64>,
    pub last_polled_at: Option<i64>,
    pub poll_count: i64,
    pub consecutive_errors: i64,
    pub last_error: Option<String>,
    pub cancel_requested_at: Option<i64>,
    pub cancel_sent_at: Option<i64>,
    pub next_cancel_at: Option<i64>,
    pub cancel_attempts: i64,
    pub next_update_at: Option<i64>,
    pub claim_owner: Option<String>,
    pub claim_token: Option<String>,
    pub claim_expires_at: Option<i64>,
    pub event_version: i64,
    pub delivered_version: i64,
    pub next_notify_at: Option<i64>,
    pub notify_attempts: i64,
    pub last_notify_error: Option<String>,
    pub dead_letters: i64,
}

impl RemoteTaskRecord {
    pub fn is_terminal(&self) -> bool {
        self.status.is_terminal()
    }

    /// `createdAt + ttlMs` on the server's clock, if limited.
    pub fn remote_expires_at(&self) -> Option<i64> {
        Some(self.remote_created_at?.saturating_add(self.ttl_ms?))
    }
}

/// One input key of a tracked task and the local answer, if any.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RemoteInput {
    pub key: String,
    pub request: Value,
    pub response: Option<Value>,
    pub first_seen_at: i64,
    pub answered_at: Option<i64>,
    /// When `tasks/update` carrying the answer was acknowledged.
    pub sent_at: Option<i64>,
}

/// Why mcptask settled a task itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The server answered `-32602`: it does not know the task (any more).
    NotFound,
    /// The server sent something that is not a valid SEP-2663 answer.
    ProtocolViolation,
    /// The server definition was removed or changed since the task started.
    ConnectionUnavailable,
    /// Too many consecutive transient errors.
    ErrorBudget,
    /// `createdAt + ttlMs` passed without a terminal status.
    TtlElapsed,
}

impl FailureKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::NotFound => "not_found",
            FailureKind::ProtocolViolation => "protocol_violation",
            FailureKind::ConnectionUnavailable => "connection_unavailable",
            FailureKind::ErrorBudget => "error_budget",
            FailureKind::TtlElapsed => "ttl_elapsed",
        }
    }
}

/// What a worker learned about a claimed task.
#[derive(Debug, Clone, PartialEq)]
pub enum Observation {
    /// A valid snapshot from `tasks/get`.
    Snapshot(RemoteSnapshot),
    /// A retryable failure (timeout, refused connection, 5xx, transport error).
    Transient(String),
    /// The task cannot be tracked any further.
    Permanent { kind: FailureKind, message: String },
    /// `tasks/cancel` was acknowledged.
    CancelAcked,
    /// `tasks/update` carrying these keys was acknowledged.
    UpdateAcked { keys: Vec<String> },
    /// Give the claim back untouched (shutdown): not an error.
    Released,
}

/// Kinds of events in a task's timeline (each is delivered to notifiers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// The handle was recorded.
    Created,
    /// The status changed (including to a terminal status).
    Status,
    /// New input requests appeared.
    InputRequired,
    /// The application stored answers.
    Answered,
    /// The application asked to cancel.
    CancelRequested,
    /// Polling keeps failing; mcptask keeps retrying.
    Degraded,
}

impl EventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Created => "created",
            EventKind::Status => "status",
            EventKind::InputRequired => "input_required",
            EventKind::Answered => "answered",
            EventKind::CancelRequested => "cancel_requested",
            EventKind::Degraded => "degraded",
        }
    }

    pub fn parse(s: &str) -> Option<EventKind> {
        [
            EventKind::Created,
            EventKind::Status,
            EventKind::InputRequired,
            EventKind::Answered,
            EventKind::CancelRequested,
            EventKind::Degraded,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }
}

/// One entry of a task's timeline / outbox.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskEvent {
    pub task_id: String,
    /// 1, 2, 3… per task; `(task_id, version)` is the idempotency key.
    pub version: i64,
    pub kind: EventKind,
    pub status: TaskStatus,
    pub occurred_at: i64,
    /// The task as the application should see it at this event.
    pub data: Value,
}

impl TaskEvent {
    /// `"{task_id}:{version}"`: receivers deduplicate on it.
    pub fn idempotency_key(&self) -> String {
        format!("{}:{}", self.task_id, self.version)
    }
}

/// Tracking policy: scheduling, retry budgets and payload bounds.
#[derive(Debug, Clone, PartialEq)]
pub struct TrackerPolicy {
    pub poll: PollPolicy,
    /// Backoff after transient errors (poll, cancel, update, notify).
    pub backoff: Backoff,
    /// Consecutive transient errors tolerated before the task is failed.
    pub error_budget: i64,
    /// `tasks/cancel` attempts before the task is settled locally.
    pub max_cancel_attempts: i64,
    /// Consecutive errors after which a `degraded` event is emitted.
    pub degraded_after: i64,
    /// Extra time past `createdAt + ttlMs` before the TTL backstop fails a task
    /// (covers clock skew between us and the server).
    pub ttl_grace_ms: i64,
    /// Delivery attempts per event before it is dead-lettered.
    pub max_notify_attempts: i64,
    pub limits: PayloadLimits,
}

impl Default for TrackerPolicy {
    fn default() -> Self {
        Self {
            poll: PollPolicy::default(),
            backoff: Backoff {
                base_ms: 1_000,
                max_ms: 60_000,
            },
            error_budget: 30,
            max_cancel_attempts: 10,
            degraded_after: 3,
            ttl_grace_ms: 30_000,
            max_notify_attempts: 8,
            limits: PayloadLimits::default(),
        }
    }
}

/// Filter for listing tracked tasks.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ListFilter {
    pub status: Option<TaskStatus>,
    pub server: Option<String>,
    pub principal: Option<String>,
    pub conversation: Option<String>,
    /// Only non-terminal tasks.
    pub active_only: bool,
}

/// A page position: tasks strictly after this `(created_at, id)` in
/// newest-first order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    pub created_at: i64,
    pub id: String,
}

impl Cursor {
    /// Opaque text form for APIs.
    ///
    /// ```
    /// use mcptask_core::client::Cursor;
    /// let c = Cursor { created_at: 42, id: "rt_1".into() };
    /// assert_eq!(Cursor::decode(&c.encode()), Some(c));
    /// assert_eq!(Cursor::decode("garbage"), None);
    /// ```
    pub fn encode(&self) -> String {
        format!("{}.{}", self.created_at, self.id)
    }

    pub fn decode(s: &str) -> Option<Cursor> {
        let (ts, id) = s.split_once('.')?;
        Some(Cursor {
            created_at: ts.parse().ok()?,
            id: id.to_string(),
        })
        .filter(|c| !c.id.is_empty())
    }
}

/// A claimed task handed to a phase worker.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimedTask {
    pub record: RemoteTaskRecord,
    pub fence: Fence,
    /// Update phase: answered keys not yet acknowledged by the server.
    pub answers: Vec<(String, Value)>,
}

/// A worker's result for one claimed task.
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    pub fence: Fence,
    pub phase: Phase,
    pub observation: Observation,
    /// Random `[0, 1)` for poll jitter.
    pub jitter: f64,
}

/// Result of recording a handle.
#[derive(Debug, Clone, PartialEq)]
pub enum InsertOutcome {
    Inserted(Box<RemoteTaskRecord>),
    /// The same remote task (server, principal, remote id) was already tracked:
    /// the existing row is kept and returned.
    AlreadyTracked(Box<RemoteTaskRecord>),
}

impl InsertOutcome {
    pub fn record(&self) -> &RemoteTaskRecord {
        match self {
            InsertOutcome::Inserted(r) | InsertOutcome::AlreadyTracked(r) => r,
        }
    }
}

/// What storing answers changed.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AnswerResult {
    /// Keys whose answer this call stored.
    pub applied: Vec<String>,
    /// Not outstanding, already answered, or the task is terminal.
    pub ignored: Vec<String>,
}

/// A task whose pending events a notify worker claimed.
#[derive(Debug, Clone, PartialEq)]
pub struct NotifyClaim {
    pub fence: Fence,
    pub attempts: i64,
    /// Undelivered events in version order.
    pub events: Vec<TaskEvent>,
}

/// A notify worker's result for one claim.
#[derive(Debug, Clone, PartialEq)]
pub struct NotifyResult {
    pub fence: Fence,
    /// Highest version now delivered (or dead-lettered).
    pub delivered_through: i64,
    /// Versions given up on after the retry budget.
    pub dead_lettered: Vec<i64>,
    /// Set when delivery of the next version failed: error and next attempt time.
    pub failure: Option<(String, i64)>,
    /// Shutdown: give the claim back without counting an attempt.
    pub released: bool,
}
