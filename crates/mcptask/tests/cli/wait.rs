//! `call --wait` as a person waits on it: the call's id comes first, its
//! questions are asked at a terminal (or printed with the command that
//! answers them), a gateway restart does not lose the call, and every call,
//! synchronous tools included, shows its progress.
//! Real gateway, real upstreams, the binary watched as it runs.

use std::time::Duration;

use mcptask_testkit::*;
use serde_json::Value;

/// The call id in the line the CLI prints before it waits.
async fn announced_id(cli: &mut LiveCli) -> String {
    let rest = cli.wait_for("task rt_").await;
    let tail: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
        .collect();
    format!("rt_{tail}")
}

/// On a terminal, `call --wait` asks the question the call asks while it
/// runs (after printing the call's id), re-asks an answer that does not fit
/// and sends the one that does: the call completes with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_wait_asks_a_running_calls_question_at_a_terminal() {
    with_deadline(Duration::from_secs(240), async {
        let stack = DemoStack::start().await;
        let gateway = &stack.gateway;
        let Some(mut cli) = LiveCli::in_terminal(
            &gateway.base,
            OPERATOR,
            &[
                "call",
                "demo",
                "confirm_delete",
                "--args",
                r#"{"filename": "notes.txt"}"#,
                "--wait",
            ],
        ) else {
            return;
        };
        let id = announced_id(&mut cli).await;
        cli.wait_for("Delete notes.txt?").await;
        cli.wait_for("true or false > ").await;
        let seen = cli.seen();
        assert!(
            seen.find("task rt_") < seen.find("Delete notes.txt?"),
            "the id comes before the wait: {seen}"
        );
        assert!(
            seen.contains(&format!("mcptask tasks show {id} --follow")),
            "{seen}"
        );
        cli.type_line("maybe").await;
        cli.wait_for("that does not fit").await;
        cli.type_line("yes").await;
        let code = cli.exit_code().await;
        let seen = cli.seen();
        assert_eq!(code, Some(0), "{seen}");
        assert!(seen.contains("Deleted notes.txt"), "{seen}");
        let task = gateway.client(Some(OPERATOR)).task(&id).await;
        let answered: Vec<&Value> = task["inputs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|i| i["answered"] == true)
            .collect();
        assert_eq!(answered.len(), 1, "{task:#}");
        assert_eq!(answered[0]["response"]["content"]["confirm"], true);
    })
    .await;
}

/// A question answered elsewhere (`tasks answer` in another shell) while a
/// terminal is asking it: the CLI stops asking, says so, and follows the
/// call to the end that answer gave it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_wait_stops_asking_a_question_answered_elsewhere() {
    with_deadline(Duration::from_secs(240), async {
        let stack = DemoStack::start().await;
        let gateway = &stack.gateway;
        let Some(mut cli) = LiveCli::in_terminal(
            &gateway.base,
            OPERATOR,
            &[
                "call",
                "demo",
                "confirm_delete",
                "--args",
                r#"{"filename": "notes.txt"}"#,
                "--wait",
            ],
        ) else {
            return;
        };
        let id = announced_id(&mut cli).await;
        cli.wait_for("true or false > ").await;
        let elsewhere = run_cli(
            &gateway.base,
            OPERATOR,
            &[
                "tasks",
                "answer",
                &id,
                "confirm_delete",
                r#"{"confirm": false}"#,
            ],
        )
        .await;
        assert!(elsewhere.status.success(), "{elsewhere:?}");
        cli.wait_for("no longer asked").await;
        let code = cli.exit_code().await;
        let seen = cli.seen();
        assert_eq!(code, Some(0), "{seen}");
        assert!(seen.contains("Kept notes.txt"), "{seen}");
    })
    .await;
}

/// Not on a terminal, `call --wait` prints the question with a command that
/// answers it and keeps waiting; that command, pasted into a shell,
/// answers it and the waiting CLI ends with the call's result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_wait_off_a_terminal_prints_the_answer_command_and_keeps_waiting() {
    with_deadline(Duration::from_secs(240), async {
        let stack = DemoStack::start().await;
        let gateway = &stack.gateway;
        let mut cli = LiveCli::piped(
            &gateway.base,
            OPERATOR,
            &[
                "call",
                "demo",
                "confirm_delete",
                "--args",
                r#"{"filename": "notes.txt"}"#,
                "--wait",
            ],
        );
        let id = announced_id(&mut cli).await;
        let rest = cli.wait_for("answer:  ").await;
        let pasted = rest.lines().next().unwrap_or_default().to_string();
        assert!(
            pasted.starts_with(&format!("mcptask tasks answer {id} confirm_delete '")),
            "{pasted}"
        );
        let bin_dir = std::path::Path::new(bin()).parent().unwrap();
        let path = format!(
            "{}:{}",
            bin_dir.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let shell = tokio::process::Command::new("sh")
            .args(["-c", &pasted])
            .env("PATH", path)
            .env("MCPTASK_GATEWAY", &gateway.base)
            .env("MCPTASK_API_TOKEN", OPERATOR)
            .output()
            .await
            .unwrap();
        assert!(shell.status.success(), "{shell:?}");
        let code = cli.exit_code().await;
        assert_eq!(code, Some(0), "{}", cli.seen());
        assert!(cli.stdout().contains("Deleted notes.txt"), "{}", cli.seen());
    })
    .await;
}

/// `call --background --wait` while the gateway is killed and started again
/// on the same port and database: the CLI says it is reconnecting, follows
/// the same call once the gateway is back and ends with its result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_wait_follows_the_same_call_across_a_gateway_restart() {
    with_deadline(Duration::from_secs(300), async {
        let (server_db, gateway_db) = (TestDatabase::sqlite(), TestDatabase::sqlite());
        let server = DemoServer::start(&server_db.url, &[]).await;
        let toml = GatewaySpec::with_tokens(&gateway_db.url, &[("demo", &server.url)])
            .toml()
            .replace(
                "listen = \"127.0.0.1:0\"",
                &format!("listen = \"127.0.0.1:{}\"", free_port()),
            );
        let mut gateway = GatewayProcess::start_toml("gateway", &toml, &[]).await;
        let mut cli = LiveCli::piped(
            &gateway.base,
            OPERATOR,
            &[
                "call",
                "demo",
                "slow_compute",
                "--args",
                r#"{"label": "restarted", "seconds": 4}"#,
                "--background",
                "--wait",
            ],
        );
        let id = announced_id(&mut cli).await;
        cli.wait_for("working").await;
        gateway.kill().await;
        cli.wait_for("reconnecting").await;
        let again = GatewayProcess::start_toml("gateway-again", &toml, &[]).await;
        assert_eq!(again.base, gateway.base, "the same address");
        let code = cli.exit_code().await;
        assert_eq!(code, Some(0), "{}", cli.seen());
        assert!(cli.stderr().contains("reconnected"), "{}", cli.seen());
        assert!(
            cli.stdout().contains("restarted: computed in 4s"),
            "{}",
            cli.seen()
        );
        let task = again.client(Some(OPERATOR)).task(&id).await;
        assert_eq!(task["status"], "completed", "the same call: {task:#}");
    })
    .await;
}

/// `call --wait` of a synchronous tool keeps the call, names it and shows
/// its progress while the tool runs; with `--sync` it waits for the
/// synchronous answer, showing the time it takes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_wait_of_a_synchronous_tool_shows_its_progress() {
    with_deadline(Duration::from_secs(300), async {
        let db = TestDatabase::sqlite();
        let upstream = SyncUpstream::start().await;
        let gateway = GatewayProcess::start(
            "gateway",
            &GatewaySpec::with_tokens(&db.url, &[("plain", &upstream.url)]),
        )
        .await;
        let mut kept = LiveCli::piped(
            &gateway.base,
            OPERATOR,
            &["call", "plain", "held", "--wait"],
        );
        let id = announced_id(&mut kept).await;
        upstream.wait_heard("held", 1).await;
        kept.wait_for(" working (").await;
        upstream.release(1);
        let code = kept.exit_code().await;
        assert_eq!(code, Some(0), "{}", kept.seen());
        let task = gateway.client(Some(OPERATOR)).task(&id).await;
        assert_eq!(
            (&task["driver"], &task["status"]),
            (&serde_json::json!("sync"), &serde_json::json!("completed")),
            "{task:#}"
        );

        let mut sync = LiveCli::piped(
            &gateway.base,
            OPERATOR,
            &["call", "plain", "held", "--wait", "--sync"],
        );
        upstream.wait_heard("held", 2).await;
        sync.wait_for("calling held on plain (").await;
        upstream.release(1);
        let code = sync.exit_code().await;
        assert_eq!(code, Some(0), "{}", sync.seen());
    })
    .await;
}
