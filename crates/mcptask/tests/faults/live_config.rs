//! Live configuration: `mcptask serve` re-reads `mcptask.toml` on SIGHUP.
//! Each edit is made while tasks run; none of them is lost or failed, and a
//! broken file is refused with the error a start would give while the
//! configuration in force keeps serving.

use serde_json::{Value, json};

use mcptask_testkit::*;

const ALICE_ROTATED: &str = "alice-rotated-0123456789";

/// The gateway's file: the test tokens, the demo server behind a scripted
/// front (to see what the gateway sends it), and `extra` lines.
fn toml(db: &str, demo: &str, alice: &str, header: &str, extra: &str) -> String {
    format!(
        "[database]\nurl = {db:?}\n\n[api]\nlisten = \"127.0.0.1:0\"\n\
         [[api.tokens]]\ntoken = {OPERATOR:?}\n\
         [[api.tokens]]\ntoken = {alice:?}\nprincipal = \"alice\"\n\
         [[api.tokens]]\ntoken = {BOB:?}\nprincipal = \"bob\"\n\n\
         [tracker]\n{BRISK_TRACKER}\n\
         [[servers]]\nname = \"demo\"\nurl = {demo:?}\nheaders = {{ Authorization = \"Bearer {header}\" }}\n\
         {extra}\n"
    )
}

async fn slow(api: &Api, seconds: f64) -> String {
    api.start_task("slow_compute", json!({"seconds": seconds}))
        .await["id"]
        .as_str()
        .unwrap()
        .to_string()
}

async fn completed(api: &Api, id: &str) -> Value {
    let done = api
        .wait_task(id, "terminal", |t| t["completedAt"].is_string())
        .await;
    assert_eq!(done["status"], "completed", "{done:#}");
    done
}

fn server_names(servers: &Value) -> Vec<String> {
    servers["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_string())
        .collect()
}

/// A server added, an API token and an upstream token rotated, a limit
/// set, then a broken file: all while tasks run. No task is lost or
/// failed; each edit is in force from the reload on; the broken file is
/// refused with its position and the edits before it keep serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_added_tokens_rotated_a_limit_set_and_a_broken_file_while_tasks_run() {
    with_deadline(WAIT * 2, async {
        let dir = tempfile::tempdir().unwrap();
        let demo = DemoServer::start(
            &format!("sqlite:{}", dir.path().join("server.db").display()),
            &[],
        )
        .await;
        let scripted = ScriptedServer::start(&demo.url).await;
        let db = format!("sqlite:{}", dir.path().join("gateway.db").display());
        let first = toml(&db, &scripted.url(), ALICE, "old-token", "");
        let gateway = GatewayProcess::start_toml("live-gw", &first, &[]).await;
        let alice = gateway.client(Some(ALICE));
        let bob = gateway.client(Some(BOB));
        let operator = gateway.client(Some(OPERATOR));
        let running: Vec<String> = futures::future::join_all((0..3).map(|_| slow(&alice, 4.0))).await;
        for id in &running {
            alice
                .wait_task(id, "polled", |t| t["pollCount"].as_i64() > Some(0))
                .await;
        }

        // One reload: a server added, alice's API token and the upstream
        // token rotated, a limit set, a webhook added.
        let hook = WebhookReceiver::start("hook-secret").await;
        let second = toml(
            &db,
            &scripted.url(),
            ALICE_ROTATED,
            "new-token",
            &format!(
                "[[servers]]\nname = \"more\"\nurl = {:?}\n\n[limits]\nper_principal_rate = 0.01\nper_principal_burst = 1\n\n[[webhooks]]\nurl = {:?}\nsecret = \"hook-secret\"\n",
                demo.url, hook.url
            ),
        );
        let said = gateway.reload(&second).await.expect("a valid edit");
        for change in ["servers added: more", "server demo: settings changed", "api tokens added for: alice", "api tokens removed for: alice", "limits:", "webhooks added:"] {
            assert!(said.contains(change), "{change:?} in {said}");
        }
        alice.get("/api/v1/tasks").await.assert_error(401, "unauthorized");
        let alice = gateway.client(Some(ALICE_ROTATED));
        assert_eq!(alice.get("/api/v1/tasks").await.status, 200);
        let servers = operator.get("/api/v1/servers").await.json;
        assert_eq!(server_names(&servers), ["demo", "more"], "{servers:#}");
        // The new limit: bob's burst is one call, the next is refused.
        let call_more = json!({"server": "more", "tool": "greet", "arguments": {"name": "x"}});
        let first_call = bob.post("/api/v1/calls", &call_more).await;
        assert_eq!(first_call.status, 200, "{first_call:#?}");
        bob.post("/api/v1/calls", &call_more)
            .await
            .assert_error(429, "rate_limited");

        // The tasks started before the reload carry on, with the new
        // upstream token from the reload on.
        for id in &running {
            completed(&alice, id).await;
        }
        let seen = scripted.seen_method("tasks/get");
        assert_eq!(
            seen.last().unwrap().authorization.as_deref(),
            Some("Bearer new-token")
        );
        // Their settling reached the webhook the reload added.
        for id in &running {
            let version = alice.task(id).await["notifications"]["eventVersion"].as_i64();
            let deadline = tokio::time::Instant::now() + WAIT;
            loop {
                let got = version.and_then(|v| hook.get(&format!("{id}:{v}")));
                if got.is_some_and(|e| e.status == "completed") {
                    break;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{id}'s last event never reached the new webhook (version {version:?}, {} posts)",
                    hook.posts()
                );
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
        assert!(hook.bad().is_empty(), "{:?}", hook.bad());

        // A broken file: refused, with the position, and nothing changes.
        let live = slow(&alice, 2.0).await;
        let broken = second.replace("[limits]", "[limits]\nper_principal_rate = \"fast\"");
        let refused = gateway.reload(&broken).await.expect_err("an invalid file");
        assert!(refused.contains("ERROR"), "{refused}");
        assert!(
            refused.contains(&format!("{}:", gateway.config_path().display())),
            "the file and its line: {refused}"
        );
        assert_eq!(alice.get("/api/v1/tasks").await.status, 200);
        let metrics = operator.get("/metrics").await;
        assert!(
            metrics.text.contains("mcptask_config_last_reload_successful 0"),
            "{}",
            metrics.text
        );
        assert_eq!(
            server_names(&operator.get("/api/v1/servers").await.json),
            ["demo", "more"]
        );
        completed(&alice, &live).await;

        // Fixed again: in force, and the metric says so.
        gateway.reload(&second).await.expect("the file is valid again");
        assert!(
            operator
                .get("/metrics")
                .await
                .text
                .contains("mcptask_config_last_reload_successful 1")
        );
    })
    .await;
}

/// A server removed by a reload takes no new calls, and its live tasks
/// are followed to their end (not failed); once none is left, the next
/// reload forgets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_servers_live_tasks_are_followed_to_their_end() {
    with_deadline(WAIT * 2, async {
        let dir = tempfile::tempdir().unwrap();
        let demo = DemoServer::start(
            &format!("sqlite:{}", dir.path().join("server.db").display()),
            &[],
        )
        .await;
        let db = format!("sqlite:{}", dir.path().join("gateway.db").display());
        let with_demo = toml(&db, &demo.url, ALICE, "t", "");
        let gateway = GatewayProcess::start_toml("retire-gw", &with_demo, &[]).await;
        let alice = gateway.client(Some(ALICE));
        let operator = gateway.client(Some(OPERATOR));
        let id = slow(&alice, 3.0).await;

        let without = with_demo.replace("name = \"demo\"", "name = \"other\"");
        // Asked first, `config check` says what the reload would change and
        // which live task it touches.
        let preview = config_check(&dir.path().join("edited.toml"), &without, &gateway.base).await;
        let reload = &preview["reload"];
        assert_eq!(
            reload["changes"]["servers_removed"],
            json!(["demo"]),
            "{preview:#}"
        );
        assert_eq!(
            reload["changes"]["servers_added"],
            json!(["other"]),
            "{preview:#}"
        );
        let affected = reload["affectedTasks"].as_array().unwrap();
        assert!(
            affected
                .iter()
                .any(|a| a["ids"].as_array().unwrap().contains(&json!(id))
                    && a["effect"]
                        .as_str()
                        .unwrap()
                        .contains("followed to their end")),
            "{preview:#}"
        );
        let unchanged =
            config_check(&dir.path().join("same.toml"), &with_demo, &gateway.base).await;
        assert_eq!(unchanged["reload"]["lines"], json!([]), "{unchanged:#}");

        let said = gateway.reload(&without).await.expect("a valid edit");
        assert!(said.contains("servers removed: demo"), "{said}");
        let servers = operator.get("/api/v1/servers").await.json;
        let demo_row = servers["servers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == "demo")
            .cloned()
            .unwrap_or_else(|| panic!("the removed server is still followed: {servers:#}"));
        assert_eq!(demo_row["retired"], true, "{demo_row:#}");
        alice
            .post(
                "/api/v1/calls",
                &json!({"server": "demo", "tool": "greet", "arguments": {"name": "x"}}),
            )
            .await
            .assert_error(404, "unknown_server");

        completed(&alice, &id).await;
        gateway.reload(&without).await.expect("the same file");
        let servers = operator.get("/api/v1/servers").await.json;
        assert_eq!(server_names(&servers), ["other"], "{servers:#}");
    })
    .await;
}

/// `mcptask config check --json --no-probe --gateway BASE` of `toml`
/// (written to `path`), with the operator's token.
async fn config_check(path: &std::path::Path, toml: &str, base: &str) -> Value {
    std::fs::write(path, toml).unwrap();
    let (path, base) = (path.to_path_buf(), base.to_string());
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(bin())
            .args([
                "config",
                "check",
                "--json",
                "--no-probe",
                "--gateway",
                &base,
                "--config",
            ])
            .arg(&path)
            .env("MCPTASK_API_TOKEN", OPERATOR)
            .env("MCPTASK_LOG", "warn")
            .env_remove("MCPTASK_DATABASE_URL")
            .output()
            .expect("run mcptask config check")
    })
    .await
    .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "config check printed no JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}
