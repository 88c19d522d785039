//! Upstream protocol faults, client side: a real gateway tracks tasks of a
//! real demo server through a scripted proxy ([`ScriptedServer`]) that refuses
//! answers, re-asks input keys, sends malformed or oversized payloads, and a
//! caller sends oversized application data.

use std::time::Duration;

use serde_json::{Value, json};

use mcptask_testkit::*;

/// A broken `tasks/get` answer, made for a remote task id.
type Case = (&'static str, Box<dyn Fn(&str) -> Scripted>);

struct Rig {
    _demo: DemoServer,
    proxy: ScriptedServer,
    _gateway: LoggedChild,
    api: Api,
    _dir: tempfile::TempDir,
}

async fn rig(name: &str) -> Rig {
    let dir = tempfile::tempdir().expect("temp dir");
    let demo_db = format!("sqlite:{}", dir.path().join("server.db").display());
    let demo = DemoServer::start_named(&format!("{name}-server"), &demo_db, &[]).await;
    let proxy = ScriptedServer::start(&demo.url).await;
    let db = format!("sqlite:{}", dir.path().join("gateway.db").display());
    let servers = format!("[[servers]]\nname = \"demo\"\nurl = {:?}\n", proxy.url());
    let (gateway, api) = start_gateway_with(
        &format!("{name}-gateway"),
        dir.path(),
        &fault_gateway_toml(&db, &servers),
    )
    .await;
    Rig {
        _demo: demo,
        proxy,
        _gateway: gateway,
        api,
        _dir: dir,
    }
}

const KEY: &str = "confirm_delete";

fn yes() -> Value {
    json!({"answers": {KEY: {"action": "accept", "content": {"confirm": true}}}})
}

/// POST the answer until the gateway stores it (the key is answerable), or panic.
async fn answer_until_stored(api: &Api, id: &str, within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let r = api
            .post(&format!("/api/v1/tasks/{id}/answers"), &yes())
            .await;
        let t = api.task(id).await;
        assert!(
            t["status"] == "input_required",
            "the task must stay tracked in input_required while the key is asked: {t:#}"
        );
        if r.json["stored"] == json!([KEY]) {
            return;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("the re-asked key never became answerable again: {r:#?}\n{t:#}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn until_seen(proxy: &ScriptedServer, what: &str, pred: impl Fn(&[Seen]) -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !pred(&proxy.seen()) {
        if tokio::time::Instant::now() > deadline {
            panic!("the server never saw {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The server refuses the answer with `-32602` (invalid params), which also
/// means "task not found" for `tasks/get`: the task is not failed, the key
/// is asked again (an `input_required` event), the new answer is sent and
/// the task finishes with the server's result.
#[tokio::test]
async fn refused_answer_invalid_params_reopens_the_key_and_the_task_completes() {
    with_deadline(WAIT, async {
        let rig = rig("refused").await;
        let task = rig
            .api
            .start_task("confirm_delete", json!({"filename": "a.txt"}))
            .await;
        let id = task["id"].as_str().unwrap().to_string();
        rig.api.wait_status(&id, "input_required").await;
        rig.proxy.script(Rule::new(
            "tasks/update",
            1,
            Scripted::Error(-32602, "confirm must be a boolean".into()),
        ));
        let r = rig
            .api
            .post(&format!("/api/v1/tasks/{id}/answers"), &yes())
            .await;
        assert_eq!(r.json["stored"], json!([KEY]), "{r:#?}");
        until_seen(&rig.proxy, "the refused update", |s| {
            s.iter().any(|s| s.method == "tasks/update" && s.scripted)
        })
        .await;
        answer_until_stored(&rig.api, &id, Duration::from_secs(20)).await;
        let done = rig
            .api
            .wait_task(&id, "terminal", |t| t["completedAt"].is_string())
            .await;
        assert_eq!(done["status"], "completed", "{done:#}");
        assert!(done.to_string().contains("Deleted a.txt"), "{done:#}");
        let updates = rig.proxy.seen_method("tasks/update");
        assert_eq!(updates.len(), 2, "one refused, one accepted: {updates:#?}");
        assert!(!updates[1].scripted);
    })
    .await;
}

/// The server acknowledges the answer but keeps asking the same key (it
/// dropped the answer): after an input-required poll interval the key is
/// surfaced again, a new answer is sent, and the task completes.
#[tokio::test]
async fn key_reasked_after_an_acknowledged_answer_is_surfaced_and_answered_again() {
    with_deadline(WAIT, async {
        let rig = rig("reasked").await;
        let task = rig
            .api
            .start_task("confirm_delete", json!({"filename": "b.txt"}))
            .await;
        let id = task["id"].as_str().unwrap().to_string();
        rig.api.wait_status(&id, "input_required").await;
        // Acknowledged without reaching the server: it still asks.
        rig.proxy
            .script(Rule::new("tasks/update", 1, Scripted::Result(json!({}))));
        let r = rig
            .api
            .post(&format!("/api/v1/tasks/{id}/answers"), &yes())
            .await;
        assert_eq!(r.json["stored"], json!([KEY]), "{r:#?}");
        until_seen(&rig.proxy, "the swallowed update", |s| {
            s.iter().any(|s| s.method == "tasks/update" && s.scripted)
        })
        .await;
        answer_until_stored(&rig.api, &id, Duration::from_secs(20)).await;
        let done = rig
            .api
            .wait_task(&id, "terminal", |t| t["completedAt"].is_string())
            .await;
        assert_eq!(done["status"], "completed", "{done:#}");
        assert!(done.to_string().contains("Deleted b.txt"), "{done:#}");
        assert_eq!(rig.proxy.seen_method("tasks/update").len(), 2);
    })
    .await;
}

/// Oversized application data is refused before `tools/call`: no remote
/// task is created (it would run untracked on the server).
#[tokio::test]
async fn oversized_correlation_is_refused_before_the_remote_task_exists() {
    with_deadline(WAIT, async {
        let rig = rig("correlation").await;
        let body = json!({
            "server": "demo",
            "tool": "slow_compute",
            "arguments": {"seconds": 30},
            "correlation": {"blob": "c".repeat(64 * 1024)},
        });
        let r = rig.api.post("/api/v1/calls", &body).await;
        assert_eq!(r.status, 400, "{r:#?}");
        assert!(r.text.contains("correlation"), "{r:#?}");
        assert!(
            rig.proxy.seen_method("tools/call").is_empty(),
            "a remote task was created for a call refused afterwards"
        );
        assert!(rig.api.list_all("").await.is_empty());
    })
    .await;
}

/// Malformed and oversized `tasks/get` answers: each broken task fails with
/// a clear protocol-violation reason and is not polled again; oversized
/// texts and results are stored bounded (truncated, flagged); a healthy task
/// beside them completes untouched. Nothing crashes, nothing is retried forever.
#[tokio::test]
async fn malformed_and_oversized_payloads_fail_or_bound_only_their_task() {
    with_deadline(WAIT, async {
        let rig = rig("malformed").await;
        let start = |seconds: u64| {
            let api = rig.api.clone();
            async move {
                api.start_task("slow_compute", json!({"seconds": seconds}))
                    .await
            }
        };
        let healthy = start(1).await;
        let mut broken = Vec::new();
        let cases: Vec<Case> = vec![
            (
                "not json",
                Box::new(|_| Scripted::Raw(200, "application/json".into(), b"{not json".to_vec())),
            ),
            (
                "wrong types",
                Box::new(|_| {
                    Scripted::Result(json!({
                        "resultType": "complete", "taskId": 42, "status": ["working"]
                    }))
                }),
            ),
            (
                "completed without a result",
                Box::new(|id| Scripted::Result(task_result(id, "completed", json!({})))),
            ),
            (
                "another task's id",
                Box::new(|_| Scripted::Result(task_result("someone-else", "working", json!({})))),
            ),
        ];
        for (name, answer) in &cases {
            let t = start(60).await;
            let remote = t["remoteTaskId"]
                .as_str()
                .expect("operator view")
                .to_string();
            rig.proxy
                .script(Rule::new("tasks/get", usize::MAX, answer(&remote)).for_task(&remote));
            broken.push((
                name.to_string(),
                t["id"].as_str().unwrap().to_string(),
                remote,
            ));
        }
        let chatty = start(60).await;
        let chatty_remote = chatty["remoteTaskId"].as_str().unwrap().to_string();
        rig.proxy.script(
            Rule::new(
                "tasks/get",
                usize::MAX,
                Scripted::Result(task_result(
                    &chatty_remote,
                    "working",
                    json!({"statusMessage": "m".repeat(2 * 1024 * 1024)}),
                )),
            )
            .for_task(&chatty_remote),
        );
        let big = "r".repeat(5 * 1024 * 1024);
        let huge = start(60).await;
        let huge_remote = huge["remoteTaskId"].as_str().unwrap().to_string();
        rig.proxy.script(
            Rule::new(
                "tasks/get",
                usize::MAX,
                Scripted::Result(task_result(
                    &huge_remote,
                    "completed",
                    json!({"result": {"content": [{"type": "text", "text": big}]}}),
                )),
            )
            .for_task(&huge_remote),
        );

        for (name, id, _) in &broken {
            let t = rig
                .api
                .wait_task(id, "settled", |t| t["completedAt"].is_string())
                .await;
            assert_eq!(t["status"], "failed", "{name}: {t:#}");
            assert_eq!(
                t["error"]["data"]["reason"], "protocol_violation",
                "{name}: {t:#}"
            );
            println!("{name}: {}", t["statusMessage"]);
        }
        let h = rig
            .api
            .wait_task(huge["id"].as_str().unwrap(), "completed", |t| {
                t["status"] == "completed"
            })
            .await;
        assert_eq!(h["resultTruncated"], true, "{}", h["statusMessage"]);
        let stored = h["result"].to_string().len();
        println!("a 5 MiB result is stored as {stored} bytes");
        assert!(
            stored <= 4 * 1024 * 1024 + 64 * 1024,
            "the stored result is bounded: {stored}"
        );
        let chatty_id = chatty["id"].as_str().unwrap();
        let c = rig
            .api
            .wait_task(chatty_id, "polled", |t| t["pollCount"].as_i64() > Some(2))
            .await;
        assert_eq!(
            c["status"], "working",
            "a long status message is not a fault"
        );
        assert_eq!(c["consecutiveErrors"], 0);
        let message = c["statusMessage"].as_str().unwrap_or_default().len();
        assert!(
            message < 16 * 1024,
            "status message stored bounded: {message} bytes"
        );
        let ok = rig
            .api
            .wait_task(healthy["id"].as_str().unwrap(), "completed", |t| {
                t["completedAt"].is_string()
            })
            .await;
        assert_eq!(ok["status"], "completed", "{ok:#}");

        // Settled tasks are not polled again.
        let gets = |remote: &str| {
            rig.proxy
                .seen_method("tasks/get")
                .iter()
                .filter(|s| s.task_id.as_deref() == Some(remote))
                .count()
        };
        let before: Vec<usize> = broken.iter().map(|(_, _, r)| gets(r)).collect();
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        let after: Vec<usize> = broken.iter().map(|(_, _, r)| gets(r)).collect();
        println!("tasks/get per broken task: {after:?}");
        assert_eq!(before, after, "a settled task is polled again");
        assert!(after.iter().all(|n| *n <= 3), "retried: {after:?}");
    })
    .await;
}
