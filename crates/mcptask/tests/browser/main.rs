//! The dashboard in real headless Chromium against a real gateway (`mcptask
//! serve`) and a real demo server (`mcptask demo-server`): the browser sees a
//! task appear live, answers its input request through the generated form,
//! cancels another task, sees both settle, and calls a tool picked from the
//! server's tool list with the form generated from its input schema. The
//! gateway also runs the front: a call an MCP client made at `/mcp` is one
//! row naming its face, driver and upstream task, and is cancelled from the
//! page; a REST call of the TypeScript everything server's 2025-11-25 task
//! tool asks a question that is answered in the page. The steps are in
//! `tests/browser/dashboard.mjs` (playwright-core driving the system's
//! Chromium); this test starts the processes, seeds a task, runs the script
//! and checks the outcome through the API. It leaves a screenshot of the
//! dashboard in `target/dashboard.png`.
//!
//! Then the console: the calls filtered by outcome (failed: the failed call
//! with its error in words; refused by policy: bob's refusal from the audit
//! trail), an answered call's timeline (its question and answer), a
//! question answered from the inbox, the servers page with a killed server
//! down and its reason, and the policy per principal. Those screenshots go
//! to `docs/console/*.png`, which `docs/DEPLOY.md` shows.
//!
//! Needs Node 22 and playwright-core in `<repo>/.tools` (`scripts/install-test-tools`)
//! and Chromium (`/usr/bin/chromium`, Debian's `chromium` package, or the
//! binary named by `MCPTASK_CHROMIUM`). Without them the test skips loudly,
//! except under `CI=true`, where it fails.

use std::path::{Path, PathBuf};
use std::time::Duration;

use mcptask_testkit::mcp::{Lifecycle, TestClient};
use mcptask_testkit::*;
use rmcp::model::CallToolResponse;
use serde_json::{Value, json};

const TEST_LIMIT: Duration = Duration::from_secs(420);
/// The whole browser session; its own steps wait up to 60 s each.
const SCRIPT_LIMIT: Duration = Duration::from_secs(300);

struct Tooling {
    node: PathBuf,
    playwright: PathBuf,
    chromium: PathBuf,
}

fn tooling() -> Result<Tooling, String> {
    let modules = repo_root().join(".tools/node_modules");
    let node = modules.join(".bin/node");
    let version = std::process::Command::new(&node)
        .arg("--version")
        .output()
        .map_err(|e| format!("cannot run {}: {e}", node.display()))?;
    let version = String::from_utf8_lossy(&version.stdout).trim().to_string();
    if !version.starts_with("v22.") {
        return Err(format!("{} is {version:?}, not Node 22", node.display()));
    }
    let playwright = modules.join("playwright-core");
    if !playwright.join("package.json").exists() {
        return Err(format!("{} is missing", playwright.display()));
    }
    let chromium = match std::env::var_os("MCPTASK_CHROMIUM") {
        Some(p) => PathBuf::from(p),
        None => ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
            .ok_or("no Chromium at /usr/bin/chromium (apt-get install chromium)")?,
    };
    if !chromium.exists() {
        return Err(format!("{} does not exist", chromium.display()));
    }
    Ok(Tooling {
        node,
        playwright,
        chromium,
    })
}

/// The tooling, or `None` after a loud SKIPPED line (outside CI).
fn tooling_or_skip() -> Option<Tooling> {
    match tooling() {
        Ok(t) => Some(t),
        Err(reason) if in_ci() => panic!(
            "the browser test is required under CI: {reason}; run scripts/install-test-tools \
             and apt-get install chromium"
        ),
        Err(reason) => {
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED (dashboard_browser: no browser tooling): {reason} — run \
                 scripts/install-test-tools and apt-get install chromium"
            );
            None
        }
    }
}

/// `target/` of this workspace (or `$CARGO_TARGET_DIR`).
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"))
}

/// SIGKILLs a process group on drop: the browser script and the Chromium it
/// started, even when the test fails or times out halfway.
struct KillGroup(u32);

impl Drop for KillGroup {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the process group of a child this test started
        // (a group that no longer exists only yields ESRCH).
        unsafe {
            libc::kill(-(self.0 as libc::pid_t), libc::SIGKILL);
        }
    }
}

fn is_png(path: &Path) -> bool {
    std::fs::read(path).is_ok_and(|b| b.len() > 1000 && b.starts_with(b"\x89PNG\r\n\x1a\n"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_tasks_live_answers_and_cancels_them() {
    let Some(tools) = tooling_or_skip() else {
        return;
    };
    let Some(everything) =
        Everything::or_skip("the_dashboard_shows_tasks_live_answers_and_cancels_them")
    else {
        return;
    };
    with_deadline(TEST_LIMIT, async {
        let server_db = TestDatabase::sqlite();
        let gateway_db = TestDatabase::sqlite();
        let server = DemoServer::start(&server_db.url, &[]).await;
        // A second server that answers once, then dies (the console shows it down).
        let flaky_db = TestDatabase::sqlite();
        let mut flaky = DemoServer::start(&flaky_db.url, &[]).await;
        let toml = GatewaySpec::with_tokens(
            &gateway_db.url,
            &[("demo", &server.url), ("flaky", &flaky.url)],
        )
        .toml()
            + "\n[proxy]\nenabled = true\n"
            + "\n[[policy]]\nprincipal = \"bob\"\ndeny = [\"demo/confirm_delete\"]\n"
            + &everything.server_toml("ev", "connect_timeout_ms = 20000\n");
        let gateway = GatewayProcess::start_toml("gateway", &toml, &[]).await;
        let api = gateway.client(Some(OPERATOR));
        // A front task held by an MCP client declaring tasks: the proxy
        // follows the demo server's SEP-2663 task for it.
        let mcp = TestClient::http(
            &format!("{}/mcp", gateway.base),
            Some(OPERATOR),
            Lifecycle::Modern { tasks: true },
        )
        .await
        .expect("connect to /mcp");
        let front_id = match mcp
            .call(
                "demo__slow_compute",
                json!({"seconds": 120, "label": "front task"}),
            )
            .await
            .expect("tools/call through the proxy")
        {
            CallToolResponse::Task(t) => t.task.task_id,
            other => panic!("expected a front task, got {other:?}"),
        };

        // Tasks that exist before the page loads: one settled each way (for a
        // telling screenshot) and a long one the browser will cancel.
        let report = api
            .start_task_with(json!({"server": "demo", "tool": "slow_compute",
                "arguments": {"seconds": 1, "label": "quarterly report"}, "waitMs": 60_000}))
            .await;
        let broken = api.start_task("protocol_error_job", json!({})).await;
        let slow = api
            .start_task(
                "slow_compute",
                json!({"seconds": 120, "label": "nightly backup"}),
            )
            .await;
        let slow_id = slow["id"].as_str().unwrap().to_string();
        api.wait_status(report["id"].as_str().unwrap(), "completed")
            .await;
        api.wait_status(broken["id"].as_str().unwrap(), "failed")
            .await;

        // Numbers for the servers page: calls answered at once (the audit
        // trail records their ends), one the tool itself fails, one the
        // policy refuses; then the flaky server answers once, dies, and the
        // next call to it fails, so its health turns down.
        for tool in ["greet", "greet", "greet", "test_error_handling"] {
            let reply = api
                .post(
                    "/api/v1/calls",
                    &json!({"server": "demo", "tool": tool, "background": false}),
                )
                .await;
            assert_eq!(reply.status, 200, "{tool}: {reply:#?}");
        }
        let refused = gateway
            .client(Some(BOB))
            .post(
                "/api/v1/calls",
                &json!({"server": "demo", "tool": "confirm_delete", "arguments": {"filename": "x"}}),
            )
            .await;
        assert!(refused.status >= 400, "{refused:#?}");
        let answered = api
            .post(
                "/api/v1/calls",
                &json!({"server": "flaky", "tool": "greet", "background": false}),
            )
            .await;
        assert_eq!(answered.status, 200, "{answered:#?}");
        flaky.kill().await;
        let failed = api
            .post(
                "/api/v1/calls",
                &json!({"server": "flaky", "tool": "greet", "background": false}),
            )
            .await;
        assert!(failed.status >= 500, "{failed:#?}");
        // The everything server (Node over stdio) is called in step 8; on a
        // loaded machine it may take a while to answer its first listing,
        // and the gateway no longer holds its start for it: the page is
        // opened once it is listed, so that a slow start reads as that.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        loop {
            let servers = api.get("/api/v1/servers").await;
            let ev_ready = servers.json["servers"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|s| s["name"] == "ev" && s["ready"] == true);
            if ev_ready {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the everything server was not listed within 120 s: {:#}",
                servers.json
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let docs = repo_root().join("docs/console");
        std::fs::create_dir_all(&docs).expect("create docs/console");

        let screenshot = target_dir().join("dashboard.png");
        std::fs::create_dir_all(screenshot.parent().unwrap()).expect("create target/");
        let _ = std::fs::remove_file(&screenshot);
        let profile = tempfile::tempdir().expect("browser profile dir");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser/dashboard.mjs");
        let child = tokio::process::Command::new(&tools.node)
            .arg(&script)
            .args([
                "--base",
                &gateway.base,
                "--token",
                OPERATOR,
                "--slow-task",
                &slow_id,
                "--front-task",
                &front_id,
                "--broken-task",
                broken["id"].as_str().unwrap(),
                "--report-task",
                report["id"].as_str().unwrap(),
            ])
            .arg("--docs")
            .arg(&docs)
            .arg("--screenshot")
            .arg(&screenshot)
            .env("PLAYWRIGHT_CORE", &tools.playwright)
            .env("CHROMIUM", &tools.chromium)
            .env("USER_DATA_DIR", profile.path())
            .env("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
            .env_remove("PLAYWRIGHT_BROWSERS_PATH")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            // Its own process group, so that Chromium dies with it (see below).
            .process_group(0)
            .spawn()
            .expect("spawn node");
        let _group = KillGroup(child.id().expect("pid of node"));
        let out = tokio::time::timeout(SCRIPT_LIMIT, child.wait_with_output())
            .await
            .unwrap_or_else(|_| panic!("the browser script did not finish within {SCRIPT_LIMIT:?}"))
            .expect("wait for node");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        // The first line says where and why it stopped (a CI summary shows
        // only the first few lines of a failure): the last step passed,
        // then the script's own account of the failure.
        let last_step = stdout.lines().last().unwrap_or("(none)");
        let why: Vec<&str> = stderr
            .lines()
            .skip_while(|l| !l.starts_with("FAILED:"))
            .take(4)
            .collect();
        let context = format!(
            "browser script: {:?}; after \"{last_step}\": {}\nstderr:\n{stderr}\nstdout:\n{stdout}",
            out.status,
            why.join(" | ")
        );
        eprintln!("{context}");
        assert!(out.status.success(), "{context}");
        let result: Value = stdout
            .lines()
            .find_map(|l| l.strip_prefix("RESULT "))
            .and_then(|l| serde_json::from_str(l).ok())
            .unwrap_or_else(|| panic!("no RESULT line: {context}"));
        let ask_id = result["askId"].as_str().expect("askId").to_string();
        assert_eq!(result["slowId"], slow_id.as_str());
        assert_eq!(result["statuses"][&ask_id], "completed", "{result:#}");
        assert_eq!(result["statuses"][&slow_id], "cancelled", "{result:#}");

        // What the browser did is what the gateway recorded.
        let asked = api.task(&ask_id).await;
        assert_eq!(asked["status"], "completed", "{asked:#}");
        assert_eq!(
            asked["result"]["content"][0]["text"], "Deleted browser-test.txt",
            "the form sent confirm = true: {asked:#}"
        );
        assert_eq!(asked["inputs"][0]["key"], "confirm_delete");
        assert_eq!(asked["inputs"][0]["answered"], true);
        // The call made from the picker carried the form's arguments, typed.
        let picked_id = result["pickedId"].as_str().expect("pickedId").to_string();
        assert_eq!(result["statuses"][&picked_id], "completed", "{result:#}");
        let picked = api.task(&picked_id).await;
        assert_eq!(
            (&picked["server"], &picked["tool"], &picked["status"]),
            (&json!("demo"), &json!("slow_compute"), &json!("completed")),
            "{picked:#}"
        );
        assert_eq!(
            picked["arguments"],
            json!({"seconds": 1, "label": "picked in the browser"}),
            "{picked:#}"
        );
        assert_eq!(
            picked["result"]["content"][0]["text"], "picked in the browser: computed in 1s",
            "{picked:#}"
        );
        // The multi-select answer went out as a list of the picked choices.
        let report_id = result["reportId"].as_str().expect("reportId");
        let report = api.task(report_id).await;
        assert_eq!(
            report["inputs"][0]["response"]["content"],
            json!({"format": "csv", "copies": 1, "urgent": false, "sections": ["summary", "appendix"]}),
            "{report:#}"
        );
        let cancelled = api.task(&slow_id).await;
        assert_eq!(cancelled["status"], "cancelled", "{cancelled:#}");
        assert!(cancelled["cancelRequestedAt"].is_string(), "{cancelled:#}");

        // The front call: one row (its id is the front's), cancelled from the
        // page; the cancel reached the demo server and the MCP client.
        let front = api.task(&front_id).await;
        assert_eq!(
            (&front["face"], &front["driver"], &front["status"]),
            (&json!("mcp"), &json!("sep2663"), &json!("cancelled")),
            "{front:#}"
        );
        assert_eq!(front["remoteTaskId"], result["upstreamTask"], "{front:#}");
        let seen = wait_status(&mcp, &front_id, "cancelled", Duration::from_secs(30)).await;
        assert_eq!(status(&seen), "cancelled", "the MCP client sees it cancelled: {seen:#}");
        let rows = api.list_all("server=demo").await;
        assert_eq!(
            rows.iter().filter(|t| t["id"] == front_id.as_str()).count(),
            1,
            "{rows:#?}"
        );
        assert!(
            !rows.iter().any(|t| t["id"] == result["upstreamTask"]),
            "the upstream task is a detail of its call, not a row: {rows:#?}"
        );

        // The 2025-11-25 call answered in the page: the everything server
        // took the interpretation picked in the form.
        let research_id = result["researchId"].as_str().expect("researchId");
        let research = api.task(research_id).await;
        assert_eq!(
            (&research["face"], &research["driver"], &research["status"]),
            (&json!("api"), &json!("sep1686"), &json!("completed")),
            "{research:#}"
        );
        assert_eq!(
            research["inputs"][0]["response"]["content"],
            json!({"interpretation": "technical"}),
            "{research:#}"
        );
        assert!(
            research["result"]["content"][0]["text"]
                .as_str()
                .is_some_and(|t| t.contains("technical")),
            "{research:#}"
        );

        // The answer given in the inbox reached the demo server.
        let inboxed = api
            .task(result["inboxId"].as_str().expect("inboxId"))
            .await;
        assert_eq!(inboxed["status"], "completed", "{inboxed:#}");
        assert_eq!(
            inboxed["result"]["content"][0]["text"], "Deleted inbox.txt",
            "{inboxed:#}"
        );

        assert!(
            is_png(&screenshot),
            "no PNG screenshot at {}",
            screenshot.display()
        );
        for page in ["calls", "timeline", "inbox", "servers", "policy"] {
            let shot = docs.join(format!("{page}.png"));
            assert!(is_png(&shot), "no PNG screenshot at {}", shot.display());
        }
        eprintln!("dashboard screenshot: {}", screenshot.display());
    })
    .await;
}
