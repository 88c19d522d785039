//! A synchronous MCP server (no tasks) in the test's own process, served
//! over Streamable HTTP on a loopback port: the upstream a gateway under
//! test calls when the test must know what the upstream heard.
//!
//! Its tools:
//!
//! - `echo {"text": …, "ms": …}` answers the text, after `ms` milliseconds
//!   if given (a call in flight for a while);
//! - `held` answers only once the test lets it ([`SyncUpstream::release`]):
//!   a call kept in flight as long as the test needs;
//! - `stall` never answers (until its request is cancelled): an upstream
//!   that went silent;
//! - `whoami` sends two progress notifications to the call's progress token
//!   and answers, as JSON text, the `clientInfo` and `progressToken` it saw
//!   (a recording upstream), naming itself in its result's `_meta`
//!   ([`SERVER_NAME`]).
//!
//! Every `tools/call` is counted per tool ([`SyncUpstream::heard`]), so a
//! test can say a call refused before it reached the upstream never did,
//! and every `echo` per text ([`SyncUpstream::heard_text`],
//! [`SyncUpstream::echoed`]), so a test that gives each call its own text
//! can say each reached it exactly once.
//!
//! ```no_run
//! # async fn demo() {
//! let upstream = mcptask_testkit::SyncUpstream::start().await;
//! // configure `[[servers]] url = upstream.url`, then:
//! upstream.wait_heard("held", 1).await;
//! upstream.release(1);
//! assert_eq!(upstream.heard("echo"), 0);
//! # }
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, JsonObject,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig,
    Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};
use tokio::sync::{Semaphore, watch};
use tokio_util::sync::CancellationToken;

/// How long [`SyncUpstream::wait_heard`] waits before it fails the test.
const HEARD_WAIT: Duration = Duration::from_secs(10);

/// The tools' shared state: what was heard, and the gate of `held`.
#[derive(Clone)]
struct Tools {
    heard: Arc<Mutex<HashMap<String, usize>>>,
    /// `echo` calls per text.
    echoed: Arc<Mutex<HashMap<String, usize>>>,
    /// Bumped on every call heard, to wake [`SyncUpstream::wait_heard`].
    calls: Arc<watch::Sender<u64>>,
    gate: Arc<Semaphore>,
    /// Speak 2025-11-25 at most: every caller opens a session.
    legacy: bool,
}

fn tool(name: &'static str, description: &'static str, schema: Value) -> Tool {
    let Value::Object(schema) = schema else {
        unreachable!("tool schemas are objects")
    };
    Tool::new(name, description, Arc::new(schema))
}

impl ServerHandler for Tools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        if self.legacy {
            std::borrow::Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25))
        } else {
            std::borrow::Cow::Borrowed(ProtocolVersion::KNOWN_VERSIONS)
        }
    }

    /// A legacy server answers `server/discover` as servers written before
    /// 2026-07-28 do: method not found (the caller falls back to
    /// `initialize`).
    async fn discover(
        &self,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::DiscoverResult, ErrorData> {
        if self.legacy {
            return Err(ErrorData::method_not_found::<
                rmcp::model::DiscoverRequestMethod,
            >());
        }
        Ok(rmcp::model::DiscoverResult::from_server_info(
            self.supported_protocol_versions().into_owned(),
            self.get_info(),
        ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let object = json!({"type": "object"});
        Ok(ListToolsResult::with_all_items(vec![
            tool(
                "echo",
                "Answers its text, after `ms` milliseconds if given.",
                json!({"type": "object", "properties": {"text": {"type": "string"}, "ms": {"type": "integer"}}}),
            ),
            tool("held", "Answers when the test lets it.", object.clone()),
            tool("stall", "Never answers.", object.clone()),
            tool(
                "whoami",
                "Sends two progress notifications to the call's progress token and answers what it saw of its caller.",
                object,
            ),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        *self
            .heard
            .lock()
            .expect("heard lock")
            .entry(request.name.to_string())
            .or_insert(0) += 1;
        self.calls.send_modify(|n| *n += 1);
        let arguments = request.arguments.unwrap_or_default();
        let text = match request.name.as_ref() {
            "echo" => {
                let text = text_of(&arguments);
                *self
                    .echoed
                    .lock()
                    .expect("echoed lock")
                    .entry(text.clone())
                    .or_insert(0) += 1;
                if let Some(ms) = arguments.get("ms").and_then(Value::as_u64) {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                }
                text
            }
            "held" => {
                tokio::select! {
                    permit = self.gate.acquire() => permit.expect("the gate stays open").forget(),
                    _ = context.ct.cancelled() => return Err(cancelled()),
                }
                "released".to_string()
            }
            "whoami" => {
                let token = context.meta.get_progress_token();
                if let Some(token) = &token {
                    for step in 1..=2 {
                        let mut note = rmcp::model::ProgressNotificationParam::new(
                            token.clone(),
                            f64::from(step),
                        );
                        note.total = Some(2.0);
                        let _ = context.peer.notify_progress(note).await;
                    }
                }
                // A 2026-07-28 request names its client in `_meta`; a
                // session's client named itself at `initialize`.
                let client = context
                    .meta
                    .client_info()
                    .or_else(|| context.peer.peer_info().map(|p| p.client_info.clone()));
                json!({
                    "clientInfo": client.map(|c| json!({"name": c.name, "version": c.version})),
                    "progressToken": token.map(|t| serde_json::to_value(t).unwrap_or_default()),
                })
                .to_string()
            }
            "stall" => {
                context.ct.cancelled().await;
                return Err(cancelled());
            }
            other => {
                return Err(ErrorData::invalid_params(
                    format!("no tool {other:?}"),
                    None,
                ));
            }
        };
        let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
        if request.name == "whoami" {
            // Names itself in its result, as servers SHOULD since 2026-07-28.
            result.meta = Some(rmcp::model::MetaObject(
                json!({"io.modelcontextprotocol/serverInfo": {"name": SERVER_NAME, "version": "0"}})
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
            ));
        }
        Ok(result.into())
    }
}

/// The name `whoami` gives itself in its result's `_meta`
/// (`io.modelcontextprotocol/serverInfo`).
pub const SERVER_NAME: &str = "sync-upstream";

fn text_of(arguments: &JsonObject) -> String {
    arguments
        .get("text")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn cancelled() -> ErrorData {
    ErrorData::internal_error("the call was cancelled", None)
}

/// A running [`sync_upstream`](self) server; stopped on drop.
pub struct SyncUpstream {
    /// `http://127.0.0.1:PORT/mcp`
    pub url: String,
    tools: Tools,
    sessions: Arc<LocalSessionManager>,
    stop: CancellationToken,
}

impl SyncUpstream {
    /// Serve the tools on `127.0.0.1:0` (a stateful Streamable HTTP
    /// endpoint answering JSON).
    pub async fn start() -> SyncUpstream {
        Self::start_at("127.0.0.1:0").await
    }

    /// [`SyncUpstream::start`] speaking 2025-11-25 at most, as most servers
    /// deployed today do: its callers hold sessions (which it may forget,
    /// [`SyncUpstream::expire_sessions`]) and name themselves at
    /// `initialize`.
    pub async fn start_legacy() -> SyncUpstream {
        Self::serve("127.0.0.1:0", true, true).await
    }

    /// [`SyncUpstream::start`] answering every request with an SSE stream
    /// (rmcp's default), where `start`'s answers are JSON bodies.
    pub async fn start_streaming() -> SyncUpstream {
        Self::serve("127.0.0.1:0", false, false).await
    }

    /// [`SyncUpstream::start`] on `addr` (`127.0.0.1:PORT`): an upstream
    /// that comes up after the gateway that names it.
    pub async fn start_at(addr: &str) -> SyncUpstream {
        Self::serve(addr, false, true).await
    }

    async fn serve(addr: &str, legacy: bool, json: bool) -> SyncUpstream {
        let tools = Tools {
            heard: Arc::default(),
            echoed: Arc::default(),
            calls: Arc::new(watch::channel(0).0),
            gate: Arc::new(Semaphore::new(0)),
            legacy,
        };
        let stop = CancellationToken::new();
        let handler = tools.clone();
        let sessions = Arc::new(LocalSessionManager::default());
        let service = StreamableHttpService::new(
            move || Ok(handler.clone()),
            sessions.clone(),
            StreamableHttpServerConfig::default()
                .with_json_response(json)
                .with_cancellation_token(stop.clone()),
        );
        let app = axum::Router::new().nest_service("/mcp", service);
        let listener = tokio::net::TcpListener::bind(addr)
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
        SyncUpstream {
            url,
            tools,
            sessions,
            stop,
        }
    }

    /// How many calls of `tool` the upstream heard so far.
    pub fn heard(&self, tool: &str) -> usize {
        self.tools
            .heard
            .lock()
            .expect("heard lock")
            .get(tool)
            .copied()
            .unwrap_or(0)
    }

    /// How many `echo` calls with `text` the upstream heard so far.
    pub fn heard_text(&self, text: &str) -> usize {
        self.tools
            .echoed
            .lock()
            .expect("echoed lock")
            .get(text)
            .copied()
            .unwrap_or(0)
    }

    /// Every text `echo` was called with, and how many times.
    pub fn echoed(&self) -> HashMap<String, usize> {
        self.tools.echoed.lock().expect("echoed lock").clone()
    }

    /// Until the upstream heard `n` calls of `tool` (the test fails after
    /// a bound).
    pub async fn wait_heard(&self, tool: &str, n: usize) {
        let mut calls = self.tools.calls.subscribe();
        let heard = tokio::time::timeout(HEARD_WAIT, calls.wait_for(|_| self.heard(tool) >= n));
        if heard.await.is_err() {
            panic!(
                "the upstream heard {} calls of {tool} in {HEARD_WAIT:?}, not {n}",
                self.heard(tool)
            );
        }
    }

    /// Forget every session, as a server does after an idle spell (or a
    /// restart): the next request on one is answered `404 Not Found:
    /// Session not found`. Returns how many there were.
    pub async fn expire_sessions(&self) -> usize {
        let ids: Vec<_> = self
            .sessions
            .sessions
            .read()
            .await
            .keys()
            .cloned()
            .collect();
        for id in &ids {
            let _ = self.sessions.close_session(id).await;
        }
        ids.len()
    }

    /// Let `n` calls of `held` answer (those waiting, or the next ones).
    pub fn release(&self, n: usize) {
        self.tools.gate.add_permits(n);
    }
}

impl Drop for SyncUpstream {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
