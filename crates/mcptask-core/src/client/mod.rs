//! Domain types of the client side: remote tasks a gateway tracks to a
//! terminal state on behalf of an application.
//!
//! All state changes are computed by the pure functions in [`transition`]; the
//! stores only lock the row, call them, and write the result back fenced.

pub mod delivery;
pub mod sep1686;
pub mod toolset;
pub mod transition;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::TaskStatus;
use crate::call::{Driver, Face};
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
    /// The wire spelling.
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
    /// Lifecycle status.
    pub status: Option<TaskStatus>,
    /// Human-readable status message, if any.
    pub status_message: Option<String>,
    /// `createdAt` as the server reported it (epoch ms).
    pub remote_created_at: Option<i64>,
    /// Time to live from creation (ms); `None` means unlimited.
    pub ttl_ms: Option<i64>,
    /// Suggested polling interval (ms), if any.
    pub poll_interval_ms: Option<i64>,
    /// Outstanding `(key, request)` pairs (only when `input_required`).
    pub input_requests: Vec<(String, Value)>,
    /// The tool result, once completed.
    pub result: Option<Value>,
    /// Whether the stored result was cut to the configured bound.
    pub result_truncated: bool,
    /// JSON-RPC error object, once failed.
    pub error: Option<Value>,
    /// Which run of the work this is, where the task's runner says (the
    /// call runtime does: its tasks rerun after an interruption).
    pub attempt: Option<i64>,
    /// The process running that attempt (its owner id), where known.
    pub attempt_by: Option<String>,
}

/// How the tracker reaches a call's task: the upstream's own task
/// (SEP-2663 methods, or a toolset's status and cancel tools), or the call
/// runtime's task that runs the call's work (SEP-1686 and synchronous
/// calls), reached in-process through the tracker's local work hook.
///
/// ```
/// use mcptask_core::call::Driver;
/// use mcptask_core::client::RemoteDriver;
/// let t = RemoteDriver::Toolset { status_tool: "job_status".into(), cancel_tool: "cancel_job".into() };
/// let (name, data) = (t.as_str(), t.data());
/// assert_eq!(RemoteDriver::from_parts(name, data.as_ref()).unwrap(), t);
/// assert_eq!(RemoteDriver::default().as_str(), "sep2663");
/// assert_eq!(RemoteDriver::Sync.driver(), Driver::Sync);
/// assert!(RemoteDriver::Sep1686.is_local() && !t.is_local());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RemoteDriver {
    /// SEP-2663: `tasks/get`, `tasks/cancel`, `tasks/update`.
    #[default]
    Sep2663,
    /// A submit/status/cancel toolset ([`toolset`]): plain `tools/call`s of
    /// these tools with `{task_id}`. It has no way to answer input.
    Toolset {
        /// The tool that reports a task's status.
        status_tool: String,
        /// The tool that cancels a task.
        cancel_tool: String,
    },
    /// A 2025-11-25 task driven by the call runtime's task of the same id.
    Sep1686,
    /// A synchronous call run as the call runtime's task of the same id.
    Sync,
}

impl RemoteDriver {
    /// The call's driver.
    pub fn driver(&self) -> Driver {
        match self {
            RemoteDriver::Sep2663 => Driver::Sep2663,
            RemoteDriver::Toolset { .. } => Driver::Toolset,
            RemoteDriver::Sep1686 => Driver::Sep1686,
            RemoteDriver::Sync => Driver::Sync,
        }
    }

    /// The stored name (`remote_tasks.driver`).
    pub fn as_str(&self) -> &'static str {
        self.driver().as_str()
    }

    /// Whether the task is the call runtime's (reached in-process), not an
    /// upstream server's.
    pub fn is_local(&self) -> bool {
        !self.driver().is_tracked()
    }

    /// The driver's own data (`remote_tasks.driver_data`), if it has any.
    pub fn data(&self) -> Option<Value> {
        match self {
            RemoteDriver::Toolset {
                status_tool,
                cancel_tool,
            } => Some(serde_json::json!({"status_tool": status_tool, "cancel_tool": cancel_tool})),
            _ => None,
        }
    }

    /// Rebuild a driver from its stored name and data.
    pub fn from_parts(name: &str, data: Option<&Value>) -> Result<Self, String> {
        match Driver::parse(name) {
            Some(Driver::Sep2663) => Ok(RemoteDriver::Sep2663),
            Some(Driver::Sep1686) => Ok(RemoteDriver::Sep1686),
            Some(Driver::Sync) => Ok(RemoteDriver::Sync),
            Some(Driver::Toolset) => {
                let tool = |role: &str| {
                    data.and_then(|d| d.get(role))
                        .and_then(Value::as_str)
                        .filter(|t| !t.is_empty())
                        .map(str::to_string)
                        .ok_or_else(|| format!("toolset driver data lacks {role}"))
                };
                Ok(RemoteDriver::Toolset {
                    status_tool: tool("status_tool")?,
                    cancel_tool: tool("cancel_tool")?,
                })
            }
            None => Err(format!("unknown remote task driver {name:?}")),
        }
    }
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
    /// The task id the remote server handed out.
    pub remote_task_id: String,
    /// How the task is polled and cancelled.
    pub driver: RemoteDriver,
    /// The face the call was made through (`None`: not recorded, rows
    /// written before faces were).
    pub face: Option<Face>,
    /// Authenticated caller the task is bound to; `None` for anonymous callers.
    pub principal: Option<String>,
    /// Application conversation the call belongs to, if any.
    pub conversation: Option<String>,
    /// Application call id, if any.
    pub call_id: Option<String>,
    /// Free-form application data echoed in every event (bounded).
    pub correlation: Option<Value>,
    /// Name of the tool that was called.
    pub tool: String,
    /// Arguments of the tool call.
    pub arguments: Option<Value>,
    /// The trace the call was made in (polls and deliveries join it).
    pub trace: Option<crate::trace::TraceContext>,
    /// What `CreateTaskResult` (or the first `tasks/get`) said.
    pub snapshot: RemoteSnapshot,
    /// When it was created (epoch ms).
    pub created_at: i64,
}

/// A tracked remote task as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RemoteTaskRecord {
    /// Task id.
    pub id: String,
    /// Registry name of the server the task lives on.
    pub server: String,
    /// Hash of the server definition the task was created with.
    pub server_hash: String,
    /// The task id the remote server handed out.
    pub remote_task_id: String,
    /// How the task is polled and cancelled.
    pub driver: RemoteDriver,
    /// The face the call was made through (`None` for rows written before
    /// faces were recorded).
    pub face: Option<Face>,
    /// Authenticated caller the task is bound to; `None` for anonymous callers.
    pub principal: Option<String>,
    /// Application conversation the call belongs to, if any.
    pub conversation: Option<String>,
    /// Application call id, if any.
    pub call_id: Option<String>,
    /// Free-form application data echoed in every event (bounded).
    pub correlation: Option<Value>,
    /// Name of the tool that was called.
    pub tool: String,
    /// Arguments of the tool call.
    pub arguments: Option<Value>,
    /// The trace the call was made in (its polls, driver steps and
    /// deliveries join it). Not part of the call's views: it is the
    /// telemetry's, not the caller's.
    #[serde(skip_serializing)]
    pub trace: Option<crate::trace::TraceContext>,
    /// Lifecycle status.
    pub status: TaskStatus,
    /// Human-readable status message, if any.
    pub status_message: Option<String>,
    /// Outstanding input requests as last reported, `[[key, request], …]`.
    pub input_requests: Vec<(String, Value)>,
    /// The tool result, once completed.
    pub result: Option<Value>,
    /// Whether the stored result was cut to the configured bound.
    pub result_truncated: bool,
    /// JSON-RPC error object: the server's, or one mcptask wrote when it had to
    /// settle the task locally (then `data.source == "mcptask"`).
    pub error: Option<Value>,
    /// `createdAt` as the server reported it (epoch ms).
    pub remote_created_at: Option<i64>,
    /// Time to live from creation (ms); `None` means unlimited.
    pub ttl_ms: Option<i64>,
    /// Suggested polling interval (ms), if any.
    pub poll_interval_ms: Option<i64>,
    /// When it was created (epoch ms).
    pub created_at: i64,
    /// Last change (epoch ms).
    pub updated_at: i64,
    /// When it became terminal (epoch ms).
    pub completed_at: Option<i64>,
    /// When the next `tasks/get` is due (`None`: not polled).
    pub next_poll_at: Option<i64>,
    /// Time of the last `tasks/get` (epoch ms).
    pub last_polled_at: Option<i64>,
    /// `tasks/get` calls made so far.
    pub poll_count: i64,
    /// Transient errors since the last good snapshot.
    pub consecutive_errors: i64,
    /// The last transient error, while in an error streak.
    pub last_error: Option<String>,
    /// When the application asked to cancel (epoch ms).
    pub cancel_requested_at: Option<i64>,
    /// When the server acknowledged `tasks/cancel` (epoch ms).
    pub cancel_sent_at: Option<i64>,
    /// When `tasks/cancel` is due (`None`: nothing to send).
    pub next_cancel_at: Option<i64>,
    /// `tasks/cancel` attempts made.
    pub cancel_attempts: i64,
    /// When stored answers are due to be sent (`None`: nothing to send).
    pub next_update_at: Option<i64>,
    /// Worker holding the work claim, if any.
    pub claim_owner: Option<String>,
    /// Token of the current claim, if claimed.
    pub claim_token: Option<String>,
    /// When the work claim lapses (epoch ms).
    pub claim_expires_at: Option<i64>,
    /// Version of the newest recorded event.
    pub event_version: i64,
    /// Events up to this version are delivered (or dead-lettered).
    pub delivered_version: i64,
    /// When pending events are due for delivery (`None`: nothing pending).
    pub next_notify_at: Option<i64>,
    /// Failed delivery attempts of the oldest pending event.
    pub notify_attempts: i64,
    /// Why the last delivery failed, if it did.
    pub last_notify_error: Option<String>,
    /// Events given up on after the retry budget.
    pub dead_letters: i64,
    /// The latest run of the call's work seen (1, then one more per rerun
    /// after an interruption; only the call runtime's tasks rerun).
    pub attempt: i64,
}

impl RemoteTaskRecord {
    /// Whether the task is terminal.
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
    /// The input key (unique per task, never reissued).
    pub key: String,
    /// The input request as the server sent it.
    pub request: Value,
    /// The answer, once given.
    pub response: Option<Value>,
    /// When the key was first seen (epoch ms).
    pub first_seen_at: i64,
    /// When the answer was stored (epoch ms).
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
    /// Transient errors for longer than the error budget.
    ErrorBudget,
    /// `createdAt + ttlMs` passed without a terminal status.
    TtlElapsed,
}

impl FailureKind {
    /// The wire spelling.
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
    Permanent {
        /// Why, as a category.
        kind: FailureKind,
        /// Why, in words.
        message: String,
    },
    /// `tasks/cancel` was acknowledged.
    CancelAcked,
    /// `tasks/update` carrying these keys was acknowledged.
    UpdateAcked {
        /// The keys whose answers the server accepted.
        keys: Vec<String>,
    },
    /// `tasks/update` was refused (`-32602`, invalid params): the server did
    /// not take these answers. They are cleared so the keys can be answered
    /// again, and the next poll says whether the server still asks (or
    /// whether the task is gone).
    UpdateRejected {
        /// The keys whose answers were sent and refused.
        keys: Vec<String>,
        /// The server's reason, in words.
        message: String,
    },
    /// Give the claim back untouched (shutdown): not an error.
    Released,
    /// The call was not made (its server has as many calls in flight as it
    /// may): give the claim back and make the phase due again after this
    /// many milliseconds. Not an error.
    Deferred {
        /// How long to wait before the phase is due again.
        delay_ms: i64,
    },
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
    /// The work started again after an interruption (its status message
    /// says which attempt, run by which process).
    Rerun,
}

impl EventKind {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Created => "created",
            EventKind::Status => "status",
            EventKind::InputRequired => "input_required",
            EventKind::Answered => "answered",
            EventKind::CancelRequested => "cancel_requested",
            EventKind::Degraded => "degraded",
            EventKind::Rerun => "rerun",
        }
    }

    /// Parse the wire spelling.
    pub fn parse(s: &str) -> Option<EventKind> {
        [
            EventKind::Created,
            EventKind::Status,
            EventKind::InputRequired,
            EventKind::Answered,
            EventKind::CancelRequested,
            EventKind::Degraded,
            EventKind::Rerun,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }
}

/// One entry of a task's timeline / outbox.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskEvent {
    /// The task concerned.
    pub task_id: String,
    /// 1, 2, 3… per task; `(task_id, version)` is the idempotency key.
    pub version: i64,
    /// What kind of event or failure this is.
    pub kind: EventKind,
    /// Lifecycle status.
    pub status: TaskStatus,
    /// When it happened (epoch ms).
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
    /// Poll scheduling.
    pub poll: PollPolicy,
    /// Backoff after transient errors (poll, cancel, update, notify).
    pub backoff: Backoff,
    /// How long a task may keep failing transiently (no good answer from its
    /// server since the last one) before it is failed locally (ms). Time, not a
    /// count: an outage costs the same whatever the backoff, and the task's own
    /// TTL (its server's promise) still bounds it when shorter.
    pub error_budget_ms: i64,
    /// `tasks/cancel` attempts before cancelling is given up. The task is
    /// then followed to the end its server gives it (never recorded
    /// `cancelled` without the server saying so); a server that answers
    /// nothing is bounded by the error budget and the TTL.
    pub max_cancel_attempts: i64,
    /// Consecutive errors after which a `degraded` event is emitted.
    pub degraded_after: i64,
    /// Extra time past `createdAt + ttlMs` before the TTL backstop fails a task
    /// (covers clock skew between us and the server).
    pub ttl_grace_ms: i64,
    /// How long each notify target keeps retrying an event (ms, from the
    /// event or its redrive) before it becomes a dead letter of that target.
    pub notify_budget_ms: i64,
    /// How long a settled task (its events and inputs too) is kept before it
    /// is purged (ms after it settled).
    pub retention_ms: i64,
    /// Payload bounds.
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
            error_budget_ms: 24 * 3_600_000,
            max_cancel_attempts: 10,
            degraded_after: 3,
            ttl_grace_ms: 30_000,
            notify_budget_ms: 6 * 3_600_000,
            retention_ms: 7 * 24 * 3_600_000,
            limits: PayloadLimits::default(),
        }
    }
}

/// Filter for listing tracked tasks.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ListFilter {
    /// Lifecycle status.
    pub status: Option<TaskStatus>,
    /// Registry name of the server the task lives on.
    pub server: Option<String>,
    /// Authenticated caller the task is bound to; `None` for anonymous callers.
    pub principal: Option<String>,
    /// Application conversation the call belongs to, if any.
    pub conversation: Option<String>,
    /// Only non-terminal tasks.
    pub active_only: bool,
    /// Only calls that ended this way (a tool error apart from a completed
    /// call, though both are `completed`).
    pub outcome: Option<crate::outcome::Outcome>,
    /// Only calls of this tool (its name on its server).
    pub tool: Option<String>,
    /// Only calls made at or after this time (epoch ms).
    pub created_since: Option<i64>,
    /// Only calls made before this time (epoch ms).
    pub created_before: Option<i64>,
}

/// A page position: tasks strictly after this `(created_at, id)` in
/// newest-first order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    /// When it was created (epoch ms).
    pub created_at: i64,
    /// Task id.
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

    /// Parse a cursor string; `None` when malformed.
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
    /// The task as stored.
    pub record: RemoteTaskRecord,
    /// Proof of the claim this result or claim belongs to.
    pub fence: Fence,
    /// Update phase: answered keys not yet acknowledged by the server.
    pub answers: Vec<(String, Value)>,
}

/// A worker's result for one claimed task.
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    /// Proof of the claim this result or claim belongs to.
    pub fence: Fence,
    /// The phase the claim was for.
    pub phase: Phase,
    /// What the worker saw.
    pub observation: Observation,
    /// Random `[0, 1)` for poll jitter.
    pub jitter: f64,
}

/// Result of recording a handle.
#[derive(Debug, Clone, PartialEq)]
pub enum InsertOutcome {
    /// A new row was recorded.
    Inserted(Box<RemoteTaskRecord>),
    /// The same remote task (server, principal, remote id) was already tracked:
    /// the existing row is kept and returned.
    AlreadyTracked(Box<RemoteTaskRecord>),
}

impl InsertOutcome {
    /// The record, whichever way it went.
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
    /// Proof of the claim this result or claim belongs to.
    pub fence: Fence,
    /// Failed delivery attempts so far.
    pub attempts: i64,
    /// Undelivered events in version order.
    pub events: Vec<TaskEvent>,
    /// Targets behind this task's outbox (a lag row catches them up): they
    /// are skipped here, so they keep receiving in order.
    pub lagging: Vec<String>,
}

/// A notify worker's result for one claim.
#[derive(Debug, Clone, PartialEq)]
pub struct NotifyResult {
    /// Proof of the claim this result or claim belongs to.
    pub fence: Fence,
    /// Highest version now delivered (or dead-lettered).
    pub delivered_through: i64,
    /// Versions given up on after the retry budget.
    pub dead_lettered: Vec<i64>,
    /// Set when delivery of the next version failed: error and next attempt time.
    pub failure: Option<(String, i64)>,
    /// Shutdown: give the claim back without counting an attempt.
    pub released: bool,
    /// Targets that did not take every delivered event: the redelivery
    /// worker catches each up from its version.
    pub lagged: Vec<delivery::TargetLag>,
    /// Events a target refused for good (`dead_lettered` lists their versions).
    pub dead: Vec<delivery::DeadLetter>,
}
