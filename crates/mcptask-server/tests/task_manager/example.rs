//! The `rmcp_task_server` example as real processes: the conformance suite's
//! task scenarios on SQLite and PostgreSQL, a SIGKILL and restart (its
//! closure task fails honestly, its named-tool task reruns), and two
//! replicas on one PostgreSQL serving each other's tasks.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use mcptask_testkit::mcp::{Lifecycle, TestClient};
use mcptask_testkit::process::LoggedChild;
use mcptask_testkit::{TestDatabase, with_deadline};
use rmcp::model::TaskStatus;
use serde_json::{Value, json};

const READY: &str = "rmcp_task_server listening on ";
pub(crate) const WAIT: Duration = Duration::from_secs(30);

/// The conformance suite's task scenarios (all of them; an extension, so
/// not scored by the suite, but required here).
const TASK_SCENARIOS: [&str; 10] = [
    "tasks-lifecycle",
    "tasks-capability-negotiation",
    "tasks-wire-fields",
    "tasks-request-state-removal",
    "tasks-mrtr-input",
    "tasks-request-headers",
    "tasks-dispatch-and-envelope",
    "tasks-status-notifications",
    "tasks-required-task-error",
    "tasks-mrtr-composition",
];

/// `target/<profile>/examples/<name>`, the program: the test command
/// builds it with `cargo build --examples` (`cargo test --no-run` leaves
/// only `<name>-<hash>`, under a name of its own).
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    let plain = exe
        .parent()
        .and_then(Path::parent)
        .expect("tests live in target/<profile>/deps")
        .join("examples")
        .join(name);
    assert!(
        plain.exists(),
        "{} is missing: build it first (cargo build --examples; scripts/test does)",
        plain.display()
    );
    plain
}

/// A running example server on `url`, on an ephemeral port.
pub(crate) struct Server {
    pub(crate) process: LoggedChild,
    pub(crate) url: String,
}

impl Server {
    /// A server with the runtime's own settings (a 30 s owner lease,
    /// recovery every 5 s), as an rmcp author ships it: a restart on the
    /// same store adopts its previous incarnation's work at once.
    pub(crate) async fn start(name: &str, database_url: &str) -> Self {
        Self::start_program(name, "rmcp_task_server", &[database_url]).await
    }

    /// The example `program` with `args`, serving HTTP on an ephemeral port.
    pub(crate) async fn start_program(name: &str, program: &str, args: &[&str]) -> Self {
        let mut command = tokio::process::Command::new(example(program));
        command
            .args(args)
            .args(["--http", "127.0.0.1:0"])
            .env("RUST_LOG", "warn");
        let (process, url) = LoggedChild::spawn(name, command, READY, Duration::from_secs(60))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        Server { process, url }
    }

    pub(crate) async fn client(&self) -> TestClient {
        TestClient::http(&self.url, None, Lifecycle::Modern { tasks: true })
            .await
            .unwrap_or_else(|e| panic!("connect to {}: {e}", self.url))
    }
}

pub(crate) fn result_text(got: &rmcp::model::GetTaskResult) -> String {
    let wire = mcptask_testkit::mcp::wire(got);
    wire["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The conformance tooling (Node 22 and the suite), or `None` after a loud
/// SKIPPED line outside CI.
pub(crate) fn tooling(test: &str) -> Option<PathBuf> {
    let bin = mcptask_testkit::repo_root().join(".tools/node_modules/.bin");
    if bin.join("conformance").exists() && bin.join("node").exists() {
        return Some(bin);
    }
    assert!(
        !mcptask_testkit::in_ci(),
        "the conformance suite is required under CI: run scripts/install-conformance"
    );
    eprintln!("SKIPPED ({test}: no conformance tooling) — run scripts/install-conformance");
    None
}

/// Every check of `scenario` against `url` that did not pass.
async fn scenario_problems(bin: &Path, url: &str, scenario: &str) -> Vec<String> {
    let out = tempfile::tempdir().expect("temp dir");
    let path = std::env::join_paths(std::iter::once(bin.to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .expect("PATH");
    let output = tokio::process::Command::new(bin.join("conformance"))
        .args(["server", "--url", url, "--scenario", scenario])
        .args(["--spec-version", "2026-07-28", "--force", "-o"])
        .arg(out.path())
        .env("PATH", path)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .expect("run conformance");
    let mut checks = Vec::new();
    let mut dirs = vec![out.path().to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let p = entry.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.file_name().is_some_and(|n| n == "checks.json") {
                let text = std::fs::read_to_string(&p).expect("checks.json");
                let parsed: Value = serde_json::from_str(&text).expect("checks.json is JSON");
                checks.extend(parsed.as_array().cloned().unwrap_or_default());
            }
        }
    }
    let mut problems: Vec<String> = checks
        .iter()
        .filter(|c| !matches!(c["status"].as_str(), Some("SUCCESS" | "SKIPPED" | "INFO")))
        .map(|c| {
            format!(
                "{scenario}: {} {}: {}",
                c["id"], c["status"], c["errorMessage"]
            )
        })
        .collect();
    if !output.status.success() {
        problems.push(format!(
            "{scenario}: exit status {}\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    problems
}

async fn conformance_on(test: &str, db: &TestDatabase) {
    let Some(bin) = tooling(test) else { return };
    let server = Server::start(&format!("rmcp_task_server on {}", db.backend), &db.url).await;
    assert_passes_the_task_scenarios(&bin, &server, db.backend).await;
}

/// Every check of every task scenario passes against `server`.
pub(crate) async fn assert_passes_the_task_scenarios(bin: &Path, server: &Server, on: &str) {
    let mut problems = Vec::new();
    for scenario in TASK_SCENARIOS {
        problems.extend(scenario_problems(bin, &server.url, scenario).await);
    }
    assert!(
        problems.is_empty(),
        "[{on}] {} problem(s):\n{}\n--- server log ---\n{}",
        problems.len(),
        problems.join("\n"),
        server.process.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taskmanager_example_passes_the_task_scenarios_on_sqlite() {
    let db = TestDatabase::sqlite();
    with_deadline(
        Duration::from_secs(600),
        conformance_on(
            "taskmanager_example_passes_the_task_scenarios_on_sqlite",
            &db,
        ),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taskmanager_example_passes_the_task_scenarios_on_postgres() {
    let Some(db) = TestDatabase::postgres().await else {
        return;
    };
    with_deadline(
        Duration::from_secs(600),
        conformance_on(
            "taskmanager_example_passes_the_task_scenarios_on_postgres",
            &db,
        ),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taskmanager_example_restart_fails_closures_and_reruns_named_tools() {
    with_deadline(Duration::from_secs(180), async {
        let db = TestDatabase::sqlite();
        let mut first = Server::start("rmcp_task_server (first)", &db.url).await;
        let client = first.client().await;
        let closure = client.start_task("slow_sum", json!({"a": 2, "b": 3})).await;
        let named = client
            .start_task("slow_compute", json!({"seconds": 3, "label": "rerun"}))
            .await;
        // Both are committed (CreateTaskResult comes after the commit) and
        // running; the process dies without a word.
        client
            .wait_for(&named, WAIT, |t| t.task.task.status_message.is_some())
            .await;
        client.close().await;
        first.process.kill().await;

        let second = Server::start("rmcp_task_server (restarted)", &db.url).await;
        let client = second.client().await;
        let failed = client.wait_terminal(&closure, WAIT).await;
        assert_eq!(failed.task.status(), TaskStatus::Failed, "{failed:?}");
        let error = mcptask_testkit::mcp::wire(&failed)["error"]["message"].to_string();
        assert!(
            error.contains("interrupted"),
            "the closure task fails honestly: {error}"
        );
        let rerun = client.wait_terminal(&named, WAIT).await;
        assert_eq!(rerun.task.status(), TaskStatus::Completed, "{rerun:?}");
        assert_eq!(result_text(&rerun), "rerun: computed in 3s");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taskmanager_example_replicas_serve_each_others_tasks() {
    let Some(db) = TestDatabase::postgres().await else {
        return;
    };
    with_deadline(Duration::from_secs(180), async {
        let (a, b) = (
            Server::start("rmcp_task_server (replica a)", &db.url).await,
            Server::start("rmcp_task_server (replica b)", &db.url).await,
        );
        let (at_a, at_b) = (a.client().await, b.client().await);
        // Created at a, its work runs at a; read, answered and settled at b.
        let asked = at_a
            .start_task("confirm_delete", json!({"filename": "report.txt"}))
            .await;
        at_b.wait_status(&asked, TaskStatus::InputRequired, WAIT)
            .await;
        at_b.update(
            &asked,
            json!({"confirm_delete": {"action": "accept", "content": {"confirm": true}}}),
        )
        .await
        .expect("tasks/update at b");
        let done = at_b.wait_terminal(&asked, WAIT).await;
        assert_eq!(result_text(&done), "Deleted report.txt");
        // Cancelled at b, the work at a stops: the status says cancelled,
        // and a's log says its work saw the cancellation and returned (the
        // status alone is written by b, whatever a's work does).
        let long = at_a
            .start_task("slow_compute", json!({"seconds": 600, "label": "long"}))
            .await;
        at_a.wait_for(&long, WAIT, |t| t.task.task.status_message.is_some())
            .await;
        at_b.cancel(&long).await.expect("tasks/cancel at b");
        let cancelled = at_b.wait_terminal(&long, WAIT).await;
        assert_eq!(
            cancelled.task.status(),
            TaskStatus::Cancelled,
            "{cancelled:?}"
        );
        assert!(
            a.process
                .logged_within("long: cancelled, the work stopped", WAIT)
                .await,
            "the work at a did not stop; a's log:\n{}",
            a.process.log()
        );
    })
    .await;
}
