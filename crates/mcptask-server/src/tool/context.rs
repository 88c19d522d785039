//! What a running tool sees: its task, input requests and cancellation.

use std::collections::BTreeMap;
use std::sync::Arc;

use mcptask_core::server::{Fence, InputState};
use rmcp::ErrorData;
use rmcp::model::{InputRequest, InputResponses};
use serde_json::Value;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::engine::RuntimeInner;

/// How a tool stops without a result.
#[derive(Debug)]
#[non_exhaustive]
pub enum TaskExit {
    /// It stopped because cancellation was requested: the task settles `cancelled`.
    Cancelled,
    /// A JSON-RPC error: the task settles `failed` with it.
    Error(ErrorData),
    /// This process no longer holds the task (another replica took it over, or
    /// it expired): stop without writing anything.
    Lost,
}

impl From<ErrorData> for TaskExit {
    fn from(e: ErrorData) -> Self {
        TaskExit::Error(e)
    }
}

/// Handle given to a running tool.
///
/// Cheap to clone. In a task it writes through the store, fenced by this
/// process's claim; in a synchronous call (client without the tasks extension)
/// status messages are dropped and input requests fail.
#[derive(Clone)]
pub struct TaskContext {
    inner: Arc<Inner>,
}

struct Inner {
    task_id: Option<String>,
    attempt: i64,
    principal: Option<String>,
    call_inputs: InputResponses,
    cancel: CancellationToken,
    task: Option<TaskMode>,
    /// The driver state as last saved (or as stored when the work started).
    state: std::sync::Mutex<Option<Value>>,
}

struct TaskMode {
    rt: Arc<RuntimeInner>,
    fence: Fence,
    wake: watch::Receiver<u64>,
}

impl TaskContext {
    pub(crate) fn for_task(
        rt: Arc<RuntimeInner>,
        fence: Fence,
        attempt: i64,
        principal: Option<String>,
        call_inputs: InputResponses,
        cancel: CancellationToken,
        wake: watch::Receiver<u64>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                task_id: Some(fence.task_id.clone()),
                attempt,
                principal,
                call_inputs,
                cancel,
                task: Some(TaskMode { rt, fence, wake }),
                state: Default::default(),
            }),
        }
    }

    pub(crate) fn synchronous(
        principal: Option<String>,
        call_inputs: InputResponses,
        cancel: CancellationToken,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                task_id: None,
                attempt: 1,
                principal,
                call_inputs,
                cancel,
                task: None,
                state: Default::default(),
            }),
        }
    }

    /// Start from the driver state stored with the task.
    pub(crate) fn with_state(self, state: Option<Value>) -> Self {
        *self.inner.state.lock().expect("state") = state;
        self
    }

    /// The task id, or `None` for a synchronous call.
    pub fn task_id(&self) -> Option<&str> {
        self.inner.task_id.as_deref()
    }

    /// 1 for the first run, then one more for each rerun after an interruption.
    pub fn attempt(&self) -> i64 {
        self.inner.attempt
    }

    /// The authenticated subject that created the task, if any.
    pub fn principal(&self) -> Option<&str> {
        self.inner.principal.as_deref()
    }

    /// Whether this call runs as a durable task.
    pub fn is_task(&self) -> bool {
        self.inner.task.is_some()
    }

    /// `inputResponses` of the multi-round-trip exchange that preceded the task.
    pub fn call_inputs(&self) -> &InputResponses {
        &self.inner.call_inputs
    }

    /// Replace the task's status message (shown to clients on `tasks/get`).
    pub async fn set_status_message(&self, message: impl Into<String>) -> Result<(), TaskExit> {
        let Some(task) = &self.inner.task else {
            return Ok(());
        };
        let message = message.into();
        let message =
            mcptask_core::payload::truncate_text(&message, task.rt.config.limits.max_message_bytes);
        let now = task.rt.clock.now_ms();
        let ok = task
            .rt
            .retrying("set status message", || {
                task.rt
                    .store
                    .set_status_message(&task.fence, Some(&message), now)
            })
            .await?;
        if !ok {
            return Err(TaskExit::Lost);
        }
        task.rt.feed.publish(&task.fence.task_id);
        Ok(())
    }

    /// Ask the client for input under `key` and wait for the answer.
    ///
    /// Keys are unique for the task's whole life: asking again for a key that
    /// was already answered (for example in a rerun after a crash) returns the
    /// stored answer at once and is never shown to the client again.
    pub async fn request_input(
        &self,
        key: impl Into<String>,
        request: InputRequest,
    ) -> Result<Value, TaskExit> {
        let key = key.into();
        let mut answers = self
            .request_inputs(BTreeMap::from([(key.clone(), request)]))
            .await?;
        answers.remove(&key).ok_or_else(|| {
            TaskExit::Error(ErrorData::internal_error("input answer went missing", None))
        })
    }

    /// Ask for several inputs at once (all outstanding together) and wait
    /// until every one is answered.
    pub async fn request_inputs(
        &self,
        requests: BTreeMap<String, InputRequest>,
    ) -> Result<BTreeMap<String, Value>, TaskExit> {
        let Some(task) = &self.inner.task else {
            return Err(TaskExit::Error(ErrorData::invalid_request(
                "this tool needs input from the client while it runs; call it with the \
                 io.modelcontextprotocol/tasks extension declared in the request _meta",
                None,
            )));
        };
        let mut wake = task.wake.clone();
        // Mark the current wake generation seen before writing, so an answer
        // committed after our write is always noticed.
        wake.borrow_and_update();
        let pending: Vec<(String, Value)> = requests
            .into_iter()
            .map(|(k, r)| serde_json::to_value(r).map(|v| (k, v)))
            .collect::<Result<_, _>>()
            .map_err(|e| {
                TaskExit::Error(ErrorData::internal_error(
                    format!("input request is not serializable: {e}"),
                    None,
                ))
            })?;
        if self.is_cancel_requested() {
            return Err(TaskExit::Cancelled);
        }
        let now = task.rt.clock.now_ms();
        let states = task
            .rt
            .retrying("request input", || {
                task.rt.store.request_inputs(&task.fence, &pending, now)
            })
            .await?
            .ok_or(TaskExit::Lost)?;
        let mut answers = BTreeMap::new();
        let mut waiting: Vec<String> = Vec::new();
        for (key, state) in states {
            match state {
                InputState::Answered(v) => {
                    answers.insert(key, v);
                }
                InputState::Pending => waiting.push(key),
            }
        }
        if !waiting.is_empty() {
            // The task now reads `input_required` with these requests.
            task.rt.feed.publish(&task.fence.task_id);
        }
        while !waiting.is_empty() {
            tokio::select! {
                _ = self.inner.cancel.cancelled() => return Err(TaskExit::Cancelled),
                changed = wake.changed() => {
                    if changed.is_err() {
                        return Err(TaskExit::Lost);
                    }
                }
            }
            let states = task
                .rt
                .retrying("read input answers", || {
                    task.rt.store.input_states(&task.fence.task_id, &waiting)
                })
                .await?;
            for (key, state) in states {
                if let InputState::Answered(v) = state {
                    waiting.retain(|k| k != &key);
                    answers.insert(key, v);
                }
            }
        }
        Ok(answers)
    }

    /// The durable state this task's work saved with [`TaskContext::save_state`]
    /// (in this attempt or an earlier, interrupted one), or `None`.
    ///
    /// A rerun after a crash reads here what the interrupted attempt had done
    /// (a proxy's driver: which upstream task it was following).
    pub fn state(&self) -> Option<Value> {
        self.inner.state.lock().expect("state").clone()
    }

    /// Save `state` with the task, fenced by this process's claim: a rerun on
    /// any replica reads it back with [`TaskContext::state`].
    ///
    /// State larger than the runtime's
    /// [`PayloadLimits::max_arguments_bytes`](mcptask_core::payload::PayloadLimits)
    /// is refused with an error and nothing is written. [`TaskExit::Lost`]
    /// when the claim is gone. In a synchronous call it is only kept in
    /// memory.
    ///
    /// ```no_run
    /// # async fn work(ctx: mcptask_server::TaskContext) -> Result<(), mcptask_server::TaskExit> {
    /// match ctx.state() {
    ///     Some(saved) => { /* resume from `saved` */ let _ = saved; }
    ///     None => ctx.save_state(serde_json::json!({"step": 1})).await?,
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn save_state(&self, state: Value) -> Result<(), TaskExit> {
        let Some(task) = &self.inner.task else {
            *self.inner.state.lock().expect("state") = Some(state);
            return Ok(());
        };
        let size = mcptask_core::payload::json_size(&state);
        let max = task.rt.config.limits.max_arguments_bytes;
        if size > max {
            return Err(TaskExit::Error(ErrorData::internal_error(
                format!("task state is {size} bytes; this server keeps at most {max}"),
                None,
            )));
        }
        let now = task.rt.clock.now_ms();
        let ok = task
            .rt
            .retrying("save task state", || {
                task.rt.store.save_state(&task.fence, &state, now)
            })
            .await?;
        if !ok {
            return Err(TaskExit::Lost);
        }
        *self.inner.state.lock().expect("state") = Some(state);
        Ok(())
    }

    /// Withdraw input requests the work no longer waits for (the question
    /// was settled elsewhere). Unanswered keys among `keys` stop being shown
    /// to clients and the task reads `working` again once none is left;
    /// answered keys keep their answers. Fenced: [`TaskExit::Lost`] when the
    /// claim is gone. Does nothing in a synchronous call.
    ///
    /// A pending [`TaskContext::request_inputs`] for a withdrawn key never
    /// completes: drop it (a `select!` with whatever made the question moot).
    pub async fn withdraw_inputs(&self, keys: &[String]) -> Result<(), TaskExit> {
        let Some(task) = &self.inner.task else {
            return Ok(());
        };
        let now = task.rt.clock.now_ms();
        let ok = task
            .rt
            .retrying("withdraw inputs", || {
                task.rt.store.withdraw_inputs(&task.fence, keys, now)
            })
            .await?;
        if ok { Ok(()) } else { Err(TaskExit::Lost) }
    }

    /// Whether `tasks/cancel` was received (or, synchronously, the request was cancelled).
    pub fn is_cancel_requested(&self) -> bool {
        self.inner.cancel.is_cancelled()
    }

    /// Resolves once cancellation is requested. Cancellation is cooperative:
    /// return [`TaskExit::Cancelled`] to settle as `cancelled`, or finish anyway.
    pub async fn cancelled(&self) {
        self.inner.cancel.cancelled().await
    }
}
