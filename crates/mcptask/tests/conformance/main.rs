//! The official MCP conformance suite (`@modelcontextprotocol/conformance`,
//! Node 22) against the demo server: every active task scenario, on SQLite
//! and on PostgreSQL.
//!
//! The tooling lives in `<repo>/.tools` (see `scripts/install-conformance`).
//! Without it the test skips loudly, except under `CI=true`, where it fails.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use mcptask_testkit::{DemoServer, TestDatabase, with_deadline};
use serde_json::Value;

const SCENARIOS: [&str; 9] = [
    "tasks-lifecycle",
    "tasks-capability-negotiation",
    "tasks-wire-fields",
    "tasks-request-state-removal",
    "tasks-mrtr-input",
    "tasks-request-headers",
    "tasks-dispatch-and-envelope",
    "tasks-required-task-error",
    "tasks-mrtr-composition",
];

/// One scenario takes a few seconds; this only catches hangs.
const SCENARIO_LIMIT: Duration = Duration::from_secs(180);

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/mcptask is two levels below the repository root")
        .to_path_buf()
}

/// `<repo>/.tools/node_modules/.bin` when it holds Node 22 and the suite.
fn tooling() -> Result<PathBuf, String> {
    let bin = repo_root().join(".tools/node_modules/.bin");
    let conformance = bin.join("conformance");
    if !conformance.exists() {
        return Err(format!("{} is missing", conformance.display()));
    }
    let node = bin.join("node");
    let version = std::process::Command::new(&node)
        .arg("--version")
        .output()
        .map_err(|e| format!("cannot run {}: {e}", node.display()))?;
    let version = String::from_utf8_lossy(&version.stdout).trim().to_string();
    if !version.starts_with("v22.") {
        return Err(format!("{} is {version:?}, not Node 22", node.display()));
    }
    Ok(bin)
}

/// The tooling, or `None` after a loud SKIPPED line (outside CI).
fn tooling_or_skip(test: &str) -> Option<PathBuf> {
    match tooling() {
        Ok(bin) => Some(bin),
        Err(reason) if in_ci() => {
            panic!(
                "the conformance suite is required under CI: {reason}; run scripts/install-conformance"
            )
        }
        Err(reason) => {
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED ({test}: no conformance tooling): {reason} — run scripts/install-conformance"
            );
            None
        }
    }
}

/// Every `checks.json` under `dir`.
fn checks_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().is_some_and(|n| n == "checks.json") {
                out.push(path);
            }
        }
    }
    out
}

/// `text` without ANSI escape sequences (`ESC [ … letter`).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The `N` of the summary line `Passed: x/y, N failed, …`.
fn failed_in_summary(output: &str) -> Option<u64> {
    let output = strip_ansi(output);
    let line = output
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with("Passed:"))?;
    let (_, after) = line.split_once(',')?;
    after.split_whitespace().next()?.parse().ok()
}

/// Run one scenario against `url`; returns a description of what failed.
async fn run_scenario(bin: &Path, url: &str, scenario: &str) -> Result<String, String> {
    let out_dir = tempfile::tempdir().expect("temp dir");
    let path = std::env::join_paths(std::iter::once(bin.to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .expect("PATH");
    let mut command = tokio::process::Command::new(bin.join("conformance"));
    command
        .args(["server", "--url", url, "--scenario", scenario, "-o"])
        .arg(out_dir.path())
        .env("PATH", path)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let output = match tokio::time::timeout(SCENARIO_LIMIT, command.output()).await {
        Ok(Ok(output)) => output,
        Ok(Err(e)) => return Err(format!("{scenario}: cannot run conformance: {e}")),
        Err(_) => {
            return Err(format!(
                "{scenario}: did not finish within {SCENARIO_LIMIT:?}"
            ));
        }
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let mut problems = Vec::new();
    if !output.status.success() {
        problems.push(format!("exit status {}", output.status));
    }
    match failed_in_summary(&text) {
        Some(0) => {}
        Some(n) => problems.push(format!("{n} failed")),
        None => problems.push("no \"Passed: x/y, N failed\" summary line".into()),
    }
    let files = checks_files(out_dir.path());
    if files.is_empty() {
        problems.push("no checks.json written".into());
    }
    let mut total = 0;
    for file in files {
        let checks: Value =
            serde_json::from_str(&std::fs::read_to_string(&file).unwrap_or_default())
                .unwrap_or_else(|e| panic!("{}: not JSON: {e}", file.display()));
        for check in checks.as_array().into_iter().flatten() {
            total += 1;
            if check["status"] == "FAILURE" {
                problems.push(format!(
                    "check {} failed: {}",
                    check["id"].as_str().unwrap_or("?"),
                    check["errorMessage"].as_str().unwrap_or("")
                ));
            }
        }
    }
    if total == 0 {
        problems.push("checks.json holds no checks".into());
    }
    if problems.is_empty() {
        Ok(format!("{scenario}: {total} checks passed"))
    } else {
        Err(format!(
            "{scenario}: {}\n--- conformance output ---\n{text}",
            problems.join("; ")
        ))
    }
}

async fn run_suite(test: &str, db: &TestDatabase) {
    let Some(bin) = tooling_or_skip(test) else {
        return;
    };
    let server =
        DemoServer::start_named(&format!("demo-server on {}", db.backend), &db.url, &[]).await;
    run_scenarios(&bin, &server.url, db).await;
}

/// The same scenarios through the proxy: conformance → `mcptask serve`'s
/// `/mcp` (the demo server's tools under their own names) → `demo-server`.
/// The front keeps its tasks in `front_db`, the upstream in `db`.
async fn run_suite_through_proxy(test: &str, db: &TestDatabase, front_db: &TestDatabase) {
    let Some(bin) = tooling_or_skip(test) else {
        return;
    };
    let server =
        DemoServer::start_named(&format!("demo-server on {}", db.backend), &db.url, &[]).await;
    let spec = mcptask_testkit::GatewaySpec::open(&front_db.url, &[("demo", &server.url)]);
    let toml = spec
        .toml()
        .replace("name = \"demo\"\n", "name = \"demo\"\nprefix = \"\"\n")
        + "\n[proxy]\nenabled = true\n";
    let gateway =
        mcptask_testkit::Gateway::start_toml(&format!("proxy on {}", db.backend), &toml, &[]).await;
    run_scenarios(&bin, &format!("{}/mcp", gateway.base), db).await;
}

async fn run_scenarios(bin: &Path, url: &str, db: &TestDatabase) {
    let mut failures = Vec::new();
    for scenario in SCENARIOS {
        match run_scenario(bin, url, scenario).await {
            Ok(summary) => eprintln!("[{}] {summary}", db.backend),
            Err(failure) => failures.push(failure),
        }
    }
    assert!(
        failures.is_empty(),
        "[{}] {} of {} conformance scenarios failed:\n\n{}",
        db.backend,
        failures.len(),
        SCENARIOS.len(),
        failures.join("\n\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_task_scenarios_on_sqlite() {
    let db = TestDatabase::sqlite();
    with_deadline(
        Duration::from_secs(900),
        run_suite("conformance_task_scenarios_on_sqlite", &db),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_task_scenarios_on_postgres() {
    if tooling_or_skip("conformance_task_scenarios_on_postgres").is_none() {
        return;
    }
    let Some(db) = TestDatabase::postgres().await else {
        eprintln!("conformance_task_scenarios_on_postgres: SKIPPED (no PostgreSQL, see above)");
        return;
    };
    with_deadline(
        Duration::from_secs(900),
        run_suite("conformance_task_scenarios_on_postgres", &db),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_task_scenarios_through_the_proxy_on_sqlite() {
    let (db, front_db) = (TestDatabase::sqlite(), TestDatabase::sqlite());
    with_deadline(
        Duration::from_secs(900),
        run_suite_through_proxy(
            "conformance_task_scenarios_through_the_proxy_on_sqlite",
            &db,
            &front_db,
        ),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_task_scenarios_through_the_proxy_on_postgres() {
    let test = "conformance_task_scenarios_through_the_proxy_on_postgres";
    if tooling_or_skip(test).is_none() {
        return;
    }
    let (Some(db), Some(front_db)) = (
        TestDatabase::postgres().await,
        TestDatabase::postgres().await,
    ) else {
        eprintln!("{test}: SKIPPED (no PostgreSQL, see above)");
        return;
    };
    with_deadline(
        Duration::from_secs(900),
        run_suite_through_proxy(test, &db, &front_db),
    )
    .await;
}

#[test]
fn summary_line_is_parsed() {
    assert_eq!(
        failed_in_summary("x\nPassed: 9/9, 0 failed, 0 warnings\n"),
        Some(0)
    );
    assert_eq!(
        failed_in_summary("Passed: 7/9, 2 failed, 1 warnings"),
        Some(2)
    );
    assert_eq!(failed_in_summary("no summary"), None);
    assert_eq!(
        failed_in_summary("\u{1b}[32mPassed: 3/3, 0 failed\u{1b}[0m"),
        Some(0)
    );
}
