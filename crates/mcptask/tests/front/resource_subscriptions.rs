//! `resources/subscribe` through the front: offered when a server behind it
//! offers it, sent to the server the resource belongs to (the rule of
//! `resources/read`), subscribed there once however many callers want it,
//! and the server's `notifications/resources/updated` handed to exactly the
//! caller sessions subscribed to that URI.

use std::time::Duration;

use mcptask_testkit::{GatewayProcess, GatewaySpec, TestDatabase, WatchedUpstream, with_deadline};
use rmcp::model::{
    CallToolRequestParams, ResourceUpdatedNotificationParam, SubscribeRequestParams,
    UnsubscribeRequestParams,
};
use rmcp::service::{
    ClientLifecycleMode, ClientServiceExt as _, NotificationContext, RunningService,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientHandler, RoleClient};
use serde_json::json;
use tokio::sync::mpsc;

/// Hands every `notifications/resources/updated` a session hears to the test.
#[derive(Clone)]
struct Updates(mpsc::UnboundedSender<String>);

impl ClientHandler for Updates {
    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let _ = self.0.send(params.uri);
    }
}

type Session = RunningService<RoleClient, Updates>;

/// A 2025-11-25 session with the front at `url`, and the URIs it hears updated.
async fn session(url: &str) -> (Session, mpsc::UnboundedReceiver<String>) {
    session_as(url, None).await
}

/// [`session`] with the bearer token `token`.
async fn session_as(url: &str, token: Option<&str>) -> (Session, mpsc::UnboundedReceiver<String>) {
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    mcptask_client::tls::install_crypto_provider();
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_string());
    if let Some(token) = token {
        config = config.auth_header(token.to_string());
    }
    let (tx, heard) = mpsc::unbounded_channel();
    let session = Updates(tx)
        .serve_with_lifecycle(
            StreamableHttpClientTransport::from_config(config),
            ClientLifecycleMode::Initialize,
        )
        .await
        .expect("a legacy session with the front");
    (session, heard)
}

#[allow(deprecated)]
async fn subscribe(session: &Session, uri: &str) {
    session
        .peer()
        .subscribe(SubscribeRequestParams::new(uri))
        .await
        .unwrap_or_else(|e| panic!("resources/subscribe {uri}: {e}"));
}

#[allow(deprecated)]
async fn unsubscribe(session: &Session, uri: &str) {
    session
        .peer()
        .unsubscribe(UnsubscribeRequestParams::new(uri))
        .await
        .unwrap_or_else(|e| panic!("resources/unsubscribe {uri}: {e}"));
}

/// Have server `b` say `uri` changed (its tool, called through the front).
async fn touch(session: &Session, uri: &str) {
    let arguments = json!({"uri": uri}).as_object().cloned().expect("an object");
    session
        .peer()
        .call_tool(CallToolRequestParams::new("b__touch").with_arguments(arguments))
        .await
        .unwrap_or_else(|e| panic!("b__touch {uri}: {e}"));
}

/// The next URI `heard` hears (fails the test after 10 s).
async fn next(heard: &mut mpsc::UnboundedReceiver<String>, who: &str) -> String {
    tokio::time::timeout(Duration::from_secs(10), heard.recv())
        .await
        .unwrap_or_else(|_| panic!("{who} heard no resources/updated within 10 s"))
        .expect("the session's handler lives")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_goes_to_the_resources_server_and_its_updates_to_the_subscribed_sessions() {
    let front_db = TestDatabase::sqlite();
    with_deadline(Duration::from_secs(120), async {
        let a = WatchedUpstream::start("a").await;
        let b = WatchedUpstream::start("b").await;
        let toml = GatewaySpec::open(&front_db.url, &[("a", &a.url), ("b", &b.url)]).toml()
            + "\n[proxy]\nenabled = true\n";
        let gateway = GatewayProcess::start_toml("proxy before two servers", &toml, &[]).await;
        let url = format!("{}/mcp", gateway.base);
        let (one, mut one_heard) = session(&url).await;
        let (two, mut two_heard) = session(&url).await;

        let offered = one
            .peer()
            .peer_info()
            .and_then(|i| i.capabilities.resources.clone())
            .and_then(|r| r.subscribe);
        assert_eq!(
            offered,
            Some(true),
            "the front offers what its servers offer"
        );

        // Each URI goes to the server that lists it, and only there.
        subscribe(&one, "b://one").await;
        subscribe(&two, "b://two").await;
        assert_eq!(
            (
                b.heard("subscribe", "b://one"),
                a.heard("subscribe", "b://one")
            ),
            (1, 0)
        );
        assert_eq!(b.heard("subscribe", "b://two"), 1);

        // Each session hears the updates of its own subscriptions: the
        // front hands one URI's update to its sessions before the next
        // URI's, so `two`'s first is `b://two` only if it never got `b://one`.
        touch(&one, "b://one").await;
        assert_eq!(next(&mut one_heard, "session one").await, "b://one");
        touch(&one, "b://two").await;
        assert_eq!(next(&mut two_heard, "session two").await, "b://two");

        // A second caller of one URI: the server is asked once, both hear it.
        subscribe(&two, "b://one").await;
        assert_eq!(
            b.heard("subscribe", "b://one"),
            1,
            "subscribed upstream once"
        );
        touch(&two, "b://one").await;
        assert_eq!(next(&mut one_heard, "session one").await, "b://one");
        assert_eq!(next(&mut two_heard, "session two").await, "b://one");

        // The server hears the unsubscription when the last caller leaves.
        unsubscribe(&one, "b://one").await;
        assert_eq!(
            b.heard("unsubscribe", "b://one"),
            0,
            "session two still wants it"
        );
        unsubscribe(&two, "b://one").await;
        assert_eq!(b.heard("unsubscribe", "b://one"), 1);

        // A URI no server lists, with two servers offering resources: no
        // owner, refused as a read of it is.
        #[allow(deprecated)]
        let refused = one
            .peer()
            .subscribe(SubscribeRequestParams::new("z://nowhere"))
            .await
            .expect_err("nobody's resource");
        assert!(refused.to_string().contains("z://nowhere"), "{refused}");
        assert_eq!(
            a.heard("subscribe", "z://nowhere") + b.heard("subscribe", "z://nowhere"),
            0
        );

        // A session that ends without unsubscribing: the next update of its
        // URI finds nobody to hand it to, and the server is told.
        let _ = two.cancel().await;
        for _ in 0..40 {
            touch(&one, "b://two").await;
            if b.heard("unsubscribe", "b://two") > 0 {
                break;
            }
            // How long matters not: the session's end is waited for.
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        assert_eq!(
            b.heard("unsubscribe", "b://two"),
            1,
            "the ended session's URI"
        );

        let _ = one.cancel().await;
    })
    .await;
}

/// What the front can only pass on is offered only when a server behind it
/// offers it: before a server of tools alone, no resource subscriptions,
/// completions, logging or word of changed prompts and resources (its own
/// list of tools changes as servers come and go: that it always offers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_front_offers_only_what_its_servers_offer() {
    let front_db = TestDatabase::sqlite();
    with_deadline(Duration::from_secs(60), async {
        let tools_only = mcptask_testkit::SyncUpstream::start_legacy().await;
        let toml = GatewaySpec::open(&front_db.url, &[("plain", &tools_only.url)]).toml()
            + "\n[proxy]\nenabled = true\n";
        let gateway =
            GatewayProcess::start_toml("proxy before a server of tools", &toml, &[]).await;
        let (session, _heard) = session(&format!("{}/mcp", gateway.base)).await;
        let offered = session
            .peer()
            .peer_info()
            .expect("the front's initialize answer")
            .capabilities
            .clone();
        let tools_change = offered.tools.as_ref().and_then(|t| t.list_changed);
        let prompts_change = offered.prompts.as_ref().and_then(|p| p.list_changed);
        let resources = offered.resources.clone().unwrap_or_default();
        #[allow(deprecated)]
        let logging = offered.logging.clone();
        assert_eq!(
            (
                tools_change,
                prompts_change,
                resources.list_changed,
                resources.subscribe,
                offered.completions.is_some(),
                logging.is_some()
            ),
            (Some(true), None, None, None, false, false),
            "{offered:?}"
        );
        let _ = session.cancel().await;
    })
    .await;
}

/// A subscription is a resource request under the caller's policy: a
/// principal denied the server is refused as for a URI no server offers,
/// and the server never hears of it; another principal subscribes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_principal_denied_a_resource_cannot_subscribe_to_it() {
    use mcptask_testkit::{ALICE, BOB};
    let front_db = TestDatabase::sqlite();
    with_deadline(Duration::from_secs(60), async {
        let b = WatchedUpstream::start("b").await;
        let toml = GatewaySpec::with_tokens(&front_db.url, &[("b", &b.url)]).toml()
            + "\n[proxy]\nenabled = true\n\n[[policy]]\nprincipal = \"alice\"\ndeny = [\"b/*\"]\n";
        let gateway = GatewayProcess::start_toml("proxy with a policy", &toml, &[]).await;
        let url = format!("{}/mcp", gateway.base);
        let (alice, _) = session_as(&url, Some(ALICE)).await;
        let (bob, _) = session_as(&url, Some(BOB)).await;
        #[allow(deprecated)]
        let refused = alice
            .peer()
            .subscribe(SubscribeRequestParams::new("b://one"))
            .await
            .expect_err("alice may not read b's resources");
        assert!(
            refused.to_string().contains("no upstream server offers"),
            "{refused}"
        );
        assert_eq!(b.heard("subscribe", "b://one"), 0);
        subscribe(&bob, "b://one").await;
        assert_eq!(b.heard("subscribe", "b://one"), 1);
        let _ = alice.cancel().await;
        let _ = bob.cancel().await;
    })
    .await;
}
