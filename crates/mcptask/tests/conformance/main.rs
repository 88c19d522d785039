//! The official MCP conformance suite (`@modelcontextprotocol/conformance`,
//! Node 22) against the demo server, on SQLite and on PostgreSQL: the whole
//! 2026-07-28 server requirement set (every scenario it runs, scored or not:
//! the tasks extension and the pending ones too), directly and through the
//! proxy, which must be invisible; its client side (the client
//! requirement set) against mcptask's upstream client ([`client`]); and the
//! npm everything server's 2025-11-25 checks, directly and through the
//! front, compared check by check ([`everything`]).
//!
//! The tooling lives in `<repo>/.tools` (see `scripts/install-conformance`).
//! Without it the test skips loudly, except under `CI=true`, where it fails.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

mod client;
mod everything;

use mcptask_testkit::{DemoServer, TestDatabase, with_deadline};
use serde_json::Value;

/// The revision whose server requirement set the demo server must pass.
const REQUIREMENTS: &str = "2026-07-28";

/// The whole set takes under a minute; this only catches hangs.
const REQUIREMENTS_LIMIT: Duration = Duration::from_secs(600);

/// Check statuses that pass: `SKIPPED` is the suite's own choice (a
/// scenario it has not rewritten yet), `INFO` a note on an optional feature.
/// A `WARNING` (a SHOULD missed) fails like a `FAILURE`.
const PASSING: [&str; 3] = ["SUCCESS", "SKIPPED", "INFO"];

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

/// `PATH` with `bin` (our Node 22) first.
fn path_with(bin: &Path) -> std::ffi::OsString {
    std::env::join_paths(
        std::iter::once(bin.to_path_buf()).chain(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        )),
    )
    .expect("PATH")
}

/// The scenarios `revision`'s requirements file lists for `leg` (`server`
/// or `client`): the scored ones (the `server:` or `client:` list) and the
/// unscored ones run on that leg (`not_scored:` entries with `leg: <leg>`).
/// The file is frozen YAML of that simple shape, read line by line.
fn required_scenarios(yaml: &str, leg: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut section = "";
    let mut pending: Option<String> = None;
    for line in yaml.lines() {
        let content = line.split('#').next().unwrap_or("").trim_end();
        if content.trim().is_empty() {
            continue;
        }
        if !content.starts_with(' ') {
            section = content.trim_end_matches(':');
            pending = None;
            continue;
        }
        let item = content.trim_start();
        if section == leg {
            if let Some(name) = item.strip_prefix("- ") {
                out.push(name.trim().to_string());
            }
        } else if section == "not_scored" {
            if let Some(name) = item.strip_prefix("- scenario:") {
                pending = Some(name.trim().to_string());
            } else if item.strip_prefix("leg:").map(str::trim) == Some(leg) {
                out.extend(pending.take());
            }
        }
    }
    out
}

/// The scenarios [`REQUIREMENTS`] sets for `leg`, from the requirements file
/// of the suite installed beside `bin`: the suite's own list, never one
/// written here.
fn requirement_set(bin: &Path, leg: &str) -> Vec<String> {
    requirement_set_of(bin, REQUIREMENTS, leg)
}

/// The scenarios `revision` sets for `leg`, as [`requirement_set`] reads them.
fn requirement_set_of(bin: &Path, revision: &str, leg: &str) -> Vec<String> {
    let requirements = bin
        .parent()
        .expect("node_modules/.bin has a parent")
        .join(format!(
            "@modelcontextprotocol/conformance/requirements/{revision}.yaml"
        ));
    let yaml = std::fs::read_to_string(&requirements)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", requirements.display()));
    let expected = required_scenarios(&yaml, leg);
    assert!(
        expected.len() > 20,
        "{} lists only {expected:?} for the {leg}: the requirements file was not understood",
        requirements.display()
    );
    expected
}

/// The `M` of the requirement-set summary line `Total: N passed, M failed`.
fn failed_in_total(output: &str) -> Option<u64> {
    let output = strip_ansi(output);
    let line = output
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with("Total:"))?;
    let (_, after) = line.split_once(',')?;
    after.split_whitespace().next()?.parse().ok()
}

/// The scenario among `scenarios` whose results directory is named `name`
/// (`<scenario>-<timestamp>`).
fn scenario_named<'a>(name: &str, scenarios: &'a [String]) -> Option<&'a str> {
    scenarios
        .iter()
        .find(|s| {
            name.strip_prefix(s.as_str())
                .and_then(|rest| rest.strip_prefix('-'))
                .is_some_and(|stamp| stamp.starts_with(|c: char| c.is_ascii_digit()))
        })
        .map(String::as_str)
}

/// The scenario whose results `dir` holds (`server-<scenario>-<timestamp>`),
/// among `scenarios`.
fn scenario_of<'a>(dir: &Path, scenarios: &'a [String]) -> Option<&'a str> {
    let name = dir.file_name()?.to_str()?.strip_prefix("server-")?;
    scenario_named(name, scenarios)
}

/// One check of a run, as its `checks.json` records it.
#[derive(Debug, Clone)]
struct Check {
    scenario: String,
    /// The check's id (a scenario may record one id several times).
    id: String,
    status: String,
    message: String,
}

/// What one run of the suite's server leg said.
struct Run {
    /// Its standard output and error.
    text: String,
    /// Every check of every scenario, in each scenario's order.
    checks: Vec<Check>,
    /// What went wrong with the run itself: its exit status, the summary
    /// line, results of an unexpected scenario, an expected one that did
    /// not run or recorded no check.
    problems: Vec<String>,
    /// How many scenarios it was to run.
    scenarios: usize,
}

/// Run the server requirement set of `revision` against `url`.
async fn run_suite(bin: &Path, url: &str, revision: &str) -> Result<Run, String> {
    let expected = requirement_set_of(bin, revision, "server");
    let out_dir = tempfile::tempdir().expect("temp dir");
    let mut command = tokio::process::Command::new(bin.join("conformance"));
    command
        .args(["server", "--url", url, "--requirements", revision, "-o"])
        .arg(out_dir.path())
        .env("PATH", path_with(bin))
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let output = match tokio::time::timeout(REQUIREMENTS_LIMIT, command.output()).await {
        Ok(Ok(output)) => output,
        Ok(Err(e)) => return Err(format!("cannot run conformance: {e}")),
        Err(_) => return Err(format!("did not finish within {REQUIREMENTS_LIMIT:?}")),
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let mut problems = Vec::new();
    // The exit status covers the scored scenarios only; the checks below cover all.
    if !output.status.success() {
        problems.push(format!("exit status {}", output.status));
    }
    match failed_in_total(&text) {
        Some(0) => {}
        Some(n) => problems.push(format!("the summary counts {n} failed")),
        None => problems.push("no \"Total: N passed, M failed\" summary line".into()),
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut checks = Vec::new();
    let mut files = checks_files(out_dir.path());
    files.sort();
    for file in files {
        let dir = file.parent().expect("checks.json is in a directory");
        let Some(scenario) = scenario_of(dir, &expected) else {
            problems.push(format!(
                "results of an unexpected scenario: {}",
                dir.display()
            ));
            continue;
        };
        seen.insert(scenario);
        let recorded: Value =
            serde_json::from_str(&std::fs::read_to_string(&file).unwrap_or_default())
                .unwrap_or_else(|e| panic!("{}: not JSON: {e}", file.display()));
        let recorded = recorded.as_array().cloned().unwrap_or_default();
        if recorded.is_empty() {
            problems.push(format!("{scenario}: no checks"));
        }
        for check in recorded {
            checks.push(Check {
                scenario: scenario.to_string(),
                id: check["id"].as_str().unwrap_or("?").to_string(),
                status: check["status"]
                    .as_str()
                    .unwrap_or("(no status)")
                    .to_string(),
                message: check["errorMessage"].as_str().unwrap_or("").to_string(),
            });
        }
    }
    for scenario in &expected {
        if !seen.contains(scenario.as_str()) {
            problems.push(format!("{scenario}: did not run (no checks.json)"));
        }
    }
    Ok(Run {
        text,
        checks,
        problems,
        scenarios: expected.len(),
    })
}

/// Run the server requirement set of [`REQUIREMENTS`] against `url`; returns
/// a description of every check that did not pass.
async fn run_requirements(bin: &Path, url: &str) -> Result<String, String> {
    let Run {
        text,
        checks,
        mut problems,
        scenarios,
    } = run_suite(bin, url, REQUIREMENTS).await?;
    let total = checks.len();
    for check in checks {
        if !PASSING.contains(&check.status.as_str()) {
            problems.push(format!(
                "{}: check {} {}: {}",
                check.scenario, check.id, check.status, check.message
            ));
        }
    }
    if problems.is_empty() {
        Ok(format!(
            "{REQUIREMENTS} requirements: {scenarios} scenarios, {total} checks passed"
        ))
    } else {
        Err(format!(
            "{REQUIREMENTS} requirements: {} problem(s):\n  {}\n--- conformance output ---\n{text}",
            problems.len(),
            problems.join("\n  ")
        ))
    }
}

/// The whole requirement set against `demo-server` on `db`.
async fn run_requirements_on(test: &str, db: &TestDatabase) {
    let Some(bin) = tooling_or_skip(test) else {
        return;
    };
    let server =
        DemoServer::start_named(&format!("demo-server on {}", db.backend), &db.url, &[]).await;
    match run_requirements(&bin, &server.url).await {
        Ok(summary) => eprintln!("[{}] {summary}", db.backend),
        Err(failure) => panic!("[{}] {failure}", db.backend),
    }
}

/// The same requirement set through the proxy: conformance → `mcptask
/// serve`'s `/mcp` (the demo server's tools under their own names), or the
/// virtual server `through` selecting all of the demo server's tools,
/// prompts and resources at `/mcp/<through>` → `demo-server`. Every check
/// must pass as it does directly: the front is invisible, and so is a
/// virtual server. The front keeps its tasks in `front_db`, the upstream in
/// `db`.
async fn run_requirements_through_proxy(
    test: &str,
    db: &TestDatabase,
    front_db: &TestDatabase,
    through: Option<&str>,
) {
    let Some(bin) = tooling_or_skip(test) else {
        return;
    };
    let server =
        DemoServer::start_named(&format!("demo-server on {}", db.backend), &db.url, &[]).await;
    let spec = mcptask_testkit::GatewaySpec::open(&front_db.url, &[("demo", &server.url)]);
    let toml = spec
        .toml()
        .replace("name = \"demo\"\n", "name = \"demo\"\nprefix = \"\"\n")
        + "\n[proxy]\nenabled = true\n"
        + &through.map_or(String::new(), |name| {
            format!(
                "\n[[virtual_servers]]\nname = {name:?}\ntools = [\"demo/*\"]\n\
                 prompts = [\"demo/*\"]\nresources = [\"demo/*\"]\n"
            )
        });
    let gateway = mcptask_testkit::GatewayProcess::start_toml(
        &format!("proxy on {}", db.backend),
        &toml,
        &[],
    )
    .await;
    let (url, via) = match through {
        Some(name) => (
            format!("{}/mcp/{name}", gateway.base),
            format!("the virtual server {name}"),
        ),
        None => (format!("{}/mcp", gateway.base), "the proxy".to_string()),
    };
    match run_requirements(&bin, &url).await {
        Ok(summary) => eprintln!("[{} through {via}] {summary}", db.backend),
        Err(failure) => panic!("[{} through {via}] {failure}", db.backend),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_requirements_on_sqlite() {
    let db = TestDatabase::sqlite();
    with_deadline(
        Duration::from_secs(900),
        run_requirements_on("conformance_requirements_on_sqlite", &db),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_requirements_on_postgres() {
    if tooling_or_skip("conformance_requirements_on_postgres").is_none() {
        return;
    }
    let Some(db) = TestDatabase::postgres().await else {
        eprintln!("conformance_requirements_on_postgres: SKIPPED (no PostgreSQL, see above)");
        return;
    };
    with_deadline(
        Duration::from_secs(900),
        run_requirements_on("conformance_requirements_on_postgres", &db),
    )
    .await;
}

/// On SQLite through a virtual server (`/mcp/tasks`, selecting everything
/// the demo server offers); on PostgreSQL through `/mcp` itself: both ways
/// are checked in one run's time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_requirements_through_the_proxy_on_sqlite() {
    let (db, front_db) = (TestDatabase::sqlite(), TestDatabase::sqlite());
    with_deadline(
        Duration::from_secs(900),
        run_requirements_through_proxy(
            "conformance_requirements_through_the_proxy_on_sqlite",
            &db,
            &front_db,
            Some("tasks"),
        ),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_requirements_through_the_proxy_on_postgres() {
    let test = "conformance_requirements_through_the_proxy_on_postgres";
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
        run_requirements_through_proxy(test, &db, &front_db, None),
    )
    .await;
}

#[test]
fn total_line_is_parsed() {
    let output = "=== SUMMARY ===\n✓ tools-list: 4 passed, 0 failed\n\nTotal: 196 passed, 0 failed\n\nNot scored for 2026-07-28: 13 scenario(s) run, 0 failing.";
    assert_eq!(failed_in_total(output), Some(0));
    assert_eq!(failed_in_total("Total: 128 passed, 40 failed"), Some(40));
    assert_eq!(failed_in_total("Passed: 3/3, 0 failed"), None);
}

#[test]
fn requirement_scenarios_are_read_from_the_yaml() {
    let yaml = "# comment\nserver:\n  - server-stateless\n  - caching # scored\n\nclient:\n  - tools_call\n\nnot_scored:\n  - scenario: auth/dpop\n    leg: client\n    reason: extension\n  - scenario: tasks-lifecycle\n    leg: server\n    reason: extension\n    note: >-\n      pending, run for visibility\n";
    assert_eq!(
        required_scenarios(yaml, "server"),
        ["server-stateless", "caching", "tasks-lifecycle"]
    );
    assert_eq!(
        required_scenarios(yaml, "client"),
        ["tools_call", "auth/dpop"]
    );
}

#[test]
fn result_directories_name_their_scenario() {
    let scenarios = [
        "input-required-result-multi-round".to_string(),
        "input-required-result-multiple-input-requests".to_string(),
        "tasks-mrtr-input".to_string(),
    ];
    let of = |d: &str| scenario_of(Path::new(d), &scenarios);
    assert_eq!(
        of("/o/server-input-required-result-multi-round-2026-12-01T15-22-30-100Z"),
        Some("input-required-result-multi-round")
    );
    assert_eq!(
        of("/o/server-input-required-result-multiple-input-requests-2026-12-01T15-22-30-1Z"),
        Some("input-required-result-multiple-input-requests")
    );
    assert_eq!(
        of("/o/server-tasks-mrtr-input-2026-12-01T00-00-00-000Z"),
        Some("tasks-mrtr-input")
    );
    assert_eq!(
        of("/o/server-tasks-mrtr-composition-2026-12-01T00-00-00-000Z"),
        None
    );
}
