//! The command line as a user meets it: the binary run the way a shell runs
//! it, with what a user's environment commonly holds.

use std::process::{Command, Stdio};
use std::time::Duration;

use mcptask_testkit::*;
use serde_json::json;

/// `mcptask ARGS…` against a gateway as a user's shell would run it.
fn mcptask(gateway: &str, token: &str, args: &[&str]) -> std::process::Output {
    Command::new(bin())
        .args(args)
        .env("MCPTASK_GATEWAY", gateway)
        .env("MCPTASK_API_TOKEN", token)
        .env("MCPTASK_LOG", "warn")
        .output()
        .expect("run mcptask")
}

/// `mcptask … | head -1` where `head` has already exited: the pipe's reader
/// is gone before the first write. `println!` would panic (exit 101); the
/// command must end quietly with 0.
#[test]
fn a_closed_stdout_pipe_ends_quietly_with_exit_zero() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("m.db").display());
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(bin())
        .args(["migrate", "--database-url", &url])
        .env("MCPTASK_LOG", "warn")
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// Ordinary errors print the message and its causes, never a stack trace,
/// even in a shell that exports `RUST_BACKTRACE=1`.
#[test]
fn errors_print_their_cause_and_no_backtrace_even_with_rust_backtrace() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nowhere.toml");
    let out = Command::new(bin())
        .arg("serve")
        .arg("--config")
        .arg(&missing)
        .env("RUST_BACKTRACE", "1")
        .env("MCPTASK_LOG", "warn")
        .env_remove("MCPTASK_CONFIG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert!(
        stderr.starts_with("error: ") && stderr.contains("nowhere.toml"),
        "the message names the file: {stderr}"
    );
    assert!(stderr.contains("fix:"), "and a fix: {stderr}");
    assert!(
        !stderr.to_lowercase().contains("backtrace") && stderr.lines().count() < 8,
        "no stack trace: {stderr}"
    );
}

/// Exit codes, as the README documents them: 0 done / completed, 1 the
/// command failed, 3 the waited-for task failed, 4 it was cancelled;
/// inspecting (`tasks show` without `--follow`) exits 0 whatever the status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_tell_a_failed_task_from_a_cancelled_one_and_inspecting_exits_zero() {
    with_deadline(Duration::from_secs(240), async {
        let (server_db, gateway_db) = (TestDatabase::sqlite(), TestDatabase::sqlite());
        let server = DemoServer::start(&server_db.url, &[]).await;
        // (sqlx's query lines: something is sure to be logged at start.)
        let gateway = GatewayProcess::start_with_env(
            "gateway",
            &GatewaySpec::with_tokens(&gateway_db.url, &[("demo", &server.url)]),
            &[("MCPTASK_LOG", "warn,sqlx::query=debug")],
        )
        .await;
        let api = gateway.client(Some(OPERATOR));
        let base = gateway.base.clone();
        let run = move |args: Vec<String>| {
            let base = base.clone();
            async move {
                tokio::task::spawn_blocking(move || {
                    let args: Vec<&str> = args.iter().map(String::as_str).collect();
                    mcptask(&base, OPERATOR, &args)
                })
                .await
                .unwrap()
            }
        };
        let code = |o: &std::process::Output| o.status.code();
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();

        let ok = run(args(&[
            "call",
            "demo",
            "slow_compute",
            "--args",
            r#"{"seconds": 0}"#,
            "--wait",
        ]))
        .await;
        assert_eq!(code(&ok), Some(0), "{ok:?}");

        let failed = run(args(&[
            "call",
            "demo",
            "failing_job",
            "--args",
            "{}",
            "--wait",
        ]))
        .await;
        assert_eq!(code(&failed), Some(3), "a failed task exits 3: {failed:?}");

        let slow = api
            .start_task("slow_compute", json!({"seconds": 120}))
            .await;
        let id = slow["id"].as_str().unwrap().to_string();

        // Waiting stops at --timeout (5) or Ctrl-C (130); both say the task goes on.
        let timed_out = run(args(&["tasks", "show", &id, "--follow", "--timeout", "1"])).await;
        assert_eq!(code(&timed_out), Some(5), "{timed_out:?}");
        let said = String::from_utf8_lossy(&timed_out.stderr);
        assert!(
            said.contains("goes on") && said.contains("--follow"),
            "{said}"
        );
        let mut follower = tokio::process::Command::new(bin())
            .args(["tasks", "show", &id, "--wait"])
            .env("MCPTASK_GATEWAY", &gateway.base)
            .env("MCPTASK_API_TOKEN", OPERATOR)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(
            follower.stderr.take().unwrap(),
        ));
        let first = lines.next_line().await.unwrap().unwrap_or_default();
        assert!(first.contains("working"), "a progress line first: {first}");
        let pid = follower.id().unwrap().to_string();
        assert!(
            Command::new("kill")
                .args(["-INT", &pid])
                .status()
                .unwrap()
                .success()
        );
        let status = follower.wait().await.unwrap();
        let mut rest = String::new();
        while let Ok(Some(line)) = lines.next_line().await {
            rest.push_str(&line);
            rest.push('\n');
        }
        assert_eq!(status.code(), Some(130), "{rest}");
        assert!(
            rest.contains("interrupted") && rest.contains("goes on"),
            "{rest}"
        );
        assert_eq!(api.task(&id).await["status"], "working", "the task went on");

        let cancel = run(args(&["tasks", "cancel", &id])).await;
        assert_eq!(code(&cancel), Some(0), "{cancel:?}");
        api.wait_task(&id, "cancelled", |t| t["status"] == "cancelled")
            .await;
        let follow = run(args(&["tasks", "show", &id, "--follow"])).await;
        assert_eq!(
            code(&follow),
            Some(4),
            "a cancelled task exits 4: {follow:?}"
        );
        let show = run(args(&["tasks", "show", &id])).await;
        assert_eq!(code(&show), Some(0), "inspecting exits 0: {show:?}");
        let again = run(args(&["tasks", "cancel", &id])).await;
        assert_eq!(code(&again), Some(0), "{again:?}");
        let said = String::from_utf8_lossy(&again.stderr);
        assert!(said.contains("already cancelled"), "{said}");

        let unknown = run(args(&["tasks", "show", "rt_nope"])).await;
        assert_eq!(
            code(&unknown),
            Some(1),
            "a command that fails exits 1: {unknown:?}"
        );
        let usage = run(args(&["tasks", "show"])).await;
        assert_eq!(code(&usage), Some(2), "usage errors exit 2: {usage:?}");
        // Filter values are encoded: `&` in a server name is part of the name.
        let odd = run(args(&["tasks", "list", "--server", "no such&server=x"])).await;
        assert_eq!(code(&odd), Some(0), "{odd:?}");
        assert!(
            String::from_utf8_lossy(&odd.stderr).contains("no tasks"),
            "{odd:?}"
        );
        let bogus = run(args(&["tasks", "list", "--status", "bogus"])).await;
        assert_eq!(code(&bogus), Some(2), "{bogus:?}");
        let said = String::from_utf8_lossy(&bogus.stderr);
        assert!(
            said.contains("input_required") && said.contains("cancelled"),
            "the valid statuses are listed: {said}"
        );
        let port = gateway.base.trim_start_matches("http://").to_string();
        let schemeless = run(args(&["tasks", "list", "--gateway", &port])).await;
        assert_eq!(code(&schemeless), Some(1), "{schemeless:?}");
        let said = String::from_utf8_lossy(&schemeless.stderr);
        assert!(
            said.contains("not an http(s) URL") && said.contains(&format!("http://{port}")),
            "{said}"
        );

        // A log that is not a terminal carries no colour codes.
        let log = gateway.log();
        assert!(
            log.contains("sqlx::query") && !log.contains('\u{1b}'),
            "{log}"
        );
        let help = run(args(&["--help"])).await;
        assert!(
            String::from_utf8_lossy(&help.stdout).contains("MCPTASK_LOG"),
            "{help:?}"
        );
    })
    .await;
}

/// The first run: `config init` writes a configuration `config check`
/// accepts (and `serve` runs), never over an existing file; completion
/// scripts come out for the common shells.
#[test]
fn config_init_writes_a_valid_file_once_and_completions_generate() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mcptask.toml");
    let run = |args: &[&str]| {
        Command::new(bin())
            .args(args)
            .current_dir(dir.path())
            // Installed, as the template's stdio demo server (probed by `config check`) expects.
            .env("PATH", path_with_bin())
            .env("MCPTASK_LOG", "warn")
            .env_remove("MCPTASK_CONFIG")
            .env_remove("MCPTASK_OPERATOR_TOKEN")
            .output()
            .unwrap()
    };
    let init = run(&["config", "init", "--output", "mcptask.toml"]);
    assert_eq!(init.status.code(), Some(0), "{init:?}");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("[[api.tokens]]"), "{text}");
    // It holds the operator token, the key file the sealing key: owner only.
    let mode = |p: &std::path::Path| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    };
    assert_eq!(mode(&path), 0o600, "mcptask.toml");
    assert_eq!(
        mode(&dir.path().join("mcptask-secret.key")),
        0o600,
        "the key file"
    );
    let check = run(&["config", "check"]);
    assert_eq!(check.status.code(), Some(0), "{check:?}");
    let summary = String::from_utf8_lossy(&check.stdout);
    assert!(
        summary.contains("valid") && summary.contains("1 operator token"),
        "{summary}"
    );

    let again = run(&["config", "init", "--output", "mcptask.toml"]);
    assert_eq!(again.status.code(), Some(1), "{again:?}");
    assert!(String::from_utf8_lossy(&again.stderr).contains("--force"));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text, "untouched");
    // Replaced with --force over a world-readable file: private again.
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let forced = run(&["config", "init", "--output", "mcptask.toml", "--force"]);
    assert_eq!(forced.status.code(), Some(0), "{forced:?}");
    assert_eq!(mode(&path), 0o600, "mcptask.toml after --force");

    std::fs::write(&path, text.replace("auth = \"token\"", "auth = \"tokens\"")).unwrap();
    let bad = run(&["config", "check"]);
    assert_eq!(bad.status.code(), Some(1), "{bad:?}");
    let said = String::from_utf8_lossy(&bad.stderr);
    assert!(
        said.contains("mcptask.toml:") && said.contains("fix:"),
        "{said}"
    );

    for shell in ["bash", "zsh", "fish"] {
        let script = run(&["completions", shell]);
        assert_eq!(script.status.code(), Some(0), "{shell}: {script:?}");
        let text = String::from_utf8_lossy(&script.stdout);
        assert!(
            text.contains("mcptask") && text.contains("completions") && text.len() > 1000,
            "{shell}: {text}"
        );
    }
}

/// `serve` says in its log when a server starts failing and when it is
/// back, once per change: an operator tailing the log sees an outage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_logs_when_a_server_degrades_and_recovers() {
    with_deadline(Duration::from_secs(240), async {
        let (server_db, gateway_db) = (TestDatabase::sqlite(), TestDatabase::sqlite());
        // A free port where nothing listens yet.
        let addr = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().to_string()
        };
        let url = format!("http://{addr}/mcp");
        let gateway = GatewayProcess::start_with_env(
            "gateway",
            &GatewaySpec::open(&gateway_db.url, &[("demo", &url)]),
            &[("MCPTASK_LOG", "warn")],
        )
        .await;
        let api = gateway.client(None);
        let call = json!({"server": "demo", "tool": "slow_compute", "arguments": {"seconds": 0}});
        let down = api.post("/api/v1/calls", &call).await;
        assert!(down.status >= 500, "{down:?}");
        let _ = api.post("/api/v1/calls", &call).await;
        let _server = DemoServer::start_at("server", &addr, &server_db.url, &[]).await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            if api.post("/api/v1/calls", &call).await.status < 300 {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the server never came back"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let log = gateway.log();
        assert_eq!(
            log.matches("server degraded").count(),
            1,
            "once per change: {log}"
        );
        assert!(log.contains("server recovered"), "{log}");
        assert!(log.contains("demo"), "names the server: {log}");
    })
    .await;
}

/// `serve --listen/--database-url` win over the environment, which wins over
/// the file: one precedence, as `demo` and `migrate` take the same flags.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_flags_override_the_environment_and_the_file() {
    with_deadline(Duration::from_secs(120), async {
        let dir = tempfile::tempdir().unwrap();
        let (file_db, env_db, flag_db) = (
            dir.path().join("file.db"),
            dir.path().join("env.db"),
            dir.path().join("flag.db"),
        );
        let config = dir.path().join("mcptask.toml");
        std::fs::write(
            &config,
            format!(
                "[database]\nurl = \"sqlite:{}\"\n[api]\nlisten = \"127.0.0.1:1\"\nauth = \"none\"\n",
                file_db.display()
            ),
        )
        .unwrap();
        let port = free_port();
        let mut command = serve_command(&config);
        command
            .env("MCPTASK_DATABASE_URL", format!("sqlite:{}", env_db.display()))
            .env("MCPTASK_LISTEN", "127.0.0.1:2")
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--database-url")
            .arg(format!("sqlite:{}", flag_db.display()));
        let (_serve, url) =
            LoggedChild::spawn("serve", command, GATEWAY_LISTENING, Duration::from_secs(60))
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(url.trim_end_matches('/'), format!("http://127.0.0.1:{port}"));
        assert!(flag_db.exists(), "the flag's database is used");
        assert!(!env_db.exists() && !file_db.exists(), "and no other");
    })
    .await;
}

/// `tasks list` pages by cursor (a hint names the next page), `--all` walks
/// every page, rows show age and principal, and `--json` works on `call`,
/// `cancel`, `tasks list --all` and `dead-letters redrive`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_list_pages_and_every_acting_command_speaks_json() {
    with_deadline(Duration::from_secs(240), async {
        let stack = DemoStack::start().await;
        let gateway = &stack.gateway;
        let alice = gateway.client(Some(ALICE));
        let mut ids = Vec::new();
        for _ in 0..5 {
            let t = alice
                .start_task("slow_compute", json!({"seconds": 120}))
                .await;
            ids.push(t["id"].as_str().unwrap().to_string());
        }
        let base = gateway.base.clone();
        let run = |args: &[&str]| {
            let (base, args) = (
                base.clone(),
                args.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            );
            async move {
                tokio::task::spawn_blocking(move || {
                    let args: Vec<&str> = args.iter().map(String::as_str).collect();
                    mcptask(&base, OPERATOR, &args)
                })
                .await
                .unwrap()
            }
        };
        let rows = |o: &std::process::Output| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .skip(1)
                .map(|l| l.split_whitespace().next().unwrap_or("").to_string())
                .collect::<Vec<_>>()
        };

        let first = run(&["tasks", "list", "--limit", "2"]).await;
        assert_eq!(first.status.code(), Some(0), "{first:?}");
        let stdout = String::from_utf8_lossy(&first.stdout);
        let header = stdout.lines().next().unwrap_or("");
        assert!(
            header.contains("AGE") && header.contains("PRINCIPAL"),
            "{stdout}"
        );
        assert!(
            stdout.lines().nth(1).unwrap_or("").contains("alice"),
            "the principal column names alice: {stdout}"
        );
        let hint = String::from_utf8_lossy(&first.stderr);
        let cursor = hint
            .split("--cursor ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("a hint names the next page: {hint}"))
            .to_string();
        let second = run(&["tasks", "list", "--limit", "2", "--cursor", &cursor]).await;
        let (page1, page2) = (rows(&first), rows(&second));
        assert_eq!((page1.len(), page2.len()), (2, 2), "{second:?}");
        assert!(
            page1.iter().all(|id| !page2.contains(id)),
            "pages do not overlap"
        );

        let all = run(&["tasks", "list", "--limit", "2", "--all"]).await;
        let mut listed = rows(&all);
        listed.sort();
        let mut expected = ids.clone();
        expected.sort();
        assert_eq!(listed, expected, "--all walks every page: {all:?}");
        let all_json = run(&["tasks", "list", "--limit", "2", "--all", "--json"]).await;
        let v: serde_json::Value = serde_json::from_slice(&all_json.stdout).unwrap();
        assert_eq!(v["tasks"].as_array().map(Vec::len), Some(5), "{v}");

        let bad = run(&["tasks", "list", "--limit", "0"]).await;
        assert_eq!(bad.status.code(), Some(2), "a usage error: {bad:?}");

        let called = run(&[
            "call",
            "demo",
            "slow_compute",
            "--args",
            r#"{"seconds": 0}"#,
            "--json",
        ])
        .await;
        let v: serde_json::Value = serde_json::from_slice(&called.stdout)
            .unwrap_or_else(|e| panic!("call --json prints JSON ({e}): {called:?}"));
        assert!(
            v["task"]["id"].is_string() || v["outcome"] == "completed",
            "{v}"
        );
        let waited = run(&[
            "call",
            "demo",
            "failing_job",
            "--args",
            "{}",
            "--wait",
            "--json",
        ])
        .await;
        assert_eq!(waited.status.code(), Some(3), "{waited:?}");
        let v: serde_json::Value = serde_json::from_slice(&waited.stdout).unwrap();
        assert_eq!(
            (v["status"].as_str(), v["result"]["isError"].as_bool()),
            (Some("completed"), Some(true)),
            "the settled task's detail: {v}"
        );
        // Read by a person: a tool error is not a plain "completed".
        let id = v["id"].as_str().expect("the task's id").to_string();
        let shown = run(&["tasks", "show", &id]).await;
        let shown = String::from_utf8_lossy(&shown.stdout);
        assert!(shown.contains("completed with a tool error"), "{shown}");
        let waited = run(&["call", "demo", "failing_job", "--args", "{}", "--wait"]).await;
        assert_eq!(waited.status.code(), Some(3), "{waited:?}");
        let said = String::from_utf8_lossy(&waited.stderr);
        assert!(said.contains("completed with a tool error after"), "{said}");
        let listed = run(&["tasks", "list", "--all"]).await;
        let listed = String::from_utf8_lossy(&listed.stdout);
        let failing: Vec<&str> = listed
            .lines()
            .filter(|l| l.contains("failing_job@demo"))
            .collect();
        assert!(
            !failing.is_empty() && failing.iter().all(|l| l.contains("tool error")),
            "{listed}"
        );

        let cancelled = run(&["tasks", "cancel", &ids[0], "--json"]).await;
        let v: serde_json::Value = serde_json::from_slice(&cancelled.stdout).unwrap();
        assert_eq!(v["id"], ids[0].as_str(), "{v}");
        assert_eq!(v["cancelRequested"], true, "{v}");

        let redrive = run(&["dead-letters", "redrive", "--json"]).await;
        let v: serde_json::Value = serde_json::from_slice(&redrive.stdout).unwrap();
        assert_eq!(v["redriven"], 0, "{v}");
    })
    .await;
}

/// Ctrl-C while the gateway makes a synchronous call (the everything
/// server's long operation, passed through): the CLI says what became of
/// the call and how to find a kept one, and exits 130 (it died silently).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_during_a_synchronous_call_says_what_became_of_it() {
    let Some(everything) =
        Everything::or_skip("ctrl_c_during_a_synchronous_call_says_what_became_of_it")
    else {
        return;
    };
    let db = TestDatabase::sqlite();
    let toml = GatewaySpec::with_tokens(&db.url, &[]).toml()
        + &everything.server_toml("ev", "connect_timeout_ms = 20000\n");
    let gateway = GatewayProcess::start_toml("gateway", &toml, &[]).await;
    let mut cli = Command::new(bin())
        .args([
            "call",
            "ev",
            "trigger-long-running-operation",
            "--sync",
            "--args",
            r#"{"duration": 30, "steps": 3}"#,
        ])
        .env("MCPTASK_GATEWAY", &gateway.base)
        .env("MCPTASK_API_TOKEN", OPERATOR)
        .env("MCPTASK_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run mcptask call");
    // Well after the CLI started and posted the call (which runs 30 s).
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        cli.try_wait().unwrap().is_none(),
        "the call was still running"
    );
    // SAFETY: signalling a child process this test spawned and still owns.
    unsafe { libc::kill(cli.id() as i32, libc::SIGINT) };
    let out = tokio::task::spawn_blocking(move || cli.wait_with_output())
        .await
        .unwrap()
        .expect("the CLI's output");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains("interrupted before the gateway answered")
            && stderr.contains("mcptask tasks list"),
        "{stderr}"
    );
}
