//! A real store with a test's hook between the runtime and some of its
//! writes: how the fault tests open a window (a pause after a commit, a
//! crash before or after one) without a line of test code in the product.
//!
//! [`Interposed`] forwards every [`ServerTaskStore`] call to the store it
//! wraps and lets its [`Interpose`] hook run at the [`Step`]s it names:
//! around a create's commit and before a task's saved state is written. A
//! hook that never returns holds the writer there for good; in a runtime
//! then shut down (tokio's `shutdown_background`), that is a process that
//! died at that instant, with the store as a SIGKILL would leave it.
//!
//! ```ignore
//! let store = Interposed::new(db.server_tasks().await, Crash::at(|step| {
//!     matches!(step, Step::AfterCreate(tasks) if tasks[0].call_row.is_some())
//! }));
//! ```

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures::stream::BoxStream;
use mcptask_core::StoreError;
use mcptask_core::server::{
    AnswerOutcome, CancelOutcome, ExpiredTask, Fence, InputState, NewServerTask, Outcome,
    ServerTaskRecord, ServerTaskState, ServerTaskView, TaskCursor, TaskPage, TaskSignal,
};
use mcptask_core::store::ServerTaskStore;
use serde_json::Value;
use tokio::sync::{Notify, watch};

/// Where a hook runs.
#[derive(Debug, Clone, Copy)]
pub enum Step<'a> {
    /// Before tasks are inserted (nothing of them is stored yet).
    BeforeCreate(&'a [NewServerTask]),
    /// After the insert committed, before the runtime hears so.
    AfterCreate(&'a [NewServerTask]),
    /// Before a task's work state is saved ([`ServerTaskStore::save_state`]).
    BeforeSaveState(&'a Value),
}

/// A test's hook at the [`Step`]s of an [`Interposed`] store.
#[async_trait]
pub trait Interpose: Send + Sync + 'static {
    /// Runs at `step`; the store call goes on when this returns.
    async fn at(&self, step: Step<'_>);
}

/// A [`ServerTaskStore`] that is `inner` with `hook` run at its [`Step`]s.
pub struct Interposed<H> {
    inner: Arc<dyn ServerTaskStore>,
    /// The test's hook (shared, so the test keeps a handle on it).
    pub hook: Arc<H>,
}

impl<H: Interpose> Interposed<H> {
    /// `inner`, with `hook` at its steps.
    pub fn new(inner: Arc<dyn ServerTaskStore>, hook: H) -> Arc<Self> {
        Self::shared(inner, Arc::new(hook))
    }

    /// `inner`, with a hook the test holds too.
    pub fn shared(inner: Arc<dyn ServerTaskStore>, hook: Arc<H>) -> Arc<Self> {
        Arc::new(Interposed { inner, hook })
    }
}

/// A crash at the first step `when` picks: the writer stops there for good
/// and [`Crash::crashed`] fires, for the test to end the runtime the writer
/// ran in (the process "died" at that instant).
pub struct Crash {
    when: Box<dyn Fn(Step<'_>) -> bool + Send + Sync>,
    crashed: Arc<Notify>,
}

impl Crash {
    /// A crash at the first step `when` picks.
    pub fn at(when: impl Fn(Step<'_>) -> bool + Send + Sync + 'static) -> Crash {
        Crash {
            when: Box::new(when),
            crashed: Arc::new(Notify::new()),
        }
    }

    /// Resolves once the crash happened.
    pub async fn crashed(&self) {
        self.crashed.notified().await;
    }
}

#[async_trait]
impl Interpose for Crash {
    async fn at(&self, step: Step<'_>) {
        if (self.when)(step) {
            // `notify_one` keeps the permit if the test is not waiting yet.
            self.crashed.notify_one();
            std::future::pending::<()>().await;
        }
    }
}

/// A pause after each create commits: [`Pause::committed`] fires, then the
/// create's return waits until [`Pause::resume`] is set, which opens the
/// window between "the row is durable" and "the runtime hears so".
pub struct Pause {
    /// Fires after each commit.
    pub committed: Arc<Notify>,
    /// Set to `true` to let the held creates return (and later ones pass).
    pub resume: watch::Sender<bool>,
    created: Mutex<Vec<String>>,
}

impl Pause {
    /// A pause that holds every create until resumed.
    pub fn new() -> Pause {
        Pause {
            committed: Arc::new(Notify::new()),
            resume: watch::channel(false).0,
            created: Mutex::new(Vec::new()),
        }
    }

    /// The ids of the tasks committed so far.
    pub fn created(&self) -> Vec<String> {
        self.created.lock().expect("pause lock").clone()
    }
}

impl Default for Pause {
    fn default() -> Self {
        Pause::new()
    }
}

#[async_trait]
impl Interpose for Pause {
    async fn at(&self, step: Step<'_>) {
        if let Step::AfterCreate(tasks) = step {
            self.created
                .lock()
                .expect("pause lock")
                .extend(tasks.iter().map(|t| t.id.clone()));
            self.committed.notify_one();
            let _ = self.resume.subscribe().wait_for(|open| *open).await;
        }
    }
}

#[async_trait]
impl<H: Interpose> ServerTaskStore for Interposed<H> {
    async fn create_tasks(&self, tasks: &[NewServerTask]) -> Result<(), StoreError> {
        self.hook.at(Step::BeforeCreate(tasks)).await;
        self.inner.create_tasks(tasks).await?;
        self.hook.at(Step::AfterCreate(tasks)).await;
        Ok(())
    }
    fn create_writers(&self) -> usize {
        self.inner.create_writers()
    }
    async fn get_task(&self, task_id: &str) -> Result<Option<ServerTaskView>, StoreError> {
        self.inner.get_task(task_id).await
    }
    async fn get_task_state(&self, task_id: &str) -> Result<Option<ServerTaskState>, StoreError> {
        self.inner.get_task_state(task_id).await
    }
    async fn set_status_message(
        &self,
        fence: &Fence,
        message: Option<&str>,
        now: i64,
    ) -> Result<bool, StoreError> {
        self.inner.set_status_message(fence, message, now).await
    }
    async fn request_inputs(
        &self,
        fence: &Fence,
        requests: &[(String, Value)],
        now: i64,
    ) -> Result<Option<Vec<(String, InputState)>>, StoreError> {
        self.inner.request_inputs(fence, requests, now).await
    }
    async fn input_states(
        &self,
        task_id: &str,
        keys: &[String],
    ) -> Result<Vec<(String, InputState)>, StoreError> {
        self.inner.input_states(task_id, keys).await
    }
    async fn answer_inputs(
        &self,
        task_id: &str,
        responses: &[(String, Value)],
        now: i64,
    ) -> Result<AnswerOutcome, StoreError> {
        self.inner.answer_inputs(task_id, responses, now).await
    }
    async fn request_cancel(&self, task_id: &str, now: i64) -> Result<CancelOutcome, StoreError> {
        self.inner.request_cancel(task_id, now).await
    }
    async fn finish(
        &self,
        fence: &Fence,
        outcome: &Outcome,
        now: i64,
        purge_at: Option<i64>,
    ) -> Result<bool, StoreError> {
        self.inner.finish(fence, outcome, now, purge_at).await
    }
    async fn begin_rerun(
        &self,
        fence: &Fence,
        now: i64,
        message: &str,
    ) -> Result<Option<i64>, StoreError> {
        self.inner.begin_rerun(fence, now, message).await
    }
    async fn heartbeat(&self, owner: &str, now: i64, lease_ms: i64) -> Result<(), StoreError> {
        self.inner.heartbeat(owner, now, lease_ms).await
    }
    async fn release_owner(&self, owner: &str, now: i64) -> Result<(), StoreError> {
        self.inner.release_owner(owner, now).await
    }
    async fn take_slot(&self) -> Result<Option<Box<dyn mcptask_core::slot::HeldSlot>>, StoreError> {
        self.inner.take_slot().await
    }
    async fn release_slot(
        &self,
        prefix: &str,
        now: i64,
    ) -> Result<mcptask_core::slot::Released, StoreError> {
        self.inner.release_slot(prefix, now).await
    }
    async fn claim_orphans(
        &self,
        owner: &str,
        now: i64,
        limit: i64,
    ) -> Result<Vec<ServerTaskRecord>, StoreError> {
        self.inner.claim_orphans(owner, now, limit).await
    }
    async fn prune_owners(&self, before: i64) -> Result<u64, StoreError> {
        self.inner.prune_owners(before).await
    }
    async fn expire_overdue(
        &self,
        now: i64,
        limit: i64,
        purge_at: i64,
    ) -> Result<Vec<ExpiredTask>, StoreError> {
        self.inner.expire_overdue(now, limit, purge_at).await
    }
    async fn purge(&self, now: i64, limit: i64) -> Result<u64, StoreError> {
        self.inner.purge(now, limit).await
    }
    async fn signals_since(&self, owner: &str, since: i64) -> Result<Vec<TaskSignal>, StoreError> {
        self.inner.signals_since(owner, since).await
    }
    async fn listen_signals(&self) -> Result<Option<BoxStream<'static, String>>, StoreError> {
        self.inner.listen_signals().await
    }
    async fn publish_changes(&self, task_ids: &[String]) -> Result<(), StoreError> {
        self.inner.publish_changes(task_ids).await
    }
    async fn listen_changes(&self) -> Result<Option<BoxStream<'static, Vec<String>>>, StoreError> {
        self.inner.listen_changes().await
    }
    async fn save_state(&self, fence: &Fence, state: &Value, now: i64) -> Result<bool, StoreError> {
        self.hook.at(Step::BeforeSaveState(state)).await;
        self.inner.save_state(fence, state, now).await
    }
    async fn withdraw_inputs(
        &self,
        fence: &Fence,
        keys: &[String],
        now: i64,
    ) -> Result<bool, StoreError> {
        self.inner.withdraw_inputs(fence, keys, now).await
    }
    async fn list_tasks(
        &self,
        principal: Option<&str>,
        live_only: bool,
        cursor: Option<&TaskCursor>,
        limit: i64,
        now: i64,
    ) -> Result<TaskPage, StoreError> {
        self.inner
            .list_tasks(principal, live_only, cursor, limit, now)
            .await
    }
}
