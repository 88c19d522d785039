//! End-to-end tracking against a real MCP server over Streamable HTTP, with the
//! tracker's store on SQLite and on PostgreSQL.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use mcptask_client::{
    CallOptions, CallOutcome, InputContext, InputResolver, ServerDef, Tracker, TrackerConfig,
};
use mcptask_core::TaskStatus;
use mcptask_core::client::EventKind;
use mcptask_testkit::TestDatabase;
use mcptask_testkit::fixtures::client::*;
use mcptask_testkit::tracker::fast_config;
use serde_json::{Value, json};

async fn start_task(tracker: &Tracker, tool: &str) -> mcptask_client::RemoteTaskRecord {
    start_task_on(tracker, "remote", tool).await
}

async fn start_task_on(
    tracker: &Tracker,
    server: &str,
    tool: &str,
) -> mcptask_client::RemoteTaskRecord {
    let opts = CallOptions {
        principal: Some("alice".into()),
        conversation: Some("conv-1".into()),
        call_id: Some(format!("call-{tool}")),
        correlation: Some(json!({"ticket": 7})),
        ..Default::default()
    };
    match tracker
        .call_tool(server, tool, json!({"x": 1}), opts)
        .await
        .unwrap()
    {
        CallOutcome::Task(t) => *t,
        CallOutcome::Completed(r) => panic!("{tool} completed synchronously: {r:?}"),
    }
}

async fn outcomes_are_recorded_as_the_server_reports_them(backend: TestDatabase) {
    let server = RemoteServer::start(Some(60_000)).await;
    let tracker = tracker(&backend, &server, fast_config()).await;
    let quick = start_task(&tracker, "quick").await;
    assert_eq!(quick.principal.as_deref(), Some("alice"));
    let boom = start_task(&tracker, "boom").await;
    let tool_error = start_task(&tracker, "tool_error").await;

    let q = tracker
        .wait(&quick.id, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(q.status, TaskStatus::Completed);
    assert_eq!(
        q.result.as_ref().unwrap()["content"][0]["text"],
        "quick {\"x\":1}"
    );
    let b = tracker
        .wait(&boom.id, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(b.status, TaskStatus::Failed);
    assert_eq!(b.error.as_ref().unwrap()["message"], "boom went the tool");
    let t = tracker
        .wait(&tool_error.id, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(
        t.status,
        TaskStatus::Completed,
        "isError is a completed task"
    );
    assert_eq!(t.result.as_ref().unwrap()["isError"], true);

    // A tool the server runs synchronously gives its result directly.
    match tracker
        .call_tool("remote", "sync_only", json!({}), CallOptions::default())
        .await
        .unwrap()
    {
        CallOutcome::Completed(r) => assert!(!r.content.is_empty()),
        CallOutcome::Task(t) => panic!("unexpected task {t:?}"),
    }
    // A JSON-RPC error on tools/call itself surfaces as an error.
    let e = tracker
        .call_tool("remote", "no_such_tool", json!({}), CallOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(e, mcptask_client::TrackerError::Remote(_)), "{e}");
    tracker.shutdown(Duration::from_secs(2)).await;
}

/// An idle phase wakes when its next task falls due, not at its idle tick:
/// with a one-minute tick and ~50 ms polls, a working task is polled over
/// and over within seconds (before the fix: once, then after a minute).
async fn polls_follow_the_schedule_not_the_idle_tick(backend: TestDatabase) {
    let server = RemoteServer::start(Some(60_000)).await;
    let config = TrackerConfig {
        idle_tick: Duration::from_secs(60),
        ..fast_config()
    };
    let tracker = tracker(&backend, &server, config).await;
    let hold = start_task(&tracker, "hold").await;
    until(&tracker, &hold.id, "polled 5 times", |r| r.poll_count >= 5).await;
    tracker.cancel(&hold.id).await.unwrap();
    tracker.shutdown(Duration::from_secs(2)).await;
}

/// A caller waiting at one replica is woken by a change another replica's
/// tracker made, through the store's change feed, not by a timer of its
/// own (before the feed, the waiter's watch never heard it: front calls
/// re-read their tracked task every 500 ms instead).
async fn a_change_at_another_replica_wakes_its_waiters(backend: TestDatabase) {
    let server = RemoteServer::start(Some(60_000)).await;
    let quiet = TrackerConfig {
        background: false,
        ..fast_config()
    };
    let waiter = tracker(&backend, &server, quiet).await;
    let worker = tracker(&backend, &server, fast_config()).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !(waiter.hears_other_replicas() && worker.hears_other_replicas()) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the change feed never came up"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let hold = start_task(&worker, "hold").await;
    until(&worker, &hold.id, "polled", |r| r.poll_count > 0).await;
    let mut watch = waiter.watch(&hold.id);
    worker.cancel(&hold.id).await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), watch.changed())
        .await
        .expect("the waiter heard the other replica's change");
    // And a wait there ends with the settled task.
    let settled = waiter
        .wait(&hold.id, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(settled.status, TaskStatus::Cancelled);
    worker.shutdown(Duration::from_secs(2)).await;
    waiter.shutdown(Duration::from_secs(2)).await;
}

async fn cancel_settles_with_what_the_server_reports(backend: TestDatabase) {
    let server = RemoteServer::start(Some(60_000)).await;
    let tracker = tracker(&backend, &server, fast_config()).await;
    let hold = start_task(&tracker, "hold").await;
    until(&tracker, &hold.id, "polled", |r| r.poll_count > 0).await;
    let r = tracker.cancel(&hold.id).await.unwrap();
    assert!(r.cancel_requested_at.is_some());
    let r = tracker
        .wait(&hold.id, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(r.status, TaskStatus::Cancelled);
    assert!(
        r.cancel_sent_at.is_some(),
        "tasks/cancel was sent and acknowledged"
    );
    // Cancelling a settled task changes nothing.
    assert_eq!(
        tracker.cancel(&hold.id).await.unwrap().status,
        TaskStatus::Cancelled
    );
    assert!(matches!(
        tracker.cancel("rt_nope").await,
        Err(mcptask_client::TrackerError::NotFound(_))
    ));
    tracker.shutdown(Duration::from_secs(2)).await;
}

async fn answers_reach_the_server_once(backend: TestDatabase) {
    let server = RemoteServer::start(Some(60_000)).await;
    let tracker = tracker(&backend, &server, fast_config()).await;
    let mut events = tracker.subscribe();
    let ask = start_task(&tracker, "ask").await;
    let r = until(&tracker, &ask.id, "input_required", |r| {
        r.status == TaskStatus::InputRequired
    })
    .await;
    assert_eq!(r.input_requests[0].0, "q");
    let inputs = tracker.inputs(&ask.id).await.unwrap();
    assert_eq!(inputs.len(), 1);
    assert_eq!(inputs[0].request["method"], "elicitation/create");

    let bad = tracker
        .answer(
            &ask.id,
            BTreeMap::from([("q".into(), json!("not an object"))]),
        )
        .await;
    assert!(matches!(
        bad,
        Err(mcptask_client::TrackerError::InvalidInput(_))
    ));
    let res = tracker
        .answer(
            &ask.id,
            BTreeMap::from([
                (
                    "q".into(),
                    json!({"action": "accept", "content": {"v": "blue"}}),
                ),
                ("zz".into(), json!({})),
            ]),
        )
        .await
        .unwrap();
    assert_eq!(res.applied, ["q"]);
    assert_eq!(res.ignored, ["zz"]);
    let again = tracker
        .answer(
            &ask.id,
            BTreeMap::from([("q".into(), json!({"action": "decline"}))]),
        )
        .await
        .unwrap();
    assert!(again.applied.is_empty(), "each key is answered once");

    let done = tracker
        .wait(&ask.id, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(
        done.result.as_ref().unwrap()["content"][0]["text"],
        "answer blue"
    );
    let inputs = tracker.inputs(&ask.id).await.unwrap();
    assert!(inputs[0].sent_at.is_some());

    // Every event arrives, in order, with a unique idempotency key and the app's context.
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !seen
        .iter()
        .any(|(_, k, s)| *k == EventKind::Status && *s == TaskStatus::Completed)
    {
        let e = tokio::time::timeout_at(deadline, events.recv())
            .await
            .expect("events keep coming")
            .unwrap();
        if e.task_id == ask.id {
            assert_eq!(e.data["correlation"]["ticket"], 7);
            assert_eq!(e.data["conversation"], "conv-1");
            seen.push((e.version, e.kind, e.status));
        }
    }
    let versions: Vec<i64> = seen.iter().map(|s| s.0).collect();
    if let Err(e) = in_version_order(&versions) {
        panic!("delivered in version order: {e}");
    }
    let kinds: Vec<EventKind> = seen.iter().map(|s| s.1).collect();
    for k in [EventKind::Created, EventKind::Answered] {
        assert!(kinds.contains(&k), "{kinds:?}");
    }
    assert!(seen.iter().any(|s| s.2 == TaskStatus::InputRequired));
    let timeline = tracker.events(&ask.id, 0, 100).await.unwrap();
    assert_eq!(timeline.len() as i64, done.event_version);
    tracker.shutdown(Duration::from_secs(2)).await;
}

/// Events of one task as a subscriber from before its creation receives
/// them: every version once, in order, from the first (`1, 2, 3, …`).
fn in_version_order(versions: &[i64]) -> Result<(), String> {
    match versions
        .iter()
        .enumerate()
        .find(|&(i, &v)| v != i as i64 + 1)
    {
        None => Ok(()),
        Some((i, v)) => Err(format!(
            "event #{} has version {v}, expected {}: {versions:?}",
            i + 1,
            i + 1
        )),
    }
}

#[test]
fn version_order_check_rejects_wrong_orders() {
    assert!(in_version_order(&[1, 2, 3, 4]).is_ok());
    for wrong in [
        &[1, 3, 2][..],
        &[2, 1],
        &[1, 2, 2, 3],
        &[1, 3],
        &[2, 3],
        &[3, 2, 1],
    ] {
        assert!(
            in_version_order(wrong).is_err(),
            "{wrong:?} must be rejected"
        );
    }
}

struct Approver;

#[async_trait::async_trait]
impl InputResolver for Approver {
    async fn resolve(&self, input: InputContext<'_>) -> Option<Value> {
        (input.key == "q")
            .then(|| json!({"action": "accept", "content": {"v": format!("auto-{}", input.tool)}}))
    }
}

async fn a_resolver_answers_without_the_app(backend: TestDatabase) {
    let server = RemoteServer::start(Some(60_000)).await;
    let tracker = Tracker::builder(backend.remote_tasks().await)
        .server(ServerDef::http("remote", server.url()))
        .config(fast_config())
        .resolver(Arc::new(Approver))
        .start()
        .await
        .unwrap();
    let ask = start_task(&tracker, "ask").await;
    let done = tracker
        .wait(&ask.id, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(
        done.result.unwrap()["content"][0]["text"],
        "answer auto-ask"
    );
    tracker.shutdown(Duration::from_secs(2)).await;
}

/// Answers `q` with a number where the form asks for a string, counting the times it is asked.
struct WrongResolver(Arc<std::sync::atomic::AtomicUsize>);

#[async_trait::async_trait]
impl InputResolver for WrongResolver {
    async fn resolve(&self, _input: InputContext<'_>) -> Option<Value> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Some(json!({"action": "accept", "content": {"v": 5}}))
    }
}

async fn answers_that_do_not_fit_the_question_are_refused(backend: TestDatabase) {
    let server = RemoteServer::start(Some(60_000)).await;
    let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let tracker = Tracker::builder(backend.remote_tasks().await)
        .server(ServerDef::http("remote", server.url()))
        .config(fast_config())
        .resolver(Arc::new(WrongResolver(asked.clone())))
        .start()
        .await
        .unwrap();
    let ask = start_task(&tracker, "ask").await;
    until(&tracker, &ask.id, "input_required", |r| {
        r.status == TaskStatus::InputRequired
    })
    .await;
    // The resolver's answer does not fit: the question stays open for a
    // person (asked again on a later poll, still nothing stored).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while asked.load(std::sync::atomic::Ordering::SeqCst) < 3 {
        let stored = tracker.inputs(&ask.id).await.unwrap()[0].response.clone();
        assert_eq!(
            stored, None,
            "the resolver's wrong answer must not be stored"
        );
        assert!(
            tokio::time::Instant::now() < deadline,
            "the resolver is asked again"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(tracker.inputs(&ask.id).await.unwrap()[0].response, None);

    // The application's wrong answer is refused by name, and nothing is stored.
    let before = tracker.get(&ask.id).await.unwrap();
    let wrong = tracker
        .answer(
            &ask.id,
            BTreeMap::from([(
                "q".into(),
                json!({"action": "accept", "content": {"v": true}}),
            )]),
        )
        .await;
    match wrong {
        Err(mcptask_client::TrackerError::AnswerRejected { key, field, reason }) => {
            assert_eq!((key.as_str(), field.as_deref()), ("q", Some("v")));
            assert_eq!(reason, "expected a string, got the boolean true");
        }
        other => panic!("expected AnswerRejected, got {other:?}"),
    }
    let inputs = tracker.inputs(&ask.id).await.unwrap();
    assert_eq!(
        (inputs[0].response.as_ref(), inputs[0].answered_at),
        (None, None)
    );
    let after = tracker.get(&ask.id).await.unwrap();
    assert_eq!(after.status, TaskStatus::InputRequired);
    assert_eq!(after.next_update_at, None);
    assert!(
        after.event_version <= before.event_version + 1,
        "no answered event"
    );

    let ok = tracker
        .answer(
            &ask.id,
            BTreeMap::from([(
                "q".into(),
                json!({"action": "accept", "content": {"v": "red"}}),
            )]),
        )
        .await
        .unwrap();
    assert_eq!(ok.applied, ["q"]);
    let done = tracker
        .wait(&ask.id, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(done.result.unwrap()["content"][0]["text"], "answer red");
    tracker.shutdown(Duration::from_secs(2)).await;
}

async fn a_removed_or_edited_server_fails_its_tasks(backend: TestDatabase) {
    let server = RemoteServer::start(Some(60_000)).await;
    let tracker = tracker(&backend, &server, fast_config()).await;
    let a = start_task(&tracker, "hold").await;
    let b = start_task(&tracker, "hold").await;
    until(&tracker, &a.id, "polled", |r| r.poll_count > 0).await;
    // Credentials and timeouts edited: the same endpoint, the same server.
    let mut rotated = ServerDef::http("remote", server.url()).with_header("X-Edited", "1");
    rotated.call_timeout = Some(Duration::from_secs(7));
    tracker.servers().upsert(rotated);
    let polls = tracker.get(&a.id).await.unwrap().poll_count;
    let ra = until(&tracker, &a.id, "polled again", |r| {
        r.poll_count > polls + 2
    })
    .await;
    assert_eq!(ra.status, TaskStatus::Working, "{ra:#?}");
    // Edited: same name, another endpoint.
    tracker
        .servers()
        .upsert(ServerDef::http("remote", format!("{}?moved", server.url())));
    let ra = until(&tracker, &a.id, "failed", |r| r.is_terminal()).await;
    assert_eq!(ra.status, TaskStatus::Failed);
    assert_eq!(
        ra.error.as_ref().unwrap()["data"]["reason"],
        "connection_unavailable"
    );
    assert!(ra.status_message.as_ref().unwrap().contains("redefined"));
    // A cancel on such a task settles it too (it cannot reach the server).
    let rb = tracker.cancel(&b.id).await.unwrap();
    let rb = until(&tracker, &rb.id, "settled", |r| r.is_terminal()).await;
    assert_eq!(rb.status, TaskStatus::Failed);
    // Removed entirely.
    tracker
        .servers()
        .upsert(ServerDef::http("remote", server.url()));
    let c = start_task(&tracker, "hold").await;
    tracker.servers().remove("remote");
    let rc = until(&tracker, &c.id, "failed", |r| r.is_terminal()).await;
    assert!(
        rc.status_message
            .as_ref()
            .unwrap()
            .contains("no longer configured")
    );
    tracker.shutdown(Duration::from_secs(2)).await;
}

async fn server_outage_backs_off_then_recovers(backend: TestDatabase) {
    let mut server = RemoteServer::start(Some(120_000)).await;
    let tracker = tracker(&backend, &server, fast_config()).await;
    let mut events = tracker.subscribe();
    let ask = start_task(&tracker, "ask").await;
    until(&tracker, &ask.id, "input_required", |r| {
        r.status == TaskStatus::InputRequired
    })
    .await;
    server.stop().await;
    let r = until(&tracker, &ask.id, "erroring", |r| r.consecutive_errors >= 3).await;
    assert!(!r.is_terminal(), "transient errors do not fail the task");
    assert!(r.last_error.is_some());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let e = tokio::time::timeout_at(deadline, events.recv())
            .await
            .expect("a degraded event")
            .unwrap();
        if e.task_id == ask.id && e.kind == EventKind::Degraded {
            break;
        }
    }
    server.restart().await;
    tracker
        .answer(
            &ask.id,
            BTreeMap::from([(
                "q".into(),
                json!({"action": "accept", "content": {"v": "back"}}),
            )]),
        )
        .await
        .unwrap();
    let done = tracker
        .wait(&ask.id, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(done.result.unwrap()["content"][0]["text"], "answer back");
    assert_eq!(done.consecutive_errors, 0);
    tracker.shutdown(Duration::from_secs(2)).await;
}

async fn garbage_from_the_remote_fails_only_that_task(backend: TestDatabase) {
    let server = RemoteServer::start(Some(60_000)).await;
    let mut config = fast_config();
    config.policy.limits.max_result_bytes = 10_000;
    let tracker = tracker(&backend, &server, config).await;
    let healthy = start_task(&tracker, "ask").await;
    let cases = [
        (
            "mismatch",
            json!({"resultType": "complete", "taskId": "someone-else", "status": "working", "createdAt": "2026-01-01T00:00:00Z", "lastUpdatedAt": "2026-01-01T00:00:00Z", "ttlMs": null}),
            "answered for task",
        ),
        (
            "shape",
            json!({"resultType": "complete", "taskId": 42, "status": ["no"]}),
            "wrong shape",
        ),
        (
            "no-result",
            json!({"resultType": "complete", "taskId": "x", "status": "completed", "createdAt": "2026-01-01T00:00:00Z", "lastUpdatedAt": "2026-01-01T00:00:00Z", "ttlMs": null}),
            "wrong shape",
        ),
        (
            "no-input-requests",
            json!({"resultType": "complete", "taskId": "x", "status": "input_required", "createdAt": "2026-01-01T00:00:00Z", "lastUpdatedAt": "2026-01-01T00:00:00Z", "ttlMs": null}),
            "",
        ),
    ];
    let mut ids = Vec::new();
    for (name, result, expect) in cases {
        let t = start_task(&tracker, "hold").await;
        let mut result = result;
        if name == "no-result" || name == "no-input-requests" {
            result["taskId"] = json!(t.remote_task_id);
        }
        server
            .mangle
            .lock()
            .unwrap()
            .insert(t.remote_task_id.clone(), Mangle::Result(result));
        ids.push((t.id, expect));
    }
    let huge = start_task(&tracker, "hold").await;
    server.mangle.lock().unwrap().insert(
        huge.remote_task_id.clone(),
        Mangle::Result(json!({"resultType": "complete", "taskId": huge.remote_task_id, "status": "completed",
            "createdAt": "2026-01-01T00:00:00Z", "lastUpdatedAt": "2026-01-01T00:00:00Z", "ttlMs": null,
            "result": {"content": [{"type": "text", "text": "z".repeat(200_000)}]}})),
    );
    for (id, expect) in ids {
        let r = until(&tracker, &id, "failed", |r| r.is_terminal()).await;
        assert_eq!(r.status, TaskStatus::Failed, "{r:#?}");
        assert_eq!(
            r.error.as_ref().unwrap()["data"]["reason"],
            "protocol_violation"
        );
        assert!(
            r.status_message.as_ref().unwrap().contains(expect),
            "{:?} lacks {expect:?}",
            r.status_message
        );
    }
    let h = until(&tracker, &huge.id, "completed", |r| r.is_terminal()).await;
    assert_eq!(h.status, TaskStatus::Completed);
    assert!(h.result_truncated);
    assert!(mcptask_core::payload::json_size(h.result.as_ref().unwrap()) < 11_000);
    // The healthy task was never disturbed.
    let r = until(&tracker, &healthy.id, "input_required", |r| {
        r.status == TaskStatus::InputRequired
    })
    .await;
    assert_eq!(r.consecutive_errors, 0);
    tracker.shutdown(Duration::from_secs(2)).await;
}

/// A server that accepts connections and never answers: setting up the
/// session is bounded by `connect_timeout` (the call fails as unavailable,
/// it does not hang), and the request carried the configured header.
async fn session_setup_is_bounded_and_carries_configured_headers(backend: TestDatabase) {
    use tokio::io::AsyncReadExt as _;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let heads = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let silent = tokio::spawn({
        let heads = heads.clone();
        async move {
            let mut held = Vec::new();
            while let Ok((mut socket, _)) = listener.accept().await {
                let mut buf = vec![0u8; 16 * 1024];
                let read =
                    tokio::time::timeout(Duration::from_secs(5), socket.read(&mut buf)).await;
                let n = read.ok().and_then(Result::ok).unwrap_or(0);
                heads
                    .lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&buf[..n]).into_owned());
                // Never answered, never closed.
                held.push(socket);
            }
        }
    });
    let mut config = fast_config();
    // Long enough for the request to be written on a loaded machine with
    // unoptimised dependencies (at 0.5 s it sometimes was not).
    config.connect_timeout = Duration::from_secs(2);
    config.call_timeout = Duration::from_secs(2);
    let tracker = Tracker::builder(backend.remote_tasks().await)
        .server(
            ServerDef::http("silent", format!("http://{addr}/mcp"))
                .with_header("X-Api-Key", "k-123"),
        )
        .config(config)
        .start()
        .await
        .unwrap();
    let began = std::time::Instant::now();
    let e = tracker
        .call_tool("silent", "hold", json!({}), CallOptions::default())
        .await
        .expect_err("nothing answers");
    // Generous: a hang would never end; the bound itself is 2 s.
    assert!(
        began.elapsed() < Duration::from_secs(20),
        "the call hung: {e}"
    );
    assert!(
        matches!(e, mcptask_client::TrackerError::Unavailable(_)),
        "{e:?}"
    );
    // The silent server records a request once it has read it, which on a
    // loaded machine can be after the caller has already given up.
    let sent = |heads: &[String]| {
        heads
            .iter()
            .any(|h| h.to_ascii_lowercase().contains("x-api-key: k-123"))
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !sent(&heads.lock().unwrap()) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let heads = heads.lock().unwrap().clone();
    assert!(sent(&heads), "the configured header was sent: {heads:?}");
    silent.abort();
    tracker.shutdown(Duration::from_secs(2)).await;
}

/// A webhook counts as delivered only on a 2xx: a 503 is retried (nothing
/// delivered, nothing dead-lettered) until the endpoint answers 200; a 404 is
/// permanent and dead-letters.
async fn webhooks_deliver_only_on_2xx(backend: TestDatabase) {
    use std::sync::atomic::{AtomicU16, Ordering};
    let server = RemoteServer::start(Some(60_000)).await;
    let answer = Arc::new(AtomicU16::new(503));
    // Every post the webhook saw: (idempotency key, the status it answered).
    let seen: Arc<std::sync::Mutex<Vec<(String, u16)>>> = Arc::default();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post({
            let (answer, seen) = (answer.clone(), seen.clone());
            move |headers: axum::http::HeaderMap| async move {
                let status = answer.load(Ordering::SeqCst);
                let key = headers
                    .get("Idempotency-Key")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string();
                seen.lock().unwrap().push((key, status));
                axum::http::StatusCode::from_u16(status).unwrap()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let endpoint = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let notifier =
        mcptask_client::notify::WebhookNotifier::new(url, b"s".to_vec(), Duration::from_secs(2))
            .unwrap();
    let tracker = Tracker::builder(backend.remote_tasks().await)
        .server(ServerDef::http("remote", server.url()))
        .config(fast_config())
        .notifier(Arc::new(notifier))
        .start()
        .await
        .unwrap();
    let answered = |key: &str, status: u16| {
        seen.lock()
            .unwrap()
            .iter()
            .any(|(k, s)| k == key && *s == status)
    };
    async fn eventually(what: &str, done: impl Fn() -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !done() {
            assert!(std::time::Instant::now() < deadline, "never: {what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    // A 503 is a failed delivery, retried, not dead-lettered.
    let t = start_task(&tracker, "hold").await;
    let created = format!("{}:1", t.id);
    eventually("a 503 for the created event", || answered(&created, 503)).await;
    assert_eq!(
        tracker.dead_letter_count().await.unwrap(),
        0,
        "a 503 is retried"
    );
    // Once the webhook answers 200, the same event is delivered.
    answer.store(200, Ordering::SeqCst);
    eventually("the created event delivered after the 200", || {
        answered(&created, 200)
    })
    .await;
    assert_eq!(tracker.dead_letter_count().await.unwrap(), 0);
    // A 404 is permanent: dead-lettered at once, with the status as its error.
    answer.store(404, Ordering::SeqCst);
    let gone = start_task(&tracker, "hold").await;
    let filter = mcptask_client::DeadLetterFilter {
        task_id: Some(gone.id.clone()),
        target: None,
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let dead = loop {
        let dead = tracker.dead_letters(&filter, 10).await.unwrap();
        if !dead.is_empty() {
            break dead;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the 404 was never dead-lettered"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(dead[0].version, 1, "{dead:?}");
    assert!(dead[0].error.contains("404"), "{dead:?}");
    let attempts = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|(k, _)| *k == format!("{}:1", gone.id))
        .count();
    assert_eq!(attempts, 1, "a 4xx is not retried");
    endpoint.abort();
    tracker.shutdown(Duration::from_secs(2)).await;
}

async fn ttl_backstop_fails_a_task_the_server_never_settles(backend: TestDatabase) {
    let server = RemoteServer::start(Some(60_000)).await;
    let mut config = fast_config();
    config.policy.ttl_grace_ms = 0;
    let tracker = tracker(&backend, &server, config).await;
    let t = start_task(&tracker, "hold").await;
    server.mangle.lock().unwrap().insert(
        t.remote_task_id.clone(),
        Mangle::Result(json!({"resultType": "complete", "taskId": t.remote_task_id, "status": "working",
            "createdAt": "2020-01-01T00:00:00Z", "lastUpdatedAt": "2020-01-01T00:00:00Z", "ttlMs": 1000})),
    );
    let r = until(&tracker, &t.id, "failed", |r| r.is_terminal()).await;
    assert_eq!(r.error.unwrap()["data"]["reason"], "ttl_elapsed");
    tracker.shutdown(Duration::from_secs(2)).await;
}

async fn server_side_ttl_expiry_is_observed(backend: TestDatabase) {
    let server = RemoteServer::start(Some(300)).await;
    let tracker = tracker(&backend, &server, fast_config()).await;
    let t = start_task(&tracker, "hold").await;
    let r = tracker.wait(&t.id, Duration::from_secs(20)).await.unwrap();
    assert_eq!(r.status, TaskStatus::Failed);
    assert!(
        r.error.unwrap()["message"]
            .as_str()
            .unwrap()
            .contains("expired")
    );
    tracker.shutdown(Duration::from_secs(2)).await;
}

async fn tracking_a_handle_twice_keeps_one_row(backend: TestDatabase) {
    let server = RemoteServer::start(Some(60_000)).await;
    let tracker = tracker(&backend, &server, fast_config()).await;
    let t = start_task(&tracker, "hold").await;
    let opts = CallOptions {
        principal: Some("alice".into()),
        ..Default::default()
    };
    let again = tracker
        .track("remote", &t.remote_task_id, "hold", opts)
        .await
        .unwrap();
    assert_eq!(again.id, t.id, "duplicate remote ids keep the tracked row");
    let other = tracker
        .track("remote", &t.remote_task_id, "hold", CallOptions::default())
        .await
        .unwrap();
    assert_ne!(other.id, t.id, "another principal tracks separately");
    let e = tracker
        .track("remote", "not-a-task", "hold", CallOptions::default())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("does not know"), "{e}");
    tracker.shutdown(Duration::from_secs(2)).await;
}

async fn shutdown_releases_claims_without_counting_errors(backend: TestDatabase) {
    let server = RemoteServer::start(Some(60_000)).await;
    let tracker = tracker(&backend, &server, fast_config()).await;
    let t = start_task(&tracker, "hold").await;
    until(&tracker, &t.id, "polled", |r| r.poll_count > 0).await;
    server.mangle.lock().unwrap().insert(
        t.remote_task_id.clone(),
        Mangle::Delay(Duration::from_secs(30)),
    );
    until(&tracker, &t.id, "claimed by a slow poll", |r| {
        r.claim_token.is_some()
    })
    .await;
    let started = std::time::Instant::now();
    tracker.shutdown(Duration::from_millis(200)).await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "shutdown never hangs"
    );
    let r = tracker.get(&t.id).await.unwrap();
    assert!(
        r.claim_token.is_none(),
        "the in-flight claim was given back"
    );
    assert_eq!(r.consecutive_errors, 0, "and not counted as an error");
    assert!(!r.is_terminal());
}

async fn a_hung_server_times_out_and_is_retried(backend: TestDatabase) {
    let server = RemoteServer::start(Some(60_000)).await;
    let mut config = fast_config();
    // Short, but not so short that the call creating the task (answered
    // at once) misses it on a loaded machine: at 300 ms it once did.
    config.call_timeout = Duration::from_secs(1);
    let tracker = tracker(&backend, &server, config).await;
    let t = start_task(&tracker, "hold").await;
    server.mangle.lock().unwrap().insert(
        t.remote_task_id.clone(),
        Mangle::Delay(Duration::from_secs(10)),
    );
    let r = until(&tracker, &t.id, "timing out", |r| r.consecutive_errors >= 2).await;
    assert!(
        r.last_error.as_deref().unwrap_or("").contains("timeout"),
        "{:?}",
        r.last_error
    );
    assert!(!r.is_terminal(), "a timeout is transient");
    server.mangle.lock().unwrap().remove(&t.remote_task_id);
    let r = until(&tracker, &t.id, "healthy again", |r| {
        r.consecutive_errors == 0
    })
    .await;
    assert!(!r.is_terminal());
    tracker.shutdown(Duration::from_secs(2)).await;
}

async fn an_unusable_handle_is_cancelled_not_left_running(backend: TestDatabase) {
    let server = RemoteServer::start(Some(60_000)).await;
    let tracker = tracker(&backend, &server, fast_config()).await;
    let long_id = "x".repeat(600);
    server.mangle.lock().unwrap().insert(
        "tools/call:hold".into(),
        Mangle::Result(json!({"resultType": "task", "taskId": long_id, "status": "working",
            "createdAt": "2026-01-01T00:00:00Z", "lastUpdatedAt": "2026-01-01T00:00:00Z", "ttlMs": 60000})),
    );
    let e = tracker
        .call_tool("remote", "hold", json!({}), CallOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(e, mcptask_client::TrackerError::Protocol(_)),
        "{e}"
    );
    let cancels: Vec<_> = server
        .seen
        .lock()
        .unwrap()
        .iter()
        .filter(|(m, id)| m == "tasks/cancel" && *id == long_id)
        .cloned()
        .collect();
    assert_eq!(
        cancels.len(),
        1,
        "the handle nothing durable holds is cancelled once"
    );
    let (page, _) = tracker.list(&Default::default(), None, 10).await.unwrap();
    assert!(page.is_empty(), "nothing was recorded");
    tracker.shutdown(Duration::from_secs(2)).await;
}

async fn remote_calls_in_flight_are_bounded(backend: TestDatabase) {
    let server = RemoteServer::start(Some(60_000)).await;
    let mut config = fast_config();
    config.max_in_flight = 2;
    let tracker = tracker(&backend, &server, config).await;
    let mut ids = Vec::new();
    for _ in 0..8 {
        let t = start_task(&tracker, "hold").await;
        server.mangle.lock().unwrap().insert(
            t.remote_task_id.clone(),
            Mangle::Delay(Duration::from_millis(150)),
        );
        ids.push(t.id);
    }
    for id in &ids {
        until(&tracker, id, "polled slowly", |r| r.poll_count >= 2).await;
    }
    let most = server
        .gets_in_flight
        .0
        .load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        (1..=2).contains(&most),
        "at most 2 tasks/get in flight, saw {most}"
    );
    tracker.shutdown(Duration::from_secs(2)).await;
}

/// A hung server capped at one call in flight (`max_in_flight`) holds one
/// of the tracker's call slots, never all of them: a healthy server's tasks
/// keep being polled beside it, and the hung server's waiting tasks are
/// deferred, not counted as errors.
async fn a_hung_server_holds_only_its_own_cap(backend: TestDatabase) {
    let hung = RemoteServer::start(Some(600_000)).await;
    let healthy = RemoteServer::start(Some(600_000)).await;
    let mut config = fast_config();
    config.max_in_flight = 4;
    // Longer than the test: the hung call is never timed out and retried.
    // The claim's lease bounds a call too (at 9/10 of it): a short lease
    // would give up on the hung get (the server still holding it) and send
    // the next one, which a slow machine reached before the healthy
    // server's polls were counted.
    config.call_timeout = Duration::from_secs(300);
    config.lease_ms = 600_000;
    let mut capped = ServerDef::http("hung", hung.url());
    capped.max_in_flight = Some(1);
    let tracker = Tracker::builder(backend.remote_tasks().await)
        .server(capped)
        .server(ServerDef::http("healthy", healthy.url()))
        .config(config)
        .start()
        .await
        .unwrap();
    let mut stuck = Vec::new();
    for _ in 0..6 {
        let t = start_task_on(&tracker, "hung", "hold").await;
        // Every tasks/get of these hangs far longer than the test.
        hung.mangle.lock().unwrap().insert(
            t.remote_task_id.clone(),
            Mangle::Delay(Duration::from_secs(600)),
        );
        stuck.push(t);
    }
    let mut fine = Vec::new();
    for _ in 0..3 {
        fine.push(start_task_on(&tracker, "healthy", "hold").await);
    }
    for t in &fine {
        until(&tracker, &t.id, "polled beside the hung server", |r| {
            r.poll_count >= 3 && r.consecutive_errors == 0
        })
        .await;
    }
    // The hung server got one tasks/get at a time (the first may still be
    // in flight), and its other tasks wait without an error counted.
    let hung_gets = hung
        .gets_in_flight
        .0
        .load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(hung_gets, 1, "one tasks/get at a time on the hung server");
    for t in &stuck {
        let r = tracker.get(&t.id).await.unwrap();
        assert!(!r.is_terminal(), "{r:#?}");
        assert_eq!(r.consecutive_errors, 0, "deferred, not failed: {r:#?}");
    }
    tracker.shutdown(Duration::from_secs(2)).await;
}

mcptask_testkit::on_both_backends! {
    a_hung_server_holds_only_its_own_cap => super::a_hung_server_holds_only_its_own_cap;
    remote_calls_in_flight_are_bounded => super::remote_calls_in_flight_are_bounded;
    a_hung_server_times_out_and_is_retried => super::a_hung_server_times_out_and_is_retried;
    an_unusable_handle_is_cancelled_not_left_running => super::an_unusable_handle_is_cancelled_not_left_running;
    outcomes_are_recorded_as_the_server_reports_them => super::outcomes_are_recorded_as_the_server_reports_them;
    cancel_settles_with_what_the_server_reports => super::cancel_settles_with_what_the_server_reports;
    a_change_at_another_replica_wakes_its_waiters => super::a_change_at_another_replica_wakes_its_waiters;
    polls_follow_the_schedule_not_the_idle_tick => super::polls_follow_the_schedule_not_the_idle_tick;
    answers_reach_the_server_once => super::answers_reach_the_server_once;
    session_setup_is_bounded_and_carries_configured_headers => super::session_setup_is_bounded_and_carries_configured_headers;
    webhooks_deliver_only_on_2xx => super::webhooks_deliver_only_on_2xx;
    a_resolver_answers_without_the_app => super::a_resolver_answers_without_the_app;
    answers_that_do_not_fit_the_question_are_refused => super::answers_that_do_not_fit_the_question_are_refused;
    a_removed_or_edited_server_fails_its_tasks => super::a_removed_or_edited_server_fails_its_tasks;
    server_outage_backs_off_then_recovers => super::server_outage_backs_off_then_recovers;
    garbage_from_the_remote_fails_only_that_task => super::garbage_from_the_remote_fails_only_that_task;
    ttl_backstop_fails_a_task_the_server_never_settles => super::ttl_backstop_fails_a_task_the_server_never_settles;
    server_side_ttl_expiry_is_observed => super::server_side_ttl_expiry_is_observed;
    tracking_a_handle_twice_keeps_one_row => super::tracking_a_handle_twice_keeps_one_row;
    shutdown_releases_claims_without_counting_errors => super::shutdown_releases_claims_without_counting_errors;
}
