//! The MCP front's fault matrix, part A: what becomes of a front task when
//! its upstream is SIGKILLed (each driver), when the proxy replica that
//! made it is SIGKILLed (two replicas on PostgreSQL), and when the front
//! refuses a call after the upstream already created its task. (The
//! windows around the commit of an upstream task's handle are opened in
//! process, through the store: `mcptask-gateway` `tests/gateway/crash.rs`.)
//!
//! Real processes throughout: `mcptask serve` with `[proxy] enabled = true`
//! (`/mcp`), `mcptask demo-server` (SEP-2663) over HTTP, the
//! `fixture-toolset` stdio server (a submit/status/cancel toolset) and the
//! TypeScript everything server over stdio (a 2025-11-25 task tool and a
//! long synchronous tool). The caller is a 2026-07-28 client that declares
//! tasks and polls `tasks/get`.

use std::time::Duration;

use mcptask_testkit::mcp::{TestClient, error_code};
use mcptask_testkit::*;
use serde_json::{Value, json};

/// `mcptask.toml` of a proxy on `db`: no API auth, a short owner lease, a
/// brisk tracker (plus `tracker` lines), then `servers` (whole
/// `[[servers]]` entries) and `proxy` lines.
fn proxy_toml(db: &str, tracker: &str, proxy: &str, servers: &str) -> String {
    let q = |s: &str| serde_json::to_string(s).expect("a TOML string");
    format!(
        "[database]\nurl = {}\n\n[api]\nlisten = \"127.0.0.1:0\"\nauth = \"none\"\n\n\
         [proxy]\nenabled = true\nowner_lease_ms = 1500\n{proxy}\n\n\
         [tracker]\npoll_default_ms = 200\npoll_min_ms = 100\npoll_max_ms = 500\n\
         input_required_poll_ms = 200\nbackoff_base_ms = 100\nbackoff_max_ms = 1000\n{tracker}\n{servers}",
        q(db)
    )
}

/// A `[[servers]]` entry for an HTTP upstream. Its calls are always handed
/// out as tasks (`answer_within_ms = 0`): these tests are about front tasks.
fn http_server(name: &str, url: &str) -> String {
    format!("\n[[servers]]\nname = {name:?}\nurl = {url:?}\nanswer_within_ms = 0\n")
}

/// A `[[servers]]` entry for the toolset fixture (jobs kept in `state`).
fn toolset_server(state: &std::path::Path) -> String {
    let q = |s: &str| serde_json::to_string(s).expect("a TOML string");
    format!(
        "\n[[servers]]\nname = \"jobs\"\ncommand = {}\nargs = [\"fixture-toolset\", \"--state\", {}]\n\n\
         [[servers.toolsets]]\nname = \"jobs\"\nsubmit_tool = \"submit_job\"\n\
         status_tool = \"job_status\"\ncancel_tool = \"cancel_job\"\n",
        q(bin()),
        q(&state.display().to_string()),
    )
}

/// The everything server as `name`, its long synchronous tool run in the
/// background, a synchronous call interrupted by a crash handled per
/// `interrupt`.
/// Its calls are handed out as tasks at once (`answer_within_ms = 0`): the
/// tests time their kills by the tasks' starts.
fn everything_server(ev: &Everything, name: &str, interrupt: &str) -> String {
    ev.server_toml(
        name,
        &format!(
            "interrupt = {interrupt:?}\nbackground = [\"trigger-long-running-operation\"]\n\
             connect_timeout_ms = 20000\ncall_timeout_ms = 60000\nanswer_within_ms = 0\n"
        ),
    )
}

/// Through the everything server `ev`: a 2025-11-25 task waiting for an
/// answer, and a 300 s synchronous call seen running.
async fn start_asking_and_long(client: &TestClient) -> (String, String) {
    let asking = client
        .start_task(
            "ev__simulate-research-query",
            json!({"topic": "rust", "ambiguous": true}),
        )
        .await;
    wait_status(client, &asking, "input_required", WAIT).await;
    let long = client
        .start_task(
            "ev__trigger-long-running-operation",
            json!({"duration": 300, "steps": 300}),
        )
        .await;
    wait_started(client, &long).await;
    (asking, long)
}

/// Poll until `id` shows a status message (its work has started and been
/// observed at least once).
async fn wait_started(client: &TestClient, id: &str) -> Value {
    poll_task(client, id, WAIT, |_| {}, |w| w["statusMessage"].is_string()).await
}

/// Poll `tasks/get` for `window`: the task must stay `working` throughout
/// (the caller sees an upstream outage as a live task, not a failure).
async fn stays_working(client: &TestClient, id: &str, window: Duration) {
    let until = tokio::time::Instant::now() + window;
    while tokio::time::Instant::now() < until {
        let got = client.get(id).await.expect("tasks/get");
        let w = mcptask_testkit::mcp::wire(&got);
        assert_eq!(status(&w), "working", "{w:#}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The message a failed task carries (its status message and error).
fn failure(w: &Value) -> String {
    w.to_string().to_lowercase()
}

/// SIGKILL every live process below `gateway` whose command line contains
/// `marker` (its stdio upstreams); returns how many.
fn kill_upstreams(gateway: &GatewayProcess, marker: &str) -> usize {
    let pids = descendants_with(gateway.pid(), marker);
    for pid in &pids {
        sigkill(*pid);
    }
    pids.len()
}

/// `(id, status)` of every task of the demo server on SQLite `url`, oldest
/// first.
async fn upstream_tasks(url: &str) -> Vec<(String, String)> {
    let pool = sqlx::SqlitePool::connect(url)
        .await
        .expect("open the upstream's database");
    let rows: Vec<(String, String)> =
        sqlx::query_as("SELECT id, status FROM server_tasks ORDER BY created_at, id")
            .fetch_all(&pool)
            .await
            .expect("read the upstream's tasks");
    pool.close().await;
    rows
}

// ---------------------------------------------------------------------------
// 1. The upstream killed mid-task, per driver

/// SEP-2663: the demo server is SIGKILLed under a front task. While it is
/// down the task stays `working` (an outage within the error budget is
/// transient); restarted on the same port and database, the server recovers
/// its task (its tool's interrupt policy fails it "interrupted") and the
/// front task settles with that outcome. The same front serves new calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sep2663_upstream_killed_mid_task_is_followed_again_once_back() {
    with_deadline(Duration::from_secs(240), async {
        let upstream_db = TestDatabase::sqlite();
        let addr = format!("127.0.0.1:{}", free_port());
        let mut demo = DemoServer::start_at("demo", &addr, &upstream_db.url, FAST_RECOVERY).await;
        let db = TestDatabase::sqlite();
        let toml = proxy_toml(&db.url, "", "", &http_server("demo", &demo.url));
        let gateway = GatewayProcess::start_toml("proxy", &toml, &[]).await;
        let client = gateway.front_client().await;
        let id = client
            .start_task(
                "demo__slow_compute",
                json!({"seconds": 300, "label": "killed"}),
            )
            .await;
        wait_started(&client, &id).await;

        demo.kill().await;
        stays_working(&client, &id, Duration::from_secs(3)).await;
        let _demo =
            DemoServer::start_at("demo again", &addr, &upstream_db.url, FAST_RECOVERY).await;
        let done = wait_terminal(&client, &id, WAIT).await;
        assert_eq!(status(&done), "failed", "{done:#}");
        assert!(failure(&done).contains("interrupted"), "{done:#}");

        let next = client
            .start_task(
                "demo__slow_compute",
                json!({"seconds": 1, "label": "after"}),
            )
            .await;
        let done = wait_terminal(&client, &next, WAIT).await;
        assert_eq!(result_text(&done), "after: computed in 1s", "{done:#}");
        assert_eq!(upstream_tasks(&upstream_db.url).await.len(), 2);
    })
    .await;
}

/// SEP-2663, the server never comes back: the front task fails once the
/// tracker's error budget is spent, with the reason; it is not `working`
/// forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sep2663_upstream_killed_for_good_fails_the_front_task_after_the_error_budget() {
    with_deadline(Duration::from_secs(180), async {
        let upstream_db = TestDatabase::sqlite();
        let mut demo = DemoServer::start(&upstream_db.url, &[]).await;
        let db = TestDatabase::sqlite();
        let toml = proxy_toml(
            &db.url,
            "error_budget_ms = 3000\n",
            "",
            &http_server("demo", &demo.url),
        );
        let gateway = GatewayProcess::start_toml("proxy", &toml, &[]).await;
        let client = gateway.front_client().await;
        let id = client
            .start_task("demo__slow_compute", json!({"seconds": 300}))
            .await;
        wait_started(&client, &id).await;
        demo.kill().await;
        let done = wait_terminal(&client, &id, WAIT).await;
        assert_eq!(status(&done), "failed", "{done:#}");
        assert!(failure(&done).contains("budget"), "{done:#}");
    })
    .await;
}

/// A toolset (submit/status/cancel over stdio): the fixture process is
/// SIGKILLed mid-job. Its jobs live in its state file, so the tracker's next
/// poll starts a new process that still knows the job; the front task
/// completes with the job's result, and the job was submitted once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn toolset_upstream_killed_mid_job_is_respawned_and_the_job_completes() {
    with_deadline(Duration::from_secs(180), async {
        let dir = tempfile::tempdir().expect("temp dir");
        let state = dir.path().join("jobs.json");
        let db = TestDatabase::sqlite();
        let toml = proxy_toml(&db.url, "", "", &toolset_server(&state));
        let gateway = GatewayProcess::start_toml("proxy", &toml, &[]).await;
        let client = gateway.front_client().await;
        let id = client
            .start_task(
                "jobs__submit_job",
                json!({"polls": 30, "result": {"rows": 7}}),
            )
            .await;
        let polls = || -> usize {
            let state: Value = std::fs::read_to_string(&state)
                .ok()
                .and_then(|s| serde_json::from_str(&s).ok())
                .unwrap_or(Value::Null);
            state["jobs"]["job-1"]["polls"]
                .as_array()
                .map_or(0, Vec::len)
        };
        let deadline = tokio::time::Instant::now() + WAIT;
        while polls() < 2 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the job is never polled"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let before = polls();
        assert!(before < 30, "the job must still run when its server dies");
        assert!(kill_upstreams(&gateway, "fixture-toolset") >= 1);

        let done = wait_terminal(&client, &id, WAIT).await;
        assert_eq!(status(&done), "completed", "{done:#}");
        assert!(
            done["result"].to_string().contains("\"rows\":7"),
            "{done:#}"
        );
        assert!(polls() > before, "polled again after the kill");
        let state: Value =
            serde_json::from_str(&std::fs::read_to_string(&state).expect("state")).expect("json");
        assert_eq!(
            state["jobs"].as_object().map(|j| j.len()),
            Some(1),
            "{state:#}"
        );
    })
    .await;
}

/// The everything server (stdio) SIGKILLed under a 2025-11-25 task waiting
/// for an answer and a synchronous call run as a front task: both front
/// tasks fail with the reason (neither stays `working` or `input_required`),
/// and new calls start a new server process and complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sep1686_and_sync_upstream_killed_mid_task_fail_the_front_tasks_with_the_reason() {
    let test = "sep1686_and_sync_upstream_killed_mid_task_fail_the_front_tasks_with_the_reason";
    let Some(ev) = Everything::or_skip(test) else {
        return;
    };
    with_deadline(Duration::from_secs(300), async {
        let db = TestDatabase::sqlite();
        let toml = proxy_toml(&db.url, "", "", &everything_server(&ev, "ev", "fail"));
        let gateway = GatewayProcess::start_toml("proxy", &toml, &[]).await;
        let client = gateway.front_client().await;
        let (asking, long) = start_asking_and_long(&client).await;

        assert!(kill_upstreams(&gateway, "server-everything") >= 1);
        for id in [&asking, &long] {
            let done = wait_terminal(&client, id, WAIT).await;
            assert_eq!(status(&done), "failed", "{done:#}");
            // The reason, in the one mapping's words (not a timeout, an
            // internal error or "interrupted").
            assert!(
                failure(&done).contains("the upstream server could not be reached"),
                "{done:#}"
            );
        }

        let again = client
            .start_task(
                "ev__trigger-long-running-operation",
                json!({"duration": 1, "steps": 1}),
            )
            .await;
        let done = wait_terminal(&client, &again, WAIT).await;
        assert_eq!(status(&done), "completed", "{done:#}");
    })
    .await;
}

/// The same over Streamable HTTP: the everything server's process is
/// SIGKILLed under a 2025-11-25 task waiting for an answer, a synchronous
/// call and a synchronous call waiting for an answer; each front task fails
/// with the reason (the answers' streams end with the server; nothing waits
/// on them forever). Restarted on the same port, the server
/// takes new calls through the same front.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sep1686_and_sync_upstream_over_http_killed_mid_task_fail_and_new_calls_work_once_back() {
    let test =
        "sep1686_and_sync_upstream_over_http_killed_mid_task_fail_and_new_calls_work_once_back";
    let Some(ev) = Everything::or_skip(test) else {
        return;
    };
    with_deadline(Duration::from_secs(300), async {
        let port = free_port();
        let (mut upstream, url) = ev.start_http("everything", port).await;
        let db = TestDatabase::sqlite();
        let server = http_server("ev", &url)
            + "background = [\"trigger-long-running-operation\", \"trigger-elicitation-request\"]\n";
        let toml = proxy_toml(&db.url, "", "", &server);
        let gateway = GatewayProcess::start_toml("proxy", &toml, &[]).await;
        let client = gateway.front_client().await;
        let (asking, long) = start_asking_and_long(&client).await;
        let eliciting = client
            .start_task("ev__trigger-elicitation-request", json!({}))
            .await;
        wait_status(&client, &eliciting, "input_required", WAIT).await;

        upstream.kill().await;
        for id in [&long, &asking, &eliciting] {
            let done = wait_terminal(&client, id, WAIT).await;
            assert_eq!(status(&done), "failed", "{done:#}");
            // The reason, in the one mapping's words (not a timeout, an
            // internal error or "interrupted").
            assert!(
                failure(&done).contains("the upstream server could not be reached"),
                "{done:#}"
            );
        }

        let (_upstream, _) = ev.start_http("everything again", port).await;
        let again = client
            .start_task(
                "ev__trigger-long-running-operation",
                json!({"duration": 1, "steps": 1}),
            )
            .await;
        let done = wait_terminal(&client, &again, WAIT).await;
        assert_eq!(status(&done), "completed", "{done:#}");
        // A question of a synchronous call is still relayed and answered.
        let asked = client
            .start_task("ev__trigger-elicitation-request", json!({}))
            .await;
        let waiting = wait_status(&client, &asked, "input_required", WAIT).await;
        let key = input_keys(&waiting).remove(0);
        client
            .update(&asked, json!({ key: {"action": "decline"} }))
            .await
            .expect("tasks/update");
        let done = wait_terminal(&client, &asked, WAIT).await;
        assert_eq!(status(&done), "completed", "{done:#}");
        assert!(result_text(&done).contains("declined"), "{done:#}");
    })
    .await;
}

// ---------------------------------------------------------------------------
// 2. A proxy replica SIGKILLed mid-task (two replicas on PostgreSQL)

/// Front tasks of every driver created through replica A; A is SIGKILLed.
/// At replica B the caller's `tasks/get` finds each and sees it settle as
/// its driver says: the SEP-2663 task is followed to its result, the
/// synchronous call with `interrupt = "rerun"` is made again and completes,
/// the one with `"fail"` fails "interrupted", and the 2025-11-25 task (its
/// upstream session died with A) fails saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_killed_mid_task_its_front_tasks_settle_at_the_other() {
    let test = "a_replica_killed_mid_task_its_front_tasks_settle_at_the_other";
    let Some(ev) = Everything::or_skip(test) else {
        return;
    };
    let Some(db) = TestDatabase::postgres().await else {
        eprintln!("{test}: SKIPPED (no PostgreSQL)");
        return;
    };
    with_deadline(Duration::from_secs(300), async {
        let upstream_db = TestDatabase::sqlite();
        let demo = DemoServer::start(&upstream_db.url, &[]).await;
        let servers = http_server("demo", &demo.url)
            + &everything_server(&ev, "evr", "rerun")
            + &everything_server(&ev, "evf", "fail");
        let toml = proxy_toml(&db.url, "", "", &servers);
        let mut a = GatewayProcess::start_toml("replica A", &toml, &[]).await;
        let b = GatewayProcess::start_toml("replica B", &toml, &[]).await;
        let (on_a, on_b) = (a.front_client().await, b.front_client().await);

        let tracked = on_a
            .start_task(
                "demo__slow_compute",
                json!({"seconds": 6, "label": "tracked"}),
            )
            .await;
        let rerun = on_a
            .start_task(
                "evr__trigger-long-running-operation",
                json!({"duration": 4, "steps": 4}),
            )
            .await;
        let fail = on_a
            .start_task(
                "evf__trigger-long-running-operation",
                json!({"duration": 300, "steps": 300}),
            )
            .await;
        let asking = on_a
            .start_task(
                "evf__simulate-research-query",
                json!({"topic": "rust", "ambiguous": true}),
            )
            .await;
        for id in [&tracked, &rerun, &fail] {
            wait_started(&on_b, id).await;
        }
        wait_status(&on_b, &asking, "input_required", WAIT).await;
        drop(on_a);
        a.kill().await;

        let done = wait_terminal(&on_b, &tracked, WAIT).await;
        assert_eq!(result_text(&done), "tracked: computed in 6s", "{done:#}");
        let done = wait_terminal(&on_b, &rerun, WAIT).await;
        assert_eq!(status(&done), "completed", "{done:#}");
        assert!(
            result_text(&done).contains("Long running operation completed"),
            "{done:#}"
        );
        let done = wait_terminal(&on_b, &fail, WAIT).await;
        assert_eq!(status(&done), "failed", "{done:#}");
        assert!(failure(&done).contains("interrupted"), "{done:#}");
        let done = wait_terminal(&on_b, &asking, WAIT).await;
        assert_eq!(status(&done), "failed", "{done:#}");
        assert!(failure(&done).contains("lost"), "{done:#}");
        // Each call is one row, at either replica.
        let rows = b.client(None).list_all("").await;
        assert_eq!(rows.len(), 4, "{rows:#?}");
        on_b.close().await;
    })
    .await;
}

// ---------------------------------------------------------------------------
// 3. A call refused after the upstream created its task

on_both_stores! {
    /// `[proxy] max_live_tasks = 1`: a second call of a SEP-2663 tool is
    /// refused "server busy" when its front task would be created, which is
    /// after the upstream created its task. That task is cancelled upstream
    /// (`tasks/cancel` seen, the task ends `cancelled`), nothing is kept at
    /// the front, and the first task runs on.
    async fn a_call_refused_after_the_upstream_created_its_task_cancels_it(db) {
        with_deadline(Duration::from_secs(180), async {
            let upstream_db = TestDatabase::sqlite();
            let demo = DemoServer::start(&upstream_db.url, &[]).await;
            let seen = FaultFront::start(&demo.base()).await;
            let toml = proxy_toml(
                &db.url,
                "",
                "max_live_tasks = 1",
                &http_server("demo", &seen.url()),
            );
            let gateway = GatewayProcess::start_toml("proxy", &toml, &[]).await;
            let client = gateway.front_client().await;
            let first = client
                .start_task("demo__slow_compute", json!({"seconds": 300, "label": "first"}))
                .await;
            let refused = client
                .call("demo__slow_compute", json!({"seconds": 300, "label": "second"}))
                .await
                .expect_err("over the live-task cap");
            assert_eq!(
                error_code(&refused),
                Some(mcptask_server::SERVER_BUSY),
                "{refused:?}"
            );
            assert_eq!(seen.count("tools/call"), 2, "the upstream made both tasks");

            let deadline = tokio::time::Instant::now() + WAIT;
            let cancelled = loop {
                let cancels: Vec<String> = seen
                    .seen()
                    .into_iter()
                    .filter(|s| s.method == "tasks/cancel")
                    .filter_map(|s| s.task_id)
                    .collect();
                if let Some(id) = cancels.first() {
                    assert_eq!(cancels.len(), 1, "{cancels:?}");
                    break id.clone();
                }
                assert!(tokio::time::Instant::now() < deadline, "no tasks/cancel upstream");
                tokio::time::sleep(Duration::from_millis(50)).await;
            };
            let deadline = tokio::time::Instant::now() + WAIT;
            loop {
                let tasks = upstream_tasks(&upstream_db.url).await;
                assert_eq!(tasks.len(), 2, "{tasks:?}");
                let of = |id: &str| tasks.iter().find(|t| t.0 == id).map(|t| t.1.clone());
                if of(&cancelled).as_deref() == Some("cancelled") {
                    assert_eq!(tasks[0].1, "working", "the first task runs on: {tasks:?}");
                    break;
                }
                assert!(tokio::time::Instant::now() < deadline, "{tasks:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let rows = gateway.client(None).list_all("").await;
            assert_eq!(mcptask_testkit::ids(&rows), vec![first.clone()]);
            let w = mcptask_testkit::mcp::wire(&client.get(&first).await.expect("tasks/get"));
            assert_eq!(status(&w), "working", "{w:#}");
        })
        .await;
    }
}
