//! Upstream protocol faults seen by the tracker's resolver.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use mcptask_client::{CallOptions, CallOutcome, InputContext, InputResolver, ServerDef, Tracker};
use mcptask_core::TaskStatus;
use serde_json::{Value, json};

use mcptask_testkit::TestDatabase;
use mcptask_testkit::fixtures::client::*;
use mcptask_testkit::tracker::fast_config;

/// Answers `q` with `try1`, `try2`, …; on its first answer makes the server
/// refuse every `tasks/update` with `-32602`, on its second lets them through.
struct Retrier {
    calls: AtomicUsize,
    server: Arc<std::sync::Mutex<std::collections::HashMap<String, Mangle>>>,
}

#[async_trait::async_trait]
impl InputResolver for Retrier {
    async fn resolve(&self, input: InputContext<'_>) -> Option<Value> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        let mut rules = self.server.lock().unwrap();
        if n == 1 {
            rules.insert(
                "tasks/update".into(),
                Mangle::Error(-32602, "v must not be try1".into()),
            );
        } else {
            rules.remove("tasks/update");
        }
        (input.key == "q").then(|| json!({"action": "accept", "content": {"v": format!("try{n}")}}))
    }
}

/// A tracker of `server` with `resolver`, and the task of its `ask` tool
/// (a question `q`).
async fn ask_with(
    backend: &TestDatabase,
    server: &RemoteServer,
    resolver: Arc<dyn InputResolver>,
) -> (Tracker, mcptask_client::RemoteTaskRecord) {
    let tracker = Tracker::builder(backend.remote_tasks().await)
        .server(ServerDef::http("remote", server.url()))
        .config(fast_config())
        .resolver(resolver)
        .start()
        .await
        .unwrap();
    let task = match tracker
        .call_tool("remote", "ask", json!({}), CallOptions::default())
        .await
        .unwrap()
    {
        CallOutcome::Task(t) => *t,
        CallOutcome::Completed(r) => panic!("ask completed synchronously: {r:?}"),
    };
    (tracker, task)
}

/// A refused answer (`-32602` to `tasks/update`) reaches the resolver again
/// and its new answer is sent; the task is neither failed nor stuck.
async fn refused_answer_is_asked_of_the_resolver_again(backend: TestDatabase) {
    let server = RemoteServer::start(Some(60_000)).await;
    let resolver = Arc::new(Retrier {
        calls: AtomicUsize::new(0),
        server: server.mangle.clone(),
    });
    let (tracker, task) = ask_with(&backend, &server, resolver.clone()).await;
    let done = tracker
        .wait(&task.id, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(done.status, TaskStatus::Completed, "{done:#?}");
    assert_eq!(done.result.unwrap()["content"][0]["text"], "answer try2");
    assert_eq!(resolver.calls.load(Ordering::SeqCst), 2);
    let updates = server
        .seen
        .lock()
        .unwrap()
        .iter()
        .filter(|(m, _)| m == "tasks/update")
        .count();
    assert_eq!(updates, 2, "one refused, one accepted");
    let reopened = tracker
        .events(&task.id, 0, 100)
        .await
        .unwrap()
        .into_iter()
        .find(|e| e.data.get("reopenedKeys").is_some())
        .expect("an input_required event naming the reopened key");
    assert_eq!(reopened.data["reopenedKeys"], json!(["q"]));
    tracker.shutdown(Duration::from_secs(2)).await;
}

/// A resolver that holds its answer until released (a person or a model
/// thinking), counting how often it is asked.
struct Thinking {
    calls: AtomicUsize,
    release: tokio::sync::Notify,
}

#[async_trait::async_trait]
impl InputResolver for Thinking {
    async fn resolve(&self, input: InputContext<'_>) -> Option<Value> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.release.notified().await;
        (input.key == "q").then(|| json!({"action": "accept", "content": {"v": "thought"}}))
    }
}

/// Polls that find a task's question while the resolver is still thinking
/// about it do not ask it again (they did: the resolver runs off the poll
/// pipeline, and every poll in the meantime asked once more).
async fn a_resolver_still_thinking_is_not_asked_again(backend: TestDatabase) {
    let server = RemoteServer::start(Some(60_000)).await;
    let resolver = Arc::new(Thinking {
        calls: AtomicUsize::new(0),
        release: tokio::sync::Notify::new(),
    });
    let (tracker, task) = ask_with(&backend, &server, resolver.clone()).await;
    let gets = || {
        server
            .seen
            .lock()
            .unwrap()
            .iter()
            .filter(|(m, id)| m == "tasks/get" && *id == task.remote_task_id)
            .count()
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while resolver.calls.load(Ordering::SeqCst) == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the resolver was never asked"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Three more polls of the task find the question while it thinks.
    let seen = gets();
    while gets() < seen + 3 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the task is not polled"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(resolver.calls.load(Ordering::SeqCst), 1);
    resolver.release.notify_waiters();
    let done = tracker
        .wait(&task.id, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(done.status, TaskStatus::Completed, "{done:#?}");
    assert_eq!(done.result.unwrap()["content"][0]["text"], "answer thought");
    assert_eq!(resolver.calls.load(Ordering::SeqCst), 1);
    tracker.shutdown(Duration::from_secs(2)).await;
}

mcptask_testkit::on_both_backends! {
    refused_answer_is_asked_of_the_resolver_again => super::refused_answer_is_asked_of_the_resolver_again;
    a_resolver_still_thinking_is_not_asked_again => super::a_resolver_still_thinking_is_not_asked_again;
}
