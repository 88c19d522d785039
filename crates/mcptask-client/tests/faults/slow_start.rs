//! A server slower to answer its first request than rmcp's 10 s
//! `server/discover` probe (an `npx` download, a loaded machine): the probe's
//! late answer must not be taken for the answer to the `initialize` that
//! follows it. Before the handshake guard, the session failed with "the
//! server's answer to `initialize` is not valid MCP".

use std::time::Duration;

use mcptask_client::remote::{Connection, Timeouts};
use mcptask_client::{ServerDef, ServerRegistry};
use mcptask_testkit::{Fault, FaultFront};
use rmcp::model::ProtocolVersion;

/// A legacy (2025-06-18) stdio server that reads nothing for `delay` seconds,
/// then refuses `server/discover` like any pre-2026 server and serves
/// `initialize` and an empty `tools/list`.
const LEGACY_SERVER: &str = r#"
import json, sys, time
time.sleep(float(sys.argv[1]))
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    method, reply = msg.get("method"), {"jsonrpc": "2.0", "id": msg["id"]}
    if method == "initialize":
        reply["result"] = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                           "serverInfo": {"name": "slow-legacy", "version": "0"}}
    elif method == "tools/list":
        reply["result"] = {"tools": []}
    else:
        reply["error"] = {"code": -32601, "message": "Method not found"}
    sys.stdout.write(json.dumps(reply) + "\n")
    sys.stdout.flush()
"#;

/// Connect to `def` with a connect timeout far beyond the servers' delays:
/// only rmcp's own 10 s probe is shorter than them.
async fn connect_patiently(def: ServerDef) -> Connection {
    let name = def.name.clone();
    let registry = ServerRegistry::new();
    registry.upsert(def);
    let timeouts = Timeouts {
        connect: Duration::from_secs(60),
        call: Duration::from_secs(30),
    };
    registry
        .connect(&name, None, timeouts)
        .await
        .expect("a slow server connects once it answers")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_server_slower_than_the_discover_probe_still_connects() {
    let dir = tempfile::tempdir().expect("temp dir");
    let script = dir.path().join("slow_legacy.py");
    std::fs::write(&script, LEGACY_SERVER).expect("write the server");
    let connection = connect_patiently(ServerDef::stdio(
        "slow",
        "python3",
        vec![script.display().to_string(), "11".to_string()],
    ))
    .await;
    let tools = connection.peer.list_all_tools().await.expect("tools/list");
    assert!(tools.is_empty());
}

/// A 2026-07-28 HTTP server whose `server/discover` answer takes longer than
/// rmcp's 10 s `Auto` probe (an OAuth authorization runs inside the probe;
/// a loaded machine): the session is still a 2026-07-28 one. Before, the
/// probe gave up and the session fell back to `initialize` (2025-11-25), or
/// failed outright against a server that only speaks 2026-07-28.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modern_http_server_slower_than_the_discover_probe_is_spoken_to_as_modern() {
    let server = mcptask_testkit::fixtures::client::RemoteServer::start(Some(60_000)).await;
    let front = FaultFront::start(&format!("http://{}", server.addr)).await;
    front.set_for(Fault::Delay(Duration::from_secs(11)), &["server/discover"]);
    let connection = connect_patiently(ServerDef::http("slow", front.url())).await;
    let version = connection
        .peer
        .peer_info()
        .map(|info| info.protocol_version.clone());
    assert_eq!(version, Some(ProtocolVersion::V_2026_07_28));
    assert_eq!(front.count("initialize"), 0, "no fallback to initialize");
}
