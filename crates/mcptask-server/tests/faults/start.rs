//! A runtime started while its database restarts waits for it: the first
//! heartbeat (the owner lease) is retried while the error is transient.
//! Found by the tracker chaos test: a gateway started just before
//! PostgreSQL's restart connected, then lost the database at its first
//! heartbeat and exited ("starting the call runtime").

use std::time::Duration;

use mcptask_server::{TaskRuntime, ToolRegistry};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_started_while_postgres_is_down_waits_for_it() {
    let Some(pg) = mcptask_testkit::pg::PrivateCluster::start().await else {
        eprintln!("a_runtime_started_while_postgres_is_down_waits_for_it: SKIPPED (no PostgreSQL)");
        return;
    };
    let url = pg.fresh_database().await;
    let store = mcptask_sql::open(&url).await.expect("open").server_tasks();
    pg.stop_immediate().await;
    // Started with the database down: its first heartbeat fails (connection
    // refused) before the database is back.
    let start = tokio::spawn(TaskRuntime::builder(store, ToolRegistry::new()).start());
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !start.is_finished(),
        "start gave up while the database was down"
    );
    pg.start_again().await;
    let runtime = tokio::time::timeout(Duration::from_secs(60), start)
        .await
        .expect("start returns once the database is back")
        .expect("start task")
        .expect("the runtime starts once the database answers again");
    runtime.shutdown(Duration::from_secs(1)).await;
}
