//! The call model's vocabulary and its one decision.
//!
//! A **call** is one tool call mcptask keeps: one id, one row in every list,
//! one stream of events. The [`Face`] that made it and the [`Driver`] that
//! carries it to its upstream are closed sets, each with one list of names
//! (stored, sent on the wire and shown in docs as [`Driver::as_str`] and
//! [`Face::as_str`]). Which driver a call gets, and whether it is kept at
//! all, is [`plan`]: a pure function of what the upstream speaks, what the
//! tool declares and what the caller asked for.

use serde::{Deserialize, Serialize};

/// What recovery does with a task whose process died while running it: the
/// one form of the policy, as a server's configuration (`interrupt = "fail"`
/// or `"rerun"`), a route and a call's stored state spell it.
///
/// ```
/// use mcptask_core::server::InterruptPolicy;
/// assert_eq!(InterruptPolicy::default(), InterruptPolicy::Fail);
/// assert_eq!(serde_json::to_value(InterruptPolicy::Rerun).unwrap(), "rerun");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InterruptPolicy {
    /// Settle the task as `failed` with an "interrupted" error (honest, at-most-once).
    #[default]
    Fail,
    /// Run the tool again from the start with `attempt + 1` (at-least-once).
    /// Answers to input keys already given are replayed, not asked again.
    Rerun,
}

/// How a call's work reaches its upstream.
///
/// ```
/// use mcptask_core::call::Driver;
/// for d in Driver::ALL {
///     assert_eq!(Driver::parse(d.as_str()), Some(d));
/// }
/// // Rows written before the names were unified read the same.
/// assert_eq!(Driver::parse("triplet"), Some(Driver::Toolset));
/// assert!(Driver::Sep2663.is_tracked() && !Driver::Sync.is_tracked());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Driver {
    /// The upstream speaks SEP-2663: the tracker polls its task
    /// (`tasks/get`, `tasks/update`, `tasks/cancel`).
    Sep2663,
    /// A submit/status/cancel toolset: the tracker polls the task with the
    /// toolset's status tool and cancels it with its cancel tool.
    Toolset,
    /// The 2025-11-25 tasks protocol (SEP-1686): the task is created and
    /// driven on an exclusive upstream session by the call runtime.
    Sep1686,
    /// A synchronous tool run as durable work of the call runtime.
    Sync,
}

impl Driver {
    /// Every driver, in the order docs list them.
    pub const ALL: [Driver; 4] = [
        Driver::Sep2663,
        Driver::Toolset,
        Driver::Sep1686,
        Driver::Sync,
    ];

    /// The one spelling: stored, sent and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Driver::Sep2663 => "sep2663",
            Driver::Toolset => "toolset",
            Driver::Sep1686 => "sep1686",
            Driver::Sync => "sync",
        }
    }

    /// Read a stored name (also the one toolsets had before 0.2, `triplet`).
    pub fn parse(name: &str) -> Option<Driver> {
        match name {
            "triplet" => Some(Driver::Toolset),
            _ => Self::ALL.into_iter().find(|d| d.as_str() == name),
        }
    }

    /// One line for people: what follows a call of this driver.
    pub fn describe(self) -> &'static str {
        match self {
            Driver::Sep2663 => "a SEP-2663 task the tracker polls upstream",
            Driver::Toolset => "a submit/status/cancel toolset the tracker polls",
            Driver::Sep1686 => "a 2025-11-25 (SEP-1686) task driven on its upstream session",
            Driver::Sync => "a synchronous tool call run as durable work",
        }
    }

    /// Whether the tracker follows the upstream's task itself (else the
    /// work runs in the call runtime and the tracker follows that).
    pub fn is_tracked(self) -> bool {
        matches!(self, Driver::Sep2663 | Driver::Toolset)
    }
}

/// A driver the tracker follows upstream: what [`Plan::Track`] carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TrackDriver {
    /// [`Driver::Sep2663`].
    Sep2663,
    /// [`Driver::Toolset`].
    Toolset,
}

/// A driver the call runtime runs: what [`Plan::Run`] carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunDriver {
    /// [`Driver::Sep1686`].
    Sep1686,
    /// [`Driver::Sync`].
    Sync,
}

impl From<TrackDriver> for Driver {
    fn from(d: TrackDriver) -> Driver {
        match d {
            TrackDriver::Sep2663 => Driver::Sep2663,
            TrackDriver::Toolset => Driver::Toolset,
        }
    }
}

impl From<RunDriver> for Driver {
    fn from(d: RunDriver) -> Driver {
        match d {
            RunDriver::Sep1686 => Driver::Sep1686,
            RunDriver::Sync => Driver::Sync,
        }
    }
}

impl std::fmt::Display for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Driver {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Driver {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Driver::parse(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown driver {name:?}")))
    }
}

/// Which face of mcptask a call was made through.
///
/// ```
/// use mcptask_core::call::Face;
/// for f in Face::ALL {
///     assert_eq!(Face::parse(f.as_str()), Some(f));
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Face {
    /// A Rust program using the libraries.
    Rust,
    /// The REST API (`POST /api/v1/calls`) or the dashboard.
    Api,
    /// The `mcptask` command line.
    Cli,
    /// The MCP front (`/mcp`, `mcptask proxy --stdio`).
    Mcp,
}

impl Face {
    /// Every face.
    pub const ALL: [Face; 4] = [Face::Rust, Face::Api, Face::Cli, Face::Mcp];

    /// The one spelling: stored, sent and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Face::Rust => "rust",
            Face::Api => "api",
            Face::Cli => "cli",
            Face::Mcp => "mcp",
        }
    }

    /// Read a stored name.
    pub fn parse(name: &str) -> Option<Face> {
        Self::ALL.into_iter().find(|f| f.as_str() == name)
    }
}

/// What an upstream server speaks, as its handshake said.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// Durable tasks (SEP-2663): 2026-07-28 or later, with the
    /// `io.modelcontextprotocol/tasks` extension declared.
    Sep2663,
    /// The 2025-11-25 tasks protocol (SEP-1686): `capabilities.tasks`;
    /// which tools take a task is per tool.
    Sep1686,
    /// No tasks: every call is synchronous.
    Sync,
}

/// Whether a tool may, must or must not run as a task (a native tool's
/// declaration, and an upstream tool's `execution.taskSupport`, whose
/// absence means `forbidden`).
///
/// ```
/// use mcptask_core::call::TaskSupport;
/// assert_eq!(TaskSupport::default(), TaskSupport::Optional);
/// assert_eq!(serde_json::to_value(TaskSupport::Required).unwrap(), "required");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskSupport {
    /// Always synchronous, never a task.
    Forbidden,
    /// A task when the request declares the extension; synchronous otherwise.
    #[default]
    Optional,
    /// Only as a task; non-declaring requests get `-32021`.
    Required,
}

/// One upstream tool, as far as choosing a driver goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolFacts {
    /// What its server speaks.
    pub protocol: Protocol,
    /// How it may be called as a task (SEP-1686 servers only).
    pub task_support: TaskSupport,
    /// It is the submit tool of a configured toolset.
    pub toolset_submit: bool,
}

/// What the caller asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wants {
    /// A kept call whatever the tool: a caller that declares tasks, or one
    /// that asked for (or was configured for) background work.
    Durable,
    /// Whatever the upstream does: its tasks are kept, its synchronous
    /// answers come back synchronously (the REST default).
    Either,
    /// The synchronous answer; nothing kept unless the tool can only run as
    /// a task (a caller that does not declare tasks).
    Sync,
}

/// How a call is made. The driver's kind is in the type: a tracked plan
/// can only carry a tracked driver, a run plan a driver the call runtime
/// runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// Call the upstream with tasks declared; a task it hands out is kept
    /// and tracked with `driver` (its synchronous answer is returned as is).
    Track(TrackDriver),
    /// Keep the call as a task of the call runtime running `driver`.
    Run(RunDriver),
    /// Call the upstream synchronously; nothing is kept.
    PassThrough,
}

/// The driver of a call: the one decision every face shares.
///
/// A toolset's submit tool and a tool that only runs as a 2025-11-25 task are
/// kept whatever was asked (neither has a synchronous answer worth having).
///
/// ```
/// use mcptask_core::call::{plan, Plan, Protocol, RunDriver, TaskSupport, ToolFacts, TrackDriver, Wants};
/// let tool = |protocol, task_support| ToolFacts { protocol, task_support, toolset_submit: false };
/// let plain = tool(Protocol::Sync, TaskSupport::Forbidden);
/// assert_eq!(plan(plain, Wants::Durable), Plan::Run(RunDriver::Sync));
/// assert_eq!(plan(plain, Wants::Either), Plan::PassThrough);
/// let research = tool(Protocol::Sep1686, TaskSupport::Required);
/// assert_eq!(plan(research, Wants::Sync), Plan::Run(RunDriver::Sep1686));
/// let durable = tool(Protocol::Sep2663, TaskSupport::Optional);
/// assert_eq!(plan(durable, Wants::Either), Plan::Track(TrackDriver::Sep2663));
/// ```
pub fn plan(tool: ToolFacts, wants: Wants) -> Plan {
    if tool.toolset_submit {
        return Plan::Track(TrackDriver::Toolset);
    }
    match (tool.protocol, tool.task_support, wants) {
        (Protocol::Sep2663, _, Wants::Sync) => Plan::PassThrough,
        (Protocol::Sep2663, _, _) => Plan::Track(TrackDriver::Sep2663),
        (Protocol::Sep1686, TaskSupport::Required, _) => Plan::Run(RunDriver::Sep1686),
        (Protocol::Sep1686, TaskSupport::Optional, Wants::Durable) => Plan::Run(RunDriver::Sep1686),
        (_, _, Wants::Durable) => Plan::Run(RunDriver::Sync),
        _ => Plan::PassThrough,
    }
}

/// The durable state of a call task in the call runtime (its
/// `driver_state`), typed: which driver runs it and what that driver needs
/// to resume after a restart. Stored as one JSON object that names its
/// driver, so the state alone says how to resume.
///
/// ```
/// use mcptask_core::call::{CallState, Driver};
/// use mcptask_core::server::InterruptPolicy;
/// let state = CallState::Sep1686 { upstream_task: Some("t-1".into()), timeout_ms: None };
/// let json = state.to_json();
/// assert_eq!(json, serde_json::json!({"driver": "sep1686", "upstreamTask": "t-1"}));
/// assert_eq!(CallState::from_json(&json, None).unwrap(), state);
/// // A synchronous call keeps the interrupt policy it was made with.
/// let sync = CallState::Sync { interrupt: InterruptPolicy::Rerun, timeout_ms: Some(1_000) };
/// assert_eq!(sync.to_json(), serde_json::json!({"driver": "sync", "interrupt": "rerun", "timeoutMs": 1000}));
/// assert_eq!(sync.timeout(), Some(std::time::Duration::from_secs(1)));
/// assert_eq!(CallState::from_json(&sync.to_json(), None).unwrap().interrupt(), InterruptPolicy::Rerun);
/// // A front task written before states named their driver: the driver
/// // comes from the task's `driver` column.
/// let old = serde_json::json!({"remote": "rt_1"});
/// assert_eq!(
///     CallState::from_json(&old, Some("sep2663")).unwrap(),
///     CallState::Tracked { driver: Driver::Sep2663, tracked: Some("rt_1".into()) },
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallState {
    /// Mirrors the tracked task of the same id (`tracked` names another
    /// one only in rows written before calls had one id).
    Tracked {
        /// [`Driver::Sep2663`] or [`Driver::Toolset`].
        driver: Driver,
        /// The tracked task, when its id is not the call's.
        tracked: Option<String>,
    },
    /// A 2025-11-25 task, with the upstream's id once it was created.
    Sep1686 {
        /// The upstream task id; set means the upstream task existed (in a
        /// session that a restart ends).
        upstream_task: Option<String>,
        /// The bound on each exchange with the upstream, as the route
        /// decided it ([`CallState::timeout`]).
        timeout_ms: Option<u64>,
    },
    /// A synchronous call run as durable work: what a crash does to it
    /// was decided when it was made (the server's `interrupt` then) and is
    /// kept, so a recovery never re-decides it from today's catalog.
    Sync {
        /// Fail it (at most once) or run it again (at least once).
        interrupt: InterruptPolicy,
        /// The bound on each exchange with the upstream, as the route
        /// decided it ([`CallState::timeout`]).
        timeout_ms: Option<u64>,
    },
}

#[derive(Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StateJson {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    driver: Option<Driver>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    remote: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    upstream_task: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    interrupt: Option<InterruptPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    timeout_ms: Option<u64>,
}

impl CallState {
    /// The fresh state of a call task that mirrors a call tracked with
    /// `driver`.
    pub fn tracked(driver: TrackDriver) -> Self {
        CallState::Tracked {
            driver: driver.into(),
            tracked: None,
        }
    }

    /// The fresh state of a call task running `driver`; `interrupt` is what
    /// a crash does to a synchronous call (a SEP-1686 task resumes or
    /// reports its loss in its driver).
    pub fn run(driver: RunDriver, interrupt: InterruptPolicy) -> Self {
        match driver {
            RunDriver::Sep1686 => CallState::Sep1686 {
                upstream_task: None,
                timeout_ms: None,
            },
            RunDriver::Sync => CallState::Sync {
                interrupt,
                timeout_ms: None,
            },
        }
    }

    /// This state with each upstream exchange bounded by `timeout` (the
    /// route's decision, kept with the call so its driver, here or after a
    /// recovery on any replica, never recomputes it from today's catalog).
    /// A mirror's exchanges are the tracker's: nothing to keep.
    pub fn bounded(mut self, timeout: std::time::Duration) -> Self {
        let ms = Some(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX));
        match &mut self {
            CallState::Tracked { .. } => {}
            CallState::Sep1686 { timeout_ms, .. } | CallState::Sync { timeout_ms, .. } => {
                *timeout_ms = ms
            }
        }
        self
    }

    /// The bound on each exchange with the upstream the route decided
    /// ([`CallState::bounded`]); `None` in a state written before calls
    /// kept it (and for a mirror).
    pub fn timeout(&self) -> Option<std::time::Duration> {
        match self {
            CallState::Tracked { .. } => None,
            CallState::Sep1686 { timeout_ms, .. } | CallState::Sync { timeout_ms, .. } => {
                timeout_ms.map(std::time::Duration::from_millis)
            }
        }
    }

    /// Its driver.
    pub fn driver(&self) -> Driver {
        match self {
            CallState::Tracked { driver, .. } => *driver,
            CallState::Sep1686 { .. } => Driver::Sep1686,
            CallState::Sync { .. } => Driver::Sync,
        }
    }

    /// What recovery does with the call task when its process died: decided
    /// by the stored state alone. A mirror and a SEP-1686 driver resume
    /// (they follow work that lives upstream); a synchronous call as it was
    /// made to.
    pub fn interrupt(&self) -> InterruptPolicy {
        match self {
            CallState::Tracked { .. } | CallState::Sep1686 { .. } => InterruptPolicy::Rerun,
            CallState::Sync { interrupt, .. } => *interrupt,
        }
    }

    /// The stored form.
    pub fn to_json(&self) -> serde_json::Value {
        let mut json = StateJson {
            driver: Some(self.driver()),
            ..Default::default()
        };
        match self {
            CallState::Tracked { tracked, .. } => json.remote = tracked.clone(),
            CallState::Sep1686 {
                upstream_task,
                timeout_ms,
            } => {
                json.upstream_task = upstream_task.clone();
                json.timeout_ms = *timeout_ms;
            }
            CallState::Sync {
                interrupt,
                timeout_ms,
            } => {
                json.interrupt = Some(*interrupt);
                json.timeout_ms = *timeout_ms;
            }
        }
        serde_json::to_value(json).unwrap_or(serde_json::Value::Null)
    }

    /// Read the stored form back; `driver` is the task's `driver` column,
    /// for states written before they named their driver. A synchronous
    /// call's state written before it kept its interrupt policy reads as
    /// [`InterruptPolicy::Fail`]: at most once, the honest default.
    pub fn from_json(state: &serde_json::Value, driver: Option<&str>) -> Result<Self, String> {
        let json: StateJson = match state {
            serde_json::Value::Null => StateJson::default(),
            v => serde_json::from_value(v.clone())
                .map_err(|e| format!("unreadable call state: {e}"))?,
        };
        let driver = match (json.driver, driver) {
            (Some(d), _) => d,
            (None, Some(name)) => {
                Driver::parse(name).ok_or_else(|| format!("unknown call driver {name:?}"))?
            }
            (None, None) => return Err("the call state names no driver".into()),
        };
        Ok(match driver {
            Driver::Sep2663 | Driver::Toolset => CallState::Tracked {
                driver,
                tracked: json.remote,
            },
            Driver::Sep1686 => CallState::Sep1686 {
                upstream_task: json.upstream_task,
                timeout_ms: json.timeout_ms,
            },
            Driver::Sync => CallState::Sync {
                interrupt: json.interrupt.unwrap_or_default(),
                timeout_ms: json.timeout_ms,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn facts() -> impl Strategy<Value = ToolFacts> {
        (
            prop_oneof![
                Just(Protocol::Sep2663),
                Just(Protocol::Sep1686),
                Just(Protocol::Sync)
            ],
            prop_oneof![
                Just(TaskSupport::Forbidden),
                Just(TaskSupport::Optional),
                Just(TaskSupport::Required)
            ],
            any::<bool>(),
        )
            .prop_map(|(protocol, task_support, toolset_submit)| ToolFacts {
                protocol,
                task_support,
                toolset_submit,
            })
    }

    fn wants() -> impl Strategy<Value = Wants> {
        prop_oneof![Just(Wants::Durable), Just(Wants::Either), Just(Wants::Sync)]
    }

    proptest! {
        /// A caller that wants a kept call always gets one, and the driver
        /// is one its upstream can carry.
        #[test]
        fn durable_is_always_kept_by_a_fitting_driver(tool in facts()) {
            let driver: Driver = match plan(tool, Wants::Durable) {
                Plan::Track(d) => d.into(),
                Plan::Run(d) => d.into(),
                Plan::PassThrough => panic!("a durable call passed through: {tool:?}"),
            };
            match driver {
                Driver::Toolset => prop_assert!(tool.toolset_submit),
                Driver::Sep2663 => prop_assert_eq!(tool.protocol, Protocol::Sep2663),
                Driver::Sep1686 => prop_assert!(tool.protocol == Protocol::Sep1686 && tool.task_support != TaskSupport::Forbidden),
                Driver::Sync => prop_assert!(tool.protocol != Protocol::Sep2663 && !tool.toolset_submit),
            }
        }

        /// Asking for less never keeps more: what passes through for
        /// `Either` passes through for `Sync` too.
        #[test]
        fn sync_keeps_no_more_than_either(tool in facts(), w in wants()) {
            if plan(tool, Wants::Either) == Plan::PassThrough {
                prop_assert_eq!(plan(tool, Wants::Sync), Plan::PassThrough);
            }
            if let Plan::Run(d) = plan(tool, w) {
                prop_assert!(!Driver::from(d).is_tracked());
            }
            if let Plan::Track(d) = plan(tool, w) {
                prop_assert!(Driver::from(d).is_tracked());
            }
        }

        /// Whatever a call task's state, it reads back the same, with or
        /// without the driver column beside it.
        #[test]
        fn call_state_round_trips(upstream in proptest::option::of("[a-z0-9-]{1,12}"), which in 0..5usize) {
            let state = match which {
                0 => CallState::Tracked { driver: Driver::Sep2663, tracked: upstream.clone() },
                1 => CallState::Tracked { driver: Driver::Toolset, tracked: None },
                2 => CallState::Sep1686 { upstream_task: upstream.clone(), timeout_ms: Some(1_500) },
                3 => CallState::Sync { interrupt: InterruptPolicy::Rerun, timeout_ms: Some(30_000) },
                _ => CallState::Sync { interrupt: InterruptPolicy::Fail, timeout_ms: None },
            };
            let json = state.to_json();
            prop_assert_eq!(CallState::from_json(&json, None).unwrap(), state.clone());
            prop_assert_eq!(CallState::from_json(&json, Some("sync")).unwrap(), state);
        }
    }

    #[test]
    fn a_tool_that_must_run_as_a_task_is_kept_for_every_caller() {
        let research = ToolFacts {
            protocol: Protocol::Sep1686,
            task_support: TaskSupport::Required,
            toolset_submit: false,
        };
        let submit = ToolFacts {
            protocol: Protocol::Sync,
            task_support: TaskSupport::Forbidden,
            toolset_submit: true,
        };
        for w in [Wants::Durable, Wants::Either, Wants::Sync] {
            assert_eq!(plan(research, w), Plan::Run(RunDriver::Sep1686));
            assert_eq!(plan(submit, w), Plan::Track(TrackDriver::Toolset));
        }
    }

    #[test]
    fn old_front_states_read_as_the_typed_state() {
        let v = serde_json::json!({"upstreamTask": "u1"});
        assert_eq!(
            CallState::from_json(&v, Some("sep1686")).unwrap(),
            CallState::Sep1686 {
                upstream_task: Some("u1".into()),
                timeout_ms: None,
            }
        );
        assert_eq!(
            CallState::from_json(&serde_json::json!({"remote": "rt_2"}), Some("triplet")).unwrap(),
            CallState::Tracked {
                driver: Driver::Toolset,
                tracked: Some("rt_2".into())
            }
        );
        assert_eq!(
            CallState::from_json(&serde_json::Value::Null, Some("sync")).unwrap(),
            CallState::Sync {
                interrupt: InterruptPolicy::Fail,
                timeout_ms: None,
            }
        );
        assert!(CallState::from_json(&serde_json::Value::Null, Some("native")).is_err());
        assert!(CallState::from_json(&serde_json::json!({}), None).is_err());
    }
}
