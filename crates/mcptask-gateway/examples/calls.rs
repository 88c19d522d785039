//! Two kept calls from Rust, without the `mcptask` binary: a 2025-11-25
//! task (SEP-1686) whose question is answered here, and a plain
//! synchronous tool run as durable work with its progress as status.
//!
//! The upstream is the TypeScript SDK's reference "everything" server over
//! stdio. Run it from a clone after `scripts/install-test-tools`:
//!
//! ```sh
//! cargo run -p mcptask-gateway --example calls
//! ```
//!
//! or point `MCPTASK_NODE` and `MCPTASK_EVERYTHING` (the server's
//! `dist/index.js`) at your own. The test command runs it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use mcptask_client::TaskStatus;
use mcptask_gateway::calls::{CallRequest, Started};
use mcptask_gateway::{Config, Gateway};
use serde_json::json;

fn tool_path(var: &str, default: &str) -> PathBuf {
    std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(default)
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let node = tool_path("MCPTASK_NODE", ".tools/node_modules/.bin/node");
    let server = tool_path(
        "MCPTASK_EVERYTHING",
        ".tools/interop/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
    );
    if !node.exists() || !server.exists() {
        let why = format!(
            "{} or {} is missing: run scripts/install-test-tools",
            node.display(),
            server.display()
        );
        if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") {
            anyhow::bail!("the everything server is required under CI: {why}");
        }
        eprintln!("SKIPPED (example calls): {why}");
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let q = |p: &Path| serde_json::to_string(&p.display().to_string()).expect("a TOML string");
    let config = Config::parse(
        "(example)",
        &format!(
            r#"
            [database]
            url = {db}
            [api]
            auth = "none"
            [tracker]
            poll_default_ms = 200
            poll_min_ms = 100
            [[servers]]
            name = "everything"
            command = {node}
            args = [{server}, "stdio"]
            connect_timeout_ms = 30000
            call_timeout_ms = 60000
            "#,
            db = serde_json::to_string(&format!(
                "sqlite:{}",
                dir.path().join("calls.db").display()
            ))?,
            node = q(&node),
            server = q(&server),
        ),
    )?;
    let gateway = Gateway::start(config).await?;
    let (calls, tracker) = (&gateway.calls, &gateway.tracker);

    // A 2025-11-25 task: kept under one id; its question waits here.
    let Started::Task(research) = calls
        .call(CallRequest {
            server: "everything".into(),
            tool: "simulate-research-query".into(),
            arguments: json!({"topic": "rust", "ambiguous": true}),
            ..Default::default()
        })
        .await?
    else {
        anyhow::bail!("a task-only tool answered synchronously");
    };
    println!("research: {} ({})", research.id, research.driver.as_str());
    let asking = tracker
        .wait_until(&research.id, Duration::from_secs(60), |r| {
            r.status == TaskStatus::InputRequired
        })
        .await?;
    let (key, question) = asking.input_requests.first().cloned().expect("a question");
    println!(
        "  asks [{key}]: {}",
        question["params"]["message"].as_str().unwrap_or("?")
    );
    let answer = json!({"action": "accept", "content": {"interpretation": "technical"}});
    tracker
        .answer(&research.id, BTreeMap::from([(key, answer)]))
        .await?;
    let done = tracker.wait(&research.id, Duration::from_secs(60)).await?;
    println!("  {}", done.status);
    anyhow::ensure!(done.status == TaskStatus::Completed, "{done:?}");

    // A plain synchronous tool, kept as durable work: its progress is the
    // call's status message until it completes.
    let Started::Task(long) = calls
        .call(CallRequest {
            server: "everything".into(),
            tool: "trigger-long-running-operation".into(),
            arguments: json!({"duration": 3, "steps": 3}),
            background: Some(true),
            ..Default::default()
        })
        .await?
    else {
        anyhow::bail!("a background call answered synchronously");
    };
    println!("long: {} ({})", long.id, long.driver.as_str());
    let progressed = tracker
        .wait_until(&long.id, Duration::from_secs(60), |r| {
            r.status_message.is_some() || r.is_terminal()
        })
        .await?;
    println!(
        "  progress: {}",
        progressed.status_message.unwrap_or_default()
    );
    let done = tracker.wait(&long.id, Duration::from_secs(60)).await?;
    println!("  {}", done.status);
    anyhow::ensure!(done.status == TaskStatus::Completed, "{done:?}");

    gateway.shutdown().await;
    Ok(())
}
