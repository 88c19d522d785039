//! The upstream layer against the real reference "everything" server
//! (`@modelcontextprotocol/server-everything@2026.8.31`, SEP-1686) over
//! stdio: protocol detection, synchronous calls with progress and
//! elicitation, SEP-1686 tasks with a routed question and a cancel, and no
//! child process left behind.
//!
//! Needs `scripts/install-test-tools` (Node 22 + `.tools/interop`); skips
//! loudly without it, fails under `CI=true`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use mcptask_client::remote::Timeouts;
use mcptask_client::upstream::{
    self, LaneOptions, Protocol, SyncEvent, SyncOptions, TaskSupport, sep1686,
};
use mcptask_client::{ServerDef, ServerRegistry, TaskStatus, Transport};
use rmcp::model::CallToolResponse;
use serde_json::{Value, json};

const TIMEOUTS: Timeouts = Timeouts {
    // A cold child's initialize took 2.3 s when probed; the machine is shared.
    connect: Duration::from_secs(30),
    call: Duration::from_secs(30),
};

fn tooling() -> Result<(PathBuf, PathBuf), String> {
    mcptask_testkit::Everything::find().map(|e| (e.node, e.entry))
}

/// A registry with the everything server as `everything`; its children
/// carry `tag` in their environment so the test can find them in /proc.
fn everything_or_skip(test: &str, tag: &str) -> Option<ServerRegistry> {
    let (node, server) = match tooling() {
        Ok(t) => t,
        Err(reason) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!(
                "the everything server is required under CI: {reason}; run scripts/install-test-tools"
            )
        }
        Err(reason) => {
            eprintln!(
                "SKIPPED ({test}: no everything server): {reason} — run scripts/install-test-tools"
            );
            return None;
        }
    };
    let mut def = ServerDef::stdio(
        "everything",
        node.to_string_lossy(),
        vec![server.to_string_lossy().into_owned(), "stdio".into()],
    );
    if let Transport::Stdio { env, .. } = &mut def.transport {
        env.insert("MCPTASK_TEST_TAG".into(), tag.into());
    }
    let registry = ServerRegistry::new();
    registry.upsert(def);
    Some(registry)
}

/// Pids of live processes whose environment carries `MCPTASK_TEST_TAG=tag`.
fn tagged_processes(tag: &str) -> Vec<u32> {
    let needle = format!("MCPTASK_TEST_TAG={tag}");
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        // A zombie has an empty environ; a live child lists its variables.
        if environ
            .split(|b| *b == 0)
            .any(|var| var == needle.as_bytes())
        {
            pids.push(pid);
        }
    }
    pids
}

/// After everything is dropped, no child of the server may remain.
async fn assert_children_gone(tag: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = tagged_processes(tag);
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "server children still alive 10 s after every handle was dropped: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The text of a synchronous call's answer (it must be a result, not an
/// input round).
fn text_of(result: &CallToolResponse) -> String {
    let CallToolResponse::Complete(result) = result else {
        panic!("expected a result, got {result:?}");
    };
    serde_json::to_value(result).unwrap()["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

fn lanes(registry: &ServerRegistry) -> upstream::LanePool {
    registry
        .lanes(
            "everything",
            LaneOptions {
                connect_timeout: TIMEOUTS.connect,
                call_timeout: TIMEOUTS.call,
                ..LaneOptions::default()
            },
        )
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detects_sep1686_with_per_tool_task_support() {
    let tag = "detect";
    let Some(registry) = everything_or_skip("detects_sep1686_with_per_tool_task_support", tag)
    else {
        return;
    };
    let info = registry.protocol("everything", TIMEOUTS).await.unwrap();
    assert_eq!(info.protocol, Protocol::Sep1686);
    assert_eq!(info.protocol_version, "2025-11-25");
    assert_eq!(
        info.task_support("simulate-research-query"),
        TaskSupport::Required
    );
    assert_eq!(info.task_support("echo"), TaskSupport::Forbidden);
    // Declaring elicitation and sampling unlocks the tools that use them.
    let names: Vec<&str> = info
        .tools
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"trigger-elicitation-request"), "{names:?}");
    assert!(names.contains(&"trigger-sampling-request"), "{names:?}");
    // The raw definitions keep what rmcp drops.
    let echo = info.tools.iter().find(|t| t["name"] == "echo").unwrap();
    assert_eq!(echo["annotations"]["idempotentHint"], true);
    // Cached: asking again opens nothing new.
    assert_eq!(
        registry.protocol("everything", TIMEOUTS).await.unwrap(),
        info
    );
    drop(registry);
    assert_children_gone(tag).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_call_reports_progress_then_the_result() {
    let tag = "progress";
    let Some(registry) = everything_or_skip("sync_call_reports_progress_then_the_result", tag)
    else {
        return;
    };
    let pool = lanes(&registry);
    let lane = pool.acquire().await.unwrap();
    let mut call = upstream::sync_call(
        lane,
        "trigger-long-running-operation",
        json!({"duration": 3, "steps": 3}),
        SyncOptions::default(),
    )
    .await
    .unwrap();
    let mut progress = Vec::new();
    let mut done = None;
    while let Some(event) = tokio::time::timeout(Duration::from_secs(30), call.next())
        .await
        .expect("an event within 30 s")
    {
        match event {
            SyncEvent::Progress {
                progress: p, total, ..
            } => {
                assert!(done.is_none(), "progress after Done");
                progress.push((p, total));
            }
            SyncEvent::Ask(ask) => panic!("unexpected ask {}", ask.method),
            SyncEvent::Done(result) => done = Some(result.unwrap()),
        }
    }
    assert_eq!(
        progress,
        vec![(1.0, Some(3.0)), (2.0, Some(3.0)), (3.0, Some(3.0))]
    );
    let text = text_of(&done.expect("Done"));
    assert!(text.contains("Duration: 3 seconds, Steps: 3"), "{text}");

    // The lane went back to the pool and is reused: a second call opens no new child.
    let before = tagged_processes(tag).len();
    assert_eq!(before, 1);
    let lane = pool.acquire().await.unwrap();
    let mut call = upstream::sync_call(
        lane,
        "echo",
        json!({"message": "again"}),
        SyncOptions::default(),
    )
    .await
    .unwrap();
    let Some(SyncEvent::Done(Ok(r))) = call.next().await else {
        panic!("echo did not complete")
    };
    assert!(text_of(&r).contains("again"));
    assert_eq!(tagged_processes(tag).len(), before);
    drop(call);
    drop(pool);
    drop(registry);
    assert_children_gone(tag).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_call_relays_elicitation_and_sampling() {
    let tag = "sync-ask";
    let Some(registry) = everything_or_skip("sync_call_relays_elicitation_and_sampling", tag)
    else {
        return;
    };
    let pool = lanes(&registry);

    let mut call = upstream::sync_call(
        pool.acquire().await.unwrap(),
        "trigger-elicitation-request",
        json!({}),
        SyncOptions::default(),
    )
    .await
    .unwrap();
    let mut asked = false;
    let mut result = None;
    while let Some(event) = tokio::time::timeout(Duration::from_secs(30), call.next())
        .await
        .unwrap()
    {
        match event {
            SyncEvent::Ask(ask) => {
                assert_eq!(ask.method, "elicitation/create");
                assert!(
                    ask.params["requestedSchema"]["properties"]["name"].is_object(),
                    "{}",
                    ask.params
                );
                assert!(ask.related_task().is_none());
                assert!(!ask.withdrawn().is_cancelled());
                assert!(ask.respond(Ok(
                    json!({"action": "accept", "content": {"name": "Ada Lovelace"}})
                )));
                asked = true;
            }
            SyncEvent::Done(r) => result = Some(r.unwrap()),
            SyncEvent::Progress { .. } => {}
        }
    }
    assert!(asked, "no elicitation arrived");
    let text = text_of(&result.unwrap());
    assert!(text.contains("Ada Lovelace"), "{text}");

    let mut call = upstream::sync_call(
        pool.acquire().await.unwrap(),
        "trigger-sampling-request",
        json!({"prompt": "hi", "maxTokens": 10}),
        SyncOptions::default(),
    )
    .await
    .unwrap();
    let mut text = String::new();
    while let Some(event) = tokio::time::timeout(Duration::from_secs(30), call.next())
        .await
        .unwrap()
    {
        match event {
            SyncEvent::Ask(ask) => {
                assert_eq!(ask.method, "sampling/createMessage");
                assert_eq!(ask.params["maxTokens"], 10);
                ask.respond(Ok(
                    json!({"role": "assistant", "content": {"type": "text", "text": "sampled!"},
                    "model": "relay-test", "stopReason": "endTurn"}),
                ));
            }
            SyncEvent::Done(r) => text = text_of(&r.unwrap()),
            SyncEvent::Progress { .. } => {}
        }
    }
    assert!(text.contains("relay-test"), "{text}");
    drop(call);
    drop(pool);
    drop(registry);
    assert_children_gone(tag).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_sync_call_spoils_its_lane() {
    let tag = "sync-cancel";
    let Some(registry) = everything_or_skip("cancelled_sync_call_spoils_its_lane", tag) else {
        return;
    };
    let pool = lanes(&registry);
    let mut call = upstream::sync_call(
        pool.acquire().await.unwrap(),
        "trigger-long-running-operation",
        json!({"duration": 30, "steps": 30}),
        SyncOptions::default(),
    )
    .await
    .unwrap();
    let Some(SyncEvent::Progress { progress, .. }) = call.next().await else {
        panic!("expected progress first")
    };
    assert_eq!(progress, 1.0);
    assert_eq!(tagged_processes(tag).len(), 1);
    call.cancel().await;
    // The upstream keeps working on a cancelled call, so its session is closed, not reused.
    assert_children_gone(tag).await;
    drop(pool);
    drop(registry);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sep1686_task_asks_through_related_task_and_cancels() {
    let tag = "legacy";
    let Some(registry) =
        everything_or_skip("sep1686_task_asks_through_related_task_and_cancels", tag)
    else {
        return;
    };
    let pool = lanes(&registry);
    let task = sep1686::create(
        pool.acquire().await.unwrap(),
        "simulate-research-query",
        json!({"topic": "python", "ambiguous": true}),
        Some(60_000),
    )
    .await
    .unwrap();
    assert_eq!(task.id().len(), 32, "{}", task.id());
    assert_eq!(task.created().status(), TaskStatus::Working);
    assert_eq!(task.created().snapshot.poll_interval_ms, Some(1000));

    // Questions are delivered only while tasks/result is open: keep one open.
    let (result, messages, ask) = {
        let result = task.result();
        let watch = async {
            let mut seen = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let now = task.status().await.unwrap();
                let msg = now.snapshot.status_message.clone().unwrap_or_default();
                if seen.last() != Some(&msg) {
                    seen.push(msg);
                }
                if now.status().is_terminal() {
                    return seen;
                }
                assert!(Instant::now() < deadline, "never ended: {seen:?}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        };
        let answer = async {
            let ask = tokio::time::timeout(Duration::from_secs(30), task.next_ask())
                .await
                .expect("a question within 30 s")
                .expect("session alive");
            let summary = (ask.method.clone(), ask.related_task(), ask.params.clone());
            assert!(ask.respond(Ok(
                json!({"action": "accept", "content": {"interpretation": "snake"}})
            )));
            summary
        };
        let result = async {
            tokio::time::timeout(Duration::from_secs(60), result)
                .await
                .expect("result within 60 s")
        };
        tokio::join!(result, watch, answer)
    };
    assert!(
        messages.iter().any(|m| m == "Gathering sources..."),
        "{messages:?}"
    );
    // The question is answered as soon as it is delivered, so `input_required`
    // may fall between two polls; the answer's effect may not.
    assert!(
        messages
            .iter()
            .any(|m| m.contains("interpretation: \"snake\"")),
        "{messages:?}"
    );
    let (method, related, params) = ask;
    assert_eq!(method, "elicitation/create");
    assert_eq!(related.as_deref(), Some(task.id()));
    let choices: Vec<Value> = params["requestedSchema"]["properties"]["interpretation"]["oneOf"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["const"].clone())
        .collect();
    assert!(choices.contains(&json!("snake")), "{params}");
    let text = text_of(&CallToolResponse::Complete(result.unwrap()));
    assert!(text.contains("python (snake)"), "{text}");
    assert_eq!(task.status().await.unwrap().status(), TaskStatus::Completed);
    // Cancelling a finished task is not an error: SEP-1686 refuses, we read the status.
    match task.cancel().await.unwrap() {
        sep1686::CancelOutcome::AlreadyTerminal(t) => assert_eq!(t.status(), TaskStatus::Completed),
        other => panic!("expected AlreadyTerminal, got {other:?}"),
    }

    // Another task, cancelled while it works.
    let other = sep1686::create(
        pool.acquire().await.unwrap(),
        "simulate-research-query",
        json!({"topic": "rust"}),
        None,
    )
    .await
    .unwrap();
    match other.cancel().await.unwrap() {
        sep1686::CancelOutcome::Cancelled(t) => assert_eq!(t.status(), TaskStatus::Cancelled),
        o => panic!("expected Cancelled, got {o:?}"),
    }
    assert_eq!(
        other.status().await.unwrap().status(),
        TaskStatus::Cancelled
    );
    let no_result = other.result().await.unwrap_err();
    assert!(
        matches!(no_result, upstream::UpstreamError::Rpc(_)),
        "{no_result:?}"
    );

    drop((task, other, pool, registry));
    assert_children_gone(tag).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lanes_are_exclusive_reused_and_closed_when_idle() {
    let tag = "lanes";
    let Some(registry) = everything_or_skip("lanes_are_exclusive_reused_and_closed_when_idle", tag)
    else {
        return;
    };
    let pool = registry
        .lanes(
            "everything",
            LaneOptions {
                max_lanes: 1,
                idle_ttl: Duration::from_millis(1500),
                connect_timeout: TIMEOUTS.connect,
                call_timeout: TIMEOUTS.call,
            },
        )
        .unwrap();
    let lane = pool.acquire().await.unwrap();
    let first = tagged_processes(tag);
    assert_eq!(first.len(), 1);
    // The only lane is taken: a second caller waits.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), pool.acquire())
            .await
            .is_err(),
        "a second lane was handed out beyond max_lanes"
    );
    drop(lane);
    let again = tokio::time::timeout(Duration::from_secs(5), pool.acquire())
        .await
        .expect("the released lane is handed out")
        .unwrap();
    assert_eq!(
        tagged_processes(tag),
        first,
        "the idle session was not reused"
    );
    drop(again);
    // Idle past idle_ttl: closed while the pool lives on.
    assert_children_gone(tag).await;
    drop(pool);
    drop(registry);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detects_sep1686_over_http_by_a_raw_probe() {
    let tag = "http";
    let test = "detects_sep1686_over_http_by_a_raw_probe";
    let Some(stdio) = everything_or_skip(test, tag) else {
        return;
    };
    let (def, _) = stdio.get("everything").unwrap();
    let Transport::Stdio {
        command, args, env, ..
    } = def.transport
    else {
        unreachable!()
    };
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut child = tokio::process::Command::new(command)
        .arg(&args[0])
        .arg("streamableHttp")
        .envs(env)
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "the HTTP server never listened");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let registry = ServerRegistry::new();
    registry.upsert(ServerDef::http(
        "everything",
        format!("http://127.0.0.1:{port}/mcp"),
    ));
    let info = registry.protocol("everything", TIMEOUTS).await.unwrap();
    assert_eq!(info.protocol, Protocol::Sep1686);
    assert_eq!(
        info.task_support("simulate-research-query"),
        TaskSupport::Required
    );
    assert_eq!(info.task_support("echo"), TaskSupport::Forbidden);
    drop(registry);
    child.kill().await.unwrap();
    assert_children_gone(tag).await;
}

/// The upstream withdraws an unanswered question (for a SEP-1686 task its
/// SDK times the request out 60 s after queueing it and sends
/// `notifications/cancelled`): the ask says so, a late answer reaches
/// nobody, and the task goes on with its default. (The synchronous
/// `trigger-elicitation-request` waits 10 minutes, too long for a test.)
/// Takes about a minute.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unanswered_ask_is_withdrawn_by_the_upstream() {
    let tag = "withdrawn";
    let Some(registry) = everything_or_skip("unanswered_ask_is_withdrawn_by_the_upstream", tag)
    else {
        return;
    };
    let pool = lanes(&registry);
    let task = sep1686::create(
        pool.acquire().await.unwrap(),
        "simulate-research-query",
        json!({"topic": "python", "ambiguous": true}),
        None,
    )
    .await
    .unwrap();
    let result = async {
        tokio::time::timeout(Duration::from_secs(150), task.result())
            .await
            .expect("the task ends within 150 s")
    };
    let ignore = async {
        let ask = tokio::time::timeout(Duration::from_secs(30), task.next_ask())
            .await
            .expect("a question within 30 s")
            .expect("session alive");
        let asked = Instant::now();
        tokio::time::timeout(Duration::from_secs(120), ask.withdrawn().cancelled())
            .await
            .expect("the upstream withdraws its question within 120 s");
        assert!(
            asked.elapsed() > Duration::from_secs(30),
            "withdrawn too early: {:?}",
            asked.elapsed()
        );
        assert!(!ask.respond(Ok(
            json!({"action": "accept", "content": {"interpretation": "snake"}})
        )));
    };
    let (result, ()) = tokio::join!(result, ignore);
    let text = text_of(&CallToolResponse::Complete(result.unwrap()));
    assert!(!text.contains("snake"), "{text}");
    assert!(text.contains("python"), "{text}");
    drop((task, pool, registry));
    assert_children_gone(tag).await;
}
