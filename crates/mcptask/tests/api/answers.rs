//! Answers are checked against the question before they are stored: a wrong
//! answer is refused (HTTP 400 naming the field; the CLI says so and exits 1)
//! and leaves the task and the store as they were; `tasks show` lists a
//! question's fields, and the example answer it prints is accepted; the task
//! detail carries each answer's content. Real gateway, real demo server, the
//! binary run as a user's shell runs it.

use std::process::Output;
use std::sync::Arc;
use std::time::Duration;

use mcptask_client::{
    CallOptions, CallOutcome, InputContext, InputResolver, ServerDef, Tracker, TrackerError,
};
use mcptask_testkit::tracker::fast_config;
use mcptask_testkit::*;
use serde_json::{Value, json};

/// `mcptask ARGS…` against `gateway`, off the async runtime.
async fn mcptask(gateway: &str, args: &[&str]) -> Output {
    run_cli(gateway, OPERATOR, args).await
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

async fn asked(api: &Api, tool: &str, arguments: Value, key: &str) -> String {
    let id = api.start_task(tool, arguments).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    api.wait_task(&id, &format!("asking {key}"), |t| {
        t["status"] == "input_required" && t["inputRequests"].get(key).is_some()
    })
    .await;
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_answer_is_refused_naming_the_field_and_nothing_is_stored() {
    with_deadline(Duration::from_secs(240), async {
        let (server_db, gateway_db) = (TestDatabase::sqlite(), TestDatabase::sqlite());
        let server = DemoServer::start(&server_db.url, &[]).await;
        let gateway = GatewayProcess::start(
            "gateway",
            &GatewaySpec::with_tokens(&gateway_db.url, &[("demo", &server.url)]),
        )
        .await;
        let api = gateway.client(Some(OPERATOR));
        let id = asked(&api, "confirm_delete", json!({"filename": "keep.txt"}), "confirm_delete").await;
        let before = api.task(&id).await;
        let path = format!("/api/v1/tasks/{id}/answers");

        // The API: 400, the key and field named, what was expected and got.
        let r = api
            .post(&path, &json!({"answers": {"confirm_delete": {"action": "accept", "content": {"confirm": "yes"}}}}))
            .await;
        r.assert_error(400, "invalid_answer");
        let message = r.json["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("\"confirm_delete\"")
                && message.contains("field \"confirm\": expected a boolean, got the string \"yes\""),
            "{message}"
        );
        assert_eq!(r.json["error"]["details"]["key"], "confirm_delete");
        assert_eq!(r.json["error"]["details"]["field"], "confirm");
        // A field the form does not have, and a missing required one.
        for (content, field) in [(json!({"confirm": true, "force": true}), "force"), (json!({}), "confirm")] {
            let r = api
                .post(&path, &json!({"answers": {"confirm_delete": {"action": "accept", "content": content}}}))
                .await;
            r.assert_error(400, "invalid_answer");
            assert_eq!(r.json["error"]["details"]["field"], field, "{r:#?}");
        }

        // The CLI: the gateway's words, exit 1, no stack trace.
        let out = mcptask(&gateway.base, &["tasks", "answer", &id, "confirm_delete", r#"{"confirm": "yes"}"#]).await;
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains("field \"confirm\": expected a boolean, got the string \"yes\"")
                && stderr.contains("nothing was stored")
                && stderr.contains(&format!("mcptask tasks show {id}")),
            "{stderr}"
        );
        assert!(!stderr.to_lowercase().contains("backtrace"), "{stderr}");

        // Nothing stored, nothing sent, the task unchanged: seen by the API…
        let after = api.task(&id).await;
        assert_eq!(after["status"], "input_required", "{after:#}");
        assert_eq!(after["inputs"][0]["answered"], false, "{after:#}");
        assert_eq!(after["inputs"][0]["response"], Value::Null, "{after:#}");
        assert_eq!(after["timeline"], before["timeline"], "no event recorded");
        // …and by the store itself.
        let store = gateway_db.remote_tasks().await;
        let inputs = store.remote_inputs(&id).await.unwrap();
        assert_eq!(inputs.len(), 1);
        assert_eq!((inputs[0].response.as_ref(), inputs[0].answered_at), (None, None));
        let record = store.get_remote(&id).await.unwrap().unwrap();
        assert_eq!(record.next_update_at, None, "no update is due: {record:?}");

        // A key the task never asked keeps its own message.
        let out = mcptask(&gateway.base, &["tasks", "answer", &id, "nope", r#"{"confirm": true}"#]).await;
        assert_eq!(out.status.code(), Some(1));
        assert!(text(&out.stderr).contains("not an outstanding question"), "{out:?}");

        // The right answer is taken, sent, and shown in the detail.
        let out = mcptask(&gateway.base, &["tasks", "answer", &id, "confirm_delete", r#"{"confirm": true}"#, "--json"]).await;
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let said: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("answer --json prints JSON ({e}): {out:?}"));
        assert_eq!(said["stored"], json!(["confirm_delete"]), "{said}");
        let done = api.wait_status(&id, "completed").await;
        assert_eq!(done["result"]["content"][0]["text"], "Deleted keep.txt");
        assert_eq!(
            done["inputs"][0]["response"],
            json!({"action": "accept", "content": {"confirm": true}}),
            "{done:#}"
        );
        // Answered once: a second answer, even a wrong one, is ignored as before.
        let r = api
            .post(&path, &json!({"answers": {"confirm_delete": {"action": "accept", "content": {"confirm": "no"}}}}))
            .await;
        assert_eq!(r.status, 200, "{r:#?}");
        assert_eq!(r.json["ignored"], json!(["confirm_delete"]));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_show_lists_the_fields_and_its_example_answer_is_accepted() {
    with_deadline(Duration::from_secs(240), async {
        let stack = DemoStack::start().await;
        let gateway = &stack.gateway;
        let api = gateway.client(Some(OPERATOR));
        let id = asked(&api, "deliver_report", json!({}), "delivery").await;

        let out = mcptask(&gateway.base, &["tasks", "show", &id]).await;
        let stdout = text(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        for line in [
            "input delivery (waiting for an answer): How should the report be delivered?",
            "format (enum, required): Format; one of \"pdf\" (PDF), \"csv\" (CSV), \"html\" (Web page)",
            "copies (integer, required): Copies; from 1 to 5; default 1",
            "email (string, optional): Send to; format email",
            "urgent (boolean, optional): Urgent?; true or false; default false",
            "sections (",
            "any of \"summary\", \"details\", \"appendix\"",
            &format!("decline: mcptask tasks answer {id} delivery '{{\"action\": \"decline\"}}'"),
        ] {
            assert!(stdout.contains(line), "missing {line:?} in:\n{stdout}");
        }

        // Wrong choices and bounds are refused by name, through the CLI.
        for (answer, says) in [
            (r#"{"format": "docx", "copies": 1}"#, "field \"format\": expected one of \"pdf\", \"csv\", \"html\", got the string \"docx\""),
            (r#"{"format": "pdf", "copies": 9}"#, "field \"copies\": must be at most 5, got 9"),
            (r#"{"format": "pdf", "copies": 1, "email": "nobody"}"#, "field \"email\": expected an email address"),
        ] {
            let out = mcptask(&gateway.base, &["tasks", "answer", &id, "delivery", answer]).await;
            assert_eq!(out.status.code(), Some(1), "{out:?}");
            assert!(text(&out.stderr).contains(says), "{says}: {}", text(&out.stderr));
        }
        assert_eq!(api.task(&id).await["status"], "input_required");

        // The example answer `tasks show` printed is one the gateway takes.
        let line = stdout
            .lines()
            .find(|l| l.trim_start().starts_with("answer:"))
            .unwrap_or_else(|| panic!("no example answer in:\n{stdout}"));
        let (_, quoted) = line.split_once(" delivery '").expect("a quoted example");
        let example = quoted.strip_suffix('\'').expect("closing quote");
        let out = mcptask(&gateway.base, &["tasks", "answer", &id, "delivery", example]).await;
        assert_eq!(out.status.code(), Some(0), "{example}: {out:?}");
        let done = api.wait_status(&id, "completed").await;
        assert_eq!(
            done["result"]["content"][0]["text"],
            "Delivering 1 pdf report(s) to user@example.com with summary",
            "{done:#}"
        );

        let out = mcptask(&gateway.base, &["tasks", "show", &id]).await;
        let stdout = text(&out.stdout);
        assert!(stdout.contains("input delivery (answered)"), "{stdout}");
        assert!(stdout.contains("\"format\":\"pdf\""), "the answer is shown: {stdout}");
    })
    .await;
}

/// Answers every question with the same response.
struct Always(Value);

#[async_trait::async_trait]
impl InputResolver for Always {
    async fn resolve(&self, _input: InputContext<'_>) -> Option<Value> {
        Some(self.0.clone())
    }
}

/// Before a task exists (multi-round-trip input), a resolver's answer that
/// does not fit the question is not sent: the call reports the input as
/// needed instead of starting the tool on garbage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resolver_answer_that_does_not_fit_is_not_sent_before_the_task_starts() {
    with_deadline(Duration::from_secs(120), async {
        let server_db = TestDatabase::sqlite();
        let server = DemoServer::start(&server_db.url, &[]).await;
        for (answer, fits) in [
            (json!({"action": "accept", "content": {"name": 5}}), false),
            (
                json!({"action": "accept", "content": {"name": "Ann"}}),
                true,
            ),
        ] {
            let db = TestDatabase::sqlite();
            let tracker = Tracker::builder(db.remote_tasks().await)
                .server(ServerDef::http("demo", &server.url))
                .config(fast_config())
                .resolver(Arc::new(Always(answer.clone())))
                .start()
                .await
                .unwrap();
            let outcome = tracker
                .call_tool(
                    "demo",
                    "test_tool_with_task",
                    json!({}),
                    CallOptions::default(),
                )
                .await;
            match (outcome, fits) {
                (Err(TrackerError::InputNeeded { keys, .. }), false) => {
                    assert_eq!(keys, ["user_name"]);
                }
                (Ok(CallOutcome::Task(task)), true) => {
                    let done = tracker.wait(&task.id, WAIT).await.unwrap();
                    let text = done.result.unwrap()["content"][0]["text"].clone();
                    assert!(text.as_str().unwrap().starts_with("Hello, Ann!"), "{text}");
                }
                (other, _) => panic!("{answer}: unexpected {other:?}"),
            }
            tracker.shutdown(Duration::from_secs(2)).await;
        }
    })
    .await;
}
