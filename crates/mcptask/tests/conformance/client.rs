//! The official MCP conformance suite's CLIENT side against mcptask's
//! upstream client: every scenario the 2026-07-28 revision requires of a
//! client (the `auth/*` ones included), every extension scenario it runs
//! beside them (client credentials, DPoP, workload identity federation,
//! enterprise-managed authorization) and the schema preservation scenario
//! added after the release, run by `conformance client --requirements
//! 2026-07-28` with `mcptask conformance-client` as the client.
//!
//! The tooling lives in `<repo>/.tools` (see `scripts/install-conformance`).
//! Without it the test skips loudly, except under `CI=true`, where it fails.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

use super::tooling_or_skip;

/// What 2026-07-28 requires of a client (`conformance list --client
/// --requirements 2026-07-28`).
const REQUIRED: [&str; 32] = [
    "tools_call",
    "request-metadata",
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/basic-cimd",
    "auth/scope-from-www-authenticate",
    "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined",
    "auth/scope-step-up",
    "auth/scope-retry-limit",
    "auth/token-endpoint-auth-basic",
    "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none",
    "auth/pre-registration",
    "auth/resource-mismatch",
    "auth/offline-access-scope",
    "auth/offline-access-not-supported",
    "auth/authorization-server-migration",
    "auth/iss-supported",
    "auth/iss-not-advertised",
    "auth/iss-supported-missing",
    "auth/iss-wrong-issuer",
    "auth/iss-unexpected",
    "auth/iss-normalized",
    "auth/metadata-issuer-mismatch",
    "sep-2322-client-request-state",
    "http-standard-headers",
    "http-custom-headers",
    "http-invalid-tool-headers",
    "json-schema-ref-no-deref",
];

/// Run in the same pass but not scored by the suite, held to the same bar
/// here: the authorization extensions (client credentials, SEP-1046; DPoP,
/// SEP-1932 / RFC 9449, with and without nonces; workload identity
/// federation, SEP-1933 / RFC 7523; enterprise-managed authorization,
/// SEP-990 / RFC 8693), and the schema preservation scenario added after the
/// release.
const EXTENSIONS: [&str; 7] = [
    "auth/client-credentials-basic",
    "auth/client-credentials-jwt",
    "auth/dpop",
    "auth/dpop-nonce",
    "auth/wif-jwt-bearer",
    "auth/enterprise-managed-authorization",
    "json-schema-2020-12-preservation",
];

/// The whole pass takes well under a minute; this only catches hangs.
const SUITE_LIMIT: Duration = Duration::from_secs(600);

/// Every `checks.json` under `dir`, by scenario name (its directory
/// relative to `dir`, without the run's `-<timestamp>` suffix).
fn checks_by_scenario(dir: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().is_some_and(|n| n == "checks.json") {
                let rel = path
                    .parent()
                    .and_then(|p| p.strip_prefix(dir).ok())
                    .map(|p| p.to_string_lossy().replace('\\', "/"))
                    .unwrap_or_default();
                // "<name>-2026-12-01T15-28-43-804Z": drop the timestamp.
                let name = rel.rsplitn(7, '-').last().unwrap_or(&rel).to_string();
                out.insert(name, path);
            }
        }
    }
    out
}

/// What is wrong with one scenario's checks: FAILURE and WARNING are
/// failures; SUCCESS, INFO and SKIPPED (a path the scenario offers and the
/// client did not need) are not.
fn problems(scenario: &str, checks: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let list = checks.as_array().cloned().unwrap_or_default();
    if list.is_empty() {
        out.push(format!("{scenario}: no checks"));
    }
    for check in list {
        let status = check["status"].as_str().unwrap_or("?");
        if !matches!(status, "SUCCESS" | "INFO" | "SKIPPED") {
            out.push(format!(
                "{scenario}: check {} is {status}: {} {}",
                check["id"].as_str().unwrap_or("?"),
                check["description"].as_str().unwrap_or(""),
                check["errorMessage"].as_str().unwrap_or("")
            ));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_client_requirements_and_extensions() {
    let Some(bin) = tooling_or_skip("conformance_client_requirements_and_extensions") else {
        return;
    };
    let out_dir = tempfile::tempdir().expect("temp dir");
    let path = std::env::join_paths(std::iter::once(bin.clone()).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .expect("PATH");
    let client = format!("{} conformance-client", env!("CARGO_BIN_EXE_mcptask"));
    let mut command = tokio::process::Command::new(bin.join("conformance"));
    command
        .args([
            "client",
            "--command",
            &client,
            "--requirements",
            "2026-07-28",
            // The suite runs every scenario at once, each a client process
            // beside its mock servers; on two shared cores (and unoptimised
            // dependencies) its default 30 s per scenario cut some short.
            "--timeout",
            "120000",
            "-o",
        ])
        .arg(out_dir.path())
        .env("PATH", path)
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
    let found = checks_by_scenario(out_dir.path());
    let mut failures = Vec::new();
    let mut passed = 0;
    for scenario in REQUIRED.iter().chain(EXTENSIONS.iter()) {
        let Some(file) = found.get(*scenario) else {
            failures.push(format!("{scenario}: not run (no checks.json)"));
            continue;
        };
        let checks: Value =
            serde_json::from_str(&std::fs::read_to_string(file).unwrap_or_default())
                .unwrap_or_else(|e| panic!("{}: not JSON: {e}", file.display()));
        let wrong = problems(scenario, &checks);
        if wrong.is_empty() {
            passed += 1;
        }
        failures.extend(wrong);
    }
    let summary = text
        .lines()
        .skip_while(|l| !l.contains("SUITE SUMMARY"))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        failures.is_empty(),
        "{} of {} client scenarios failed:\n{}\n--- suite summary ---\n{summary}",
        REQUIRED.len() + EXTENSIONS.len() - passed,
        REQUIRED.len() + EXTENSIONS.len(),
        failures.join("\n")
    );
    eprintln!(
        "conformance client: all {passed} scenarios pass ({} required by 2026-07-28, {} more: the authorization extensions, schema preservation)",
        REQUIRED.len(),
        EXTENSIONS.len()
    );
}
