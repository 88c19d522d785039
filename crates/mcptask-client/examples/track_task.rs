//! Track a remote task durably: call a task tool through a [`Tracker`],
//! print every event the tracker delivers, and wait for the result.
//!
//! ```sh
//! cargo build --examples
//! cargo run -p mcptask-client --example track_task
//! ```
//!
//! By default the tracker runs the `durable_server` example of
//! `mcptask-server` (built next to this one by `cargo build --examples`) as a
//! stdio child process and calls its `slow_square` tool. Press Ctrl-C while
//! the task runs to request its cancellation: the tracker sends `tasks/cancel`
//! and the task settles as `cancelled` (a second Ctrl-C leaves at once).
//!
//! Any MCP server with task tools works over Streamable HTTP, for example the
//! bundled demo server:
//!
//! ```sh
//! cargo run -p mcptask -- demo-server --http 127.0.0.1:8080 &
//! cargo run -p mcptask-client --example track_task -- \
//!     http://127.0.0.1:8080/mcp slow_compute '{"seconds": 3}'
//! ```
//!
//! The tracker's store is `./track_task.db` (the stdio server keeps its tasks
//! in `./durable_server.db`): the task handle is written there before
//! `call_tool` returns, so a tracker started again on the same file would
//! still follow the task to its end.

use std::time::Duration;

use mcptask_client::{CallOptions, CallOutcome, ServerDef, TaskEvent, TaskStatus, Tracker};
use serde_json::{Value, json};

/// The server to call: `URL [TOOL [ARGUMENTS]]` over Streamable HTTP, or the
/// `durable_server` example over stdio.
fn server_and_call() -> Result<(ServerDef, String, Value), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(url) = args.first() {
        let tool = args.get(1).cloned().unwrap_or_else(|| "slow_square".into());
        let arguments = match args.get(2) {
            Some(text) => serde_json::from_str(text)?,
            None => json!({"n": 12, "seconds": 5}),
        };
        return Ok((ServerDef::http("remote", url), tool, arguments));
    }
    let exe = std::env::current_exe()?
        .with_file_name(format!("durable_server{}", std::env::consts::EXE_SUFFIX));
    if !exe.exists() {
        return Err(format!(
            "{} is missing: build it with `cargo build --examples` (or pass a server URL)",
            exe.display()
        )
        .into());
    }
    let def = ServerDef::stdio("remote", exe.display().to_string(), Vec::new());
    Ok((def, "slow_square".into(), json!({"n": 12, "seconds": 5})))
}

fn print_event(event: &TaskEvent) {
    let message = event.data["statusMessage"].as_str().unwrap_or_default();
    println!(
        "event {:>2}  {:<14} {:<14} {message}",
        event.version,
        event.kind.as_str(),
        event.status.as_str()
    );
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (server, tool, arguments) = server_and_call()?;
    // Opens (creating the file if needed) and migrates the tracker's store.
    let store = mcptask_sql::open("sqlite:track_task.db").await?;
    let tracker = Tracker::builder(store.remote_tasks())
        .server(server)
        .start()
        .await?;
    // Events of every tracked task, delivered at least once each.
    let mut events = tracker.subscribe();

    let task = match tracker
        .call_tool("remote", &tool, arguments, CallOptions::default())
        .await?
    {
        CallOutcome::Completed(result) => {
            println!("{tool} answered at once: {result:?}");
            tracker.shutdown(Duration::from_secs(5)).await;
            return Ok(());
        }
        CallOutcome::Task(task) => task,
    };
    println!(
        "{tool} is task {} (remote id {}), tracked durably",
        task.id, task.remote_task_id
    );

    // Print this task's events until it settles; Ctrl-C requests cancellation.
    let mut cancel_requested = false;
    loop {
        tokio::select! {
            event = events.recv() => match event {
                Ok(event) if event.task_id == task.id => {
                    print_event(&event);
                    if event.status.is_terminal() {
                        break;
                    }
                }
                Ok(_) => {}
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
            },
            _ = tokio::signal::ctrl_c() => {
                if cancel_requested {
                    println!("leaving; the task stays tracked in track_task.db");
                    tracker.shutdown(Duration::from_secs(5)).await;
                    return Ok(());
                }
                println!("cancellation requested (tasks/cancel); Ctrl-C again to leave");
                tracker.cancel(&task.id).await?;
                cancel_requested = true;
            }
        }
    }

    let done = tracker.wait(&task.id, Duration::from_secs(60)).await?;
    println!("{} ended {}", done.id, done.status);
    if let Some(result) = &done.result {
        println!(
            "result: {}",
            result["content"][0]["text"].as_str().unwrap_or("(no text)")
        );
    }
    if let Some(error) = &done.error {
        println!("error: {error}");
    }
    tracker.shutdown(Duration::from_secs(5)).await;
    // A task that did not complete, and whose cancellation nobody asked
    // for, is a failure of the run (the test command runs this example).
    if !cancel_requested && done.status != TaskStatus::Completed {
        return Err(format!("{} ended {}, not completed", done.id, done.status).into());
    }
    Ok(())
}
