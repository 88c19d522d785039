//! Input a server asks for before it starts a task (multi-round-trip): the
//! API's `POST /api/v1/calls` takes `inputResponses` after a 409
//! `input_needed`, checks them against the questions, and relays them; the
//! CLI answers from `--input KEY=JSON` or prints the questions and the flag
//! that answers them; the server's opaque `requestState` is echoed back.
//! Real gateway, real demo server, the binary run as a shell runs it.

use std::process::Output;
use std::time::Duration;

use mcptask_testkit::*;
use serde_json::{Value, json};

async fn mcptask(gateway: &str, args: &[&str]) -> Output {
    run_cli(gateway, OPERATOR, args).await
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn name_question() -> Value {
    json!({"method": "elicitation/create", "params": {"mode": "form", "message": "What is your name?",
        "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pre_task_question_is_answered_through_the_api_and_the_cli() {
    with_deadline(Duration::from_secs(240), async {
        let stack = DemoStack::start().await;
        let gateway = &stack.gateway;
        let api = gateway.client(Some(OPERATOR));
        let call = |responses: Value| {
            json!({"server": "demo", "tool": "test_tool_with_task", "arguments": {}, "inputResponses": responses})
        };

        // Asked first: 409 with the question.
        let asked = api.post("/api/v1/calls", &call(json!({}))).await;
        asked.assert_error(409, "input_needed");
        assert_eq!(
            asked.json["error"]["details"]["inputRequests"]["user_name"]["params"]["message"],
            "What is your name?",
            "{asked:#?}"
        );

        // An answer that does not fit is refused by field; no task starts.
        let wrong = api
            .post(
                "/api/v1/calls",
                &call(json!({"user_name": {"action": "accept", "content": {"name": 5}}})),
            )
            .await;
        wrong.assert_error(400, "invalid_answer");
        let message = wrong.json["error"]["message"].as_str().unwrap();
        assert!(message.contains("\"name\""), "names the field: {message}");
        assert!(api.list_all("").await.is_empty(), "no task was created");

        // The right one starts the task, which uses it.
        let started = api
            .post(
                "/api/v1/calls",
                &call(json!({"user_name": {"action": "accept", "content": {"name": "Ada"}}})),
            )
            .await;
        assert_eq!(started.status, 202, "{started:#?}");
        let id = started.json["task"]["id"].as_str().unwrap().to_string();
        let done = api.wait_status(&id, "completed").await;
        assert!(
            done["result"]["content"][0]["text"]
                .as_str()
                .unwrap_or("")
                .starts_with("Hello, Ada!"),
            "{done:#}"
        );

        // The CLI without an answer (and no terminal): the question, its
        // field and the flag that answers it; exit 1.
        let out = mcptask(&gateway.base, &["call", "demo", "test_tool_with_task"]).await;
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        let err = text(&out.stderr);
        assert!(err.contains("input user_name: What is your name?"), "{err}");
        assert!(err.contains("name (string, required)"), "{err}");
        assert!(err.contains("--input 'user_name={"), "{err}");
        assert!(!err.contains("panicked") && !err.contains("backtrace"), "{err}");

        // With --input: the task runs and the CLI follows it to the end.
        let out = mcptask(
            &gateway.base,
            &[
                "call",
                "demo",
                "test_tool_with_task",
                "--input",
                r#"user_name={"name": "Grace"}"#,
                "--wait",
            ],
        )
        .await;
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        assert!(text(&out.stdout).contains("Hello, Grace!"), "{out:?}");

        // A wrong --input is the gateway's refusal, naming the field.
        let out = mcptask(
            &gateway.base,
            &["call", "demo", "test_tool_with_task", "--input", r#"user_name={"name": true}"#],
        )
        .await;
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        assert!(text(&out.stderr).contains("\"name\""), "{out:?}");
    })
    .await;
}

/// MRTR: the server's opaque `requestState` goes back with the answers
/// (a server that keeps its progress there would otherwise start over), and
/// a round with state but no question is a continuation, not "input needed".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_request_state_is_echoed_back() {
    with_deadline(Duration::from_secs(240), async {
        let (server_db, gateway_db) = (TestDatabase::sqlite(), TestDatabase::sqlite());
        let server = DemoServer::start(&server_db.url, &[]).await;
        let proxy = ScriptedServer::start(&server.url).await;
        let gateway = GatewayProcess::start(
            "gateway",
            &GatewaySpec::with_tokens(&gateway_db.url, &[("demo", &proxy.url())]),
        )
        .await;
        let api = gateway.client(Some(OPERATOR));

        proxy.script(Rule::new(
            "tools/call",
            1,
            Scripted::Result(json!({"resultType": "input_required",
                "inputRequests": {"user_name": name_question()}, "requestState": "opaque-1"})),
        ));
        let started = api
            .post(
                "/api/v1/calls",
                &json!({"server": "demo", "tool": "test_tool_with_task", "arguments": {},
                    "inputResponses": {"user_name": {"action": "accept", "content": {"name": "Ada"}}}}),
            )
            .await;
        assert_eq!(started.status, 202, "{started:#?}");
        let calls = proxy.seen_method("tools/call");
        assert_eq!(calls.len(), 2, "{calls:#?}");
        assert_eq!(calls[1].params["requestState"], "opaque-1", "{calls:#?}");
        assert_eq!(
            calls[1].params["inputResponses"]["user_name"]["content"]["name"],
            "Ada"
        );

        proxy.clear();
        proxy.script(Rule::new(
            "tools/call",
            1,
            Scripted::Result(json!({"resultType": "input_required", "requestState": "state-only"})),
        ));
        let before = proxy.seen_method("tools/call").len();
        let continued = api
            .post(
                "/api/v1/calls",
                &json!({"server": "demo", "tool": "slow_compute", "arguments": {"seconds": 0}}),
            )
            .await;
        assert!(continued.status < 300, "{continued:#?}");
        let calls = proxy.seen_method("tools/call");
        assert_eq!(calls.len(), before + 2, "{calls:#?}");
        assert_eq!(calls[before + 1].params["requestState"], "state-only");
    })
    .await;
}

/// On a terminal the CLI asks the question field by field (here a real
/// pseudo-terminal, [`LiveCli::in_terminal`]), re-asking when the answer
/// does not fit, and the task runs with what was typed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_is_asked_field_by_field() {
    with_deadline(Duration::from_secs(240), async {
        let stack = DemoStack::start().await;
        let gateway = &stack.gateway;
        let Some(mut cli) = LiveCli::in_terminal(
            &gateway.base,
            OPERATOR,
            &["call", "demo", "test_tool_with_task", "--wait"],
        ) else {
            return;
        };
        cli.wait_for("input user_name: What is your name?").await;
        // An empty line first: the required name is missing, so the
        // question is asked again.
        cli.wait_for("name (string, required) > ").await;
        cli.type_line("").await;
        cli.wait_for("that does not fit").await;
        cli.type_line("Ada").await;
        let code = cli.exit_code().await;
        // (The terminal merges the CLI's stdout and stderr.)
        let shown = cli.seen();
        assert_eq!(code, Some(0), "{shown}");
        assert!(shown.contains("Hello, Ada!"), "{shown}");
    })
    .await;
}
