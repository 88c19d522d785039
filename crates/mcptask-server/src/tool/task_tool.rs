//! A tool the runtime serves: its definition, handler and task behaviour.
//!
//! Whether a call becomes a task, what recovery does when its process dies and
//! how long its task lives are properties of the tool, not of each call, so
//! they are declared once here, next to the handler.

use std::future::Future;
use std::sync::Arc;

use futures::future::BoxFuture;
use mcptask_core::server::{InterruptPolicy, ServerTaskRecord, TaskSupport};
use rmcp::model::{CallToolResult, InputRequests, InputResponses, JsonObject, Tool};

use super::context::{TaskContext, TaskExit};

/// What a tool handler receives.
pub struct ToolCall {
    /// The `tools/call` arguments (an empty object when none were given).
    pub arguments: JsonObject,
    /// Task state, input requests and cancellation.
    pub ctx: TaskContext,
}

/// Result of a [`TaskTool::preflight`] check.
pub enum Preflight {
    /// Create the task now.
    Proceed,
    /// Answer the `tools/call` with an `InputRequiredResult` carrying these
    /// requests first (multi-round-trip input, resolved before the task exists).
    NeedInput(InputRequests),
}

pub(crate) type HandlerFn =
    Arc<dyn Fn(ToolCall) -> BoxFuture<'static, Result<CallToolResult, TaskExit>> + Send + Sync>;
pub(crate) type PreflightFn = Arc<dyn Fn(&JsonObject, &InputResponses) -> Preflight + Send + Sync>;

/// Decides a task's interrupt policy from its record.
pub(crate) type InterruptFn = Arc<dyn Fn(&ServerTaskRecord) -> InterruptPolicy + Send + Sync>;

/// A tool served by the runtime.
///
/// ```
/// use mcptask_server::{TaskTool, TaskSupport, InterruptPolicy};
/// use rmcp::model::{CallToolResult, ContentBlock, Tool};
/// use std::sync::Arc;
///
/// let tool = TaskTool::new(
///     Tool::new("export", "Export everything", Arc::new(Default::default())),
///     |_call| async { Ok(CallToolResult::success(vec![ContentBlock::text("ok")])) },
/// )
/// .support(TaskSupport::Required)
/// .interrupt(InterruptPolicy::Rerun)
/// .ttl_ms(Some(600_000));
/// assert_eq!(tool.name(), "export");
/// ```
#[derive(Clone)]
pub struct TaskTool {
    pub(crate) tool: Tool,
    pub(crate) support: TaskSupport,
    pub(crate) interrupt: InterruptPolicy,
    /// Decides the policy from the task itself (its stored state), when set.
    pub(crate) interrupt_by: Option<InterruptFn>,
    /// `None`: runtime default; `Some(None)`: unlimited.
    pub(crate) ttl_ms: Option<Option<i64>>,
    pub(crate) poll_interval_ms: Option<i64>,
    pub(crate) handler: HandlerFn,
    pub(crate) preflight: Option<PreflightFn>,
}

impl TaskTool {
    /// A tool with `Optional` task support and the `Fail` interrupt policy.
    pub fn new<F, Fut>(tool: Tool, handler: F) -> Self
    where
        F: Fn(ToolCall) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<CallToolResult, TaskExit>> + Send + 'static,
    {
        Self {
            tool,
            support: TaskSupport::Optional,
            interrupt: InterruptPolicy::Fail,
            interrupt_by: None,
            ttl_ms: None,
            poll_interval_ms: None,
            handler: Arc::new(move |call| Box::pin(handler(call))),
            preflight: None,
        }
    }

    /// Whether calls may, must or must not run as tasks (default `Optional`).
    pub fn support(mut self, support: TaskSupport) -> Self {
        self.support = support;
        self
    }

    /// What recovery does when the process running a task of this tool dies
    /// (default `Fail`).
    pub fn interrupt(mut self, policy: InterruptPolicy) -> Self {
        self.interrupt = policy;
        self
    }

    /// What recovery does with an interrupted task of this tool, decided
    /// from the task's own record (e.g. the state its work stored when it
    /// was made) instead of one policy for the tool. A runtime whose tools
    /// are made per call (a gateway's) keeps the decision taken when each
    /// call was made this way.
    pub fn interrupt_by(
        mut self,
        decide: impl Fn(&ServerTaskRecord) -> InterruptPolicy + Send + Sync + 'static,
    ) -> Self {
        self.interrupt_by = Some(Arc::new(decide));
        self
    }

    /// The interrupt policy for `record`, a task of this tool.
    pub(crate) fn interrupt_for(&self, record: &ServerTaskRecord) -> InterruptPolicy {
        match &self.interrupt_by {
            Some(decide) => decide(record),
            None => self.interrupt,
        }
    }

    /// TTL of this tool's tasks; `None` = unlimited.
    pub fn ttl_ms(mut self, ttl_ms: Option<i64>) -> Self {
        self.ttl_ms = Some(ttl_ms);
        self
    }

    /// `pollIntervalMs` suggested to clients polling this tool's tasks
    /// (default: the runtime's).
    pub fn poll_interval_ms(mut self, ms: i64) -> Self {
        self.poll_interval_ms = Some(ms);
        self
    }

    /// Ask for input with a multi-round-trip exchange before the task is created.
    /// The answers are stored with the task and given to every attempt through
    /// [`TaskContext::call_inputs`].
    pub fn preflight<F>(mut self, check: F) -> Self
    where
        F: Fn(&JsonObject, &InputResponses) -> Preflight + Send + Sync + 'static,
    {
        self.preflight = Some(Arc::new(check));
        self
    }

    /// The tool's name, as called in `tools/call`.
    pub fn name(&self) -> &str {
        &self.tool.name
    }

    /// The definition listed by `tools/list`.
    pub fn definition(&self) -> &Tool {
        &self.tool
    }

    /// Whether calls may, must or must not run as tasks.
    pub fn task_support(&self) -> TaskSupport {
        self.support
    }
}
