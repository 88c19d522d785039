//! Who answers through the front (docs/PROXY.md, "Who answers"): its
//! handshake names the front, and a relayed result keeps the `_meta` the
//! upstream gave it, the upstream's own name included, the same on the
//! fast path (a stateless 2026-07-28 call, relayed as bytes) and the full
//! way (a call in an `initialize` session).

use std::time::Duration;

use mcptask_testkit::mcp::{Lifecycle, TestClient};
use mcptask_testkit::sync_upstream::SERVER_NAME;
use mcptask_testkit::{GatewayProcess, GatewaySpec, SyncUpstream, TestDatabase, with_deadline};
use rmcp::model::CallToolResponse;
use serde_json::{Value, json};

const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handshake_names_the_front_and_a_result_its_upstream_on_every_path() {
    let front_db = TestDatabase::sqlite();
    with_deadline(Duration::from_secs(60), async {
        let upstream = SyncUpstream::start().await;
        let toml = GatewaySpec::open(&front_db.url, &[("up", &upstream.url)]).toml()
            + "\n[proxy]\nenabled = true\n";
        let gateway = GatewayProcess::start_toml("proxy", &toml, &[]).await;
        let mcp = format!("{}/mcp", gateway.base);

        // The fast path: the upstream's bytes.
        mcptask_client::tls::install_crypto_provider();
        let relayed = mcptask_testkit::stateless::post_tools_call(
            &mcp,
            None,
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "up__whoami",
            json!({}),
            json!({
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            }),
        )
        .await;
        assert_eq!(
            relayed["result"]["_meta"][SERVER_INFO]["name"], SERVER_NAME,
            "{relayed}"
        );

        // The full way: a session's call, decoded and answered by the front.
        let session = TestClient::http(&mcp, None, Lifecycle::Legacy)
            .await
            .expect("an initialize session");
        let handshake = session
            .peer()
            .peer_info()
            .expect("the front's initialize answer")
            .server_info
            .clone()
            .map(|info| info.name);
        assert_eq!(handshake.as_deref(), Some("mcptask-proxy"));
        let answer = session
            .call("up__whoami", json!({}))
            .await
            .expect("tools/call");
        let CallToolResponse::Complete(result) = answer else {
            panic!("a session's plain call is answered: {answer:?}")
        };
        let meta = serde_json::to_value(&result.meta).unwrap_or(Value::Null);
        assert_eq!(meta[SERVER_INFO]["name"], SERVER_NAME, "{meta}");
        session.close().await;
    })
    .await;
}
