//! What the fault cells share: raw SQL on the test database (to build a
//! backlog or plant a constraint), a runtime on the real clock, a client over
//! a real rmcp transport, and a store that pauses after committing a create
//! (`mcptask_testkit::interposed`).

#![allow(dead_code)]

use std::time::Duration;

use mcptask_server::{DurableTaskServer, RuntimeConfig, TaskRuntime, ToolRegistry};
use mcptask_sql::Store;
use mcptask_testkit::mcp::{Lifecycle, TestClient};
use sqlx::AssertSqlSafe;

pub use mcptask_testkit::TestDatabase;
pub use mcptask_testkit::interposed::{Interposed, Pause};

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
