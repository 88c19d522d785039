//! The front's own refusals of a `tools/call` (a tool it does not list, a
//! server not ready yet) read as an upstream of the caller's era answers
//! the same call (issue 42, item 3): a caller cannot tell the gateway's
//! refusal from a server's by its shape. Each era is checked against a real
//! server of that era asked directly: the npm everything server (the
//! TypeScript SDK v1, 2025-11-25) and the demo server (rmcp, 2026-07-28).

use std::time::Duration;

use mcptask_testkit::mcp::{Lifecycle, TestClient};
use mcptask_testkit::*;
use rmcp::model::CallToolResponse;
use rmcp::service::ServiceError;
use serde_json::json;

/// What a `tools/call` answer looks like, whatever it says: a tool result
/// (its `isError`, the kinds of its content blocks, whether it is
/// structured) or a JSON-RPC error (its code, whether it has `data`).
fn shape(answer: &Result<CallToolResponse, ServiceError>) -> String {
    match answer {
        Ok(CallToolResponse::Complete(result)) => {
            let json = serde_json::to_value(result).expect("a result");
            let kinds: Vec<String> = json["content"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| c["type"].to_string())
                .collect();
            format!(
                "result isError={} content={kinds:?} structured={}",
                json["isError"],
                result.structured_content.is_some()
            )
        }
        Ok(other) => format!("not a complete result: {other:?}"),
        Err(ServiceError::McpError(data)) => {
            format!("error code={} data={}", data.code.0, data.data.is_some())
        }
        Err(other) => format!("not an answer: {other}"),
    }
}

/// The words of an answer, whichever shape it has.
fn words(answer: &Result<CallToolResponse, ServiceError>) -> String {
    match answer {
        Ok(CallToolResponse::Complete(result)) => serde_json::to_string(&result.content).unwrap(),
        Ok(other) => format!("{other:?}"),
        Err(e) => e.to_string(),
    }
}

/// A front before the demo server, the everything server when it is
/// installed, and a stdio command that never speaks MCP (`mute`, given up
/// on after 1 s so a call of its tools is refused at once).
async fn gateway(
    everything: Option<&Everything>,
) -> (GatewayProcess, DemoServer, TestDatabase, TestDatabase) {
    let upstream_db = TestDatabase::sqlite();
    let demo = DemoServer::start(&upstream_db.url, &[]).await;
    let front_db = TestDatabase::sqlite();
    let mut toml = format!(
        "{}\n[proxy]\nenabled = true\n\n[[servers]]\nname = \"mute\"\ncommand = \"sleep\"\nargs = [\"600\"]\nconnect_timeout_ms = 1000\n",
        GatewaySpec::open(&front_db.url, &[("demo", &demo.url)]).toml(),
    );
    if let Some(everything) = everything {
        toml.push_str(&everything.server_toml("everything", ""));
    }
    let gateway = GatewayProcess::start_toml("front", &toml, &[]).await;
    (gateway, demo, upstream_db, front_db)
}

/// A 2025-11-25 caller (an `initialize` session): the everything server,
/// asked directly for a tool it lacks, answers a tool result with
/// `isError: true`; so does the front for a tool it does not list, and for
/// a tool of a server not ready yet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_caller_is_refused_as_a_2025_11_25_server_refuses() {
    let test = "own_errors::a_session_caller_is_refused_as_a_2025_11_25_server_refuses";
    let Some(everything) = Everything::or_skip(test) else {
        return;
    };
    with_deadline(Duration::from_secs(120), async {
        let mut command = tokio::process::Command::new(&everything.node);
        command
            .arg(&everything.entry)
            .arg("stdio")
            .kill_on_drop(true);
        let direct = TestClient::stdio(command, Lifecycle::Legacy)
            .await
            .expect("the everything server, directly");
        let theirs = direct.call("no_such_tool", json!({})).await;
        println!("the everything server: {theirs:?}");

        let (gateway, _demo, _u, _f) = gateway(Some(&everything)).await;
        let front = TestClient::http(&format!("{}/mcp", gateway.base), None, Lifecycle::Legacy)
            .await
            .expect("a session at /mcp");
        front.tools_once_listed("everything__echo").await;
        for (tool, said) in [
            ("everything__no_such_tool", "unknown tool"),
            ("nobody__greet", "unknown tool"),
            ("mute__greet", "not ready"),
        ] {
            let ours = front.call(tool, json!({})).await;
            println!("the front, {tool}: {ours:?}");
            assert_eq!(
                shape(&ours),
                shape(&theirs),
                "{tool}: {ours:?} vs {theirs:?}"
            );
            assert!(words(&ours).contains(said), "{tool}: {ours:?}");
        }
    })
    .await;
}

/// A 2026-07-28 caller: the demo server (rmcp's tool router), asked
/// directly for a tool it lacks, answers the JSON-RPC error `-32602`; so
/// does the front for a tool it does not list. A server not ready yet is a
/// JSON-RPC error too, with its reason in `data`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_caller_is_refused_as_a_2026_server_refuses() {
    with_deadline(Duration::from_secs(120), async {
        let (gateway, demo, _u, _f) = gateway(None).await;
        let modern = Lifecycle::Modern { tasks: false };
        let direct = TestClient::http(&demo.url, None, modern)
            .await
            .expect("the demo server, directly");
        let theirs = direct.call("no_such_tool", json!({})).await;
        println!("the demo server: {theirs:?}");
        assert_eq!(shape(&theirs), "error code=-32602 data=false", "{theirs:?}");

        let front = TestClient::http(&format!("{}/mcp", gateway.base), None, modern)
            .await
            .expect("a client of /mcp");
        for tool in ["demo__no_such_tool", "nobody__greet"] {
            let ours = front.call(tool, json!({})).await;
            assert_eq!(shape(&ours), shape(&theirs), "{tool}: {ours:?}");
            assert!(words(&ours).contains("unknown tool"), "{tool}: {ours:?}");
        }
        let not_ready = front.call("mute__greet", json!({})).await;
        assert!(
            shape(&not_ready).starts_with("error ") && words(&not_ready).contains("not ready"),
            "{not_ready:?}"
        );
    })
    .await;
}
