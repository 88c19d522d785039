//! What the fault cells share: raw SQL on the test database (to build a
//! backlog or plant a constraint), a runtime on the real clock, a client over
//! a real rmcp transport, and a store that pauses after committing a create.

#![allow(dead_code)]

use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::BoxStream;
use mcptask_core::StoreError;
use mcptask_core::server::{
    AnswerOutcome, CancelOutcome, ExpiredTask, Fence, InputState, NewServerTask, Outcome,
    ServerTaskRecord, ServerTaskView, TaskSignal,
};
use mcptask_core::store::ServerTaskStore;
use mcptask_server::{DurableTaskServer, RuntimeConfig, TaskRuntime, ToolRegistry};
use mcptask_sql::Store;
use mcptask_testkit::mcp::{Lifecycle, TestClient};
use serde_json::Value;
use sqlx::AssertSqlSafe;
use tokio::sync::{Notify, watch};

pub use mcptask_testkit::TestDatabase;

/// Run `sql` (one or more statements) on the test database.
pub async fn exec(db: &TestDatabase, sql: &str) {
    match db.open().await {
        Store::Sqlite(s) => {
            sqlx::raw_sql(AssertSqlSafe(sql.to_string()))
                .execute(s.writer_pool())
                .await
                .expect("raw sql on sqlite");
        }
        Store::Postgres(p) => {
            sqlx::raw_sql(AssertSqlSafe(sql.to_string()))
                .execute(p.pool())
                .await
                .expect("raw sql on postgres");
        }
    }
}

/// A database handle kept open for repeated single-integer queries.
pub struct Probe(Store);

impl Probe {
    pub async fn open(db: &TestDatabase) -> Self {
        Probe(db.open().await)
    }

    /// The first column of the first row of `sql`, an integer (NULL reads 0).
    pub async fn int(&self, sql: &str) -> i64 {
        let q = || sqlx::query_scalar::<_, Option<i64>>(AssertSqlSafe(sql.to_string()));
        let v = match &self.0 {
            Store::Sqlite(s) => q().fetch_optional(s.writer_pool()).await,
            Store::Postgres(p) => {
                sqlx::query_scalar::<_, Option<i64>>(AssertSqlSafe(sql.to_string()))
                    .fetch_optional(p.pool())
                    .await
            }
        };
        v.expect("probe query").flatten().unwrap_or(0)
    }
}

/// Start a runtime on the system clock (leases and loops in real time).
pub async fn start_real(
    db: &TestDatabase,
    registry: ToolRegistry,
    config: RuntimeConfig,
    owner: &str,
) -> TaskRuntime {
    TaskRuntime::builder(db.server_tasks().await, registry)
        .config(config)
        .owner_id(owner)
        .start()
        .await
        .expect("start runtime")
}

/// A client over an in-process rmcp transport, declaring the tasks extension.
pub async fn client(runtime: &TaskRuntime) -> TestClient {
    TestClient::in_process(
        DurableTaskServer::new(runtime.clone()),
        Lifecycle::Modern { tasks: true },
    )
    .await
}

/// Settings with short leases and fast loops, for runtimes on the real clock.
pub fn fast_config(lease_ms: i64) -> RuntimeConfig {
    RuntimeConfig {
        lease_ms,
        recovery_every_ms: 50,
        sweep_every_ms: 100,
        backstop_every_ms: 100,
        backstop_window_ms: 60_000,
        retention_ms: 60_000,
        default_ttl_ms: Some(3_600_000),
        background: true,
        ..Default::default()
    }
}

pub const WAIT: Duration = Duration::from_secs(20);

/// Wait until `check` holds, or panic with `what` after `WAIT`.
pub async fn until<F, Fut>(what: &str, check: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A real store with one fault injected: after a create commits, it reports
/// the commit and then holds the create's return until `resume`, which opens
/// the window between "the row is durable" and "the runtime hears so".
pub struct PausedStore {
    inner: Arc<dyn ServerTaskStore>,
    pub committed: Arc<Notify>,
    pub resume: watch::Sender<bool>,
    pub created: Mutex<Vec<String>>,
}

impl PausedStore {
    pub fn new(inner: Arc<dyn ServerTaskStore>) -> Arc<Self> {
        Arc::new(PausedStore {
            inner,
            committed: Arc::new(Notify::new()),
            resume: watch::channel(false).0,
            created: Mutex::new(Vec::new()),
        })
    }

    pub fn created(&self) -> Vec<String> {
        self.created.lock().unwrap().clone()
    }
}

#[async_trait]
impl ServerTaskStore for PausedStore {
    async fn create_tasks(&self, tasks: &[NewServerTask]) -> Result<(), StoreError> {
        self.inner.create_tasks(tasks).await?;
        self.created
            .lock()
            .unwrap()
            .extend(tasks.iter().map(|t| t.id.clone()));
        self.committed.notify_one();
        let _ = self.resume.subscribe().wait_for(|open| *open).await;
        Ok(())
    }
    async fn get_task(&self, task_id: &str) -> Result<Option<ServerTaskView>, StoreError> {
        self.inner.get_task(task_id).await
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
    async fn begin_rerun(&self, fence: &Fence, now: i64) -> Result<Option<i64>, StoreError> {
        self.inner.begin_rerun(fence, now).await
    }
    async fn heartbeat(&self, owner: &str, now: i64, lease_ms: i64) -> Result<(), StoreError> {
        self.inner.heartbeat(owner, now, lease_ms).await
    }
    async fn release_owner(&self, owner: &str, now: i64) -> Result<(), StoreError> {
        self.inner.release_owner(owner, now).await
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
    async fn save_state(&self, fence: &Fence, state: &Value, now: i64) -> Result<bool, StoreError> {
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
        cursor: Option<&mcptask_core::server::TaskCursor>,
        limit: i64,
        now: i64,
    ) -> Result<mcptask_core::server::TaskPage, StoreError> {
        self.inner
            .list_tasks(principal, live_only, cursor, limit, now)
            .await
    }
}
