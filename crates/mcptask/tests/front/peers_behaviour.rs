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
fn front_toml(db: &TestDatabase, servers: &str) -> String {
    format!(
        "{}\n[proxy]\nenabled = true\n\n{servers}",
        GatewaySpec::open(&db.url, &[]).toml()
    )
}

/// Hears `notifications/tools/list_changed` on a session-ful (legacy
/// `initialize`) connection to the front, as a desktop host does.
#[derive(Clone)]
struct ListChanged(tokio::sync::mpsc::UnboundedSender<Instant>);

impl rmcp::ClientHandler for ListChanged {
    async fn on_tool_list_changed(
        &self,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        let _ = self.0.send(Instant::now());
    }
}

/// A legacy session with the front at `url` that reports list changes.
async fn listening_host(
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

