//! Fixtures: a real MCP server (mcptask-server over Streamable HTTP, on its own
//! SQLite file) that can be stopped, restarted and made to misbehave, and
//! trackers on SQLite or PostgreSQL.

#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use mcptask_client::{ServerDef, Tracker, TrackerConfig};
use mcptask_server::input::{accepted, elicit_form};
use mcptask_server::{
    DurableTaskServer, RuntimeConfig, TaskExit, TaskRuntime, TaskTool, ToolRegistry,
};
use rmcp::model::{CallToolResult, ContentBlock, Tool};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

fn schema() -> Arc<rmcp::model::JsonObject> {
    Arc::new(rmcp::model::JsonObject::new())
}

fn text(s: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(s.into())])
}

/// quick, boom (JSON-RPC error), tool_error (isError), hold (until cancelled),
/// ask (input key "q"), sync_only (never a task).
pub fn tools() -> ToolRegistry {
    let mut r = ToolRegistry::new();
    r.register(TaskTool::new(
        Tool::new("quick", "quick", schema()),
        |call| async move { Ok(text(format!("quick {}", Value::Object(call.arguments)))) },
    ));
    r.register(TaskTool::new(Tool::new("boom", "boom", schema()), |_call| async move {
        Err(rmcp::ErrorData::internal_error("boom went the tool", None).into())
    }));
    r.register(TaskTool::new(
        Tool::new("tool_error", "tool_error", schema()),
        |_call| async move {
            Ok(CallToolResult::error(vec![ContentBlock::text(
                "the tool says no",
            )]))
        },
    ));
    r.register(TaskTool::new(
        Tool::new("hold", "hold", schema()),
        |call| async move {
            call.ctx.cancelled().await;
            Err(TaskExit::Cancelled)
        },
    ));
    r.register(
        TaskTool::new(Tool::new("ask", "ask", schema()), |call| async move {
            let req = elicit_form(
                "q?",
                json!({"type": "object", "properties": {"v": {"type": "string"}}}),
            )
            .map_err(|e| TaskExit::Error(rmcp::ErrorData::internal_error(e.to_string(), None)))?;
            let answer = call.ctx.request_input("q", req).await?;
            let v = accepted(&answer)
                .and_then(|c| c.get("v"))
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_string();
            Ok(text(format!("answer {v}")))
        })
        .interrupt(mcptask_server::InterruptPolicy::Rerun),
    );
    r.register(
        TaskTool::new(
            Tool::new("sync_only", "sync", schema()),
            |_call| async move { Ok(text("sync result")) },
        )
        .support(mcptask_server::TaskSupport::Forbidden),
    );
    r
}

/// How the mangling layer answers `tasks/get` for a remote task id.
#[derive(Clone)]
pub enum Mangle {
    /// Replace the whole `result` with this JSON.
    Result(Value),
    /// Delay the real answer.
    Delay(Duration),
    /// Answer with this JSON-RPC error (code, message).
    Error(i64, String),
}

/// A real task server on an HTTP port, restartable on the same port and store.
pub struct RemoteServer {
    pub addr: SocketAddr,
    pub store_url: String,
    /// Rules keyed by remote task id (for `tasks/get`), `tools/call:<tool>`
    /// or `tasks/update` (every update).
    pub mangle: Arc<Mutex<HashMap<String, Mangle>>>,
    /// `(method, taskId)` of every tasks/* request received.
    pub seen: Arc<Mutex<Vec<(String, String)>>>,
    /// Most `tasks/get` requests in flight at once, and how many are now.
    pub gets_in_flight: Arc<(
        std::sync::atomic::AtomicUsize,
        std::sync::atomic::AtomicUsize,
    )>,
    runtime: Option<TaskRuntime>,
    stop: CancellationToken,
    ttl_ms: Option<i64>,
    /// Whether it serves task status notifications (`TaskListenLayer`).
    push: bool,
    _dir: Arc<tempfile::TempDir>,
}

impl RemoteServer {
    pub async fn start(ttl_ms: Option<i64>) -> Self {
        Self::start_with(ttl_ms, false).await
    }

    /// A server that also serves task status notifications.
    pub async fn start_with_push(ttl_ms: Option<i64>) -> Self {
        Self::start_with(ttl_ms, true).await
    }

    async fn start_with(ttl_ms: Option<i64>, push: bool) -> Self {
        let dir = Arc::new(tempfile::tempdir().unwrap());
        let store_url = format!("sqlite:{}", dir.path().join("server.db").display());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut s = RemoteServer {
            addr,
            store_url,
            mangle: Arc::new(Mutex::new(HashMap::new())),
            seen: Arc::new(Mutex::new(Vec::new())),
            gets_in_flight: Arc::default(),
            runtime: None,
            stop: CancellationToken::new(),
            ttl_ms,
            push,
            _dir: dir,
        };
        s.serve(listener).await;
        s
    }

    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    async fn serve(&mut self, listener: tokio::net::TcpListener) {
        let store = mcptask_sql::open(&self.store_url).await.unwrap();
        let config = RuntimeConfig {
            default_ttl_ms: self.ttl_ms,
            default_poll_interval_ms: 50,
            lease_ms: 1_000,
            recovery_every_ms: 100,
            sweep_every_ms: 50,
            ..Default::default()
        };
        let runtime = TaskRuntime::builder(store.server_tasks(), tools())
            .config(config)
            .start()
            .await
            .unwrap();
        let handler = DurableTaskServer::new(runtime.clone());
        self.stop = CancellationToken::new();
        let service = StreamableHttpService::new(
            move || Ok(handler.clone()),
            Arc::new(LocalSessionManager::default()),
            StreamableHttpServerConfig::default()
                .with_json_response(true)
                .with_cancellation_token(self.stop.clone()),
        );
        let routes = if self.push {
            use tower::Layer;
            let service = mcptask_server::TaskListenLayer::new().layer(service);
            axum::Router::new().nest_service("/mcp", service)
        } else {
            axum::Router::new().nest_service("/mcp", service)
        };
        let app = routes.layer(axum::middleware::from_fn_with_state(
            (
                self.mangle.clone(),
                self.seen.clone(),
                self.gets_in_flight.clone(),
            ),
            mangle_layer,
        ));
        let stop = self.stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move { stop.cancelled().await })
                .await;
        });
        self.runtime = Some(runtime);
    }

    /// Stop serving (connections refused) and stop the runtime's work.
    pub async fn stop(&mut self) {
        self.stop.cancel();
        if let Some(rt) = self.runtime.take() {
            rt.shutdown(Duration::from_millis(100)).await;
        }
    }

    /// Serve again on the same port and store (tasks recovered per policy).
    pub async fn restart(&mut self) {
        let mut listener = None;
        for _ in 0..100 {
            match tokio::net::TcpListener::bind(self.addr).await {
                Ok(l) => {
                    listener = Some(l);
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
        self.serve(listener.expect("rebind the server port")).await;
    }
}

type Shared<T> = Arc<Mutex<T>>;
type InFlight = Arc<(
    std::sync::atomic::AtomicUsize,
    std::sync::atomic::AtomicUsize,
)>;
type MangleState = (
    Shared<HashMap<String, Mangle>>,
    Shared<Vec<(String, String)>>,
    InFlight,
);

async fn mangle_layer(
    State((mangle, seen, in_flight)): State<MangleState>,
    request: Request,
    next: axum::middleware::Next,
) -> Response {
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, 16 * 1024 * 1024)
        .await
        .unwrap_or_default();
    let parsed: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let method = parsed["method"].as_str().unwrap_or_default().to_string();
    let task_id = parsed["params"]["taskId"].as_str().map(str::to_string);
    if let Some(id) = &task_id {
        seen.lock().unwrap().push((method.clone(), id.clone()));
    }
    if method == "subscriptions/listen" {
        seen.lock().unwrap().push((method.clone(), String::new()));
    }
    let key = match (method.as_str(), task_id, parsed["params"]["name"].as_str()) {
        ("tasks/get", Some(id), _) => Some(id),
        ("tools/call", _, Some(tool)) => Some(format!("tools/call:{tool}")),
        ("tasks/update", Some(_), _) => Some("tasks/update".into()),
        _ => None,
    };
    let counting = method == "tasks/get";
    if counting {
        use std::sync::atomic::Ordering::SeqCst;
        let now = in_flight.1.fetch_add(1, SeqCst) + 1;
        in_flight.0.fetch_max(now, SeqCst);
    }
    let response = answer(&mangle, key, &parsed, parts, bytes, next).await;
    if counting {
        in_flight
            .1
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
    response
}

async fn answer(
    mangle: &Shared<HashMap<String, Mangle>>,
    key: Option<String>,
    parsed: &Value,
    parts: axum::http::request::Parts,
    bytes: axum::body::Bytes,
    next: axum::middleware::Next,
) -> Response {
    if let Some(key) = key {
        let rule = mangle.lock().unwrap().get(&key).cloned();
        match rule {
            Some(Mangle::Result(result)) => {
                let body = json!({"jsonrpc": "2.0", "id": parsed["id"], "result": result});
                return (
                    [(axum::http::header::CONTENT_TYPE, "application/json")],
                    body.to_string(),
                )
                    .into_response();
            }
            Some(Mangle::Error(code, message)) => {
                let body = json!({"jsonrpc": "2.0", "id": parsed["id"], "error": {"code": code, "message": message}});
                return (
                    [(axum::http::header::CONTENT_TYPE, "application/json")],
                    body.to_string(),
                )
                    .into_response();
            }
            Some(Mangle::Delay(d)) => tokio::time::sleep(d).await,
            None => {}
        }
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// The database a tracker runs on (SQLite or PostgreSQL).
pub use mcptask_sql::testkit::TestDatabase as TrackerBackend;

/// Fast schedules: one definition for every tracker test.
pub use mcptask_client::testkit::fast_config;

pub async fn tracker(
    backend: &TrackerBackend,
    server: &RemoteServer,
    config: TrackerConfig,
) -> Tracker {
    Tracker::builder(backend.remote_tasks().await)
        .server(ServerDef::http("remote", server.url()))
        .config(config)
        .start()
        .await
        .unwrap()
}

/// Wait for a condition on a task (tracker view), polling the store.
pub async fn until(
    tracker: &Tracker,
    id: &str,
    what: &str,
    pred: impl Fn(&mcptask_client::RemoteTaskRecord) -> bool,
) -> mcptask_client::RemoteTaskRecord {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let r = tracker.get(id).await.unwrap();
        if pred(&r) {
            return r;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("task {id} never became {what}; last: {r:#?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
