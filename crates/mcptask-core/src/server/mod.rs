//! Domain types of the server side: tasks this process hands out to MCP clients.
//!
//! Every decision the server runtime carries out is a pure function here, so
//! every replica and every store decides the same way and each rule is tested
//! without a database:
//! - [`recovery`]: what to do with a task whose owner died;
//! - [`outcome`]: what to store when a tool's work ends;
//! - [`reading`]: how a task reads to a client at a given time (overdue reads as expired);
//! - [`retention`]: when a settled task may be purged.

use serde_json::Value;

use crate::TaskStatus;
pub use crate::lease::Fence;

pub mod outcome;
pub mod reading;
pub mod recovery;
pub mod retention;

pub use crate::call::{InterruptPolicy, TaskSupport};

/// A task about to be inserted.
#[derive(Debug, Clone, PartialEq)]
pub struct NewServerTask {
    /// Task id.
    pub id: String,
    /// Authenticated subject the task is bound to; `None` for anonymous callers.
    pub principal: Option<String>,
    /// Name of the tool that was called.
    pub tool: String,
    /// Arguments of the tool call.
    pub arguments: Value,
    /// `inputResponses` of the multi-round-trip exchange that preceded the task.
    pub call_inputs: Option<Value>,
    /// When it was created (epoch ms).
    pub created_at: i64,
    /// `None` means unlimited.
    pub ttl_ms: Option<i64>,
    /// Suggested polling interval (ms), if any.
    pub poll_interval_ms: Option<i64>,
    /// Human-readable status message, if any.
    pub status_message: Option<String>,
    /// The process that will run it (it must have an owner lease).
    pub owner: String,
    /// Token of the current claim, if claimed.
    pub claim_token: String,
    /// What drives the task's work when it is not a native tool (the proxy's
    /// driver name, e.g. `"sep2663"`); `None` for a native tool.
    pub driver: Option<String>,
    /// The driver's durable state (JSON), rewritten with
    /// [`ServerTaskStore::save_state`](crate::store::ServerTaskStore::save_state).
    pub driver_state: Option<Value>,
    /// The tracker's row of the call this task carries, as
    /// [`new_record`](crate::client::transition::new_record) made it,
    /// committed in the same transaction (a gateway's call: one id, and
    /// never one row without the other).
    pub call_row: Option<Box<crate::client::transition::Change>>,
}

impl NewServerTask {
    /// The row as it reads right after insertion: `working`, attempt 1,
    /// claimed by its creator.
    ///
    /// ```
    /// use mcptask_core::server::NewServerTask;
    /// let new = NewServerTask {
    ///     id: "t".into(), principal: None, tool: "x".into(), arguments: serde_json::json!({}),
    ///     call_inputs: None, created_at: 5, ttl_ms: None, poll_interval_ms: Some(100),
    ///     status_message: None, owner: "A".into(), claim_token: "k".into(),
    ///     driver: None, driver_state: None, call_row: None,
    /// };
    /// let r = new.into_record();
    /// assert_eq!((r.attempt, r.updated_at, r.owner.as_deref()), (1, 5, Some("A")));
    /// ```
    pub fn into_record(self) -> ServerTaskRecord {
        ServerTaskRecord {
            id: self.id,
            principal: self.principal,
            tool: self.tool,
            arguments: self.arguments,
            call_inputs: self.call_inputs,
            status: TaskStatus::Working,
            status_message: self.status_message,
            result: None,
            error: None,
            created_at: self.created_at,
            updated_at: self.created_at,
            ttl_ms: self.ttl_ms,
            poll_interval_ms: self.poll_interval_ms,
            attempt: 1,
            cancel_requested: false,
            owner: Some(self.owner),
            claim_token: Some(self.claim_token),
            purge_at: None,
            driver: self.driver,
            driver_state: self.driver_state,
        }
    }
}

/// A task as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerTaskRecord {
    /// Task id.
    pub id: String,
    /// Authenticated caller the task is bound to; `None` for anonymous callers.
    pub principal: Option<String>,
    /// Name of the tool that was called.
    pub tool: String,
    /// Arguments of the tool call.
    pub arguments: Value,
    /// `inputResponses` gathered before the task was created, if any.
    pub call_inputs: Option<Value>,
    /// Lifecycle status.
    pub status: TaskStatus,
    /// Human-readable status message, if any.
    pub status_message: Option<String>,
    /// The tool result, once completed.
    pub result: Option<Value>,
    /// JSON-RPC error object, once failed.
    pub error: Option<Value>,
    /// When it was created (epoch ms).
    pub created_at: i64,
    /// Last change (epoch ms).
    pub updated_at: i64,
    /// Time to live from creation (ms); `None` means unlimited.
    pub ttl_ms: Option<i64>,
    /// Suggested polling interval (ms), if any.
    pub poll_interval_ms: Option<i64>,
    /// 1 for the first run; incremented by each rerun after an interruption.
    pub attempt: i64,
    /// Whether cancellation was requested (durable flag).
    pub cancel_requested: bool,
    /// The process (owner id) holding the claim, if any.
    pub owner: Option<String>,
    /// Token of the current claim, if claimed.
    pub claim_token: Option<String>,
    /// When a terminal task stops being readable and may be deleted.
    pub purge_at: Option<i64>,
    /// What drives the task's work when it is not a native tool; `None` for
    /// a native tool.
    pub driver: Option<String>,
    /// The driver's durable state (JSON), if any was saved.
    pub driver_state: Option<Value>,
}

/// Where a page of [`ServerTaskStore::list_tasks`](crate::store::ServerTaskStore::list_tasks)
/// resumes: after the task created at `created_at` with id `id` (tasks are
/// listed newest first, ties by id descending).
///
/// ```
/// use mcptask_core::server::{NewServerTask, TaskCursor};
/// let r = NewServerTask {
///     id: "t".into(), principal: None, tool: "x".into(), arguments: serde_json::json!({}),
///     call_inputs: None, created_at: 5, ttl_ms: None, poll_interval_ms: None,
///     status_message: None, owner: "A".into(), claim_token: "k".into(),
///     driver: None, driver_state: None, call_row: None,
/// }.into_record();
/// assert_eq!(TaskCursor::after(&r), TaskCursor { created_at: 5, id: "t".into() });
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskCursor {
    /// Creation time of the last task of the previous page.
    pub created_at: i64,
    /// Id of the last task of the previous page.
    pub id: String,
}

impl TaskCursor {
    /// The cursor that resumes after `record`.
    pub fn after(record: &ServerTaskRecord) -> Self {
        TaskCursor {
            created_at: record.created_at,
            id: record.id.clone(),
        }
    }

    /// The cursor as opaque text for a client to hand back.
    ///
    /// ```
    /// use mcptask_core::server::TaskCursor;
    /// let c = TaskCursor { created_at: 5, id: "a:b".into() };
    /// assert_eq!(TaskCursor::decode(&c.encode()), Some(c));
    /// assert_eq!(TaskCursor::decode("nonsense"), None);
    /// ```
    pub fn encode(&self) -> String {
        format!("{}:{}", self.created_at, self.id)
    }

    /// Read back what [`TaskCursor::encode`] gave; `None` for anything else.
    pub fn decode(text: &str) -> Option<Self> {
        let (at, id) = text.split_once(':')?;
        Some(TaskCursor {
            created_at: at.parse().ok()?,
            id: id.to_string(),
        })
    }
}

/// One page of [`ServerTaskStore::list_tasks`](crate::store::ServerTaskStore::list_tasks).
#[derive(Debug, Clone, PartialEq)]
pub struct TaskPage {
    /// The tasks, newest first.
    pub tasks: Vec<ServerTaskRecord>,
    /// Where the next page starts; `None` when this page is the last.
    pub next: Option<TaskCursor>,
}

impl ServerTaskRecord {
    /// `createdAt + ttlMs`, if the TTL is limited.
    pub fn expires_at(&self) -> Option<i64> {
        expires_at(self.created_at, self.ttl_ms)
    }

    /// A live task whose TTL has elapsed (the sweeper may not have marked it yet).
    pub fn is_overdue(&self, now: i64) -> bool {
        is_overdue(self.status, self.expires_at(), now)
    }

    /// Past its retention: reads treat it as absent even before the purge sweep runs.
    pub fn is_purged(&self, now: i64) -> bool {
        is_purged(self.purge_at, now)
    }

    /// The fence that authorises writes by the current claim holder.
    pub fn fence(&self) -> Option<Fence> {
        Some(Fence {
            task_id: self.id.clone(),
            owner: self.owner.clone()?,
            token: self.claim_token.clone()?,
        })
    }
}

/// What `tasks/get` reads of a task: its state, its result and what it waits
/// for, without its arguments, claim or driver. The hottest request reads
/// this narrower row ([`ServerTaskStore::get_task_state`]) rather than the
/// whole [`ServerTaskView`], so the database and the decoder handle half the
/// columns and no stored arguments are parsed.
///
/// [`ServerTaskStore::get_task_state`]: crate::store::ServerTaskStore::get_task_state
///
/// ```
/// use mcptask_core::server::{NewServerTask, ServerTaskState, ServerTaskView};
/// let record = NewServerTask {
///     id: "t".into(), principal: Some("alice".into()), tool: "x".into(),
///     arguments: serde_json::json!({"big": "payload"}), call_inputs: None, created_at: 5,
///     ttl_ms: Some(60_000), poll_interval_ms: None, status_message: None,
///     owner: "A".into(), claim_token: "k".into(), driver: None, driver_state: None, call_row: None,
/// }.into_record();
/// let state = ServerTaskState::of(&ServerTaskView { record, input_requests: vec![] });
/// assert_eq!((state.id.as_str(), state.expires_at()), ("t", Some(60_005)));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ServerTaskState {
    /// The task id.
    pub id: String,
    /// The principal the task is bound to (`None`: anonymous).
    pub principal: Option<String>,
    /// Status as stored.
    pub status: TaskStatus,
    /// Human-readable status message.
    pub status_message: Option<String>,
    /// The `CallToolResult`, when completed.
    pub result: Option<Value>,
    /// The JSON-RPC error, when failed.
    pub error: Option<Value>,
    /// Creation time (epoch ms).
    pub created_at: i64,
    /// Last change (epoch ms).
    pub updated_at: i64,
    /// TTL in ms; `None` = unlimited.
    pub ttl_ms: Option<i64>,
    /// Suggested poll interval in ms.
    pub poll_interval_ms: Option<i64>,
    /// When reads stop seeing the task (retention).
    pub purge_at: Option<i64>,
    /// `(key, request)` pairs not yet answered, ordered by key (only when
    /// `input_required`).
    pub input_requests: Vec<(String, Value)>,
    /// Which run of the work this is: 1, then one more for each rerun after
    /// an interruption.
    pub attempt: i64,
    /// The process (owner id) running it, if any.
    pub owner: Option<String>,
}

impl ServerTaskState {
    /// The state part of a full view.
    pub fn of(view: &ServerTaskView) -> Self {
        let r = &view.record;
        ServerTaskState {
            id: r.id.clone(),
            principal: r.principal.clone(),
            status: r.status,
            status_message: r.status_message.clone(),
            result: r.result.clone(),
            error: r.error.clone(),
            created_at: r.created_at,
            updated_at: r.updated_at,
            ttl_ms: r.ttl_ms,
            poll_interval_ms: r.poll_interval_ms,
            purge_at: r.purge_at,
            input_requests: view.input_requests.clone(),
            attempt: r.attempt,
            owner: r.owner.clone(),
        }
    }

    /// `createdAt + ttlMs`, if the TTL is limited.
    pub fn expires_at(&self) -> Option<i64> {
        expires_at(self.created_at, self.ttl_ms)
    }

    /// A live task whose TTL has elapsed (the sweeper may not have marked it yet).
    pub fn is_overdue(&self, now: i64) -> bool {
        is_overdue(self.status, self.expires_at(), now)
    }

    /// Past its retention: reads treat it as absent even before the purge sweep runs.
    pub fn is_purged(&self, now: i64) -> bool {
        is_purged(self.purge_at, now)
    }
}

fn is_overdue(status: TaskStatus, expires_at: Option<i64>, now: i64) -> bool {
    !status.is_terminal() && expires_at.is_some_and(|e| e <= now)
}

fn expires_at(created_at: i64, ttl_ms: Option<i64>) -> Option<i64> {
    ttl_ms.map(|ttl| created_at.saturating_add(ttl))
}

fn is_purged(purge_at: Option<i64>, now: i64) -> bool {
    purge_at.is_some_and(|p| p <= now)
}

/// A task together with its outstanding input requests (only when `input_required`).
#[derive(Debug, Clone, PartialEq)]
pub struct ServerTaskView {
    /// The task as stored.
    pub record: ServerTaskRecord,
    /// `(key, request)` pairs not yet answered, ordered by key.
    pub input_requests: Vec<(String, Value)>,
}

/// How a task's work ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// A tool result (including one with `isError: true`).
    Completed {
        /// The `CallToolResult`.
        result: Value,
    },
    /// A JSON-RPC error object, with a human-readable status message.
    Failed {
        /// The JSON-RPC error object.
        error: Value,
        /// The status message shown with it.
        message: String,
    },
    /// The work stopped because cancellation was requested.
    Cancelled {
        /// The status message, if any.
        message: Option<String>,
    },
}

impl Outcome {
    /// The status this outcome settles the task in.
    pub fn status(&self) -> TaskStatus {
        match self {
            Outcome::Completed { .. } => TaskStatus::Completed,
            Outcome::Failed { .. } => TaskStatus::Failed,
            Outcome::Cancelled { .. } => TaskStatus::Cancelled,
        }
    }

    /// A `failed` outcome carrying a JSON-RPC error object.
    ///
    /// ```
    /// use mcptask_core::server::Outcome;
    /// let o = Outcome::failed(-32603, "boom");
    /// assert_eq!(o.status(), mcptask_core::TaskStatus::Failed);
    /// ```
    pub fn failed(code: i64, message: impl Into<String>) -> Outcome {
        let message = message.into();
        Outcome::Failed {
            error: serde_json::json!({"code": code, "message": message}),
            message,
        }
    }
}

/// The state of one input key after asking for it.
#[derive(Debug, Clone, PartialEq)]
pub enum InputState {
    /// Answered earlier (possibly in a previous attempt): the stored response.
    Answered(Value),
    /// Outstanding: shown in `inputRequests` until answered.
    Pending,
}

/// What `tasks/update` changed.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AnswerOutcome {
    /// Whether the task exists at all.
    pub found: bool,
    /// Keys whose response was stored by this call.
    pub applied: Vec<String>,
    /// Keys ignored: unknown, already answered, or the task is terminal.
    pub ignored: Vec<String>,
    /// The process running the task, to be signalled.
    pub owner: Option<String>,
}

/// What `tasks/cancel` changed.
#[derive(Debug, Clone, PartialEq)]
pub enum CancelOutcome {
    /// No such task.
    NotFound,
    /// Nothing to do: the task already settled.
    AlreadyTerminal,
    /// The durable cancel flag is set; `owner` should be signalled.
    Requested {
        /// The process (owner id) holding the claim, if any.
        owner: Option<String>,
    },
}

/// A live task owned by `owner` whose signal time moved (answer, cancel, expiry).
#[derive(Debug, Clone, PartialEq)]
pub struct TaskSignal {
    /// The task concerned.
    pub task_id: String,
    /// Lifecycle status.
    pub status: TaskStatus,
    /// Whether cancellation was requested (durable flag).
    pub cancel_requested: bool,
    /// Time of the signal (epoch ms).
    pub signaled_at: i64,
}

/// A task the TTL sweep just failed.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpiredTask {
    /// The task concerned.
    pub task_id: String,
    /// The process (owner id) holding the claim, if any.
    pub owner: Option<String>,
}

/// The JSON-RPC error stored when a task outlives its TTL.
pub fn expired_error() -> Value {
    serde_json::json!({
        "code": -32603,
        "message": "task expired: its TTL elapsed before it finished"
    })
}

/// Status message stored with [`expired_error`].
pub const EXPIRED_MESSAGE: &str = "Task expired: its TTL elapsed before it finished";

/// The outcome of a task that outlived its TTL: what the sweep writes, what
/// recovery settles, and what a late finish is turned into
/// ([`reading::settles_as`]).
pub fn expired_outcome() -> Outcome {
    Outcome::Failed {
        error: expired_error(),
        message: EXPIRED_MESSAGE.to_string(),
    }
}

/// Why an input key cannot be asked with `asked`: it was asked before in this
/// task with a different request (`stored`). A key names one question for the
/// task's whole life, so that a rerun asking it again gets the stored answer;
/// the same key with another question would silently get the answer to the
/// first one. `None` when the requests are the same.
///
/// ```
/// use mcptask_core::server::input_conflict;
/// use serde_json::json;
/// assert!(input_conflict("q", &json!({"m": 1}), &json!({"m": 1})).is_none());
/// assert!(input_conflict("q", &json!({"m": 1}), &json!({"m": 2})).unwrap().contains("\"q\""));
/// ```
pub fn input_conflict(key: &str, stored: &Value, asked: &Value) -> Option<String> {
    (stored != asked).then(|| {
        format!(
            "input key {key:?} was already asked in this task with a different request; \
             ask a different question under a new key"
        )
    })
}

/// The JSON-RPC error stored when recovery fails an interrupted task.
pub fn interrupted_error(attempt: i64) -> Value {
    serde_json::json!({
        "code": -32603,
        "message": format!("task interrupted: the server process running attempt {attempt} stopped before it finished"),
        "data": {"reason": "interrupted", "attempt": attempt}
    })
}
