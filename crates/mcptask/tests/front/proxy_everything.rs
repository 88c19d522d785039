//! The proxy in front of a server nobody here wrote: the TypeScript SDK's
//! reference "everything" server (pinned in scripts/interop), over stdio.
//! Its task tool speaks the 2025-11-25 tasks protocol; its long-running tool
//! is a plain synchronous call with progress. Through the front, both are
//! durable front tasks of a 2026-07-28 client that declares tasks.
//!
//! The server comes from `scripts/install-test-tools`; without it the tests
//! skip loudly, except under `CI=true`, where they fail.

use std::path::{Path, PathBuf};
use std::time::Duration;

use mcptask_testkit::mcp::{Lifecycle, TestClient};
use mcptask_testkit::{
    Everything, GatewayProcess, input_keys, poll_task, proxy_stdio_command, result_text, status,
    wait_terminal,
};
use rmcp::model::CallToolResponse;
use serde_json::{Value, json};

/// `(node, the everything server's entry point)`, or `None` after a loud
/// SKIPPED line.
fn everything_or_skip(test: &str) -> Option<(PathBuf, PathBuf)> {
    Everything::or_skip(test).map(|e| (e.node, e.entry))
}

/// A proxy configuration: the everything server as `name` once per
/// `(name, interrupt)`, front tasks in `db`.
fn config(db: &str, node: &Path, entry: &Path, servers: &[(&str, &str)]) -> String {
    let q = |s: &str| serde_json::to_string(s).expect("TOML string");
    let mut text = format!(
        "[database]\nurl = {}\n\n[api]\nlisten = \"127.0.0.1:0\"\nauth = \"none\"\n\n[proxy]\nenabled = true\nowner_lease_ms = 2000\n",
        q(db)
    );
    for (name, interrupt) in servers {
        text.push_str(&format!(
            "\n[[servers]]\nname = {}\ncommand = {}\nargs = [{}, \"stdio\"]\ninterrupt = {}\nconnect_timeout_ms = 20000\ncall_timeout_ms = 60000\n",
            q(name),
            q(&node.display().to_string()),
            q(&entry.display().to_string()),
            q(interrupt)
        ));
    }
    text
}

/// A directory holding a proxy configuration with the everything server as
/// `everything` (`interrupt = "fail"`) and a front database; the config's path.
fn stdio_config(node: &Path, entry: &Path) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = format!("sqlite:{}", dir.path().join("front.db").display());
    let path = dir.path().join("mcptask.toml");
    std::fs::write(&path, config(&db, node, entry, &[("everything", "fail")])).expect("config");
    (dir, path)
}

fn task_id(response: CallToolResponse) -> String {
    match response {
        CallToolResponse::Task(t) => t.task.task_id,
        other => panic!("expected a front task, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sep1686_task_is_answered_through_the_front_and_plain_calls_pass_through() {
    let test = "a_sep1686_task_is_answered_through_the_front_and_plain_calls_pass_through";
    let Some((node, entry)) = everything_or_skip(test) else {
        return;
    };
    let (_dir, path) = stdio_config(&node, &entry);
    let client = TestClient::stdio(
        proxy_stdio_command(&path),
        Lifecycle::Modern { tasks: true },
    )
    .await
    .expect("connect to mcptask proxy --stdio");

    let names = client.tools_once_listed("everything__echo").await;
    for wanted in [
        "everything__echo",
        "everything__simulate-research-query",
        "everything__trigger-long-running-operation",
    ] {
        assert!(
            names.iter().any(|n| n == wanted),
            "{wanted} missing from {names:?}"
        );
    }

    // The SEP-1686 task tool: a front task; its question is the front
    // task's input request, answered with tasks/update on the front.
    let id = task_id(
        client
            .call(
                "everything__simulate-research-query",
                json!({"topic": "python", "ambiguous": true}),
            )
            .await
            .expect("tools/call"),
    );
    let mut messages = Vec::new();
    let asking = poll_task(
        &client,
        &id,
        Duration::from_secs(45),
        |w| {
            if let Some(m) = w["statusMessage"].as_str() {
                messages.push(m.to_string());
            }
        },
        |w| status(w) == "input_required" || mcptask_testkit::is_terminal(w),
    )
    .await;
    assert_eq!(status(&asking), "input_required", "{asking:#}");
    assert!(
        !messages.is_empty(),
        "the upstream's status messages were not mirrored"
    );
    let keys = input_keys(&asking);
    assert_eq!(keys.len(), 1, "{asking:#}");
    let request = &asking["inputRequests"][&keys[0]];
    assert_eq!(request["method"], "elicitation/create", "{request:#}");
    client
        .update(
            &id,
            json!({ keys[0].clone(): {"action": "accept", "content": {"interpretation": "snake"}} }),
        )
        .await
        .expect("tasks/update");
    let done = wait_terminal(&client, &id, Duration::from_secs(45)).await;
    assert_eq!(status(&done), "completed", "{done:#}");
    assert!(result_text(&done).contains("python (snake)"), "{done:#}");

    // A caller that does not declare tasks: a plain tool passes through.
    let plain = TestClient::stdio(
        proxy_stdio_command(&path),
        Lifecycle::Modern { tasks: false },
    )
    .await
    .expect("second client");
    match plain
        .call("everything__echo", json!({"message": "hi"}))
        .await
        .expect("echo")
    {
        CallToolResponse::Complete(result) => {
            let text = serde_json::to_value(&result).unwrap()["content"][0]["text"].clone();
            assert_eq!(text, json!("Echo: hi"), "{result:?}");
        }
        other => panic!("expected a synchronous answer, got {other:?}"),
    }
    plain.close().await;
    client.close().await;
}

/// Poll until the front task's status message shows upstream progress.
async fn wait_progress(client: &TestClient, id: &str) -> Value {
    poll_task(
        client,
        id,
        Duration::from_secs(45),
        |_| {},
        |w| {
            mcptask_testkit::is_terminal(w)
                || w["statusMessage"]
                    .as_str()
                    .is_some_and(|m| m.contains("/8"))
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_synchronous_call_survives_sigkill_of_the_proxy_per_its_interrupt_policy() {
    let test = "a_long_synchronous_call_survives_sigkill_of_the_proxy_per_its_interrupt_policy";
    let Some((node, entry)) = everything_or_skip(test) else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let db = format!("sqlite:{}", dir.path().join("front.db").display());
    let toml = config(&db, &node, &entry, &[("again", "rerun"), ("once", "fail")]);
    let gateway = GatewayProcess::start_toml("proxy (first)", &toml, &[]).await;
    let url = format!("{}/mcp", gateway.base);
    let client = TestClient::http(&url, None, Lifecycle::Modern { tasks: true })
        .await
        .expect("connect to /mcp");
    let args = json!({"duration": 8, "steps": 8});
    let rerun = task_id(
        client
            .call("again__trigger-long-running-operation", args.clone())
            .await
            .expect("tools/call"),
    );
    let fail = task_id(
        client
            .call("once__trigger-long-running-operation", args)
            .await
            .expect("tools/call"),
    );
    for id in [&rerun, &fail] {
        let seen = wait_progress(&client, id).await;
        assert_eq!(
            status(&seen),
            "working",
            "progress is the status message: {seen:#}"
        );
    }
    drop(client);
    drop(gateway); // SIGKILL, with the calls in flight upstream

    let gateway = GatewayProcess::start_toml("proxy (restarted)", &toml, &[]).await;
    let url = format!("{}/mcp", gateway.base);
    let client = TestClient::http(&url, None, Lifecycle::Modern { tasks: true })
        .await
        .expect("reconnect to /mcp");
    let done = wait_terminal(&client, &rerun, Duration::from_secs(60)).await;
    assert_eq!(status(&done), "completed", "rerun policy: {done:#}");
    assert!(
        result_text(&done).contains("Long running operation completed"),
        "{done:#}"
    );
    let failed = wait_terminal(&client, &fail, Duration::from_secs(60)).await;
    assert_eq!(status(&failed), "failed", "fail policy: {failed:#}");
    assert!(
        failed.to_string().to_lowercase().contains("interrupt"),
        "the failure says the work was interrupted: {failed:#}"
    );
    client.close().await;
}

/// The everything server's prompts and resources through `proxy --stdio`:
/// prompts named `<server>__<prompt>`, resources with their own URIs (static
/// ones and one made from a URI template), each read routed to the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompts_and_resources_pass_through_the_front() {
    use rmcp::model::{
        GetPromptRequestParams, GetPromptResponse, ReadResourceRequestParams, ReadResourceResponse,
    };
    let test = "prompts_and_resources_pass_through_the_front";
    let Some((node, entry)) = everything_or_skip(test) else {
        return;
    };
    let (_dir, path) = stdio_config(&node, &entry);
    let client = TestClient::stdio(
        proxy_stdio_command(&path),
        Lifecycle::Modern { tasks: false },
    )
    .await
    .expect("connect to mcptask proxy --stdio");
    let peer = client.peer();

    let prompts = peer.list_all_prompts().await.expect("prompts/list");
    let names: Vec<&str> = prompts.iter().map(|p| p.name.as_str()).collect();
    assert!(names.contains(&"everything__args-prompt"), "{names:?}");
    assert!(names.contains(&"everything__simple-prompt"), "{names:?}");
    let got = peer
        .get_prompt_once(
            GetPromptRequestParams::new("everything__args-prompt")
                .with_arguments(json!({"city": "Lyon"}).as_object().unwrap().clone()),
        )
        .await
        .expect("prompts/get");
    let GetPromptResponse::Complete(got) = got else {
        panic!("expected the prompt, got {got:?}");
    };
    let said = serde_json::to_value(&got.messages[0]).expect("a message as JSON");
    assert_eq!(
        said["content"]["text"], "What's weather in Lyon?",
        "{said:#}"
    );
    let unknown = peer
        .get_prompt_once(GetPromptRequestParams::new("args-prompt"))
        .await
        .expect_err("an unprefixed name is not a front prompt");
    assert!(unknown.to_string().contains("unknown prompt"), "{unknown}");

    let resources = peer.list_all_resources().await.expect("resources/list");
    let first = resources
        .first()
        .expect("the everything server lists documents");
    assert!(
        first.uri.starts_with("demo://resource/static/"),
        "{first:?}"
    );
    assert!(first.name.starts_with("everything__"), "{first:?}");
    let templates = peer
        .list_all_resource_templates()
        .await
        .expect("resources/templates/list");
    assert!(
        templates
            .iter()
            .any(|t| t.uri_template == "demo://resource/dynamic/text/{resourceId}"),
        "{templates:?}"
    );
    for uri in [
        first.uri.clone(),
        "demo://resource/dynamic/text/7".to_string(),
    ] {
        let read = peer
            .read_resource_once(ReadResourceRequestParams::new(uri.clone()))
            .await
            .unwrap_or_else(|e| panic!("resources/read {uri}: {e}"));
        let ReadResourceResponse::Complete(read) = read else {
            panic!("expected contents of {uri}, got {read:?}");
        };
        let contents = serde_json::to_value(&read.contents[0]).expect("contents as JSON");
        assert_eq!(contents["uri"], uri.as_str(), "{contents:#}");
        assert!(
            contents["text"].as_str().is_some_and(|t| !t.is_empty()),
            "{contents:#}"
        );
    }
    let missing = peer
        .read_resource_once(ReadResourceRequestParams::new("nowhere://x"))
        .await
        .expect_err("nobody offers it");
    assert!(missing.to_string().contains("nowhere://x"), "{missing}");
}

/// A legacy caller (a desktop host's stdio session) that offers elicitation.
#[derive(Clone)]
struct Elicited(tokio::sync::mpsc::UnboundedSender<String>);

impl rmcp::ClientHandler for Elicited {
    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<rmcp::RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        let asked = serde_json::to_value(&request).expect("request as JSON");
        let _ = self
            .0
            .send(asked["message"].as_str().unwrap_or_default().to_string());
        Ok(
            rmcp::model::ElicitResult::new(rmcp::model::ElicitationAction::Accept)
                .with_content(json!({"name": "Ada", "check": true})),
        )
    }

    fn get_info(&self) -> rmcp::model::ClientConfig {
        rmcp::model::ClientConfig::new(
            rmcp::model::ClientCapabilities::builder()
                .enable_elicitation()
                .build(),
            rmcp::model::Implementation::new("legacy-host", "0.0.0"),
        )
    }
}

/// A synchronous call whose upstream asks mid-call: a legacy caller that
/// offers elicitation is asked through the front and its answer reaches the
/// upstream; a 2026-07-28 caller without tasks gets an error that says how to
/// call the tool instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_question_during_a_pass_through_call_reaches_a_legacy_caller() {
    use rmcp::service::{ClientLifecycleMode, ClientServiceExt as _};
    let test = "an_upstream_question_during_a_pass_through_call_reaches_a_legacy_caller";
    let Some((node, entry)) = everything_or_skip(test) else {
        return;
    };
    let (_dir, path) = stdio_config(&node, &entry);

    let (tx, mut asked) = tokio::sync::mpsc::unbounded_channel();
    let transport = rmcp::transport::TokioChildProcess::new(proxy_stdio_command(&path))
        .expect("spawn the proxy");
    let legacy = Elicited(tx)
        .serve_with_lifecycle(transport, ClientLifecycleMode::Initialize)
        .await
        .expect("a legacy session with the proxy");
    let result = legacy
        .peer()
        .call_tool(rmcp::model::CallToolRequestParams::new(
            "everything__trigger-elicitation-request",
        ))
        .await
        .expect("tools/call");
    let text: String = result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(text.contains("- Name: Ada"), "{text}");
    assert!(text.contains("- Agreed to terms: true"), "{text}");
    let question = asked.try_recv().expect("the caller was asked");
    assert!(question.contains("Please provide inputs"), "{question}");

    let modern = TestClient::stdio(
        proxy_stdio_command(&path),
        Lifecycle::Modern { tasks: false },
    )
    .await
    .expect("connect to mcptask proxy --stdio");
    let refused = modern
        .call("everything__trigger-elicitation-request", json!({}))
        .await;
    let said = format!("{refused:?}");
    assert!(said.contains("call the tool as a task"), "{said}");
}

/// Protocol bridging: the everything server speaks 2025-11-25, whose
/// results carry no `resultType`. Through the front a 2026-07-28 caller
/// gets results valid in its revision (`resultType: "complete"` on tools,
/// prompts and resources), and a 2025-11-25 caller gets them as the
/// server sent them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_of_a_2025_11_25_server_are_valid_in_each_callers_revision() {
    use rmcp::model::{
        CallToolRequestParams, CallToolResponse, GetPromptRequestParams, GetPromptResponse,
        ReadResourceRequestParams, ReadResourceResponse, ResultType,
    };
    let test = "results_of_a_2025_11_25_server_are_valid_in_each_callers_revision";
    let Some((node, entry)) = everything_or_skip(test) else {
        return;
    };
    let (_dir, path) = stdio_config(&node, &entry);
    for (lifecycle, expected) in [
        (
            Lifecycle::Modern { tasks: false },
            Some(ResultType::COMPLETE),
        ),
        (Lifecycle::Legacy, None),
    ] {
        let client = TestClient::stdio(proxy_stdio_command(&path), lifecycle)
            .await
            .expect("connect to mcptask proxy --stdio");
        let peer = client.peer();
        let call = CallToolRequestParams::new("everything__echo")
            .with_arguments(json!({"message": "bridged"}).as_object().unwrap().clone());
        let CallToolResponse::Complete(called) =
            peer.call_tool_once(call).await.expect("tools/call")
        else {
            panic!("a synchronous answer");
        };
        assert_eq!(
            called.result_type, expected,
            "tools/call, {lifecycle:?}: {called:?}"
        );
        let GetPromptResponse::Complete(prompt) = peer
            .get_prompt_once(GetPromptRequestParams::new("everything__simple-prompt"))
            .await
            .expect("prompts/get")
        else {
            panic!("the prompt");
        };
        assert_eq!(prompt.result_type, expected, "prompts/get, {lifecycle:?}");
        let ReadResourceResponse::Complete(read) = peer
            .read_resource_once(ReadResourceRequestParams::new(
                "demo://resource/static/document/architecture.md",
            ))
            .await
            .expect("resources/read")
        else {
            panic!("the resource");
        };
        assert_eq!(read.result_type, expected, "resources/read, {lifecycle:?}");
    }
}

/// Logging through the front (`/mcp`): the everything server offers it, so
/// the front does (once it has met the server) and hands a session's
/// `logging/setLevel` to it, answering once it has. A front with no server
/// that logs would say `method not found`, as a server without logging does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(deprecated)] // logging (SEP-2577): still what 2025-11-25 sessions use
async fn logging_set_level_reaches_the_upstream_that_offers_logging() {
    use rmcp::model::{LoggingLevel, SetLevelRequestParams};
    let test = "logging_set_level_reaches_the_upstream_that_offers_logging";
    let Some((node, entry)) = everything_or_skip(test) else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let db = format!("sqlite:{}", dir.path().join("front.db").display());
    let toml = config(&db, &node, &entry, &[("everything", "fail")]);
    let gateway = GatewayProcess::start_toml("proxy", &toml, &[]).await;
    let url = format!("{}/mcp", gateway.base);
    // The front offers what its servers offer once it has met them.
    let lister = TestClient::http(&url, None, Lifecycle::Modern { tasks: false })
        .await
        .expect("connect to /mcp");
    lister.tools_once_listed("everything__echo").await;
    lister.close().await;

    let session = TestClient::http(&url, None, Lifecycle::Legacy)
        .await
        .expect("a 2025-11-25 session on /mcp");
    let peer = session.peer();
    let offered = peer
        .peer_info()
        .expect("the front's initialize answer")
        .capabilities
        .clone();
    assert!(
        offered.logging.is_some(),
        "the front offers logging when an upstream does: {offered:?}"
    );
    peer.set_level(SetLevelRequestParams::new(LoggingLevel::Warning))
        .await
        .expect("logging/setLevel answered once the upstream answered");
    session.close().await;
}
