//! `mcptask demo`: the demo server and the gateway in one process on the
//! embedded SQLite file, three tasks run end to end, then the dashboard.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, bail};

use crate::cli::output::outln;
use mcptask_client::{CallOptions, CallOutcome, RemoteTaskRecord, TaskStatus, Tracker};
use mcptask_gateway::{Config, Gateway};
use serde_json::json;
use tokio_util::sync::CancellationToken;

pub struct DemoArgs {
    pub database_url: String,
    pub listen: SocketAddr,
    pub once: bool,
}

fn step(n: usize, text: &str) {
    outln!("[{n}/3] {text}");
}

async fn settle(tracker: &Tracker, id: &str) -> anyhow::Result<RemoteTaskRecord> {
    tracker
        .wait(id, Duration::from_secs(60))
        .await
        .with_context(|| format!("task {id} did not settle within a minute"))
}

async fn start_task(
    tracker: &Tracker,
    tool: &str,
    args: serde_json::Value,
) -> anyhow::Result<RemoteTaskRecord> {
    let options = CallOptions {
        conversation: Some("demo".into()),
        ..Default::default()
    };
    match tracker.call_tool("demo", tool, args, options).await? {
        CallOutcome::Task(t) => Ok(*t),
        CallOutcome::Completed(_) => {
            bail!("{tool} completed without a task: is the tasks extension declared?")
        }
    }
}

fn result_text(r: &RemoteTaskRecord) -> String {
    r.result
        .as_ref()
        .and_then(|v| v["content"][0]["text"].as_str())
        .unwrap_or("")
        .to_string()
}

pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    // The error names the (redacted) URL, the cause and the fix already.
    let store = mcptask_sql::open(&args.database_url).await?;
    let stop = CancellationToken::new();

    // The MCP server with durable tasks, on a free loopback port.
    let server_options = mcptask_demo::DemoServerOptions::new(args.database_url.clone());
    let runtime =
        mcptask_server::TaskRuntime::builder(store.server_tasks(), mcptask_demo::tools::registry())
            .start()
            .await
            .context("starting the demo server runtime")?;
    let mcp_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let mcp_url = format!("http://{}/mcp", mcp_listener.local_addr()?);
    let mcp_app = mcptask_demo::router(runtime.clone(), &server_options, stop.clone());
    tokio::spawn({
        let stop = stop.clone();
        async move {
            mcptask_gateway::serve::serve(mcp_listener, mcp_app, stop.cancelled()).await;
        }
    });

    // The gateway: tracker + API + dashboard, with a fresh token.
    let token = mcptask_core::ids::new_task_id();
    let config = Config::parse(
        "(demo)",
        &format!(
            "[api]\nlisten = \"{}\"\n[[api.tokens]]\ntoken = \"{token}\"\n\n[[servers]]\nname = \"demo\"\nurl = \"{mcp_url}\"\n",
            args.listen
        ),
    )?;
    let gw = Gateway::start_with_store(config, store.clone()).await?;
    let listener = match tokio::net::TcpListener::bind(args.listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("{} is busy ({e}); using a free port instead", args.listen);
            tokio::net::TcpListener::bind("127.0.0.1:0").await?
        }
    };
    let api_addr = listener.local_addr()?;
    let handle = mcptask_gateway::metrics::install().ok();
    gw.spawn_metric_gauges(Duration::from_secs(5));
    tokio::spawn({
        let gw = gw.clone();
        async move {
            let _ = gw.serve(listener, handle).await;
        }
    });
    let dashboard = format!("http://{api_addr}/#token={token}");
    outln!(
        "mcptask demo — durable MCP tasks on {}",
        mcptask_sql::redact(&args.database_url)
    );
    outln!("  demo MCP server: {mcp_url}");
    // With --once the dashboard goes away with the process: printing its URL
    // would hand out a link that is dead by the time anyone opens it.
    if args.once {
        outln!("  dashboard:       not kept with --once (`mcptask demo` serves it)");
    } else {
        outln!("  dashboard:       {dashboard}");
    }
    outln!();

    let tracker = &gw.tracker;
    let outcome = async {
        let report = start_task(
            tracker,
            "slow_compute",
            json!({"seconds": 3, "label": "quarterly report"}),
        )
        .await?;
        step(
            1,
            &format!(
                "slow_compute started as task {} (the handle is durable before the call returns)",
                report.id
            ),
        );
        let question = start_task(
            tracker,
            "confirm_delete",
            json!({"filename": "old-report.txt"}),
        )
        .await?;
        step(
            2,
            &format!("confirm_delete started as task {}", question.id),
        );
        let doomed = start_task(tracker, "countdown", json!({"seconds": 600})).await?;
        step(3, &format!("countdown started as task {}", doomed.id));

        let asked = tracker
            .wait_until(&question.id, Duration::from_secs(60), |r| {
                r.status == TaskStatus::InputRequired
            })
            .await?;
        let (key, request) = asked
            .input_requests
            .first()
            .cloned()
            .context("the task asked nothing")?;
        step(
            2,
            &format!(
                "the server asks [{key}]: {}",
                request["params"]["message"].as_str().unwrap_or("?")
            ),
        );
        tracker
            .answer(
                &question.id,
                BTreeMap::from([(
                    key.clone(),
                    json!({"action": "accept", "content": {"confirm": true}}),
                )]),
            )
            .await?;
        step(2, "answered \"yes\" through the tracker (tasks/update)");

        tokio::time::sleep(Duration::from_millis(500)).await;
        tracker.cancel(&doomed.id).await?;
        step(3, "cancellation requested (tasks/cancel)");

        let r1 = settle(tracker, &report.id).await?;
        step(1, &format!("{}: {}", r1.status, result_text(&r1)));
        let r2 = settle(tracker, &question.id).await?;
        step(2, &format!("{}: {}", r2.status, result_text(&r2)));
        let r3 = settle(tracker, &doomed.id).await?;
        step(
            3,
            &format!(
                "{}{}",
                r3.status,
                r3.status_message
                    .as_deref()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            ),
        );
        let expected = [
            (r1.status, TaskStatus::Completed),
            (r2.status, TaskStatus::Completed),
            (r3.status, TaskStatus::Cancelled),
        ];
        if expected.iter().any(|(got, want)| got != want) {
            bail!("the demo tasks did not end as expected: {expected:?}");
        }
        anyhow::Ok(())
    }
    .await;

    match &outcome {
        Ok(()) => {
            outln!();
            if args.once {
                outln!(
                    "All three tasks settled. They stay in {}; `mcptask demo` (without --once) shows every step on the dashboard.",
                    mcptask_sql::redact(&args.database_url)
                );
            } else {
                outln!("All three tasks settled. Every step is in the timeline of each task:");
                outln!("  {dashboard}");
            }
        }
        Err(e) => eprintln!("demo failed: {e:#}"),
    }
    if !args.once && outcome.is_ok() {
        outln!(
            "Serving until Ctrl-C (try: mcptask call demo countdown --args '{{\"seconds\": 20}}' --wait --token {token} --gateway http://{api_addr})"
        );
        crate::wiring::shutdown_signal().await;
    }
    stop.cancel();
    runtime.shutdown(Duration::from_secs(5)).await;
    gw.shutdown().await;
    outcome
}
