//! The handle a task's work gets: rmcp's `TaskContext` methods, written
//! through the durable runtime.
//!
//! rmcp hands the context to `make_future` before the task exists anywhere
//! but in memory; here the task exists once its row is committed. So the
//! context is made unbound, given to `make_future` at once (as rmcp does),
//! and bound to the runtime's own [`crate::TaskContext`] when the work
//! starts, which is always before the future is first polled.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use rmcp::ErrorData;
use rmcp::model::InputRequest;
use rmcp::task_manager::TaskExit;
use serde_json::Value;

/// What a task's work uses to report status, ask the client for input and
/// notice cancellation: rmcp's `TaskContext`, durable.
///
/// Differences from rmcp's (each one a durable write or a durable fact):
/// [`TaskContext::set_status_message`] is awaited and returns a `Result`
/// (the message is committed, fenced by this process's claim); an input
/// key answered before a restart is answered again at once (rmcp: keys may
/// not repeat); [`TaskContext::attempt`] tells a rerun from the first run.
///
/// ```no_run
/// use mcptask_server::task_manager::{TaskContext, TaskExit};
/// use rmcp::model::{CallToolResult, ContentBlock};
///
/// async fn work(ctx: TaskContext) -> Result<CallToolResult, TaskExit> {
///     ctx.set_status_message("halfway").await?;
///     tokio::select! {
///         _ = ctx.cancelled() => Err(TaskExit::Cancelled),
///         _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {
///             Ok(CallToolResult::success(vec![ContentBlock::text("done")]))
///         }
///     }
/// }
/// ```
#[derive(Clone)]
pub struct TaskContext {
    task_id: Arc<str>,
    bound: Arc<OnceLock<crate::TaskContext>>,
}

impl TaskContext {
    /// A context for `task_id`, bound later by [`TaskContext::bind`].
    pub(crate) fn unbound(task_id: &str) -> Self {
        Self {
            task_id: task_id.into(),
            bound: Arc::default(),
        }
    }

    /// A context already bound to the runtime's (a named tool's task).
    pub(crate) fn bound(ctx: crate::TaskContext) -> Self {
        let this = Self::unbound(ctx.task_id().unwrap_or_default());
        this.bind(ctx);
        this
    }

    /// Bind to the runtime's context of the started work.
    pub(crate) fn bind(&self, ctx: crate::TaskContext) {
        let _ = self.bound.set(ctx);
    }

    fn durable(&self) -> Result<&crate::TaskContext, TaskExit> {
        self.bound.get().ok_or_else(|| {
            TaskExit::Error(ErrorData::internal_error(
                "the task's context was used before its work started",
                None,
            ))
        })
    }

    /// The id of the task this context belongs to.
    pub fn task_id(&self) -> &str {
        &self.task_id
    }

    /// 1 for the first run, then one more for each rerun after a crash
    /// (only a named tool's task is rerun).
    pub fn attempt(&self) -> i64 {
        self.bound.get().map_or(1, crate::TaskContext::attempt)
    }

    /// The runtime's own context, for what rmcp's has no name for
    /// ([`crate::TaskContext::request_inputs`], `save_state`, `principal`).
    pub fn durable_context(&self) -> Option<&crate::TaskContext> {
        self.bound.get()
    }

    /// Ask the client for input under `key` (shown from `tasks/get` as
    /// `input_required`) and wait for its `tasks/update` answer. The request
    /// and the answer are stored: a rerun asking the same key gets the
    /// stored answer at once.
    pub async fn request_input(
        &self,
        key: impl Into<String>,
        request: InputRequest,
    ) -> Result<Value, TaskExit> {
        self.durable()?
            .request_input(key, request)
            .await
            .map_err(rmcp_exit)
    }

    /// Replace the task's status message: `ctx.set_status_message(m).await?`.
    /// The write is committed when the returned [`StatusWrite`] is awaited
    /// (rmcp's sets it in memory and returns nothing); rmcp's line without
    /// `.await` is warned of, since the message would be lost.
    pub fn set_status_message(&self, message: impl Into<String>) -> StatusWrite<'_> {
        let message = message.into();
        StatusWrite {
            write: Box::pin(async move {
                self.durable()?
                    .set_status_message(message)
                    .await
                    .map_err(rmcp_exit)
            }),
        }
    }

    /// Whether `tasks/cancel` was received for this task, here or at
    /// another replica.
    pub fn is_cancel_requested(&self) -> bool {
        self.bound
            .get()
            .is_some_and(crate::TaskContext::is_cancel_requested)
    }

    /// Resolves once `tasks/cancel` was received (cooperative: return
    /// [`TaskExit::Cancelled`] to settle `cancelled`).
    pub async fn cancelled(&self) {
        match self.bound.get() {
            Some(ctx) => ctx.cancelled().await,
            // Unbound: the work has not started, so nothing awaits this.
            None => std::future::pending().await,
        }
    }
}

/// A status message on its way to the store
/// ([`TaskContext::set_status_message`]): nothing is written until it is
/// awaited, so one dropped unawaited (rmcp's line, which returns nothing)
/// is warned of at compile time with what is lost.
///
/// ```compile_fail
/// #![deny(unused_must_use)]
/// async fn work(ctx: mcptask_server::task_manager::TaskContext) {
///     ctx.set_status_message("halfway"); // rmcp's line: never written
/// }
/// ```
#[must_use = "the status message is written only when this is awaited (`.await?`); dropped, it is never stored and clients never see it"]
pub struct StatusWrite<'a> {
    write: Pin<Box<dyn Future<Output = Result<(), TaskExit>> + Send + 'a>>,
}

impl Future for StatusWrite<'_> {
    type Output = Result<(), TaskExit>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.write.as_mut().poll(cx)
    }
}

/// The runtime's exit as rmcp's. A lost claim has no rmcp name; it becomes
/// an error, which the runtime then drops (the write is fenced by the claim
/// that was lost).
pub(crate) fn rmcp_exit(exit: crate::TaskExit) -> TaskExit {
    match exit {
        crate::TaskExit::Cancelled => TaskExit::Cancelled,
        crate::TaskExit::Error(e) => TaskExit::Error(e),
        crate::TaskExit::Lost => TaskExit::Error(ErrorData::internal_error(
            "this process no longer holds the task",
            None,
        )),
        // `crate::TaskExit` is non-exhaustive for other crates only.
    }
}

/// rmcp's exit as the runtime's.
pub(crate) fn durable_exit(exit: TaskExit) -> crate::TaskExit {
    match exit {
        TaskExit::Cancelled => crate::TaskExit::Cancelled,
        TaskExit::Error(e) => crate::TaskExit::Error(e),
    }
}
