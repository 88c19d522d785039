//! The 2025-11-25 server requirement set against a server nobody here
//! wrote, the npm "everything" server over Streamable HTTP, directly and
//! through the front (configured with `prefix = ""`, so the names are the
//! server's own). The server is no conformance fixture (it lacks the
//! suite's test tools, prompts and resources, so many checks fail
//! directly); what is asserted is the comparison, check by check: every
//! check that passes directly passes through the front with the same
//! status. The checks the front passes where the server does not (it
//! refuses a forged `Host`, answers 404 for an ended session) are its own.
//!
//! The server comes from `scripts/install-test-tools`; without it (or the
//! suite) the test skips loudly, except under `CI=true`, where it fails.

use std::collections::BTreeMap;
use std::time::Duration;

use mcptask_testkit::{
    Everything, GatewayProcess, GatewaySpec, TestDatabase, free_port, with_deadline,
};

use super::{Check, PASSING, run_suite, tooling_or_skip};

/// The revision whose server scenarios are compared.
const REVISION: &str = "2025-11-25";

/// A check's name in a run: its scenario, its id, and which of that
/// scenario's checks of that id it is (a scenario may record one id
/// several times, e.g. each SSE event it read).
type Name = (String, String, usize);

/// Each check of `checks` by its name.
fn by_name(checks: &[Check]) -> BTreeMap<Name, &Check> {
    let mut seen: BTreeMap<(String, String), usize> = BTreeMap::new();
    let mut out = BTreeMap::new();
    for check in checks {
        let n = seen
            .entry((check.scenario.clone(), check.id.clone()))
            .or_default();
        out.insert((check.scenario.clone(), check.id.clone(), *n), check);
        *n += 1;
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_everything_server_passes_through_the_front_every_check_it_passes_directly() {
    let test = "the_everything_server_passes_through_the_front_every_check_it_passes_directly";
    let Some(bin) = tooling_or_skip(test) else {
        return;
    };
    let Some(everything) = Everything::or_skip(test) else {
        return;
    };
    let front_db = TestDatabase::sqlite();
    with_deadline(Duration::from_secs(600), async {
        let (_server, url) = everything.start_http("everything", free_port()).await;
        let toml = GatewaySpec::open(&front_db.url, &[("everything", &url)])
            .toml()
            .replace(
                "name = \"everything\"\n",
                "name = \"everything\"\nprefix = \"\"\n",
            )
            + "\n[proxy]\nenabled = true\n";
        let gateway =
            GatewayProcess::start_toml("proxy before the everything server", &toml, &[]).await;
        let direct = run_suite(&bin, &url, REVISION)
            .await
            .unwrap_or_else(|e| panic!("directly: {e}"));
        let through = run_suite(&bin, &format!("{}/mcp", gateway.base), REVISION)
            .await
            .unwrap_or_else(|e| panic!("through the front: {e}"));
        let through_names = by_name(&through.checks);
        let mut compared = Vec::new();
        let mut differ = Vec::new();
        for (name, check) in by_name(&direct.checks) {
            if !PASSING.contains(&check.status.as_str()) {
                continue;
            }
            let (scenario, id, n) = &name;
            match through_names.get(&name) {
                Some(front) if front.status == check.status => {
                    compared.push(format!("{scenario}: {id}#{n} {}", check.status));
                }
                Some(front) => differ.push(format!(
                    "{scenario}: {id}#{n} {} directly, {} through the front: {}",
                    check.status, front.status, front.message
                )),
                None => differ.push(format!(
                    "{scenario}: {id}#{n} {} directly, not run through the front",
                    check.status
                )),
            }
        }
        assert!(
            differ.is_empty(),
            "{} check(s) passing directly differ through the front:\n  {}\n\
             --- directly ---\n{}\n--- through the front ---\n{}",
            differ.len(),
            differ.join("\n  "),
            direct.text,
            through.text
        );
        // A run that compared nothing proves nothing.
        assert!(
            compared.len() > 20,
            "only {} checks pass directly: {compared:?}\n{}",
            compared.len(),
            direct.text
        );
        eprintln!(
            "{REVISION}: {} of the everything server's checks pass directly and through the front alike:\n  {}",
            compared.len(),
            compared.join("\n  ")
        );
    })
    .await;
}
