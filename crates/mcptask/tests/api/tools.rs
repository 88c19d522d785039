//! Tool discovery and first-run checks, end to end: `GET
//! /api/v1/servers/{name}/tools` and `mcptask tools` against a real gateway
//! and real demo servers, the server probe at `serve` start, and `mcptask
//! config check` probing servers and reading a real database for the live
//! tasks an edited configuration would fail.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use mcptask_testkit::run_cli as mcptask;
use mcptask_testkit::*;
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(240);

/// `mcptask config check --config PATH EXTRA…` in `dir`.
async fn config_check(dir: &Path, config: &Path, extra: &[&str]) -> std::process::Output {
    let (dir, config) = (dir.to_path_buf(), config.to_path_buf());
    let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        Command::new(bin())
            .args(["config", "check", "--config"])
            .arg(&config)
            .args(&extra)
            .current_dir(&dir)
            .env("MCPTASK_LOG", "error")
            .env_remove("MCPTASK_CONFIG")
            .env_remove("MCPTASK_DATABASE_URL")
            .env_remove("MCPTASK_OPERATOR_TOKEN")
            .env_remove("MCPTASK_API_TOKEN")
            .output()
            .expect("run mcptask config check")
    })
    .await
    .unwrap()
}

fn text(o: &std::process::Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// An address nothing listens on (bound, then released).
fn dead_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}/mcp")
}

fn tool_names(answer: &Value) -> Vec<String> {
    answer["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools: {answer:#}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_lists_a_servers_tools_with_their_schemas_for_any_token() {
    with_deadline(LIMIT, async {
        let (server_db, gateway_db) = (TestDatabase::sqlite(), TestDatabase::sqlite());
        let server = DemoServer::start(&server_db.url, &[]).await;
        let dead = dead_url();
        let gateway = GatewayProcess::start(
            "gateway",
            &GatewaySpec::with_tokens(&gateway_db.url, &[("demo", &server.url), ("down", &dead)]),
        )
        .await;
        let api = gateway.client(Some(OPERATOR));

        let answer = api.get("/api/v1/servers/demo/tools").await;
        let body = answer.assert_status(200).clone();
        assert_eq!(body["server"], "demo");
        let names = tool_names(&body);
        for tool in ["greet", "slow_compute", "failing_job", "confirm_delete"] {
            assert!(
                names.contains(&tool.to_string()),
                "{tool} missing: {names:?}"
            );
        }
        let slow = body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "slow_compute")
            .unwrap();
        assert!(
            slow["description"].as_str().unwrap().contains("seconds"),
            "{slow:#}"
        );
        assert_eq!(
            slow["inputSchema"]["properties"]["seconds"]["type"],
            "number"
        );

        // A principal may call tools, so it may list them.
        let alice = api
            .with_token(Some(ALICE))
            .get("/api/v1/servers/demo/tools")
            .await;
        assert_eq!(tool_names(alice.assert_status(200)), names);
        api.with_token(None)
            .get("/api/v1/servers/demo/tools")
            .await
            .assert_error(401, "unauthorized");

        // An unknown server: named, with the configured ones.
        let unknown = api.get("/api/v1/servers/nope/tools").await;
        unknown.assert_error(404, "unknown_server");
        let message = unknown.json["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("\"nope\"") && message.contains("demo") && message.contains("down"),
            "{message}"
        );
        assert_eq!(
            unknown.json["error"]["details"]["servers"],
            json!(["demo", "down"])
        );

        // A server that cannot be reached: 502 naming it and the cause.
        let down = api.get("/api/v1/servers/down/tools").await;
        down.assert_error(502, "unavailable");
        let message = down.json["error"]["message"].as_str().unwrap();
        assert!(message.contains("\"down\""), "names the server: {message}");
        assert!(
            message.to_lowercase().contains("connect"),
            "names the cause: {message}"
        );
        assert!(
            !message.contains("WorkerTransport") && !message.contains("::"),
            "no Rust type names: {message}"
        );

        // The listing counts for the servers' health.
        let servers = api.get("/api/v1/servers").await;
        let health = |name: &str| {
            servers.json["servers"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s["name"] == name)
                .unwrap()["health"]["state"]
                .clone()
        };
        assert_eq!(health("demo"), "ok", "{:#}", servers.json);
        assert_eq!(health("down"), "error", "{:#}", servers.json);

        // The route is documented.
        let doc = api.get("/openapi.json").await;
        assert!(
            doc.json["paths"]["/api/v1/servers/{name}/tools"]["get"].is_object(),
            "missing from /openapi.json"
        );
    })
    .await;
}

/// `tools/list` pages are followed to the last, and a server whose cursors
/// never end gets a protocol error instead of a hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_of_tools_is_listed_and_endless_cursors_are_refused() {
    with_deadline(LIMIT, async {
        let (server_db, gateway_db) = (TestDatabase::sqlite(), TestDatabase::sqlite());
        let server = DemoServer::start(&server_db.url, &[]).await;
        let scripted = ScriptedServer::start(&server.url).await;
        let page = |name: &str, next: Option<&str>| {
            let mut page = json!({"tools": [{"name": name, "description": format!("{name} (scripted)"),
                "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}]});
            if let Some(next) = next {
                page["nextCursor"] = json!(next);
            }
            Scripted::Result(page)
        };
        // Every listing sees the same two pages (the gateway also lists its
        // servers' tools at start, for its catalog).
        scripted.script(
            Rule::new("tools/list", usize::MAX, page("first", Some("page-2")))
                .when("/cursor", Value::Null),
        );
        scripted.script(
            Rule::new("tools/list", usize::MAX, page("second", None))
                .when("/cursor", json!("page-2")),
        );
        let gateway = GatewayProcess::start(
            "gateway",
            &GatewaySpec::with_tokens(&gateway_db.url, &[("paged", &scripted.url())]),
        )
        .await;
        let api = gateway.client(Some(OPERATOR));
        let answer = api.get("/api/v1/servers/paged/tools").await;
        assert_eq!(tool_names(answer.assert_status(200)), ["first", "second"]);
        let lists = scripted.seen_method("tools/list");
        assert!(
            lists.iter().any(|l| l.params["cursor"] == "page-2"),
            "the second page was asked for: {lists:#?}"
        );

        scripted.clear();
        scripted.script(Rule::new("tools/list", usize::MAX, page("again", Some("same"))));
        let endless = api.get("/api/v1/servers/paged/tools").await;
        endless.assert_error(502, "protocol_error");
        let message = endless.json["error"]["message"].as_str().unwrap();
        assert!(message.contains("never end"), "{message}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_lists_tools_of_every_server_or_one_and_names_an_unknown_one() {
    with_deadline(LIMIT, async {
        let (server_db, other_db, gateway_db) = (
            TestDatabase::sqlite(),
            TestDatabase::sqlite(),
            TestDatabase::sqlite(),
        );
        let server = DemoServer::start(&server_db.url, &[]).await;
        let other = DemoServer::start_named("other", &other_db.url, &[]).await;
        let gateway = GatewayProcess::start(
            "gateway",
            &GatewaySpec::with_tokens(
                &gateway_db.url,
                &[("demo", &server.url), ("other", &other.url)],
            ),
        )
        .await;

        let all = mcptask(&gateway.base, ALICE, &["tools"]).await;
        let (out, err) = text(&all);
        assert_eq!(all.status.code(), Some(0), "{out}\n{err}");
        let header = out.lines().next().unwrap();
        assert!(
            header.starts_with("SERVER") && header.contains("ARGUMENTS"),
            "{out}"
        );
        let row = |server: &str, tool: &str| {
            out.lines()
                .find(|l| {
                    let mut cols = l.split_whitespace();
                    cols.next() == Some(server) && cols.next() == Some(tool)
                })
                .unwrap_or_else(|| panic!("no {server} {tool} row:\n{out}"))
                .to_string()
        };
        let slow = row("demo", "slow_compute");
        assert!(slow.contains("label:string seconds:number"), "{slow}");
        assert!(slow.contains("Sleep for `seconds`"), "{slow}");
        assert!(
            row("other", "failing_job").contains("  -  "),
            "no arguments: {out}"
        );
        // No demo tool argument is required: none is starred.
        assert!(!slow.contains('*'), "{slow}");

        let one = mcptask(&gateway.base, OPERATOR, &["tools", "other"]).await;
        let (out, err) = text(&one);
        assert_eq!(one.status.code(), Some(0), "{out}\n{err}");
        assert!(
            out.lines().skip(1).all(|l| l.starts_with("other ")),
            "{out}"
        );

        let json_out = mcptask(&gateway.base, OPERATOR, &["tools", "demo", "--json"]).await;
        let (out, err) = text(&json_out);
        assert_eq!(json_out.status.code(), Some(0), "{err}");
        let answer: Value = serde_json::from_str(&out).expect("--json prints JSON");
        assert_eq!(answer["server"], "demo");
        assert!(tool_names(&answer).contains(&"confirm_delete".to_string()));
        assert!(answer["tools"][0]["inputSchema"].is_object(), "{answer:#}");

        let unknown = mcptask(&gateway.base, OPERATOR, &["tools", "nope"]).await;
        let (out, err) = text(&unknown);
        assert_eq!(unknown.status.code(), Some(1), "{out}\n{err}");
        assert!(
            err.contains("\"nope\"") && err.contains("demo, other"),
            "names the server and the configured ones: {err}"
        );
        assert!(
            !err.to_lowercase().contains("backtrace") && err.lines().count() < 5,
            "{err}"
        );
    })
    .await;
}

/// `serve` contacts each server once at start: health leaves `unknown`
/// without any call, and a server that is down is logged as degraded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_probes_each_server_at_start() {
    with_deadline(LIMIT, async {
        let (server_db, gateway_db) = (TestDatabase::sqlite(), TestDatabase::sqlite());
        let server = DemoServer::start(&server_db.url, &[]).await;
        let dead = dead_url();
        let gateway = GatewayProcess::start(
            "gateway",
            &GatewaySpec::with_tokens(&gateway_db.url, &[("demo", &server.url), ("down", &dead)]),
        )
        .await;
        let api = gateway.client(Some(OPERATOR));
        let deadline = Instant::now() + WAIT;
        let states = loop {
            let servers = api.get("/api/v1/servers").await;
            let states: Vec<(String, String)> = servers.json["servers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| {
                    (
                        s["name"].as_str().unwrap().to_string(),
                        s["health"]["state"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect();
            if states.iter().all(|(_, s)| s != "unknown") {
                break states;
            }
            assert!(
                Instant::now() < deadline,
                "health still unknown without a call: {states:?}\n{}",
                gateway.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert_eq!(
            states,
            [
                ("demo".into(), "ok".into()),
                ("down".into(), "error".into())
            ]
        );
        let log = gateway.log();
        assert!(
            log.lines()
                .any(|l| l.contains("server degraded") && l.contains("down")),
            "the failing server is logged at start:\n{log}"
        );
        let tasks = api.get("/api/v1/tasks").await;
        assert_eq!(tasks.json["tasks"], json!([]), "no call was made");
    })
    .await;
}

fn write_config(dir: &Path, database_url: &str, servers: &[(&str, &str)]) -> std::path::PathBuf {
    let spec = GatewaySpec::open(database_url, servers);
    let path = dir.join(format!("check-{}.toml", servers.len()));
    std::fs::write(&path, spec.toml()).unwrap();
    path
}

/// `config check` probes the servers and reads the database: live tasks of
/// a removed server, or of a server whose endpoint changed, are listed per
/// server, and anything wrong makes it exit 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_check_probes_servers_and_lists_the_live_tasks_an_edit_would_fail() {
    with_deadline(LIMIT, async {
        let (server_db, other_db, gateway_db) = (
            TestDatabase::sqlite(),
            TestDatabase::sqlite(),
            TestDatabase::sqlite(),
        );
        let server = DemoServer::start(&server_db.url, &[]).await;
        let other = DemoServer::start_named("other", &other_db.url, &[]).await;
        let dir = tempfile::tempdir().unwrap();

        // Live tasks on two names of one server, then the gateway stops.
        let original = [("demo", server.url.as_str()), ("old", server.url.as_str())];
        let gateway =
            GatewayProcess::start("gateway", &GatewaySpec::open(&gateway_db.url, &original)).await;
        let api = gateway.client(None);
        let mut on_demo = Vec::new();
        for _ in 0..2 {
            let t = api
                .start_task("slow_compute", json!({"seconds": 600}))
                .await;
            on_demo.push(t["id"].as_str().unwrap().to_string());
        }
        let on_old = api
            .start_task_with(
                json!({"server": "old", "tool": "slow_compute", "arguments": {"seconds": 600}}),
            )
            .await["id"]
            .as_str()
            .unwrap()
            .to_string();
        drop(gateway);

        // The configuration they were created with: all is well.
        let same = write_config(dir.path(), &gateway_db.url, &original);
        let ok = config_check(dir.path(), &same, &[]).await;
        let (out, err) = text(&ok);
        assert_eq!(ok.status.code(), Some(0), "{out}\n{err}");
        assert!(
            out.contains("ok, ") && out.contains(" tools)"),
            "probed: {out}"
        );
        assert!(
            out.contains("3 live") && out.contains("none would fail"),
            "{out}"
        );

        // An edit: "demo" points at another server, "old" is gone, "down"
        // cannot be reached.
        let dead = dead_url();
        let edited = write_config(
            dir.path(),
            &gateway_db.url,
            &[
                ("demo", other.url.as_str()),
                ("down", dead.as_str()),
                ("x", other.url.as_str()),
            ],
        );
        let bad = config_check(dir.path(), &edited, &[]).await;
        let (out, err) = text(&bad);
        assert_eq!(bad.status.code(), Some(1), "{out}\n{err}");
        let line = |needle: &str| {
            out.lines()
                .find(|l| l.contains(needle))
                .unwrap_or_else(|| panic!("no line with {needle:?}:\n{out}"))
                .to_string()
        };
        let demo = line("demo: 2 task(s)");
        assert!(demo.contains("endpoint changed"), "{demo}");
        assert!(
            on_demo.iter().all(|id| demo.contains(id.as_str())),
            "{demo}"
        );
        let old = line("old: 1 task(s)");
        assert!(
            old.contains("no longer configured") && old.contains(&on_old),
            "{old}"
        );
        let down = line(&dead);
        assert!(down.contains("error:"), "the probe failed: {down}");
        assert!(line(&format!("x  {}", other.url)).contains("ok, "), "{out}");
        assert!(
            err.contains("1 server(s) could not be reached")
                && err.contains("3 live task(s) would fail"),
            "{err}"
        );

        // --no-probe: the servers are not contacted, the tasks still counted.
        let quiet = config_check(dir.path(), &edited, &["--no-probe"]).await;
        let (out, err) = text(&quiet);
        assert_eq!(quiet.status.code(), Some(1), "{out}\n{err}");
        assert!(!out.contains("error:") && !out.contains("ok, "), "{out}");
        assert!(!err.contains("could not be reached"), "{err}");

        // --json: the same findings, for scripts.
        let as_json = config_check(dir.path(), &edited, &["--json"]).await;
        assert_eq!(as_json.status.code(), Some(1), "{as_json:?}");
        let report: serde_json::Value = serde_json::from_slice(&as_json.stdout)
            .unwrap_or_else(|e| panic!("config check --json prints JSON ({e}): {as_json:?}"));
        let failing: usize = report["tasks"]["wouldFail"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["count"].as_u64().unwrap() as usize)
            .sum();
        assert_eq!(failing, 3, "{report}");
        let probes: Vec<bool> = report["servers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["probe"]["ok"].as_bool().unwrap())
            .collect();
        assert_eq!(probes.iter().filter(|ok| !**ok).count(), 1, "{report}");
        assert_eq!(
            report["problems"].as_array().map(Vec::len),
            Some(2),
            "{report}"
        );

        // A database that does not exist yet is said so, and not created.
        let fresh = dir.path().join("fresh.db");
        let url = format!("sqlite:{}", fresh.display());
        let new = write_config(dir.path(), &url, &[]);
        let first = config_check(dir.path(), &new, &[]).await;
        let (out, err) = text(&first);
        assert_eq!(first.status.code(), Some(0), "{out}\n{err}");
        assert!(out.contains("does not exist yet"), "{out}");
        assert!(!fresh.exists(), "config check created the database");
    })
    .await;
}

/// A server that never answers `tools/list` costs one call timeout: the API
/// answers 502 naming the timeout, the server's health turns `error`, and
/// once it answers again the listing works and the health is `ok`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_tools_list_is_bounded_by_the_call_timeout() {
    with_deadline(LIMIT, async {
        let (server_db, gateway_db) = (TestDatabase::sqlite(), TestDatabase::sqlite());
        let server = DemoServer::start(&server_db.url, &[]).await;
        let front = FaultFront::start(&server.base()).await;
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("mcptask.toml");
        let toml = GatewaySpec::open(&gateway_db.url, &[("hung", &front.url())])
            .toml()
            .replace("[tracker]\n", "[tracker]\ncall_timeout_ms = 1500\n");
        std::fs::write(&config, toml).unwrap();
        let mut command = serve_command(&config);
        command.current_dir(dir.path());
        let (gateway, url) = LoggedChild::spawn(
            "gateway",
            command,
            GATEWAY_LISTENING,
            Duration::from_secs(60),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        let api = Api::new(url.trim_end_matches('/'), None);
        let health = || async {
            api.get("/api/v1/servers").await.json["servers"][0]["health"]["state"].clone()
        };

        front.set_for(Fault::Hang, &["tools/list"]);
        let hung = api.get("/api/v1/servers/hung/tools").await;
        hung.assert_error(502, "unavailable");
        let message = hung.json["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("\"hung\"") && message.contains("no answer within"),
            "{message}\n{}",
            gateway.log()
        );
        assert_eq!(health().await, "error");

        front.set(Fault::Forward);
        let back = api.get("/api/v1/servers/hung/tools").await;
        assert!(tool_names(back.assert_status(200)).contains(&"greet".to_string()));
        assert_eq!(health().await, "ok");
    })
    .await;
}
