//! Task status notifications (`subscriptions/listen` with `taskIds`) over
//! real Streamable HTTP, on both stores: the stream is served by one replica
//! while the work runs on another.

use std::sync::Arc;
use std::time::Duration;

use mcptask_server::{DurableTaskServer, TaskListenLayer, TaskRuntime};
use mcptask_testkit::TestDatabase;
use mcptask_testkit::fixtures::server::*;
use mcptask_testkit::mcp::{TaskListen, listen_body};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tower::Layer;

const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";
const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// Serve `runtime` over Streamable HTTP (with the listen layer) on a free
/// port; returns the URL and what stops it.
async fn serve(runtime: TaskRuntime) -> (String, CancellationToken) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let stop = CancellationToken::new();
    let server = DurableTaskServer::new(runtime);
    let http = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default().with_cancellation_token(stop.clone()),
    );
    let app = axum::Router::new().nest_service("/mcp", TaskListenLayer::new().layer(http));
    let stopped = stop.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move { stopped.cancelled().await })
            .await;
    });
    (url, stop)
}

/// A runtime on the real clock that runs its own work.
async fn replica(backend: &TestDatabase, gate: &Gate, owner: &str) -> TaskRuntime {
    replica_with(backend, gate, owner, config()).await
}

/// [`replica`] with its own configuration (background loops always on).
async fn replica_with(
    backend: &TestDatabase,
    gate: &Gate,
    owner: &str,
    config: mcptask_server::RuntimeConfig,
) -> TaskRuntime {
    let clock: mcptask_core::SharedClock = Arc::new(mcptask_core::SystemClock);
    TaskRuntime::builder(backend.server_tasks().await, registry(gate))
        .clock(clock)
        .config(mcptask_server::RuntimeConfig {
            background: true,
            ..config
        })
        .owner_id(owner)
        .start()
        .await
        .unwrap()
}

/// A subscription on replica A hears what the work on replica B does: the
/// task, working when the stream opened, completes on B; A sends exactly one
/// notification (the terminal snapshot, equal to `tasks/get`, with the
/// result), then ends the stream with the final result.
async fn a_subscription_on_one_replica_sees_changes_made_on_another(backend: TestDatabase) {
    let gate = Gate::new();
    let a = replica(&backend, &gate, "A").await;
    let b = replica(&backend, &gate, "B").await;
    let (url, stop) = serve(a.clone()).await;

    // `hold` stays working until the gate opens, which happens only after
    // the stream is acknowledged: the change is made on B after A watches.
    let id = b
        .create_task(request("hold", json!({})))
        .await
        .unwrap()
        .task_id;
    let mut listen =
        TaskListen::open(&url, None, listen_body(41, &[&id, "no-such-task"], true)).await;
    let ack = listen.next().await.expect("an acknowledgement");
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    assert_eq!(
        ack["params"]["notifications"]["taskIds"],
        json!([id]),
        "only tasks the caller can read are accepted: {ack}"
    );
    assert_eq!(ack["params"]["_meta"][SUBSCRIPTION_ID], 41, "{ack}");
    gate.release(1);

    let done = listen.next().await.expect("a notification");
    assert_eq!(done["method"], "notifications/tasks", "{done}");
    let params = &done["params"];
    assert_eq!(params["_meta"][SUBSCRIPTION_ID], 41, "{done}");
    assert_eq!(
        params["status"], "completed",
        "one notification per status change: {done}"
    );
    assert_eq!(
        params["result"]["content"][0]["text"], "held attempt 1",
        "{done}"
    );
    let got = serde_json::to_value(b.get_task(&id, None).await.unwrap()).unwrap();
    let mut snapshot = params.clone();
    snapshot.as_object_mut().unwrap().remove("_meta");
    assert_eq!(snapshot, got, "the terminal notification equals tasks/get");

    let end = listen.next().await.expect("the final result");
    assert_eq!(end["id"], 41, "{end}");
    assert_eq!(end["result"]["_meta"][SUBSCRIPTION_ID], 41, "{end}");
    stop.cancel();
    a.shutdown(Duration::from_millis(100)).await;
    b.shutdown(Duration::from_millis(100)).await;
}

/// A task that already ended when the stream opens is reported at once (the
/// client has not seen it end, or it would not ask), and the stream ends.
async fn an_already_ended_task_is_reported_at_once(backend: TestDatabase) {
    let gate = Gate::new();
    let a = replica(&backend, &gate, "A").await;
    let (url, stop) = serve(a.clone()).await;
    let id = a
        .create_task(request("echo", json!({"x": 1})))
        .await
        .unwrap()
        .task_id;
    eventually(&a, &id, "completed", status_is("completed")).await;
    let mut listen = TaskListen::open(&url, None, listen_body(5, &[&id], true)).await;
    let ack = listen.next().await.unwrap();
    assert_eq!(ack["params"]["notifications"]["taskIds"], json!([id]));
    let done = listen.next().await.unwrap();
    assert_eq!(done["params"]["status"], "completed", "{done}");
    assert!(done["params"]["result"].is_object(), "{done}");
    let end = listen.next().await.unwrap();
    assert!(end.get("result").is_some(), "{end}");
    stop.cancel();
    a.shutdown(Duration::from_millis(100)).await;
}

/// Asking for task notifications without declaring the tasks extension is
/// refused with -32021 and the capability that is missing.
async fn a_non_declaring_request_gets_32021(backend: TestDatabase) {
    let gate = Gate::new();
    let a = replica(&backend, &gate, "A").await;
    let (url, stop) = serve(a.clone()).await;
    let id = a
        .create_task(request("hold", json!({})))
        .await
        .unwrap()
        .task_id;
    let mut listen = TaskListen::open(&url, None, listen_body(9, &[&id], false)).await;
    let answer = listen.next().await.expect("an answer");
    assert_eq!(answer["id"], 9, "{answer}");
    assert_eq!(answer["error"]["code"], -32021, "{answer}");
    assert_eq!(
        answer["error"]["data"]["requiredCapabilities"]["extensions"][TASKS_EXTENSION],
        json!({}),
        "{answer}"
    );
    stop.cancel();
    a.shutdown(Duration::from_millis(100)).await;
}

/// A change the feed never announced (here a row changed behind the
/// runtime's back, as when a publish fails after its commit) still reaches
/// an open stream: the stream re-reads its tasks now and then.
async fn a_change_nobody_announced_is_still_reported(backend: TestDatabase) {
    let gate = Gate::new();
    let recheck_often = mcptask_server::RuntimeConfig {
        listen_recheck_every_ms: 200,
        ..config()
    };
    let a = replica_with(&backend, &gate, "A", recheck_often).await;
    let (url, stop) = serve(a.clone()).await;
    let id = a
        .create_task(request("hold", json!({})))
        .await
        .unwrap()
        .task_id;
    let mut listen = TaskListen::open(&url, None, listen_body(3, &[&id], true)).await;
    let ack = listen.next().await.expect("an acknowledgement");
    assert_eq!(ack["params"]["notifications"]["taskIds"], json!([id]));

    let unannounced = "UPDATE server_tasks SET status = 'cancelled', \
        status_message = 'changed behind the feed', updated_at = updated_at + 1 WHERE id = $1";
    let changed = match backend.open().await {
        mcptask_sql::Store::Sqlite(s) => sqlx::query(unannounced)
            .bind(&id)
            .execute(s.writer_pool())
            .await
            .unwrap()
            .rows_affected(),
        mcptask_sql::Store::Postgres(s) => sqlx::query(unannounced)
            .bind(&id)
            .execute(s.pool())
            .await
            .unwrap()
            .rows_affected(),
    };
    assert_eq!(changed, 1);

    let seen = listen.next().await.expect("a notification");
    assert_eq!(seen["method"], "notifications/tasks", "{seen}");
    assert_eq!(seen["params"]["status"], "cancelled", "{seen}");
    assert_eq!(
        seen["params"]["statusMessage"], "changed behind the feed",
        "{seen}"
    );
    let end = listen.next().await.expect("the final result");
    assert_eq!(end["id"], 3, "{end}");
    stop.cancel();
    gate.release(1);
    a.shutdown(Duration::from_millis(100)).await;
}

mcptask_testkit::on_both_backends! {
    a_change_nobody_announced_is_still_reported => super::a_change_nobody_announced_is_still_reported;
    a_subscription_on_one_replica_sees_changes_made_on_another => super::a_subscription_on_one_replica_sees_changes_made_on_another;
    an_already_ended_task_is_reported_at_once => super::an_already_ended_task_is_reported_at_once;
    a_non_declaring_request_gets_32021 => super::a_non_declaring_request_gets_32021;
}
