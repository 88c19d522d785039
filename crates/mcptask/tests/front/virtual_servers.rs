//! Virtual servers (`[[virtual_servers]]`) on a real gateway before two
//! real upstreams: one served at `/mcp/<name>` with one tool of each lists
//! exactly those two, calls both (one kept as a task, as at `/mcp`),
//! refuses a tool outside it as a tool that does not exist, applies
//! `[[policy]]` within it, and refuses a principal it does not name; `/mcp` itself still serves everything; `proxy
//! --stdio --server <name>` serves the same selection. (The file's
//! checks: `mcptask-gateway`'s `config::tests`.)

use std::collections::BTreeSet;
use std::time::Duration;

use mcptask_testkit::mcp::{Lifecycle, TestClient, error_code};
use mcptask_testkit::{
    ALICE, BOB, DemoServer, GatewayProcess, GatewaySpec, OPERATOR, TestDatabase, with_deadline,
};
use rmcp::model::CallToolResponse;
use serde_json::json;

const PAIR: &str = "\n[[virtual_servers]]\nname = \"pair\"\ntools = [\"demo/greet\", \"other/slow_*\"]\nprincipals = [\"alice\", \"bob\"]\n";

/// Bob may not call `demo/greet`, wherever he calls from.
const DENY_BOB: &str = "\n[[policy]]\nprincipal = \"bob\"\ndeny = [\"demo/greet\"]\n";

/// The tool names `client` lists, listed again until `expected` are all
/// there (the front lists its upstreams in the background), at most 30 s.
async fn listed(client: &TestClient, expected: &[&str]) -> BTreeSet<String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let names: BTreeSet<String> = client
            .peer()
            .list_all_tools()
            .await
            .expect("tools/list")
            .into_iter()
            .map(|t| t.name.to_string())
            .collect();
        if expected.iter().all(|e| names.contains(*e)) || tokio::time::Instant::now() >= deadline {
            return names;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Call `tool` and wait for its end: completed, with `text` in its result
/// (a task, or the answer itself).
async fn completes(client: &TestClient, tool: &str, arguments: serde_json::Value, text: &str) {
    match client.call(tool, arguments).await.expect("tools/call") {
        CallToolResponse::Task(t) => {
            let id = t.task.task_id;
            let done = client.wait_terminal(&id, Duration::from_secs(60)).await;
            let wire = mcptask_testkit::mcp::wire(&done);
            assert_eq!(wire["status"], "completed", "{tool}: {wire}");
            let wire = wire.to_string();
            assert!(wire.contains(text), "{tool}: {wire}");
        }
        // A tool that forbids tasks answers at once, as at `/mcp`.
        CallToolResponse::Complete(result) => {
            let answer = serde_json::to_string(&result).unwrap();
            assert!(answer.contains(text), "{tool}: {answer}");
        }
        other => panic!("{tool}: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_virtual_server_serves_exactly_its_selection_to_its_principals() {
    let db = TestDatabase::sqlite();
    with_deadline(Duration::from_secs(240), async {
        let dir = tempfile::tempdir().expect("temp dir");
        let demo_db = format!("sqlite:{}", dir.path().join("demo.db").display());
        let other_db = format!("sqlite:{}", dir.path().join("other.db").display());
        let demo = DemoServer::start_named("vs-demo", &demo_db, &[]).await;
        let other = DemoServer::start_named("vs-other", &other_db, &[]).await;
        let spec = GatewaySpec::with_tokens(&db.url, &[("demo", &demo.url), ("other", &other.url)]);
        let toml = format!("{}\n[proxy]\nenabled = true\n{PAIR}{DENY_BOB}", spec.toml());
        let gateway = GatewayProcess::start_toml("vs-gateway", &toml, &[]).await;
        let at = |path: &str| format!("{}{path}", gateway.base);
        let tasks = Lifecycle::Modern { tasks: true };

        // Alice, through the virtual server: exactly its two tools.
        let alice = TestClient::http(&at("/mcp/pair"), Some(ALICE), tasks)
            .await
            .expect("alice connects to /mcp/pair");
        let names = listed(&alice, &["demo__greet", "other__slow_compute"]).await;
        let expected: BTreeSet<String> = ["demo__greet", "other__slow_compute"]
            .map(String::from)
            .into();
        assert_eq!(names, expected);

        // A call of each works: one kept as a task, as at /mcp.
        completes(&alice, "demo__greet", json!({"name": "Ada"}), "Hello, Ada!").await;
        completes(
            &alice,
            "other__slow_compute",
            json!({"seconds": 0.2, "label": "vs"}),
            "vs: computed",
        )
        .await;

        // A tool of a selected server outside the selection reads as one
        // that does not exist.
        let outside = alice
            .call("demo__slow_compute", json!({"seconds": 0.1}))
            .await
            .expect_err("outside the selection");
        let missing = alice
            .call("demo__no_such_tool", json!({}))
            .await
            .expect_err("no such tool");
        assert_eq!(
            error_code(&outside),
            error_code(&missing),
            "{outside} / {missing}"
        );
        assert_eq!(
            outside.to_string().replace("demo__slow_compute", "X"),
            missing.to_string().replace("demo__no_such_tool", "X")
        );
        alice.close().await;

        // At /mcp, the same caller sees every tool: the selection is the
        // virtual server's only.
        let whole = TestClient::http(&at("/mcp"), Some(ALICE), tasks)
            .await
            .expect("alice connects to /mcp");
        let all = listed(&whole, &["demo__slow_compute", "other__greet"]).await;
        assert!(
            all.contains("demo__slow_compute") && all.contains("other__greet"),
            "{all:?}"
        );
        whole.close().await;

        // Bob may use it, under his policy: greet is not his to see.
        let bob = TestClient::http(&at("/mcp/pair"), Some(BOB), tasks)
            .await
            .expect("bob connects to /mcp/pair");
        let names = listed(&bob, &["other__slow_compute"]).await;
        let only: BTreeSet<String> = ["other__slow_compute".to_string()].into();
        assert_eq!(names, only);
        bob.call("demo__greet", json!({}))
            .await
            .expect_err("denied to bob by [[policy]]");
        bob.close().await;

        // The operator token has no principal: not among its principals,
        // refused before any MCP.
        let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
        let refused = gateway
            .client(Some(OPERATOR))
            .post("/mcp/pair", &initialize)
            .await;
        assert_eq!(refused.status, 403, "{refused:#?}");
        assert!(
            refused.text.contains("may not use the virtual server"),
            "{}",
            refused.text
        );
        assert!(
            TestClient::http(&at("/mcp/pair"), Some(OPERATOR), tasks)
                .await
                .is_err(),
            "the operator token cannot open /mcp/pair"
        );
        // A name no virtual server has.
        let nobody = gateway
            .client(Some(ALICE))
            .post("/mcp/nope", &initialize)
            .await;
        assert_eq!(nobody.status, 404, "{nobody:#?}");

        // Calls show the virtual server they came through: alice's two
        // calls and bob's refusal in the audit trail, under "via"; none of
        // /mcp's; and in /metrics.
        let op = gateway.client(Some(OPERATOR));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let trail = op.get("/api/v1/audit?limit=200").await;
            let events = trail.json["events"].as_array().cloned().unwrap_or_default();
            let through = |principal: &str, tool: &str, outcome: &str| {
                events.iter().any(|e| {
                    e["principal"] == principal
                        && e["tool"] == tool
                        && e["outcome"] == outcome
                        && e["via"] == "pair"
                })
            };
            if through("alice", "greet", "completed")
                && through("alice", "slow_compute", "completed")
                && through("bob", "greet", "refused_policy")
            {
                assert!(
                    events
                        .iter()
                        .all(|e| e["via"].is_null() || e["via"] == "pair"),
                    "{trail:#?}"
                );
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "calls through the virtual server not audited with it: {trail:#?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let metrics = op.get("/metrics").await;
        assert!(
            metrics
                .text
                .lines()
                .any(|l| l.starts_with("mcptask_virtual_server_calls_total{")
                    && l.contains("virtual_server=\"pair\"")
                    && l.contains("outcome=\"completed\"")),
            "{}",
            metrics.text
        );
    })
    .await;
}

/// `proxy --stdio --server <name>`: the same selection over stdio, for
/// `[proxy] principal`; a name no virtual server has, or one that does not
/// admit that principal, ends the command with the fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_stdio_serves_a_virtual_server() {
    with_deadline(Duration::from_secs(180), async {
        let dir = tempfile::tempdir().expect("temp dir");
        let demo_db = format!("sqlite:{}", dir.path().join("demo.db").display());
        let other_db = format!("sqlite:{}", dir.path().join("other.db").display());
        let demo = DemoServer::start_named("vs-stdio-demo", &demo_db, &[]).await;
        let other = DemoServer::start_named("vs-stdio-other", &other_db, &[]).await;
        let config = dir.path().join("mcptask.toml");
        let toml = |principal: &str| {
            format!(
                "[database]\nurl = \"sqlite:{}\"\n[api]\nauth = \"none\"\n[proxy]\nprincipal = \"{principal}\"\n\
                 [[servers]]\nname = \"demo\"\nurl = \"{}\"\n[[servers]]\nname = \"other\"\nurl = \"{}\"\n{PAIR}",
                dir.path().join("front.db").display(),
                demo.url,
                other.url
            )
        };
        std::fs::write(&config, toml("alice")).expect("write");
        let through = |name: &str| {
            let mut command = mcptask_testkit::proxy_stdio_command(&config);
            command.args(["--server", name]);
            command
        };
        let tasks = Lifecycle::Modern { tasks: true };
        let alice = TestClient::stdio(through("pair"), tasks)
            .await
            .expect("connect to proxy --stdio --server pair");
        let names = listed(&alice, &["demo__greet", "other__slow_compute"]).await;
        let expected: BTreeSet<String> = ["demo__greet", "other__slow_compute"]
            .map(String::from)
            .into();
        assert_eq!(names, expected);
        completes(&alice, "demo__greet", json!({"name": "Ada"}), "Hello, Ada!").await;
        alice
            .call("demo__slow_compute", json!({"seconds": 0.1}))
            .await
            .expect_err("outside the selection");
        alice.close().await;

        for (principal, name, said) in [
            ("alice", "nope", "no [[virtual_servers]] entry is named \"nope\""),
            ("carol", "pair", "does not admit the principal"),
        ] {
            std::fs::write(&config, toml(principal)).expect("write");
            let out = through(name)
                .stdin(std::process::Stdio::null())
                .output()
                .await
                .expect("run proxy --stdio");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{name}: {stderr}");
            assert!(stderr.contains(said) && stderr.contains("fix:"), "{stderr}");
        }
    })
    .await;
}
