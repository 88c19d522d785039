//! The gateway in this test process: its calls (`Calls`, with a real
//! tracker and call runtime on a SQLite file in a temporary directory)
//! before a [`SyncUpstream`] on a loopback port, and its MCP front served
//! to rmcp clients over in-memory pipes. No `mcptask serve`, no mocked
//! store: the route, the drivers and the front run as in production, and a
//! test reaches both faces of a call, the Rust/REST one ([`Seam::call`],
//! `Calls::call`) and the MCP one ([`Seam::front`], `FrontServer`).
//!
//! ```ignore
//! let seam = Seam::start("[limits]\nper_principal_in_flight = 1", "call_timeout_ms = 300").await;
//! let alice = seam.front(Some("alice"), Declares::No).await;
//! alice.call("up__echo", json!({"text": "hi"})).await?;
//! seam.call(Some("alice"), "echo", None).await?;
//! assert_eq!(seam.upstream.heard("echo"), 2);
//! ```

use std::sync::Arc;

use mcptask_gateway::auth::Caller;
use mcptask_gateway::calls::{CallError, CallRequest, Started};
use mcptask_gateway::{Calls, Config, Gateway};
use mcptask_testkit::SyncUpstream;
use mcptask_testkit::mcp::{Lifecycle, TestClient};
use serde_json::json;

/// The upstream's name in the configuration: its tools are `up__<tool>`
/// at the front.
pub const SERVER: &str = "up";

/// Whether a front client declares the tasks extension on its requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Declares {
    Tasks,
    No,
}

/// A gateway's calls and front in this process, before one upstream.
pub struct Seam {
    /// Assembled as the binary assembles it (`Gateway::start_with_store`:
    /// the tracker with the configured servers, then `Calls::start`).
    pub gateway: Gateway,
    /// The one upstream, `[[servers]] name = "up"`.
    pub upstream: SyncUpstream,
    _dir: tempfile::TempDir,
}

impl Seam {
    /// A gateway before a fresh [`SyncUpstream`], with `sections` (TOML:
    /// `[limits]`, `[[policy]]`, …) added to its configuration and
    /// `server` (TOML keys: `call_timeout_ms`, `background`, …) added to
    /// the upstream's `[[servers]]` entry. The front is enabled; the
    /// upstream's tools are listed (in the background) before this returns.
    pub async fn start(sections: &str, server: &str) -> Seam {
        Self::start_before(SyncUpstream::start().await, sections, server).await
    }

    /// [`Seam::start`] before an upstream that speaks 2025-11-25 at most
    /// (its callers hold sessions).
    pub async fn start_legacy(sections: &str, server: &str) -> Seam {
        Self::start_before(SyncUpstream::start_legacy().await, sections, server).await
    }

    async fn start_before(upstream: SyncUpstream, sections: &str, server: &str) -> Seam {
        let (gateway, dir) = gateway_before(&upstream.url, sections, server).await;
        Seam {
            gateway,
            upstream,
            _dir: dir,
        }
    }

    /// The gateway's calls.
    pub fn calls(&self) -> &Calls {
        &self.gateway.calls
    }

    /// An MCP client of the front (2026-07-28, stateless), every request
    /// made as `principal`, as `mcptask proxy --stdio` binds its caller.
    pub async fn front(&self, principal: Option<&str>, declares: Declares) -> TestClient {
        front_of(self.calls(), principal, declares).await
    }
}

/// A gateway (the front enabled) before the upstream at `url`, named
/// [`SERVER`], with `sections` and `server` added to its configuration (see
/// [`Seam::start`]); its tools are listed before this returns.
async fn gateway_before(url: &str, sections: &str, server: &str) -> (Gateway, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let text = format!(
        r#"
            [database]
            url = "sqlite:{db}"
            [api]
            auth = "none"
            [tracker]
            poll_default_ms = 50
            poll_min_ms = 20
            [proxy]
            enabled = true
            {sections}
            [[servers]]
            name = "{SERVER}"
            url = "{url}"
            {server}
            "#,
        db = dir.path().join("gateway.db").display(),
    );
    let config = Config::parse("(seam)", &text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let store = mcptask_sql::open(&config.database.url)
        .await
        .expect("open the gateway's SQLite store");
    let gateway = Gateway::start_with_store(config, store)
        .await
        .expect("start the gateway");
    // The gateway lists its upstreams in the background; the seam's
    // tests start from a listed catalog.
    let mut changes = gateway.calls.upstreams.catalog_changes();
    let listed = changes.wait_for(|_| gateway.calls.upstreams.has_listing(SERVER));
    if tokio::time::timeout(std::time::Duration::from_secs(10), listed)
        .await
        .is_err()
    {
        let why = gateway.calls.upstreams.refresh_server(SERVER).await.err();
        panic!("the upstream is not listed after 10 s: {why:?}");
    }
    (gateway, dir)
}

/// An MCP client of `calls`' front (2026-07-28, stateless), every request
/// made as `principal`.
async fn front_of(calls: &Calls, principal: Option<&str>, declares: Declares) -> TestClient {
    let caller = caller(principal);
    let front = mcptask_gateway::front::server(calls, Arc::new(move |_| caller.clone()));
    let lifecycle = Lifecycle::Modern {
        tasks: declares == Declares::Tasks,
    };
    TestClient::in_process(front, lifecycle).await
}

/// A gateway in this process before an upstream the test runs itself (a
/// third-party server, often behind a `FaultFront`), named [`SERVER`].
pub struct UrlSeam {
    pub gateway: Gateway,
    _dir: tempfile::TempDir,
}

impl UrlSeam {
    /// A gateway before the MCP server at `url`, listed before this returns.
    pub async fn start(url: &str, server: &str) -> UrlSeam {
        let (gateway, dir) = gateway_before(url, "", server).await;
        UrlSeam { gateway, _dir: dir }
    }

    /// See [`Seam::front`].
    pub async fn front(&self, principal: Option<&str>, declares: Declares) -> TestClient {
        front_of(&self.gateway.calls, principal, declares).await
    }
}

impl Seam {
    /// A call of the upstream's `tool` at the Rust face (`Calls::call`,
    /// which the REST API and the CLI call too), made as `principal`.
    pub async fn call(
        &self,
        principal: Option<&str>,
        tool: &str,
        background: Option<bool>,
    ) -> Result<Started, CallError> {
        let caller = caller(principal);
        let options = mcptask_client::CallOptions {
            principal: caller.principal.clone(),
            face: Some(mcptask_core::call::Face::Api),
            ..Default::default()
        };
        self.calls()
            .call(CallRequest {
                server: SERVER.into(),
                tool: tool.into(),
                arguments: json!({"text": "hello"}),
                background,
                options,
                caller,
            })
            .await
    }
}

/// A caller with a principal token (or anonymous), never an operator.
pub fn caller(principal: Option<&str>) -> Caller {
    Caller {
        principal: principal.map(str::to_string),
        ..Caller::default()
    }
}

/// The progress token a [`RecordingHost`] puts on its calls. rmcp's client
/// stamps numbers of its own on every request (0, 1, …), so a host's
/// chosen token is written on the wire between the host and the front.
pub const HOST_TOKEN: &str = "caller-token-1";

/// Relay newline-delimited JSON-RPC between a host and the front, giving
/// each `tools/call` the host's own token ([`HOST_TOKEN`]) and the progress
/// the front sends for it back the number rmcp's client gave it.
async fn own_tokens(host: tokio::io::DuplexStream, front: tokio::io::DuplexStream) {
    use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
    let (host_read, mut host_write) = tokio::io::split(host);
    let (front_read, mut front_write) = tokio::io::split(front);
    let rmcps = Arc::new(std::sync::Mutex::new(serde_json::Value::Null));
    let theirs = Arc::clone(&rmcps);
    let up = async move {
        let mut lines = BufReader::new(host_read).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let mut message: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
            if message["method"] == "tools/call" {
                let token = &mut message["params"]["_meta"]["progressToken"];
                *theirs.lock().expect("token lock") = token.take();
                *token = json!(HOST_TOKEN);
            }
            let out = format!("{message}\n");
            if front_write.write_all(out.as_bytes()).await.is_err() {
                break;
            }
        }
    };
    let down = async move {
        let mut lines = BufReader::new(front_read).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let mut message: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
            if message["method"] == "notifications/progress"
                && message["params"]["progressToken"] == HOST_TOKEN
            {
                message["params"]["progressToken"] = rmcps.lock().expect("token lock").clone();
            }
            let out = format!("{message}\n");
            if host_write.write_all(out.as_bytes()).await.is_err() {
                break;
            }
        }
    };
    tokio::join!(up, down);
}

/// A host that names itself (`clientInfo`) at `initialize` (a 2025-11-25
/// session with the front, over an in-memory pipe) and records the
/// progress notifications it hears.
pub struct RecordingHost {
    service: rmcp::service::RunningService<rmcp::RoleClient, ProgressRecorder>,
    progress: Arc<std::sync::Mutex<Vec<f64>>>,
}

/// The client side of a [`RecordingHost`].
#[derive(Clone)]
pub struct ProgressRecorder {
    info: rmcp::model::Implementation,
    progress: Arc<std::sync::Mutex<Vec<f64>>>,
}

impl rmcp::ClientHandler for ProgressRecorder {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        rmcp::model::ClientConfig::new(
            rmcp::model::ClientCapabilities::default(),
            self.info.clone(),
        )
    }

    async fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        self.progress
            .lock()
            .expect("progress lock")
            .push(params.progress);
    }
}

impl RecordingHost {
    /// Connect to the seam's front as `name` `version` (no principal).
    pub async fn connect(seam: &Seam, name: &str, version: &str) -> RecordingHost {
        use rmcp::service::{ClientLifecycleMode, ClientServiceExt as _};
        let front = mcptask_gateway::front::server(seam.calls(), Arc::new(|_| Caller::default()));
        let (client_io, host_side) = tokio::io::duplex(1 << 20);
        let (front_side, server_io) = tokio::io::duplex(1 << 20);
        tokio::spawn(async move {
            use rmcp::ServiceExt as _;
            if let Ok(running) = front.serve(server_io).await {
                let _ = running.waiting().await;
            }
        });
        tokio::spawn(own_tokens(host_side, front_side));
        let progress = Arc::default();
        let recorder = ProgressRecorder {
            info: rmcp::model::Implementation::new(name.to_string(), version.to_string()),
            progress: Arc::clone(&progress),
        };
        let service = recorder
            .serve_with_lifecycle(client_io, ClientLifecycleMode::Initialize)
            .await
            .expect("a session with the front");
        RecordingHost { service, progress }
    }

    /// Call `tool` with `_meta.progressToken = token`: its text answer and
    /// the progress values heard meanwhile.
    pub async fn call_with_progress(&self, tool: &str, token: &str) -> (String, Vec<f64>) {
        let mut params = rmcp::model::CallToolRequestParams::new(tool.to_string());
        params.meta = Some(rmcp::model::RequestMetaObject::with_progress_token(
            rmcp::model::ProgressToken(rmcp::model::NumberOrString::String(token.into())),
        ));
        let answer = self
            .service
            .peer()
            .call_tool_once(params)
            .await
            .expect("tools/call");
        let rmcp::model::CallToolResponse::Complete(result) = answer else {
            panic!("expected a synchronous answer, got {answer:?}");
        };
        let text = result.content[0]
            .as_text()
            .map(|t| t.text.clone())
            .unwrap_or_default();
        // Notifications sent before the answer are read before it; give a
        // late one a moment.
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let heard = self.progress.lock().expect("progress lock").clone();
        (text, heard)
    }
}
