//! The route's call timeout bounds a front task's upstream exchange on every
//! driver (synchronous, SEP-1686, SEP-2663, toolset): an upstream that never
//! answers the call ends it at the server's `call_timeout_ms` (1 s here),
//! never at the tracker's default (60 s here), whichever driver carries it.
//! Real `mcptask serve` processes before real upstreams; a `ScriptedServer`
//! holds the calls of those that answer at once.

use std::time::{Duration, Instant};

use mcptask_testkit::mcp::{TestClient, wire};
use mcptask_testkit::*;
use rmcp::model::CallToolResponse;
use serde_json::{Value, json};

/// The server's own bound, and the tracker's default, far longer.
const SERVER_TIMEOUT: Duration = Duration::from_secs(1);
const TRACKER_TIMEOUT_MS: u64 = 60_000;

/// Generous: a call bounded by the server's second ends well before; one
/// bounded by the tracker's minute does not.
const ENDS_WITHIN: Duration = Duration::from_secs(15);

/// A front (`mcptask serve`, proxy on, no auth) whose tracker's call timeout
/// is a minute, before `servers` (each with `call_timeout_ms = 1000`).
async fn front(db: &TestDatabase, servers: &str) -> GatewayProcess {
    let mut spec = GatewaySpec::open(&db.url, &[]);
    spec.servers.clear();
    let toml = format!(
        "{}call_timeout_ms = {TRACKER_TIMEOUT_MS}\nlease_ms = {}\n\n{servers}\n[proxy]\nenabled = true\n",
        spec.toml(),
        TRACKER_TIMEOUT_MS * 2,
    );
    GatewayProcess::start_toml("front", &toml, &[]).await
}

/// A `[[servers]]` entry for `url` bounded by [`SERVER_TIMEOUT`], with
/// `extra` TOML lines.
fn server(name: &str, url: &str, extra: &str) -> String {
    format!(
        "[[servers]]\nname = {name:?}\nurl = {url:?}\ncall_timeout_ms = {}\n{extra}\n",
        SERVER_TIMEOUT.as_millis()
    )
}

/// A call of `tool` by a caller that declares tasks, to its end: the front
/// task's terminal wire form (a task that ends), or the error the call
/// itself was answered with (a create the upstream never answered). Returns
/// it with how long it took; fails the test if it outlives
/// [`ENDS_WITHIN`] or ends before the server's bound.
async fn ended(client: &TestClient, tool: &str, arguments: Value) -> String {
    let started = Instant::now();
    let end = async {
        match client.call(tool, arguments).await {
            Ok(CallToolResponse::Task(created)) => {
                let done = wire(&client.wait_terminal(&created.task.task_id, WAIT).await);
                assert_eq!(done["status"], "failed", "{done:#}");
                done.to_string()
            }
            Ok(other) => panic!("expected a task or an error, got {other:?}"),
            Err(e) => format!("error: {e}"),
        }
    };
    let seen = tokio::time::timeout(ENDS_WITHIN, end)
        .await
        .unwrap_or_else(|_| {
            panic!("{tool}: not ended after {ENDS_WITHIN:?} (the server's bound is 1 s)")
        });
    let took = started.elapsed();
    eprintln!("{tool}: {seen} after {} ms", took.as_millis());
    assert!(
        took >= SERVER_TIMEOUT - Duration::from_millis(100),
        "{tool}: ended after {took:?}, before the server's bound: {seen}"
    );
    assert!(
        seen.contains("1s") || seen.contains("within"),
        "{tool}: not a timeout: {seen}"
    );
    seen
}

/// The synchronous driver: a front task of a tool that never answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_front_task_ends_at_the_servers_call_timeout() {
    with_deadline(Duration::from_secs(120), async {
        let upstream = SyncUpstream::start().await;
        let db = TestDatabase::sqlite();
        let gateway = front(&db, &server("sync", &upstream.url, "")).await;
        let client = gateway.front_client().await;
        client.tools_once_listed("sync__stall").await;
        ended(&client, "sync__stall", json!({})).await;
    })
    .await;
}

/// The toolset driver: a submit tool that never answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_toolset_front_task_ends_at_the_servers_call_timeout() {
    with_deadline(Duration::from_secs(120), async {
        let upstream = SyncUpstream::start().await;
        let db = TestDatabase::sqlite();
        let toolset = "\n[[servers.toolsets]]\nname = \"jobs\"\nsubmit_tool = \"stall\"\n\
                       status_tool = \"echo\"\ncancel_tool = \"whoami\"\n";
        let gateway = front(&db, &server("jobs", &upstream.url, toolset)).await;
        let client = gateway.front_client().await;
        client.tools_once_listed("jobs__stall").await;
        ended(&client, "jobs__stall", json!({})).await;
    })
    .await;
}

/// The SEP-2663 driver: the upstream's `tools/call` (the task's create) held
/// by an answer that never ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sep2663_front_task_ends_at_the_servers_call_timeout() {
    with_deadline(Duration::from_secs(120), async {
        let upstream_db = TestDatabase::sqlite();
        let demo = DemoServer::start(&upstream_db.url, &[]).await;
        let scripted = ScriptedServer::start(&demo.url).await;
        let db = TestDatabase::sqlite();
        let gateway = front(&db, &server("demo", &scripted.url(), "")).await;
        let client = gateway.front_client().await;
        client.tools_once_listed("demo__greet").await;
        scripted.script(
            Rule::new("tools/call", usize::MAX, Scripted::EndlessSse).when("/name", json!("greet")),
        );
        ended(&client, "demo__greet", json!({"name": "held"})).await;
    })
    .await;
}

/// The SEP-1686 driver (the 2025-11-25 tasks protocol): the everything
/// server's task-only tool, whose create is held by an answer that never
/// ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sep1686_front_task_ends_at_the_servers_call_timeout() {
    let test = "a_sep1686_front_task_ends_at_the_servers_call_timeout";
    let Some(ev) = Everything::or_skip(test) else {
        return;
    };
    with_deadline(Duration::from_secs(180), async {
        let (_upstream, url) = ev.start_http("everything", free_port()).await;
        let scripted = ScriptedServer::start(&url).await;
        let db = TestDatabase::sqlite();
        let gateway = front(&db, &server("ev", &scripted.url(), "")).await;
        let client = gateway.front_client().await;
        client
            .tools_once_listed("ev__simulate-research-query")
            .await;
        scripted.script(
            Rule::new("tools/call", usize::MAX, Scripted::EndlessSse)
                .when("/name", json!("simulate-research-query")),
        );
        ended(
            &client,
            "ev__simulate-research-query",
            json!({"topic": "rust"}),
        )
        .await;
    })
    .await;
}
