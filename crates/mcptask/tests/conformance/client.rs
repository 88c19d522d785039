//! The official MCP conformance suite's CLIENT side against mcptask's
//! upstream client: every client scenario of the 2026-07-28 requirement set,
//! as the suite's requirements file lists it: the scored ones (the `auth/*`
//! ones included) and the unscored ones run beside them (client
//! credentials, DPoP, workload identity federation, enterprise-managed
//! authorization, the schema preservation scenario added after the release),
//! run by `conformance client --requirements 2026-07-28` with `mcptask
//! conformance-client` as the client. The suite's verdict counts (its exit
//! status and its `Total:` line), and every scenario must have run, have no
//! check that fails or warns, and pass at least one check: a scenario whose
//! checks were all skipped proves nothing.
//!
//! The tooling lives in `<repo>/.tools` (see `scripts/install-conformance`).
//! Without it the test skips loudly, except under `CI=true`, where it fails.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

use super::{
    PASSING, REQUIREMENTS, checks_files, failed_in_total, path_with, requirement_set,
    scenario_named, tooling_or_skip,
};

/// The whole pass takes well under a minute; this only catches hangs.
const SUITE_LIMIT: Duration = Duration::from_secs(600);

/// The scenario whose results `dir` holds: its path below `out`
/// (`<scenario>-<timestamp>`, `auth/` scenarios one level down), among
/// `scenarios`.
fn scenario_at<'a>(out: &Path, dir: &Path, scenarios: &'a [String]) -> Option<&'a str> {
    let rel = dir.strip_prefix(out).ok()?.to_str()?.replace('\\', "/");
    scenario_named(&rel, scenarios)
}

/// What is wrong with one scenario's checks: a check that does not pass
/// ([`PASSING`]: FAILURE and WARNING fail), no checks at all, or no check
/// that succeeded (all SKIPPED or INFO: nothing of the client was checked).
fn problems(scenario: &str, checks: &Value) -> Vec<String> {
    let list = checks.as_array().cloned().unwrap_or_default();
    if list.is_empty() {
        return vec![format!("{scenario}: no checks")];
    }
    let mut out = Vec::new();
    for check in &list {
        let status = check["status"].as_str().unwrap_or("(no status)");
        if !PASSING.contains(&status) {
            out.push(format!(
                "{scenario}: check {} is {status}: {} {}",
                check["id"].as_str().unwrap_or("?"),
                check["description"].as_str().unwrap_or(""),
                check["errorMessage"].as_str().unwrap_or("")
            ));
        }
    }
    if !list.iter().any(|c| c["status"] == "SUCCESS") {
        out.push(format!(
            "{scenario}: none of its {} checks succeeded (all skipped or informational)",
            list.len()
        ));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_client_requirements_and_extensions() {
    let Some(bin) = tooling_or_skip("conformance_client_requirements_and_extensions") else {
        return;
    };
    let expected = requirement_set(&bin, "client");
    let out_dir = tempfile::tempdir().expect("temp dir");
    let client = format!("{} conformance-client", env!("CARGO_BIN_EXE_mcptask"));
    let mut command = tokio::process::Command::new(bin.join("conformance"));
    command
        .args([
            "client",
            "--command",
            &client,
            "--requirements",
            REQUIREMENTS,
            // The suite runs every scenario at once, each a client process
            // beside its mock servers; on two shared cores (and unoptimised
            // dependencies) its default 30 s per scenario cut some short.
            "--timeout",
            "120000",
            "-o",
        ])
        .arg(out_dir.path())
        .env("PATH", path_with(&bin))
        .env("NO_COLOR", "1")
        .env("MCPTASK_LOG", "warn")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(SUITE_LIMIT, command.output())
        .await
        .unwrap_or_else(|_| {
            panic!("the conformance client suite did not finish within {SUITE_LIMIT:?}")
        })
        .expect("run conformance");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let mut failures = Vec::new();
    // The exit status covers the scored scenarios only; the checks below cover all.
    if !output.status.success() {
        failures.push(format!("the suite exited with {}", output.status));
    }
    match failed_in_total(&text) {
        Some(0) => {}
        Some(n) => failures.push(format!("the suite's summary counts {n} failed")),
        None => failures.push("no \"Total: N passed, M failed\" summary line".into()),
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut passed = 0;
    for file in checks_files(out_dir.path()) {
        let dir = file.parent().expect("checks.json is in a directory");
        let Some(scenario) = scenario_at(out_dir.path(), dir, &expected) else {
            failures.push(format!(
                "results of an unexpected scenario: {}",
                dir.display()
            ));
            continue;
        };
        seen.insert(scenario);
        let checks: Value =
            serde_json::from_str(&std::fs::read_to_string(&file).unwrap_or_default())
                .unwrap_or_else(|e| panic!("{}: not JSON: {e}", file.display()));
        let wrong = problems(scenario, &checks);
        if wrong.is_empty() {
            passed += 1;
        }
        failures.extend(wrong);
    }
    for scenario in &expected {
        if !seen.contains(scenario.as_str()) {
            failures.push(format!("{scenario}: did not run (no checks.json)"));
        }
    }
    let summary = text
        .lines()
        .skip_while(|l| !l.contains("SUMMARY"))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        failures.is_empty(),
        "{REQUIREMENTS} client requirements: {} problem(s), {passed} of {} scenarios pass:\n{}\n--- suite summary ---\n{summary}",
        failures.len(),
        expected.len(),
        failures.join("\n")
    );
    eprintln!(
        "conformance client: all {passed} scenarios of the {REQUIREMENTS} client requirement set pass (scored and unscored)"
    );
}

#[test]
fn a_scenario_with_only_skipped_checks_fails() {
    let skipped = serde_json::json!([
        {"id": "a", "status": "SKIPPED"},
        {"id": "b", "status": "INFO"}
    ]);
    assert_eq!(
        problems("s", &skipped).len(),
        1,
        "{:?}",
        problems("s", &skipped)
    );
    let passing = serde_json::json!([
        {"id": "a", "status": "SKIPPED"},
        {"id": "b", "status": "SUCCESS"}
    ]);
    assert!(problems("s", &passing).is_empty());
    let warned = serde_json::json!([
        {"id": "a", "status": "SUCCESS"},
        {"id": "b", "status": "WARNING"}
    ]);
    assert_eq!(problems("s", &warned).len(), 1);
    assert_eq!(problems("s", &serde_json::json!([])).len(), 1);
}

#[test]
fn client_result_directories_name_their_scenario() {
    let scenarios = ["auth/dpop".to_string(), "auth/dpop-nonce".to_string()];
    let out = Path::new("/o");
    let of = |d: &str| scenario_at(out, Path::new(d), &scenarios);
    assert_eq!(
        of("/o/auth/dpop-2026-12-01T15-28-43-804Z"),
        Some("auth/dpop")
    );
    assert_eq!(
        of("/o/auth/dpop-nonce-2026-12-01T15-28-43-804Z"),
        Some("auth/dpop-nonce")
    );
    assert_eq!(
        of("/o/auth/metadata-default-2026-12-01T15-28-43-804Z"),
        None
    );
}
