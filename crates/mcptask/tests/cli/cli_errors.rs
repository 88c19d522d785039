//! Every error a user can provoke from the command line names its cause and
//! a fix: the binary run as a shell runs it (with `RUST_BACKTRACE=1`, common
//! in Rust users' shells), against real gateways, real MCP servers, real
//! SQLite files and a real PostgreSQL. Each case asserts the exit code of
//! docs/CLI.md, that no stack trace, panic or Rust type path leaks, and that
//! the cause is named.

use std::process::{Command, Output};
use std::time::Duration;

use mcptask_testkit::*;

/// `mcptask ARGS…` as a user's shell runs it: `RUST_BACKTRACE=1`, no
/// inherited MCPTASK_* settings except those given.
fn mcptask(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(bin());
    command
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .env("MCPTASK_LOG", "warn")
        .env_remove("MCPTASK_CONFIG")
        .env_remove("MCPTASK_DATABASE_URL")
        .env_remove("MCPTASK_GATEWAY")
        .env_remove("MCPTASK_API_TOKEN")
        .env_remove("MCPTASK_OPERATOR_TOKEN")
        .env_remove("MCPTASK_LISTEN")
        .env_remove("MCPTASK_AUTH")
        .envs(env.iter().copied());
    command.output().expect("run mcptask")
}

async fn mcptask_async(args: Vec<String>, env: Vec<(String, String)>) -> Output {
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        mcptask(&args, &env)
    })
    .await
    .expect("mcptask thread")
}

/// A Rust path such as `rmcp::transport::Worker` or `std::io::Error`
/// (a URL's `://` is not one).
fn type_path(text: &str) -> Option<&str> {
    let bytes = text.as_bytes();
    (1..bytes.len().saturating_sub(2)).find_map(|i| {
        let path = bytes[i] == b':' && bytes[i + 1] == b':';
        let before = bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_';
        let after =
            bytes[i + 2].is_ascii_alphabetic() || bytes[i + 2] == b'_' || bytes[i + 2] == b'<';
        (path && before && after).then(|| {
            let start = text[..i].rfind(char::is_whitespace).map_or(0, |s| s + 1);
            &text[start..(i + 30).min(text.len())]
        })
    })
}

/// An error message as a user should read it: nothing a developer would
/// need a debugger for.
#[track_caller]
fn assert_plain(what: &str, text: &str) {
    let lower = text.to_lowercase();
    assert!(
        !lower.contains("stack backtrace") && !lower.contains("panicked"),
        "{what}: a backtrace or panic: {text}"
    );
    assert!(
        !text.contains("WorkerTransport") && !text.contains("Transport ["),
        "{what}: rmcp's transport type: {text}"
    );
    if let Some(path) = type_path(text) {
        panic!("{what}: a Rust type path ({path}) in: {text}");
    }
}

/// The command failed with `code`, said so plainly on stderr, and named
/// everything in `needles`.
#[track_caller]
fn assert_error(what: &str, out: &Output, code: i32, needles: &[&str]) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(
        out.status.code(),
        Some(code),
        "{what}: exit code; stderr: {stderr}"
    );
    assert!(stderr.starts_with("error: "), "{what}: {stderr}");
    assert_plain(what, &stderr);
    for needle in needles {
        assert!(
            stderr.contains(needle),
            "{what}: {needle:?} missing in: {stderr}"
        );
    }
    stderr
}

/// `127.0.0.1:PORT` where nothing listens.
fn closed_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

/// A web server that is not MCP: every request gets this status, content
/// type and body (a real socket; one connection at a time is plenty).
fn canned_http(status: &'static str, content_type: &'static str, body: &'static str) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
            // Read the request head and any body announced by Content-Length.
            let mut request = Vec::new();
            let mut buf = [0u8; 4096];
            while let Ok(n) = stream.read(&mut buf) {
                if n == 0 {
                    break;
                }
                request.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&request).to_string();
                if let Some(head_end) = text.find("\r\n\r\n") {
                    let length = text[..head_end]
                        .lines()
                        .find_map(|l| {
                            let (k, v) = l.split_once(':')?;
                            k.eq_ignore_ascii_case("content-length")
                                .then(|| v.trim().parse::<usize>().ok())
                                .flatten()
                        })
                        .unwrap_or(0);
                    if request.len() >= head_end + 4 + length {
                        break;
                    }
                }
            }
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    addr
}

/// `mcptask serve` on `toml`, started with `RUST_BACKTRACE=1`.
async fn serve(dir: &std::path::Path, toml: &str) -> (LoggedChild, String) {
    let config = dir.join("mcptask.toml");
    std::fs::write(&config, toml).unwrap();
    let mut command = serve_command(&config);
    // The default log filter, as a user's `serve` has it.
    command
        .current_dir(dir)
        .env("RUST_BACKTRACE", "1")
        .env_remove("MCPTASK_LOG");
    let (process, url) = LoggedChild::spawn("gateway", command, GATEWAY_LISTENING, WAIT)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    (process, url.trim_end_matches('/').to_string())
}

fn q(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

/// Servers that cannot be used, each for its own reason: the call fails
/// with that reason (CLI and API), the server's health says it in full,
/// and the log says it once, all without rmcp's type names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unusable_servers_are_reported_with_their_cause_and_fix() {
    with_deadline(Duration::from_secs(240), async {
        let (server_db, gateway_db) = (TestDatabase::sqlite(), TestDatabase::sqlite());
        let locked =
            DemoServer::start(&server_db.url, &["--auth-token", "s3cret-token=alice"]).await;
        let down = closed_addr();
        // https:// to a plain-HTTP server: the TLS handshake gets HTTP back.
        let locked_addr = locked.url.split('/').nth(2).unwrap().to_string();
        let html = canned_http(
            "200 OK",
            "text/html; charset=utf-8",
            "<!doctype html><html><body>Welcome to nginx!</body></html>",
        );
        let missing = canned_http("404 Not Found", "text/plain", "no route");
        let not_executable = tempfile::tempdir().unwrap();
        let script = not_executable.path().join("server.sh");
        std::fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
        let script = script.display().to_string();
        let dir = tempfile::tempdir().unwrap();
        let cases: Vec<(&str, String, Vec<String>)> = vec![
            (
                "down",
                format!("url = {}", q(&format!("http://{down}/mcp"))),
                vec![
                    format!("cannot connect to \"down\" at http://{down}/mcp"),
                    "connection refused (is the server running?)".into(),
                ],
            ),
            (
                "nocmd",
                "command = \"mcptask-no-such-command\"".into(),
                vec![
                    "cannot start server \"nocmd\"".into(),
                    "command \"mcptask-no-such-command\" not found".into(),
                    "PATH".into(),
                ],
            ),
            (
                "noexec",
                format!("command = {}", q(&script)),
                vec![
                    "cannot start server \"noexec\"".into(),
                    format!("command {} is not executable", q(&script)),
                ],
            ),
            (
                "exits",
                "command = \"false\"".into(),
                vec![
                    "cannot start server \"exits\"".into(),
                    "exited (or closed its output) before it answered".into(),
                    "run its command by hand".into(),
                ],
            ),
            (
                "tls",
                format!("url = {}", q(&format!("https://{}/mcp", locked_addr))),
                vec![
                    format!("cannot connect to \"tls\" at https://{locked_addr}/mcp"),
                    "did not answer in TLS".into(),
                    "use http://".into(),
                ],
            ),
            (
                "locked",
                format!("url = {}", q(&locked.url)),
                vec!["HTTP 401".into(), "Authorization".into()],
            ),
            (
                "html",
                format!("url = {}", q(&format!("http://{html}/"))),
                vec![
                    "an HTML page (text/html".into(),
                    "instead of an MCP answer".into(),
                    "/mcp".into(),
                ],
            ),
            (
                "wrongpath",
                format!("url = {}", q(&format!("http://{missing}/api"))),
                vec!["HTTP 404".into(), "/mcp".into()],
            ),
        ];
        let mut toml = format!(
            "[database]\nurl = {}\n\n[api]\nlisten = \"127.0.0.1:0\"\nauth = \"none\"\n",
            q(&gateway_db.url)
        );
        for (name, endpoint, _) in &cases {
            toml.push_str(&format!(
                "\n[[servers]]\nname = {}\n{endpoint}\nconnect_timeout_ms = 20000\n",
                q(name)
            ));
        }
        let (gateway, base) = serve(dir.path(), &toml).await;

        for (name, _, needles) in &cases {
            let out = mcptask_async(
                vec!["call".into(), name.to_string(), "slow_compute".into()],
                vec![("MCPTASK_GATEWAY".into(), base.clone())],
            )
            .await;
            let needles: Vec<&str> = needles.iter().map(String::as_str).collect();
            assert_error(&format!("call {name}"), &out, 1, &needles);
        }

        let servers = Api::new(&base, None).get("/api/v1/servers").await;
        let servers = servers.assert_status(200)["servers"].clone();
        for (name, _, needles) in &cases {
            let server = servers
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s["name"] == *name)
                .unwrap_or_else(|| panic!("{name} in {servers:#}"));
            assert_eq!(server["health"]["state"], "error", "{server:#}");
            let last = server["health"]["lastError"].as_str().unwrap_or_default();
            assert_plain(&format!("lastError of {name}"), last);
            for needle in needles {
                assert!(
                    last.contains(needle.as_str()),
                    "{name}: {needle:?} missing in lastError: {last}"
                );
            }
            assert!(!last.ends_with('…'), "{name}: cut: {last}");
        }

        let log = gateway.log();
        for (name, _, needles) in &cases {
            // (The log quotes field values: `\"` inside them is `"`.)
            let degraded = log
                .lines()
                .map(|l| l.replace("\\\"", "\""))
                .find(|l| {
                    l.contains("server degraded") && l.contains(&format!("server={}", q(name)))
                })
                .unwrap_or_else(|| panic!("no degraded line for {name}: {log}"));
            assert!(degraded.contains(needles[0].as_str()), "{degraded}");
        }
        // Each line is `TIME LEVEL target: message fields`; the target is a
        // module path by design, the rest must read as words.
        for line in log.lines() {
            let said = line.split_once(": ").map_or(line, |(_, rest)| rest);
            assert_plain("serve's log", said);
        }
    })
    .await;
}

/// A server that goes away under a live task: the task's `lastError` and
/// the server's health say why in words (the calls on the open session fail
/// first, then the reconnects), and the task goes on within its budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_lost_under_a_live_task_is_reported_plainly() {
    with_deadline(Duration::from_secs(240), async {
        let (server_db, gateway_db) = (TestDatabase::sqlite(), TestDatabase::sqlite());
        let mut server = DemoServer::start(&server_db.url, &[]).await;
        let gateway = GatewayProcess::start(
            "gateway",
            &GatewaySpec::open(&gateway_db.url, &[("demo", &server.url)]),
        )
        .await;
        let api = gateway.client(None);
        let task = api
            .start_task("slow_compute", serde_json::json!({"seconds": 120}))
            .await;
        let id = task["id"].as_str().unwrap().to_string();
        server.kill().await;
        let seen = api
            .wait_task(&id, "a lastError", |t| t["lastError"].is_string())
            .await;
        let last = seen["lastError"].as_str().unwrap();
        eprintln!("[lost server] the task's lastError: {last}");
        assert_plain("the task's lastError", last);
        assert!(
            last.contains("connection refused") || last.contains("connection to the server closed"),
            "{last}"
        );
        assert_eq!(seen["status"], "working", "{seen:#}");
        let servers = api.get("/api/v1/servers").await;
        let health = &servers.assert_status(200)["servers"][0]["health"];
        assert_plain("health", health["lastError"].as_str().unwrap_or_default());
        assert_eq!(health["state"], "error", "{health:#}");
    })
    .await;
}

/// An unreachable PostgreSQL is reported at once with the real reason and
/// the redacted URL, by every command that opens the store; not after 30
/// seconds as "pool timed out".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_postgres_fails_fast_with_the_reason() {
    with_deadline(Duration::from_secs(240), async {
        let down = closed_addr();
        let url = format!("postgres://mcptask:hunter2@{down}/mcptask");
        let redacted = format!("postgres://mcptask:***@{down}/mcptask");
        let refused = format!("connection refused at {down}");
        let needles = [redacted.as_str(), refused.as_str(), "is PostgreSQL running"];
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("mcptask.toml");
        std::fs::write(
            &config,
            format!(
                "[database]\nurl = {}\n\n[api]\nlisten = \"127.0.0.1:0\"\nauth = \"none\"\n",
                q(&url)
            ),
        )
        .unwrap();
        let config = config.display().to_string();
        let commands: Vec<Vec<String>> = vec![
            vec!["migrate".into(), "--database-url".into(), url.clone()],
            vec!["serve".into(), "--config".into(), config],
            vec![
                "demo-server".into(),
                "--http".into(),
                "127.0.0.1:0".into(),
                "--database-url".into(),
                url.clone(),
            ],
            vec![
                "demo".into(),
                "--once".into(),
                "--listen".into(),
                "127.0.0.1:0".into(),
                "--database-url".into(),
                url.clone(),
            ],
        ];
        let mut commands = commands;
        // A host name that does not resolve is told apart from a host that
        // refuses.
        commands.push(vec![
            "migrate".into(),
            "--database-url".into(),
            "postgres://mcptask@nosuchhost.invalid/mcptask".into(),
        ]);
        let runs = commands.into_iter().map(|args| async move {
            let what = args[0].clone();
            (what, mcptask_async(args, Vec::new()).await)
        });
        let mut outs = futures_join_all(runs).await;
        let (what, out) = outs.pop().unwrap();
        assert_error(
            &format!("{what} (DNS)"),
            &out,
            1,
            &[
                "the host \"nosuchhost.invalid\"",
                "check the host in the URL",
            ],
        );
        for (what, out) in outs {
            let said = assert_error(&what, &out, 1, &needles);
            assert!(
                !said.contains("hunter2"),
                "{what}: the password leaked: {said}"
            );
            assert!(!said.contains("timed out"), "{what}: {said}");
        }
    })
    .await;
}

/// A wrong database name or user on a running PostgreSQL says which, and how
/// to fix it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_postgres_database_or_user_is_named() {
    with_deadline(Duration::from_secs(240), async {
        let Some(url) = mcptask_testkit::pg::fresh_database().await else {
            return;
        };
        let (prefix, _db) = url.rsplit_once('/').unwrap();
        let no_db = format!("{prefix}/mcptask_no_such_db");
        let out = mcptask_async(
            vec!["migrate".into(), "--database-url".into(), no_db.clone()],
            Vec::new(),
        )
        .await;
        assert_error(
            "missing database",
            &out,
            1,
            &[
                "database \"mcptask_no_such_db\" does not exist",
                "createdb",
                &no_db,
            ],
        );

        let (scheme, rest) = url.split_once("://").unwrap();
        let (_user, host) = rest.split_once('@').unwrap();
        let no_user = format!("{scheme}://mcptask_no_such_role@{host}");
        let out = mcptask_async(
            vec!["migrate".into(), "--database-url".into(), no_user],
            Vec::new(),
        )
        .await;
        assert_error(
            "missing role",
            &out,
            1,
            &["mcptask_no_such_role", "check the user in the URL"],
        );
    })
    .await;
}

/// An SQLite path that cannot hold a database: one error naming the path,
/// what is wrong with it and the fix; the directory is not created.
#[test]
fn an_unusable_sqlite_path_is_named_once_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let parent = dir.path().join("no/such/dir");
    let url = format!("sqlite:{}", parent.join("m.db").display());
    let out = mcptask(&["migrate", "--database-url", &url], &[]);
    let said = assert_error(
        "missing directory",
        &out,
        1,
        &[&parent.display().to_string(), "does not exist", "mkdir -p"],
    );
    assert!(!said.contains("unable to open database file"), "{said}");
    assert!(said.lines().count() <= 2, "said once: {said}");
    assert!(!parent.exists(), "the directory must not be created");

    // The same through `serve`'s configuration.
    let config = dir.path().join("mcptask.toml");
    std::fs::write(
        &config,
        format!(
            "[database]\nurl = {}\n\n[api]\nlisten = \"127.0.0.1:0\"\nauth = \"none\"\n",
            q(&url)
        ),
    )
    .unwrap();
    let out = mcptask(&["serve", "--config", &config.display().to_string()], &[]);
    assert_error(
        "serve, missing directory",
        &out,
        1,
        &["does not exist", "mkdir -p"],
    );

    let url = format!("sqlite:{}", dir.path().display());
    let out = mcptask(&["migrate", "--database-url", &url], &[]);
    assert_error("a directory", &out, 1, &["is a directory", "mcptask.db"]);

    // A directory the process may not write to. Root writes anywhere, so
    // the case only exists for other users.
    use std::os::unix::fs::PermissionsExt as _;
    let locked = dir.path().join("locked");
    std::fs::create_dir(&locked).unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o555)).unwrap();
    if unsafe { libc::geteuid() } != 0 {
        let url = format!("sqlite:{}", locked.join("m.db").display());
        let out = mcptask(&["migrate", "--database-url", &url], &[]);
        assert_error(
            "read-only directory",
            &out,
            1,
            &["not writable", &locked.display().to_string()],
        );
    } else {
        eprintln!("(as root every directory is writable: read-only case not exercised)");
    }
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A store migrated by a newer mcptask is refused with what happened and
/// what to do, not sqlx's "previously applied but is missing".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_newer_than_the_binary_is_refused_plainly() {
    let db = TestDatabase::sqlite();
    let store = db.open().await;
    let mcptask_sql::Store::Sqlite(sqlite) = &store else {
        unreachable!()
    };
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) VALUES (9999, 'from the future', TRUE, x'00', 0)",
    )
    .execute(sqlite.writer_pool())
    .await
    .unwrap();
    store.close().await;
    let out = mcptask_async(
        vec!["migrate".into(), "--database-url".into(), db.url.clone()],
        Vec::new(),
    )
    .await;
    assert_error(
        "newer schema",
        &out,
        1,
        &["newer", "9999", "run a newer mcptask"],
    );
}

/// The client commands' errors: a gateway that is not running, a wrong
/// token, something that is not a gateway, a bad configuration file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_and_config_errors_name_the_cause() {
    with_deadline(Duration::from_secs(240), async {
        let down = closed_addr();
        let out = mcptask_async(
            vec![
                "tasks".into(),
                "list".into(),
                "--gateway".into(),
                format!("http://{down}"),
            ],
            Vec::new(),
        )
        .await;
        assert_error(
            "gateway down",
            &out,
            1,
            &[
                &format!("cannot reach the gateway at http://{down}"),
                "mcptask serve",
                "refused",
            ],
        );

        let gateway_db = TestDatabase::sqlite();
        let gateway =
            GatewayProcess::start("gateway", &GatewaySpec::with_tokens(&gateway_db.url, &[])).await;
        let env = vec![
            ("MCPTASK_GATEWAY".to_string(), gateway.base.clone()),
            (
                "MCPTASK_API_TOKEN".to_string(),
                "wrong-token-0123456789".to_string(),
            ),
        ];
        let out = mcptask_async(vec!["tasks".into(), "list".into()], env).await;
        assert_error(
            "wrong token",
            &out,
            1,
            &["unknown API token", "--token", "MCPTASK_API_TOKEN"],
        );

        let env = vec![
            ("MCPTASK_GATEWAY".to_string(), gateway.base.clone()),
            ("MCPTASK_API_TOKEN".to_string(), OPERATOR.to_string()),
        ];
        let out = mcptask_async(
            vec!["tasks".into(), "show".into(), "rt_nope".into()],
            env.clone(),
        )
        .await;
        assert_error(
            "unknown task",
            &out,
            1,
            &["task not found", "mcptask tasks list"],
        );
        let out = mcptask_async(
            vec!["call".into(), "nosuch".into(), "tool".into()],
            env.clone(),
        )
        .await;
        assert_error(
            "unknown server",
            &out,
            1,
            &["server \"nosuch\" is not configured", "[[servers]]"],
        );

        // A listen address that is taken: `serve` and `demo-server` say so
        // and which setting to change.
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let taken_addr = taken.local_addr().unwrap().to_string();
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("mcptask.toml");
        std::fs::write(
            &config,
            format!(
                "[database]\nurl = {}\n\n[api]\nlisten = {}\nauth = \"none\"\n",
                q(&format!("sqlite:{}", dir.path().join("g.db").display())),
                q(&taken_addr)
            ),
        )
        .unwrap();
        let out = mcptask_async(
            vec![
                "serve".into(),
                "--config".into(),
                config.display().to_string(),
            ],
            Vec::new(),
        )
        .await;
        assert_error(
            "serve on a taken port",
            &out,
            1,
            &[&taken_addr, "already in use", "[api] listen"],
        );
        let out = mcptask_async(
            vec![
                "demo-server".into(),
                "--http".into(),
                taken_addr.clone(),
                "--database-url".into(),
                format!("sqlite:{}", dir.path().join("s.db").display()),
            ],
            Vec::new(),
        )
        .await;
        assert_error(
            "demo-server on a taken port",
            &out,
            1,
            &[&taken_addr, "already in use", "--http"],
        );
        drop(taken);

        // An MCP server's port, a web page: neither is a gateway.
        let server_db = TestDatabase::sqlite();
        let server = DemoServer::start(&server_db.url, &[]).await;
        let html = canned_http("200 OK", "text/html", "<html>hello</html>");
        for base in [server.base(), format!("http://{html}")] {
            let out = mcptask_async(
                vec![
                    "tasks".into(),
                    "list".into(),
                    "--gateway".into(),
                    base.clone(),
                ],
                vec![("MCPTASK_API_TOKEN".into(), OPERATOR.into())],
            )
            .await;
            assert_error(
                "not a gateway",
                &out,
                1,
                &[&base, "is it an mcptask gateway?", "--gateway"],
            );
        }

        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nowhere.toml");
        for command in ["serve", "check"] {
            let args: Vec<&str> = match command {
                "serve" => vec!["serve", "--config"],
                _ => vec!["config", "check", "--config"],
            };
            let path = missing.display().to_string();
            let out = mcptask(&[args.as_slice(), &[path.as_str()]].concat(), &[]);
            assert_error(command, &out, 1, &[&path, "cannot read", "fix:"]);
            let path = dir.path().display().to_string();
            let out = mcptask(&[args.as_slice(), &[path.as_str()]].concat(), &[]);
            assert_error(command, &out, 1, &[&path, "directory", "fix:"]);
        }
    })
    .await;
}

/// The operator token the Kubernetes Secret ships with is a placeholder:
/// `config check` and `serve` refuse it (and a short token) with a fix,
/// rather than guarding a gateway with a value printed in the repository.
#[test]
fn placeholder_and_short_operator_tokens_are_refused() {
    let shipped = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../deploy/kubernetes/secret.yaml"),
    )
    .expect("read the shipped Secret");
    let placeholder = shipped
        .lines()
        .find_map(|l| l.trim().strip_prefix("MCPTASK_OPERATOR_TOKEN: "))
        .expect("the Secret names an operator token")
        .trim_matches('"')
        .to_string();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mcptask.toml");
    let db = dir.path().join("m.db");
    std::fs::write(
        &path,
        format!(
            "[database]\nurl = \"sqlite:{}\"\n[api]\nlisten = \"127.0.0.1:0\"\nauth = \"token\"\n",
            db.display()
        ),
    )
    .unwrap();
    let path = path.display().to_string();
    for (token, why) in [
        (placeholder.as_str(), "placeholder"),
        ("0123abcd", "at least 16"),
    ] {
        for args in [
            vec!["config", "check", "--config", path.as_str()],
            vec!["serve", "--config", path.as_str()],
        ] {
            let out = mcptask(&args, &[("MCPTASK_OPERATOR_TOKEN", token)]);
            assert_error(
                &format!("{} with {token:?}", args[0]),
                &out,
                1,
                &["MCPTASK_OPERATOR_TOKEN", why, "fix:", "openssl rand"],
            );
        }
    }
    // A random token passes the same check.
    let out = mcptask(
        &["config", "check", "--config", path.as_str()],
        &[("MCPTASK_OPERATOR_TOKEN", "9f2c41d7a0b35e6c8d14f0a2b7c9e3d5")],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The checker itself: a test that cannot fail is a defect.
#[test]
fn the_type_path_check_finds_paths_and_spares_urls() {
    assert!(type_path("Transport [rmcp::transport::worker::WorkerTransport<X>] error").is_some());
    assert!(type_path("std::io::Error").is_some());
    assert!(type_path("cannot connect to \"x\" at http://127.0.0.1:1/mcp: refused").is_none());
    assert!(type_path("at [::1]:80").is_none());
}

/// Run futures concurrently and collect their outputs in order.
async fn futures_join_all<F>(futures: impl IntoIterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.expect("task"));
    }
    out
}
