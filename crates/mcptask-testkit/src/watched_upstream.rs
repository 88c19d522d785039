//! A 2025-11-25 MCP server with resources one can subscribe to, in the
//! test's own process, over Streamable HTTP on a loopback port: the
//! upstream a front under test relays `resources/subscribe` to, when the
//! test must know what the upstream heard and when it must say a resource
//! changed.
//!
//! It lists the resources `<scheme>://one` and `<scheme>://two`, offers
//! `resources.subscribe`, records each `resources/subscribe` and
//! `…/unsubscribe` it hears (per URI), and has one tool, `touch {"uri": …}`,
//! which sends `notifications/resources/updated` for `uri` to every session
//! subscribed to it (whichever session the call came on, as a server whose
//! resource changed does).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams,
    ReadResourceResponse, ReadResourceResult, Resource, ResourceContents,
    ResourceUpdatedNotificationParam, ServerCapabilities, ServerConfig, SubscribeRequestParams,
    Tool, UnsubscribeRequestParams,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, Peer, RoleServer, ServerHandler};
use serde_json::json;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// How long [`WatchedUpstream::wait_heard`] waits before it fails the test.
const HEARD_WAIT: Duration = Duration::from_secs(10);

/// What the server heard, shared by its sessions.
#[derive(Clone, Default)]
struct Shared {
    /// `("subscribe" | "unsubscribe", uri)` → how many times.
    heard: Arc<Mutex<HashMap<(String, String), usize>>>,
    /// URI → the sessions subscribed to it.
    subscribers: Arc<Mutex<HashMap<String, Vec<Peer<RoleServer>>>>>,
    /// Bumped on every subscribe or unsubscribe heard.
    changes: Arc<watch::Sender<u64>>,
}

#[derive(Clone)]
struct Server {
    scheme: String,
    shared: Shared,
}

impl Shared {
    fn hear(&self, what: &str, uri: &str) {
        *self
            .heard
            .lock()
            .expect("heard lock")
            .entry((what.to_string(), uri.to_string()))
            .or_default() += 1;
        self.changes.send_modify(|n| *n += 1);
    }
}

#[allow(deprecated)]
impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .enable_resources_subscribe()
                .build(),
        )
    }

    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        std::borrow::Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25))
    }

    async fn discover(
        &self,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::DiscoverResult, ErrorData> {
        Err(ErrorData::method_not_found::<
            rmcp::model::DiscoverRequestMethod,
        >())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let resource = |name: &str| -> Resource {
            Resource::new(format!("{}://{name}", self.scheme), name.to_string())
        };
        Ok(ListResourcesResult::with_all_items(vec![
            resource("one"),
            resource("two"),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        Ok(ReadResourceResponse::Complete(ReadResourceResult::new(
            vec![ResourceContents::text(request.uri.clone(), request.uri)],
        )))
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.shared
            .subscribers
            .lock()
            .expect("subscribers lock")
            .entry(request.uri.clone())
            .or_default()
            .push(context.peer.clone());
        self.shared.hear("subscribe", &request.uri);
        Ok(())
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        // Sessions hold one subscription each here: the URI's are dropped.
        self.shared
            .subscribers
            .lock()
            .expect("subscribers lock")
            .remove(&request.uri);
        self.shared.hear("unsubscribe", &request.uri);
        Ok(())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let serde_json::Value::Object(schema) = json!({
            "type": "object",
            "properties": {"uri": {"type": "string"}},
        }) else {
            unreachable!("an object")
        };
        Ok(ListToolsResult::with_all_items(vec![Tool::new(
            "touch",
            "Say resource `uri` changed to every session subscribed to it.",
            Arc::new(schema),
        )]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let uri = request
            .arguments
            .as_ref()
            .and_then(|a| a.get("uri"))
            .and_then(|u| u.as_str())
            .unwrap_or_default()
            .to_string();
        let peers = self
            .shared
            .subscribers
            .lock()
            .expect("subscribers lock")
            .get(&uri)
            .cloned()
            .unwrap_or_default();
        let mut told = 0;
        for peer in peers {
            if peer
                .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri.clone()))
                .await
                .is_ok()
            {
                told += 1;
            }
        }
        Ok(CallToolResponse::Complete(CallToolResult::success(vec![
            ContentBlock::text(format!("{told} session(s) told {uri} changed")),
        ])))
    }
}

/// A running [`watched_upstream`](self) server; stopped on drop.
pub struct WatchedUpstream {
    /// `http://127.0.0.1:PORT/mcp`
    pub url: String,
    shared: Shared,
    stop: CancellationToken,
}

impl WatchedUpstream {
    /// Serve resources `<scheme>://one` and `<scheme>://two` on `127.0.0.1:0`.
    pub async fn start(scheme: &str) -> WatchedUpstream {
        let shared = Shared {
            changes: Arc::new(watch::channel(0).0),
            ..Shared::default()
        };
        let server = Server {
            scheme: scheme.to_string(),
            shared: shared.clone(),
        };
        let stop = CancellationToken::new();
        let service = StreamableHttpService::new(
            move || Ok(server.clone()),
            Arc::new(LocalSessionManager::default()),
            StreamableHttpServerConfig::default()
                .with_json_response(true)
                .with_cancellation_token(stop.clone()),
        );
        let app = axum::Router::new().nest_service("/mcp", service);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the upstream's port");
        let url = format!(
            "http://{}/mcp",
            listener.local_addr().expect("the upstream's address")
        );
        let stopped = stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move { stopped.cancelled().await })
                .await;
        });
        WatchedUpstream { url, shared, stop }
    }

    /// How many `what` (`"subscribe"` or `"unsubscribe"`) of `uri` it heard.
    pub fn heard(&self, what: &str, uri: &str) -> usize {
        self.shared
            .heard
            .lock()
            .expect("heard lock")
            .get(&(what.to_string(), uri.to_string()))
            .copied()
            .unwrap_or(0)
    }

    /// Wait until it heard `n` `what`s of `uri` (fails the test after 10 s).
    pub async fn wait_heard(&self, what: &str, uri: &str, n: usize) {
        let mut changes = self.shared.changes.subscribe();
        let reached = tokio::time::timeout(HEARD_WAIT, async {
            while self.heard(what, uri) < n {
                if changes.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
        assert!(
            reached.is_ok() && self.heard(what, uri) >= n,
            "the upstream heard {} {what} of {uri} within {HEARD_WAIT:?}, not {n}",
            self.heard(what, uri)
        );
    }
}

impl Drop for WatchedUpstream {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
