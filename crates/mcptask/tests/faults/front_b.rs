//! The MCP front's faults, part B (docs/RELIABILITY.md, "The MCP front
//! (part B)"): a caller that goes away mid synchronous call, an upstream that
//! grants a shorter task TTL than the front would, a relayed question nobody
//! answers, and an upstream whose tool list changes while a front task runs.
//! Real `mcptask serve` / `mcptask proxy --stdio` processes before real
//! `mcptask demo-server` processes (some behind a `ScriptedServer`).

use std::time::Duration;

use mcptask_testkit::mcp::{Lifecycle, TestClient, error_code, wire};
use mcptask_testkit::*;
use rmcp::model::{CallToolRequestParams, CallToolResponse};
use serde_json::{Value, json};

/// What the demo server logs when `test_wait_for_cancellation` starts.
const WAITING: &str = "test_wait_for_cancellation: waiting for the call to be cancelled";

/// `[[servers]]` entry `demo` at `url`, with raw `extra` lines.
fn demo_entry(url: &str, extra: &str) -> String {
    format!(
        "[[servers]]\nname = \"demo\"\nurl = {}\n{extra}",
        json!(url)
    )
}

/// A front at `/mcp` (`mcptask serve` with the proxy on) before `servers`,
/// with raw `[proxy]` lines.
async fn front(db: &TestDatabase, servers: &str, proxy: &str) -> GatewayProcess {
    let toml = format!(
        "{}\n[proxy]\nenabled = true\n{proxy}",
        fault_gateway_toml(&db.url, servers)
    );
    GatewayProcess::start_toml("front", &toml, &[]).await
}

/// Poll `check` every 50 ms until it returns `Some`, or panic with `what`.
async fn until<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    within: Duration,
    mut check: impl FnMut() -> F,
) -> T {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn count(log: &str, needle: &str) -> usize {
    log.matches(needle).count()
}

/// Start `demo__test_wait_for_cancellation` through `peer` (a caller that
/// does not declare tasks: the call is relayed synchronously) and wait
/// until the upstream runs it.
async fn start_blocking_call(
    peer: rmcp::Peer<rmcp::RoleClient>,
    upstream_log: &impl Fn() -> String,
) -> tokio::task::JoinHandle<()> {
    let before = count(&upstream_log(), WAITING);
    let call = tokio::spawn(async move {
        let params = CallToolRequestParams::new("demo__test_wait_for_cancellation");
        let _ = peer.call_tool_once(params).await;
    });
    until("the upstream runs the call", WAIT, || async {
        (count(&upstream_log(), WAITING) > before).then_some(())
    })
    .await;
    call
}

/// The pid a stdio child's stderr line carries (the gateway's tap adds it).
fn last_waiting_pid(log: &str) -> Option<u32> {
    let line = log.lines().rev().find(|l| l.contains(WAITING))?;
    line.rsplit("pid=").next()?.trim().parse().ok()
}

/// Whether process `pid` has ended (gone, or a zombie not yet reaped).
fn ended(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('Z')),
    }
}

/// The upstream logged one more cancellation than `before`; for a stdio
/// upstream, its session's child may instead have ended (the lane of a
/// withdrawn call is closed, not reused: the notification and the close
/// race, and either stops the call).
async fn upstream_saw_cancellation(
    upstream_log: &impl Fn() -> String,
    before: usize,
    how: &str,
    gone: std::time::Instant,
) {
    let child = last_waiting_pid(&upstream_log());
    until(
        &format!("{how}: the upstream call was never cancelled"),
        Duration::from_secs(30),
        || async {
            let logged = count(&upstream_log(), mcptask_demo::CANCELLED_WHILE_WAITING) > before;
            (logged || child.is_some_and(ended)).then_some(())
        },
    )
    .await;
    eprintln!(
        "{how}: the upstream call was cancelled {} ms after the caller went away",
        gone.elapsed().as_millis()
    );
}

/// A plain call through `client` answers (the upstream's lanes are free).
async fn greet_answers(client: &TestClient) {
    match client
        .call("demo__greet", json!({"name": "again"}))
        .await
        .expect("a following call on the same upstream")
    {
        CallToolResponse::Complete(result) => {
            let text = serde_json::to_value(&result).unwrap()["content"][0]["text"].clone();
            assert_eq!(text, json!("Hello, again!"), "{result:?}");
        }
        other => panic!("expected a synchronous answer, got {other:?}"),
    }
}

/// A stdio host of `mcptask proxy --stdio` that goes away while a
/// synchronous call is in flight upstream: closing the proxy's stdin (the
/// host exits) or killing the proxy. The upstream call is cancelled either
/// way, and a new host's call on the same upstream answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_host_gone_mid_sync_call_cancels_the_upstream_call() {
    let db = TestDatabase::sqlite();
    with_deadline(Duration::from_secs(240), async {
        let server = DemoServer::start(&db.url, &[]).await;
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("mcptask.toml");
        let toml = format!(
            "[database]\nurl = {}\n[api]\nauth = \"none\"\n{}",
            json!(format!("sqlite:{}", dir.path().join("front.db").display())),
            demo_entry(&server.url, "")
        );
        std::fs::write(&config, toml).unwrap();
        for how in ["the host closes stdin", "the proxy is killed"] {
            let host = TestClient::stdio(
                proxy_stdio_command(&config),
                Lifecycle::Modern { tasks: false },
            )
            .await
            .expect("connect to mcptask proxy --stdio");
            let cancelled = count(&server.log(), mcptask_demo::CANCELLED_WHILE_WAITING);
            let call = start_blocking_call(host.peer().clone(), &|| server.log()).await;
            let gone = std::time::Instant::now();
            if how == "the proxy is killed" {
                let pids = process::children_with(&config.display().to_string());
                assert_eq!(pids.len(), 1, "the proxy's pid: {pids:?}");
                process::sigkill(pids[0]);
            }
            host.close().await;
            call.abort();
            upstream_saw_cancellation(&|| server.log(), cancelled, how, gone).await;
        }
        stdin_closed_alone(&config, &server).await;
        let host = TestClient::stdio(
            proxy_stdio_command(&config),
            Lifecycle::Modern { tasks: false },
        )
        .await
        .expect("connect to mcptask proxy --stdio");
        greet_answers(&host).await;
        host.close().await;
    })
    .await;
}

/// Where the upstream's log is read: the demo server's own (HTTP), or the
/// gateway's, which logs a stdio child's stderr at debug level.
const GATEWAY_LOG: &[(&str, &str)] = &[(
    "MCPTASK_LOG",
    "info,mcptask_client::remote::tap=debug,sqlx=warn,rmcp=warn",
)];

/// What rmcp logs when a handler outlives its drain after the input closed.
const DRAIN_TIMED_OUT: &str = "timed out draining in-flight responses";

/// A host that dies without a word to its proxy: the proxy's stdin closes,
/// no signal follows. The upstream call is cancelled at once (not left
/// running through rmcp's drain of in-flight handlers) and the proxy exits.
async fn stdin_closed_alone(config: &std::path::Path, server: &DemoServer) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let mut command = proxy_stdio_command(config);
    command
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut proxy = command.spawn().expect("spawn mcptask proxy --stdio");
    let mut stderr = proxy.stderr.take().expect("piped stderr");
    let proxy_log = tokio::spawn(async move {
        use tokio::io::AsyncReadExt;
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text).await;
        text
    });
    let mut stdin = proxy.stdin.take().expect("piped stdin");
    let mut stdout = BufReader::new(proxy.stdout.take().expect("piped stdout")).lines();
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "dying-host", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    let discover =
        json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": meta}});
    stdin
        .write_all(format!("{discover}\n").as_bytes())
        .await
        .unwrap();
    let answer = tokio::time::timeout(WAIT, stdout.next_line())
        .await
        .expect("server/discover answered")
        .expect("read stdout")
        .expect("a line");
    assert!(answer.contains("\"result\""), "server/discover: {answer}");
    let cancelled = count(&server.log(), mcptask_demo::CANCELLED_WHILE_WAITING);
    let waiting = count(&server.log(), WAITING);
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "demo__test_wait_for_cancellation", "arguments": {}, "_meta": meta}});
    stdin
        .write_all(format!("{call}\n").as_bytes())
        .await
        .unwrap();
    until("the upstream runs the call", WAIT, || async {
        (count(&server.log(), WAITING) > waiting).then_some(())
    })
    .await;
    let gone = std::time::Instant::now();
    drop(stdin);
    let how = "only the proxy's stdin closes";
    upstream_saw_cancellation(&|| server.log(), cancelled, how, gone).await;
    let exited = tokio::time::timeout(Duration::from_secs(60), proxy.wait()).await;
    assert!(exited.is_ok(), "{how}: the proxy did not exit");
    drop(stdout);
    let log = proxy_log.await.expect("the proxy's stderr");
    assert!(
        !log.contains(DRAIN_TIMED_OUT),
        "{how}: the upstream call ran on until rmcp's drain gave up:\n{log}"
    );
}

/// An HTTP client of `/mcp` that drops its connection while its synchronous
/// call is in flight upstream, once more than a stdio upstream has lanes
/// (4): each upstream call is cancelled (the HTTP request aborted for a
/// 2026-07-28 HTTP upstream, `notifications/cancelled` for a stdio session),
/// no lane stays held (the next call on the same upstream answers), and no
/// call row is left live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_client_gone_mid_sync_call_cancels_the_upstream_call() {
    let (db, front_db) = (TestDatabase::sqlite(), TestDatabase::sqlite());
    with_deadline(Duration::from_secs(300), async {
        let server = DemoServer::start(&db.url, &[]).await;
        let stdio_db = TestDatabase::sqlite();
        let stdio_entry = format!(
            "[[servers]]\nname = \"demo\"\ncommand = {}\nargs = [\"demo-server\", \"--stdio\", \"--database-url\", {}]\n",
            json!(bin()),
            json!(stdio_db.url)
        );
        for (upstream, entry) in [
            ("HTTP", demo_entry(&server.url, "")),
            ("stdio", stdio_entry),
        ] {
            let toml = format!(
                "{}\n[proxy]\nenabled = true\n",
                fault_gateway_toml(&front_db.url, &entry)
            );
            let gateway = GatewayProcess::start_toml("front", &toml, GATEWAY_LOG).await;
            let upstream_log = || match upstream {
                "HTTP" => server.log(),
                _ => gateway.log(),
            };
            let url = format!("{}/mcp", gateway.base);
            for round in 0..5 {
                let client = TestClient::http(&url, None, Lifecycle::Modern { tasks: false })
                    .await
                    .expect("connect to /mcp");
                let cancelled = count(&upstream_log(), mcptask_demo::CANCELLED_WHILE_WAITING);
                let call = start_blocking_call(client.peer().clone(), &upstream_log).await;
                // The client process goes away: its connections close.
                let gone = std::time::Instant::now();
                call.abort();
                client.close().await;
                let how = format!("{upstream} upstream, round {round}");
                upstream_saw_cancellation(&upstream_log, cancelled, &how, gone).await;
            }
            let client = TestClient::http(&url, None, Lifecycle::Modern { tasks: false })
                .await
                .expect("connect to /mcp");
            greet_answers(&client).await;
            client.close().await;
            let live: Vec<Value> = gateway
                .client(None)
                .list_all("")
                .await
                .into_iter()
                .filter(|t| !is_terminal(t))
                .collect();
            assert!(live.is_empty(), "{upstream}: calls left live: {live:#?}");
        }
    })
    .await;
}

/// An upstream that grants a shorter TTL than the front would keep its task
/// (60 s against the front's default hour): the front task's TTL is not
/// longer, in its `CreateTaskResult` and in `tasks/get`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn front_task_ttl_is_capped_by_the_upstreams() {
    let (db, front_db) = (TestDatabase::sqlite(), TestDatabase::sqlite());
    with_deadline(Duration::from_secs(180), async {
        let server = DemoServer::start(&db.url, &[]).await;
        let scripted = ScriptedServer::start(&server.url).await;
        let granted = 60_000;
        let upstream_task = json!({"resultType": "task", "ttlMs": granted});
        scripted.script(
            Rule::new(
                "tools/call",
                1,
                Scripted::Result(task_result("up-short-ttl", "working", upstream_task)),
            )
            .when("/name", json!("slow_compute")),
        );
        scripted.script(
            Rule::new(
                "tasks/get",
                usize::MAX,
                Scripted::Result(task_result(
                    "up-short-ttl",
                    "working",
                    json!({"ttlMs": granted}),
                )),
            )
            .for_task("up-short-ttl"),
        );
        let gateway = front(&front_db, &demo_entry(&scripted.url(), ""), "").await;
        let client = gateway.front_client().await;
        let created = match client
            .call("demo__slow_compute", json!({"seconds": 600}))
            .await
            .expect("tools/call")
        {
            CallToolResponse::Task(created) => created,
            other => panic!("expected a front task, got {other:?}"),
        };
        let created_wire = serde_json::to_value(&created).unwrap();
        let ttl = created_wire["ttlMs"].as_i64();
        assert!(
            ttl.is_some_and(|t| t <= granted),
            "the created front task promises {ttl:?} ms, the upstream grants {granted}: {created_wire:#}"
        );
        let id = created.task.task_id.clone();
        let got = wire(&client.get(&id).await.expect("tasks/get"));
        let ttl = got["ttlMs"].as_i64();
        assert!(
            ttl.is_some_and(|t| t <= granted),
            "tasks/get promises {ttl:?} ms, the upstream grants {granted}: {got:#}"
        );
        client.cancel(&id).await.expect("tasks/cancel");
        client.close().await;
    })
    .await;
}

/// A tracked upstream task asks a question nobody answers: after the
/// front's bound (`[proxy] question_timeout_ms`, 1.5 s here) the front
/// task fails saying so, and the upstream task is cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_relayed_question_expires_and_cancels_the_upstream_task() {
    let (db, front_db) = (TestDatabase::sqlite(), TestDatabase::sqlite());
    with_deadline(Duration::from_secs(180), async {
        let server = DemoServer::start(&db.url, &[]).await;
        let gateway = front(
            &front_db,
            &demo_entry(&server.url, ""),
            "question_timeout_ms = 1500\n",
        )
        .await;
        let client = gateway.front_client().await;
        let id = client
            .start_task("demo__confirm_delete", json!({"filename": "never.txt"}))
            .await;
        let asked = client
            .wait_for(&id, WAIT, |t| {
                wire(t)["status"] == "input_required" || t.task.status().is_terminal()
            })
            .await;
        assert_eq!(
            wire(&asked)["status"],
            "input_required",
            "{:#}",
            wire(&asked)
        );
        // Nobody answers.
        let asked_at = std::time::Instant::now();
        let ended = client.wait_terminal(&id, WAIT).await;
        eprintln!(
            "tracked: the front task failed {} ms after it was seen asking",
            asked_at.elapsed().as_millis()
        );
        let ended = wire(&ended);
        assert_eq!(ended["status"], "failed", "{ended:#}");
        let message = ended["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("no answer") && message.contains("1500"),
            "the failure does not say why: {ended:#}"
        );
        // The upstream task was cancelled, not left waiting for an answer.
        let row = gateway.client(None).task(&id).await;
        let remote = row["remoteTaskId"]
            .as_str()
            .expect("the upstream task id")
            .to_string();
        let direct = server.client().await;
        let upstream = direct
            .wait_for(&remote, WAIT, |t| t.task.status().is_terminal())
            .await;
        assert_eq!(
            wire(&upstream)["status"],
            "cancelled",
            "{:#}",
            wire(&upstream)
        );
        direct.close().await;
        client.close().await;
    })
    .await;
}

/// The demo server's tool list as its `tools/list` result, with `drop`
/// left out and a copy of `greet` named `add` put in.
async fn changed_listing(server: &DemoServer, drop: &str, add: &str) -> Value {
    let direct = server.client().await;
    let tools = direct.peer().list_all_tools().await.expect("tools/list");
    direct.close().await;
    let mut listed: Vec<Value> = tools
        .iter()
        .filter(|t| t.name != drop)
        .map(|t| serde_json::to_value(t).unwrap())
        .collect();
    let mut added = listed
        .iter()
        .find(|t| t["name"] == "greet")
        .cloned()
        .expect("the demo lists greet");
    added["name"] = json!(add);
    listed.push(added);
    json!({"resultType": "complete", "tools": listed})
}

async fn front_names(client: &TestClient) -> Vec<String> {
    client
        .peer()
        .list_all_tools()
        .await
        .expect("tools/list")
        .into_iter()
        .map(|t| t.name.to_string())
        .collect()
}

/// While a front task of `confirm_delete` waits for its answer, the
/// upstream drops that tool, adds another, and says its list changed: the
/// task still completes with the upstream's result; the front's
/// `tools/list` shows the new list; a new call of the dropped tool is
/// refused as unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_tool_list_changing_mid_task_the_task_completes() {
    let (db, front_db) = (TestDatabase::sqlite(), TestDatabase::sqlite());
    with_deadline(Duration::from_secs(180), async {
        let server = DemoServer::start(&db.url, &[]).await;
        let scripted = ScriptedServer::start(&server.url).await;
        let gateway = front(&front_db, &demo_entry(&scripted.url(), ""), "").await;
        let client = gateway.front_client().await;
        assert!(
            front_names(&client)
                .await
                .contains(&"demo__confirm_delete".into())
        );
        let id = client
            .start_task("demo__confirm_delete", json!({"filename": "kept.txt"}))
            .await;
        let asked = client
            .wait_for(&id, WAIT, |t| {
                wire(t)["status"] == "input_required" || t.task.status().is_terminal()
            })
            .await;
        let asked = wire(&asked);
        assert_eq!(asked["status"], "input_required", "{asked:#}");

        // The upstream's tools change, and it says so on its listen stream.
        let listing = changed_listing(&server, "confirm_delete", "brand_new_tool").await;
        scripted.script(Rule::new(
            "tools/list",
            usize::MAX,
            Scripted::Result(listing),
        ));
        let direct = server.client().await;
        direct
            .call("test_trigger_tool_change", json!({}))
            .await
            .expect("announce the change");
        direct.close().await;
        let names = until("the front lists the new tools", WAIT, || async {
            let names = front_names(&client).await;
            (!names.contains(&"demo__confirm_delete".to_string())).then_some(names)
        })
        .await;
        assert!(
            names.contains(&"demo__brand_new_tool".to_string()),
            "{names:?}"
        );

        // A new call of the dropped tool: refused as unknown.
        let refused = client
            .call("demo__confirm_delete", json!({"filename": "new.txt"}))
            .await
            .expect_err("a call of a tool the upstream dropped");
        assert_eq!(error_code(&refused), Some(-32602), "{refused}");
        assert!(
            refused.to_string().contains("demo__confirm_delete"),
            "{refused}"
        );

        // The running task: answered, it completes with the upstream's result.
        let key = input_keys(&asked)[0].clone();
        client
            .update(
                &id,
                json!({ key: {"action": "accept", "content": {"confirm": true}} }),
            )
            .await
            .expect("tasks/update");
        let done = wire(&client.wait_terminal(&id, WAIT).await);
        assert_eq!(done["status"], "completed", "{done:#}");
        assert!(result_text(&done).contains("Deleted kept.txt"), "{done:#}");
        client.close().await;
    })
    .await;
}

/// A synchronous upstream (the reference "everything" server, stdio) asks
/// mid-call (`elicitation/create`) through a front task and nobody
/// answers: after the bound the front task fails saying so, the upstream
/// call is withdrawn, and the next call on that server answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_mid_call_question_expires_and_ends_the_sync_call() {
    let test = "an_unanswered_mid_call_question_expires_and_ends_the_sync_call";
    let Some(everything) = Everything::or_skip(test) else {
        return;
    };
    let front_db = TestDatabase::sqlite();
    with_deadline(Duration::from_secs(180), async {
        let servers = everything.server_toml(
            "everything",
            "connect_timeout_ms = 20000\ncall_timeout_ms = 60000\n",
        );
        let gateway = front(&front_db, &servers, "question_timeout_ms = 1500\n").await;
        let client = gateway.front_client().await;
        let id = client
            .start_task("everything__trigger-elicitation-request", json!({}))
            .await;
        let asked = client
            .wait_for(&id, WAIT, |t| {
                wire(t)["status"] == "input_required" || t.task.status().is_terminal()
            })
            .await;
        assert_eq!(
            wire(&asked)["status"],
            "input_required",
            "{:#}",
            wire(&asked)
        );
        // Nobody answers.
        let asked_at = std::time::Instant::now();
        let ended = wire(&client.wait_terminal(&id, WAIT).await);
        eprintln!(
            "synchronous: the front task failed {} ms after it was seen asking",
            asked_at.elapsed().as_millis()
        );
        assert_eq!(ended["status"], "failed", "{ended:#}");
        assert_eq!(
            ended["error"]["data"]["reason"], "question_timeout",
            "{ended:#}"
        );
        assert!(
            ended["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("1500")),
            "{ended:#}"
        );
        match client
            .call("everything__echo", json!({"message": "still here"}))
            .await
            .expect("a following call on the same upstream")
        {
            CallToolResponse::Task(created) => {
                let done = wire(&client.wait_terminal(&created.task.task_id, WAIT).await);
                assert_eq!(done["status"], "completed", "{done:#}");
                assert!(result_text(&done).contains("still here"), "{done:#}");
            }
            CallToolResponse::Complete(result) => {
                let text = serde_json::to_value(&result).unwrap().to_string();
                assert!(text.contains("still here"), "{text}");
            }
            other => panic!("unexpected answer {other:?}"),
        }
        client.close().await;
    })
    .await;
}
