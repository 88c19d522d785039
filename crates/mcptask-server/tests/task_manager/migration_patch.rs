//! The migration guide's changes, applied mechanically: the patch
//! `docs/migrating/rmcp_task_server.patch`, applied with `patch` to the rmcp
//! server `examples/rmcp_task_server_before.rs` (rmcp's in-memory
//! `TaskManager`, `Default` and a sync `new()`, closures handed to `spawn`
//! from a sync helper, stdio and HTTP), gives `examples/rmcp_task_server.rs`
//! byte for byte: the durable server the other modules of this binary build
//! and run (conformance scenarios on both stores, `kill -9` and restart,
//! replicas). The rmcp server passes the same scenarios on rmcp's manager,
//! so the patch starts from a working server. And the guide shows exactly
//! that patch.

use std::path::{Path, PathBuf};
use std::time::Duration;

use mcptask_testkit::with_deadline;

use crate::example::{Server, assert_passes_the_task_scenarios, tooling};

/// How to write the patch again after either example changed.
const REGENERATE: &str = "cd crates/mcptask-server/examples && diff -u \
    --label a/rmcp_task_server.rs --label b/rmcp_task_server.rs \
    rmcp_task_server_before.rs rmcp_task_server.rs > ../../../docs/migrating/rmcp_task_server.patch";

fn repo_file(path: &str) -> PathBuf {
    mcptask_testkit::repo_root().join(path)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

const PATCH: &str = "docs/migrating/rmcp_task_server.patch";
const BEFORE: &str = "crates/mcptask-server/examples/rmcp_task_server_before.rs";
const AFTER: &str = "crates/mcptask-server/examples/rmcp_task_server.rs";
const GUIDE: &str = "docs/MIGRATING-FROM-RMCP-TASKS.md";

#[test]
fn the_guide_patch_turns_the_rmcp_server_into_the_durable_one() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = dir.path().join("rmcp_task_server.rs");
    std::fs::copy(repo_file(BEFORE), &server).expect("copy the rmcp server");
    // No fuzz: every hunk must apply where and as it is written.
    let output = std::process::Command::new("patch")
        .args([
            "--batch",
            "--fuzz=0",
            "--no-backup-if-mismatch",
            "-p1",
            "-d",
        ])
        .arg(dir.path())
        .arg("-i")
        .arg(repo_file(PATCH))
        .output()
        .expect("run patch (install it: the guide tells readers to use it)");
    assert!(
        output.status.success(),
        "{PATCH} does not apply to {BEFORE}: {}{}\nwrite it again: {REGENERATE}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        read(&server) == read(&repo_file(AFTER)),
        "{BEFORE} with {PATCH} applied is not {AFTER}: write the patch again: {REGENERATE}"
    );
}

/// The guide quotes the patch hunk by hunk, each in a ```diff block with
/// its explanation between them: the blocks, in order, are the patch. And
/// the size it states is the patch's.
#[test]
fn the_guide_shows_the_patch_whole() {
    let guide = read(&repo_file(GUIDE));
    let mut shown = String::new();
    let mut lines = guide.lines();
    while let Some(line) = lines.next() {
        if line.trim_end() == "```diff" {
            for quoted in lines.by_ref().take_while(|l| l.trim_end() != "```") {
                shown.push_str(quoted);
                shown.push('\n');
            }
        }
    }
    let patch = read(&repo_file(PATCH));
    assert!(
        shown == patch,
        "the ```diff blocks of {GUIDE} are not {PATCH}; shown:\n{shown}"
    );
    let body: Vec<&str> = patch.lines().skip(2).collect();
    let count = |prefix: &str| body.iter().filter(|l| l.starts_with(prefix)).count();
    let size = format!(
        "{} hunks that remove {} lines and add {}",
        count("@@"),
        count("-"),
        count("+")
    );
    let flowed = guide.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flowed.contains(&size),
        "{GUIDE} does not say the patch is {size}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rmcp_server_before_the_patch_passes_the_task_scenarios() {
    let test = "the_rmcp_server_before_the_patch_passes_the_task_scenarios";
    let Some(bin) = tooling(test) else { return };
    with_deadline(Duration::from_secs(600), async {
        let server =
            Server::start_program("rmcp_task_server_before", "rmcp_task_server_before", &[]).await;
        assert_passes_the_task_scenarios(&bin, &server, "rmcp's in-memory TaskManager").await;
    })
    .await;
}
