//! Tool policy (`[[policy]]`) at the faces the binary serves: `mcptask
//! proxy --stdio`, the CLI (`mcptask call`), the agent tools of callers that
//! do not declare tasks, and a policy edit put in force by a live reload
//! (SIGHUP) while a front task of the newly denied tool runs. (`/mcp` and
//! the REST API: `mcptask-gateway`'s
//! `authorization::a_denied_tool_is_neither_listed_nor_callable_at_any_face`.)

use std::time::Duration;

use mcptask_testkit::mcp::{Lifecycle, TestClient, error_code, wire};
use mcptask_testkit::{
    ALICE, BOB, DemoServer, GatewayProcess, GatewaySpec, TestDatabase, proxy_stdio_command,
    run_cli, with_deadline,
};
use rmcp::model::CallToolResponse;
use serde_json::json;

/// Bob may not call the demo server's `slow_*` tools.
const DENY_BOB: &str = "\n[[policy]]\nprincipal = \"bob\"\ndeny = [\"demo/slow_*\"]\n";

async fn names(client: &TestClient) -> Vec<String> {
    client
        .peer()
        .list_all_tools()
        .await
        .expect("tools/list")
        .into_iter()
        .map(|t| t.name.to_string())
        .collect()
}

/// A denied call reads as a call of a tool that does not exist: same code,
/// same words but the name.
async fn assert_refused_like_a_missing_tool(client: &TestClient, tool: &str) {
    let denied = client
        .call(tool, json!({"seconds": 1}))
        .await
        .expect_err("a denied tool is refused");
    let missing = client
        .call("demo__no_such_tool", json!({}))
        .await
        .expect_err("a missing tool is refused");
    let shape = |e: &rmcp::service::ServiceError, name: &str| {
        (error_code(e), e.to_string().replace(name, "X"))
    };
    assert_eq!(
        shape(&denied, tool),
        shape(&missing, "demo__no_such_tool"),
        "{denied} / {missing}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_tool_is_refused_at_the_stdio_face() {
    let db = TestDatabase::sqlite();
    with_deadline(Duration::from_secs(180), async {
        let server = DemoServer::start(&db.url, &[]).await;
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("mcptask.toml");
        let toml = |principal: &str| {
            format!(
                "[database]\nurl = \"sqlite:{}\"\n[api]\nauth = \"none\"\n[proxy]\nprincipal = \"{principal}\"\n[[servers]]\nname = \"demo\"\nurl = \"{}\"\nbackground = [\"slow_compute\"]\n{DENY_BOB}",
                dir.path().join("front.db").display(),
                server.url
            )
        };
        std::fs::write(&config, toml("bob")).unwrap();
        for lifecycle in [
            Lifecycle::Modern { tasks: true },
            Lifecycle::Modern { tasks: false },
        ] {
            let bob = TestClient::stdio(proxy_stdio_command(&config), lifecycle)
                .await
                .expect("connect to mcptask proxy --stdio");
            // The front lists its servers in the background (it never
            // waits for one): a stateless caller lists again until they
            // are there.
            let mut listed = names(&bob).await;
            let asked = std::time::Instant::now();
            while !listed.contains(&"demo__greet".to_string()) && asked.elapsed() < Duration::from_secs(10) {
                tokio::time::sleep(Duration::from_millis(100)).await;
                listed = names(&bob).await;
            }
            assert!(listed.contains(&"demo__greet".to_string()), "{listed:?}");
            assert!(
                !listed.iter().any(|n| n.starts_with("demo__slow_")),
                "{lifecycle:?}: {listed:?}"
            );
            assert_refused_like_a_missing_tool(&bob, "demo__slow_compute").await;
            bob.close().await;
        }
        // The same file for alice: the tool is hers to call.
        std::fs::write(&config, toml("alice")).unwrap();
        let alice = TestClient::stdio(proxy_stdio_command(&config), Lifecycle::Modern { tasks: true })
            .await
            .expect("connect to mcptask proxy --stdio");
        assert!(names(&alice).await.contains(&"demo__slow_compute".to_string()));
        let id = alice.start_task("demo__slow_compute", json!({"seconds": 0.2})).await;
        let done = alice.wait_terminal(&id, Duration::from_secs(60)).await;
        assert_eq!(wire(&done)["status"], "completed");
        alice.close().await;
    })
    .await;
}

/// `mcptask proxy --stdio` re-reads its file on SIGHUP too: a policy edit
/// hides the tool from the host's next listing and refuses its calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_reloaded_into_proxy_stdio_hides_the_tool() {
    let db = TestDatabase::sqlite();
    with_deadline(Duration::from_secs(180), async {
        let server = DemoServer::start(&db.url, &[]).await;
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("mcptask.toml");
        let toml = format!(
            "[database]\nurl = \"sqlite:{}\"\n[api]\nauth = \"none\"\n[proxy]\nprincipal = \"bob\"\n[[servers]]\nname = \"demo\"\nurl = \"{}\"\n",
            dir.path().join("front.db").display(),
            server.url
        );
        std::fs::write(&config, &toml).unwrap();
        let bob = TestClient::stdio(proxy_stdio_command(&config), Lifecycle::Modern { tasks: true })
            .await
            .expect("connect to mcptask proxy --stdio");
        assert!(names(&bob).await.contains(&"demo__slow_compute".to_string()));
        // Its command line names this test's (unique) config path.
        let pids = mcptask_testkit::process::children_with(&config.display().to_string());
        assert_eq!(pids.len(), 1, "the proxy's pid: {pids:?}");

        std::fs::write(&config, format!("{toml}{DENY_BOB}")).unwrap();
        mcptask_testkit::process::sighup(pids[0]);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while names(&bob).await.contains(&"demo__slow_compute".to_string()) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the reloaded policy never hid the tool"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_refused_like_a_missing_tool(&bob, "demo__slow_compute").await;
        assert!(names(&bob).await.contains(&"demo__greet".to_string()));
        bob.close().await;
    })
    .await;
}

async fn stack(
    db: &TestDatabase,
    front_db: &TestDatabase,
    policy: &str,
) -> (DemoServer, GatewayProcess) {
    let server = DemoServer::start(&db.url, &[]).await;
    let spec = GatewaySpec::with_tokens(&front_db.url, &[("demo", &server.url)]);
    let toml = spec.toml().replace(
        "name = \"demo\"\n",
        "name = \"demo\"\nbackground = [\"slow_compute\"]\n",
    ) + "\n[proxy]\nenabled = true\n"
        + policy;
    let gateway = GatewayProcess::start_toml("proxy with a policy", &toml, &[]).await;
    (server, gateway)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_tool_is_refused_by_the_cli_and_the_agent_tools() {
    let (db, front_db) = (TestDatabase::sqlite(), TestDatabase::sqlite());
    with_deadline(Duration::from_secs(180), async {
        let (_server, gateway) = stack(&db, &front_db, DENY_BOB).await;

        // The CLI: refused for bob as an unknown tool is, run for alice.
        let denied = run_cli(
            &gateway.base,
            BOB,
            &[
                "call",
                "demo",
                "slow_compute",
                "--args",
                "{\"seconds\": 0.1}",
            ],
        )
        .await;
        let missing = run_cli(&gateway.base, BOB, &["call", "demo", "no_such_tool"]).await;
        assert_eq!(denied.status.code(), Some(1), "{denied:?}");
        assert_eq!(denied.status.code(), missing.status.code());
        let said = |o: &std::process::Output, name: &str| {
            String::from_utf8_lossy(&o.stderr).replace(name, "X")
        };
        assert_eq!(
            said(&denied, "slow_compute"),
            said(&missing, "no_such_tool")
        );
        assert!(
            said(&denied, "slow_compute").contains("unknown_tool")
                || said(&denied, "slow_compute").contains("offers no tool"),
            "{}",
            said(&denied, "slow_compute")
        );
        let tools = run_cli(&gateway.base, BOB, &["tools", "demo"]).await;
        let listed = String::from_utf8_lossy(&tools.stdout);
        assert!(
            listed.contains("greet") && !listed.contains("slow_compute"),
            "{listed}"
        );
        let allowed = run_cli(
            &gateway.base,
            ALICE,
            &[
                "call",
                "demo",
                "slow_compute",
                "--args",
                "{\"seconds\": 0.1}",
                "--wait",
            ],
        )
        .await;
        assert_eq!(allowed.status.code(), Some(0), "{allowed:?}");

        // The agent tools (callers that do not declare tasks): bob's
        // listing lacks the tool and calling it starts nothing; alice's
        // call starts a background task.
        let url = format!("{}/mcp", gateway.base);
        let bob = TestClient::http(&url, Some(BOB), Lifecycle::Modern { tasks: false })
            .await
            .expect("bob connects");
        let listed = names(&bob).await;
        assert!(
            listed.contains(&"mcptask_get_task".to_string()),
            "{listed:?}"
        );
        assert!(
            !listed.contains(&"demo__slow_compute".to_string()),
            "{listed:?}"
        );
        assert_refused_like_a_missing_tool(&bob, "demo__slow_compute").await;
        let bobs = match bob
            .call("mcptask_list_tasks", json!({"status": "all"}))
            .await
        {
            Ok(CallToolResponse::Complete(r)) => r.structured_content.unwrap(),
            other => panic!("{other:?}"),
        };
        assert_eq!(bobs["tasks"], json!([]), "nothing was started for bob");
        let alice = TestClient::http(&url, Some(ALICE), Lifecycle::Modern { tasks: false })
            .await
            .expect("alice connects");
        let started = match alice
            .call("demo__slow_compute", json!({"seconds": 0.1}))
            .await
        {
            Ok(CallToolResponse::Complete(r)) => r,
            other => panic!("{other:?}"),
        };
        assert_eq!(started.structured_content.unwrap()["status"], "working");
    })
    .await;
}

/// A policy edit put in force by SIGHUP: the front task alice started
/// before it runs to its end; her new calls of the tool are refused, and
/// her listing no longer has it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_front_task_of_a_tool_a_reload_denies_runs_to_its_end_while_new_calls_are_refused() {
    let (db, front_db) = (TestDatabase::sqlite(), TestDatabase::sqlite());
    with_deadline(Duration::from_secs(180), async {
        let (_server, gateway) = stack(&db, &front_db, "").await;
        let url = format!("{}/mcp", gateway.base);
        let alice = TestClient::http(&url, Some(ALICE), Lifecycle::Modern { tasks: true })
            .await
            .expect("alice connects");
        let running = alice
            .start_task("demo__slow_compute", json!({"seconds": 3}))
            .await;

        let edited = std::fs::read_to_string(gateway.config_path()).unwrap()
            + "\n[[policy]]\nprincipal = \"alice\"\ndeny = [\"demo/slow_*\"]\n";
        let reloaded = gateway.reload(&edited).await.expect("the edit is valid");
        assert!(reloaded.contains("policy changed"), "{reloaded}");

        assert_refused_like_a_missing_tool(&alice, "demo__slow_compute").await;
        assert!(
            !names(&alice)
                .await
                .contains(&"demo__slow_compute".to_string())
        );
        let api = gateway.client(Some(ALICE));
        api.post(
            "/api/v1/calls",
            &json!({"server": "demo", "tool": "slow_compute", "arguments": {"seconds": 1}}),
        )
        .await
        .assert_error(404, "unknown_tool");

        let done = alice.wait_terminal(&running, Duration::from_secs(60)).await;
        assert_eq!(
            wire(&done)["status"],
            "completed",
            "the task made before the edit ran to its end: {:#}",
            wire(&done)
        );
        let row = api.task(&running).await;
        assert_eq!(
            (&row["status"], &row["face"]),
            (&json!("completed"), &json!("mcp"))
        );
    })
    .await;
}
