//! The front before upstreams that behave as real ones do (issue 32's
//! acceptance): one that accepts connections and never answers, one that
//! starts after the gateway, a host that exits while its background task
//! runs. Each test prints what it measured.

use std::time::{Duration, Instant};

use mcptask_testkit::mcp::{Lifecycle, TestClient};
use mcptask_testkit::*;
use rmcp::model::CallToolResponse;
use serde_json::json;

fn names(tools: Vec<rmcp::model::Tool>) -> Vec<String> {
    tools.into_iter().map(|t| t.name.to_string()).collect()
}

/// `[proxy] enabled` before `servers` (`[[servers]]` TOML entries).
pub(crate) fn front_toml(db: &TestDatabase, servers: &str) -> String {
    format!(
        "{}\n[proxy]\nenabled = true\n\n{servers}",
        GatewaySpec::open(&db.url, &[]).toml()
    )
}

/// Hears `notifications/tools/list_changed` on a session-ful (legacy
/// `initialize`) connection to the front, as a desktop host does.
#[derive(Clone)]
pub(crate) struct ListChanged(tokio::sync::mpsc::UnboundedSender<Instant>);

impl rmcp::ClientHandler for ListChanged {
    async fn on_tool_list_changed(
        &self,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        let _ = self.0.send(Instant::now());
    }
}

/// A legacy session with the front at `url` that reports list changes.
pub(crate) async fn listening_host(
    url: &str,
) -> (
    rmcp::service::RunningService<rmcp::RoleClient, ListChanged>,
    tokio::sync::mpsc::UnboundedReceiver<Instant>,
) {
    use rmcp::service::{ClientLifecycleMode, ClientServiceExt as _};
    use rmcp::transport::StreamableHttpClientTransport;
    mcptask_client::tls::install_crypto_provider();
    let (tx, heard) = tokio::sync::mpsc::unbounded_channel();
    let host = ListChanged(tx)
        .serve_with_lifecycle(
            StreamableHttpClientTransport::from_uri(url.to_string()),
            ClientLifecycleMode::Initialize,
        )
        .await
        .expect("a legacy session with the front");
    (host, heard)
}

/// An upstream that accepts connections and reads requests but never
/// answers (its connect timeout the default 30 s), beside a working one:
/// `serve` listens, answers `initialize` and lists the working server's
/// tools within 1 s of being started; the mute server's tools are "not
/// ready", and the front declares `tools.listChanged` to say when they come.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mute_upstream_beside_a_working_one_delays_nothing() {
    with_deadline(Duration::from_secs(120), async {
        let working = SyncUpstream::start().await;
        let behind = SyncUpstream::start().await;
        let mute = FaultFront::start(behind.url.trim_end_matches("/mcp")).await;
        mute.set(Fault::Hang);
        let db = TestDatabase::sqlite();
        let toml = front_toml(
            &db,
            &format!(
                "[[servers]]\nname = \"work\"\nurl = \"{}\"\n\n[[servers]]\nname = \"mute\"\nurl = \"{}\"\n",
                working.url,
                mute.url()
            ),
        );
        // What starting a gateway costs on this machine now, before the
        // working server alone: the mute one may add nothing to it.
        let alone = Instant::now();
        let baseline = GatewayProcess::start_toml(
            "front before a working upstream",
            &front_toml(
                &TestDatabase::sqlite(),
                &format!("[[servers]]\nname = \"work\"\nurl = \"{}\"\n", working.url),
            ),
            &[],
        )
        .await;
        let alone = alone.elapsed();
        drop(baseline);
        let started = Instant::now();
        let gateway = GatewayProcess::start_toml("front before a mute upstream", &toml, &[]).await;
        let listening = started.elapsed();
        let url = format!("{}/mcp", gateway.base);
        let (host, _heard) = listening_host(&url).await;
        let initialized = started.elapsed();
        let tools = names(host.peer().list_all_tools().await.expect("tools/list"));
        let listed = started.elapsed();
        println!(
            "mute beside working: listening {listening:?} (alone: {alone:?}), initialize answered {initialized:?}, tools/list answered {listed:?} after the spawn"
        );
        assert!(
            tools.iter().any(|n| n == "work__echo"),
            "the working server's tools at once: {tools:?}"
        );
        assert!(!tools.iter().any(|n| n.starts_with("mute__")), "{tools:?}");
        // The process's own start (migrations, a loaded machine) is not the
        // front's wait: measured against the same start without the mute
        // server, and from when it listens.
        assert!(
            listening < alone + Duration::from_secs(1),
            "listening after {listening:?}, {alone:?} without the mute server"
        );
        assert!(
            listed - listening < Duration::from_secs(1),
            "initialize and tools/list answered {:?} after the gateway listened",
            listed - listening
        );
        let caps = host.peer().peer_info().expect("the front's initialize result");
        let list_changed = caps
            .capabilities
            .tools
            .as_ref()
            .and_then(|t| t.list_changed);
        assert_eq!(list_changed, Some(true), "{caps:?}");
        // The mute server's tools are not ready (not unknown), and the
        // working one answers meanwhile.
        let client = TestClient::http(&url, None, Lifecycle::Modern { tasks: false })
            .await
            .expect("a client of /mcp");
        let error = client
            .call("mute__echo", json!({"text": "anyone?"}))
            .await
            .expect_err("the mute server is not listed");
        assert!(error.to_string().contains("not ready"), "{error}");
        let answer = client
            .call("work__echo", json!({"text": "here"}))
            .await
            .expect("the working server answers");
        assert!(format!("{answer:?}").contains("here"), "{answer:?}");
        assert!(!mute.seen().is_empty(), "the mute server was asked");
    })
    .await;
}

/// An upstream that starts listening 5 s after the gateway: its tools are
/// listed (and a connected host told `notifications/tools/list_changed`)
/// within 2 s of it listening, and calls of them work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_started_5_s_after_the_gateway_is_listed_within_2_s() {
    with_deadline(Duration::from_secs(120), async {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let db = TestDatabase::sqlite();
        let toml = front_toml(
            &db,
            &format!("[[servers]]\nname = \"late\"\nurl = \"http://127.0.0.1:{port}/mcp\"\n"),
        );
        let started = Instant::now();
        let gateway = GatewayProcess::start_toml("front before a late upstream", &toml, &[]).await;
        let url = format!("{}/mcp", gateway.base);
        let (host, mut heard) = listening_host(&url).await;
        let before = names(host.peer().list_all_tools().await.expect("tools/list"));
        assert!(!before.iter().any(|n| n.starts_with("late__")), "{before:?}");

        tokio::time::sleep(Duration::from_secs(5).saturating_sub(started.elapsed())).await;
        let _late = SyncUpstream::start_at(&format!("127.0.0.1:{port}")).await;
        let up = Instant::now();
        let announced = tokio::time::timeout(Duration::from_secs(30), heard.recv())
            .await
            .expect("a list_changed within 30 s")
            .expect("a list_changed");
        let announced = announced.saturating_duration_since(up);
        let tools = names(host.peer().list_all_tools().await.expect("tools/list"));
        let listed = up.elapsed();
        println!(
            "late upstream: listening {:?} after the gateway was started; list_changed {announced:?} and tools/list {listed:?} after it listened",
            up - started
        );
        assert!(tools.iter().any(|n| n == "late__echo"), "{tools:?}");
        assert!(
            listed < Duration::from_secs(2),
            "listed {listed:?} after it listened"
        );
        let client = TestClient::http(&url, None, Lifecycle::Modern { tasks: false })
            .await
            .expect("a client of /mcp");
        let answer = client
            .call("late__echo", json!({"text": "on time"}))
            .await
            .expect("the late server answers");
        assert!(
            matches!(&answer, CallToolResponse::Complete(r) if format!("{r:?}").contains("on time")),
            "{answer:?}"
        );
    })
    .await;
}

/// One JSON-RPC exchange over a stdio proxy's pipes: a 2026-07-28 request
/// (no session), its answer line.
async fn ask_stdio(
    stdin: &mut tokio::process::ChildStdin,
    stdout: &mut tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
    id: u64,
    method: &str,
    params: serde_json::Value,
) -> serde_json::Value {
    use tokio::io::AsyncWriteExt;
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "short-lived-host", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    stdin
        .write_all(format!("{request}\n").as_bytes())
        .await
        .expect("write to the proxy");
    loop {
        let line = tokio::time::timeout(Duration::from_secs(30), stdout.next_line())
            .await
            .expect("an answer within 30 s")
            .expect("read the proxy's stdout")
            .expect("the proxy answers");
        let message: serde_json::Value = serde_json::from_str(&line).expect("JSON-RPC");
        if message["id"] == json!(id) {
            return message;
        }
    }
}

/// `mcptask proxy --stdio` on `config`, its pipes taken.
fn spawn_proxy(
    config: &std::path::Path,
) -> (
    tokio::process::Child,
    tokio::process::ChildStdin,
    tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
) {
    use tokio::io::AsyncBufReadExt;
    let mut command = proxy_stdio_command(config);
    command
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    let mut proxy = command.spawn().expect("spawn mcptask proxy --stdio");
    let stdin = proxy.stdin.take().expect("piped stdin");
    let stdout = tokio::io::BufReader::new(proxy.stdout.take().expect("piped stdout")).lines();
    (proxy, stdin, stdout)
}

/// A host that starts a background call through `proxy --stdio` and exits
/// (its stdin closes, as every `inspector --cli` run does) while the call
/// runs longer than the proxy's shutdown drain (10 s): the proxy finishes
/// the call before it exits, and a later proxy on the same SQLite file
/// reads it `completed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_call_of_a_stdio_host_that_exits_completes() {
    with_deadline(Duration::from_secs(120), async {
        let upstream = SyncUpstream::start().await;
        let dir = tempfile::tempdir().expect("temp dir");
        let config = dir.path().join("mcptask.toml");
        std::fs::write(
            &config,
            format!(
                "[database]\nurl = \"sqlite:{}\"\n[api]\nauth = \"none\"\n\n[[servers]]\nname = \"up\"\nurl = \"{}\"\nbackground = [\"held\"]\n",
                dir.path().join("front.db").display(),
                upstream.url
            ),
        )
        .expect("write mcptask.toml");
        let (mut proxy, mut stdin, mut stdout) = spawn_proxy(&config);
        let started = ask_stdio(
            &mut stdin,
            &mut stdout,
            1,
            "tools/call",
            json!({"name": "up__held", "arguments": {}}),
        )
        .await;
        let id = started["result"]["structuredContent"]["taskId"]
            .as_str()
            .unwrap_or_else(|| panic!("a background task: {started}"))
            .to_string();
        upstream.wait_heard("held", 1).await;
        // The host exits: its end of the pipes closes, no signal follows.
        drop(stdin);
        drop(stdout);
        let gone = Instant::now();
        // Longer than the proxy's drain at shutdown: before this fix the
        // call was left to recovery there and failed "interrupted".
        tokio::time::sleep(Duration::from_secs(11)).await;
        assert!(
            proxy.try_wait().expect("the proxy's status").is_none(),
            "the proxy exited while its host's call ran"
        );
        upstream.release(1);
        let exited = tokio::time::timeout(Duration::from_secs(20), proxy.wait())
            .await
            .expect("the proxy exits once the call has ended")
            .expect("the proxy's status");
        println!(
            "the proxy exited {:?} after its host ({exited}), the call released after 11 s",
            gone.elapsed()
        );
        assert!(exited.success(), "{exited}");

        let (_later, mut stdin, mut stdout) = spawn_proxy(&config);
        let got = ask_stdio(
            &mut stdin,
            &mut stdout,
            1,
            "tools/call",
            json!({"name": "mcptask_get_task", "arguments": {"taskId": id}}),
        )
        .await;
        assert_eq!(
            got["result"]["structuredContent"]["status"], "completed",
            "{got:#}"
        );
    })
    .await;
}

/// The content type of the front's answer to a stateless 2026-07-28
/// `tools/list` (the front answers it itself), once `tool` is listed.
async fn listing_answer_type(mcp: &str, tool: &str) -> String {
    mcptask_client::tls::install_crypto_provider();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let response = reqwest::Client::new()
            .post(mcp)
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", "2026-07-28")
            .header("Mcp-Method", "tools/list")
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
            "params": {"_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "style-probe", "version": "0"},
                "io.modelcontextprotocol/clientCapabilities": {},
            }}}))
            .send()
            .await
            .expect("POST /mcp");
        let kind = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let text = response.text().await.expect("the answer");
        if text.contains(tool) {
            return kind;
        }
        assert!(Instant::now() < deadline, "{tool} never listed: {text}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The front answers in its upstream's style: SSE before a server that
/// streams its answers (rmcp's default), JSON before one that answers JSON,
/// so a client sees through the front what it sees directly (issue 32:
/// rmcp's `server-sse-streams-functional` went from SUCCESS directly to
/// INFO through the front, which answered JSON to everything).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_front_answers_as_its_upstream_streams_or_not() {
    with_deadline(Duration::from_secs(120), async {
        for (streaming, want) in [(true, "text/event-stream"), (false, "application/json")] {
            let upstream = if streaming {
                SyncUpstream::start_streaming().await
            } else {
                SyncUpstream::start().await
            };
            let db = TestDatabase::sqlite();
            let toml = front_toml(
                &db,
                &format!("[[servers]]\nname = \"up\"\nurl = \"{}\"\n", upstream.url),
            );
            let gateway = GatewayProcess::start_toml("front answering in style", &toml, &[]).await;
            let direct = listing_answer_type(&upstream.url, "echo").await;
            let through = listing_answer_type(&format!("{}/mcp", gateway.base), "up__echo").await;
            println!(
                "streaming upstream {streaming}: directly {direct:?}, through the front {through:?}"
            );
            assert!(direct.starts_with(want), "directly: {direct}");
            assert!(through.starts_with(want), "through the front: {through}");
        }
    })
    .await;
}
