//! An MCP client for tests: speaks the 2026-07-28 lifecycle (per-request
//! `_meta` capabilities) or the legacy `initialize` one, over an in-process
//! duplex pipe, Streamable HTTP or a stdio child process.

use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientCapabilities, ClientConfig,
    GetTaskParams, GetTaskResult, Implementation, InputResponses, JsonObject, ProtocolVersion,
    TaskStatus, UpdateTaskParams,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RunningService, ServiceError};
use rmcp::{RoleClient, ServerHandler, ServiceExt};
use serde_json::Value;

/// How the test client talks to the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifecycle {
    /// 2026-07-28 `server/discover`.
    Modern {
        /// Whether every request declares the tasks extension.
        tasks: bool,
    },
    /// Legacy `initialize` handshake (2025-11-25), declaring the extension at initialize.
    Legacy,
}

/// A connected test client.
pub struct TestClient {
    service: RunningService<RoleClient, ClientConfig>,
}

fn client_config(lifecycle: Lifecycle) -> ClientConfig {
    let caps = match lifecycle {
        Lifecycle::Modern { tasks: false } => ClientCapabilities::default(),
        _ => ClientCapabilities::builder().enable_tasks().build(),
    };
    ClientConfig::new(caps, Implementation::new("mcptask-test-client", "0.0.0"))
}

fn lifecycle_mode(lifecycle: Lifecycle) -> ClientLifecycleMode {
    match lifecycle {
        Lifecycle::Legacy => ClientLifecycleMode::Initialize,
        Lifecycle::Modern { .. } => ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
    }
}

impl TestClient {
    /// Serve `server` (a [`mcptask_server::DurableTaskServer`], a gateway's front, any
    /// rmcp server) on one end of an in-memory pipe and connect to the
    /// other.
    pub async fn in_process(server: impl ServerHandler, lifecycle: Lifecycle) -> Self {
        Self::in_process_on(&tokio::runtime::Handle::current(), server, lifecycle).await
    }

    /// [`in_process`](Self::in_process), with the server side served on
    /// `runtime`: a test that shuts that runtime down (a gateway "killed"
    /// with everything it spawned) ends the server's side with it.
    pub async fn in_process_on(
        runtime: &tokio::runtime::Handle,
        server: impl ServerHandler,
        lifecycle: Lifecycle,
    ) -> Self {
        let (client_io, server_io) = tokio::io::duplex(1 << 20);
        runtime.spawn(async move {
            if let Ok(running) = server.serve(server_io).await {
                let _ = running.waiting().await;
            }
        });
        let service = client_config(lifecycle)
            .serve_with_lifecycle(client_io, lifecycle_mode(lifecycle))
            .await
            .expect("connect in-process client");
        Self { service }
    }

    /// Connect over Streamable HTTP, optionally with a bearer token.
    pub async fn http(
        url: &str,
        bearer: Option<&str>,
        lifecycle: Lifecycle,
    ) -> Result<Self, String> {
        use rmcp::transport::StreamableHttpClientTransport;
        use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
        let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_string());
        if let Some(token) = bearer {
            config = config.auth_header(token.to_string());
        }
        // reqwest panics without a rustls provider when another crate in the
        // build (mcptask-client's `tls` feature) turned its TLS on.
        mcptask_client::tls::install_crypto_provider();
        let transport = StreamableHttpClientTransport::from_config(config);
        let service = client_config(lifecycle)
            .serve_with_lifecycle(transport, lifecycle_mode(lifecycle))
            .await
            .map_err(|e| e.to_string())?;
        Ok(Self { service })
    }

    /// Spawn `command` (an MCP server on stdio) and connect to it.
    pub async fn stdio(
        command: tokio::process::Command,
        lifecycle: Lifecycle,
    ) -> Result<Self, String> {
        let transport =
            rmcp::transport::TokioChildProcess::new(command).map_err(|e| e.to_string())?;
        let service = client_config(lifecycle)
            .serve_with_lifecycle(transport, lifecycle_mode(lifecycle))
            .await
            .map_err(|e| e.to_string())?;
        Ok(Self { service })
    }

    /// The underlying rmcp peer, for requests this client has no helper for.
    pub fn peer(&self) -> &rmcp::Peer<RoleClient> {
        self.service.peer()
    }

    /// `tools/call` once (no MRTR driving, no polling).
    pub async fn call(
        &self,
        tool: &str,
        arguments: Value,
    ) -> Result<CallToolResponse, ServiceError> {
        let mut params = CallToolRequestParams::new(tool.to_string());
        if let Value::Object(map) = arguments {
            params = params.with_arguments(map);
        }
        self.service.peer().call_tool_once(params).await
    }

    /// `tools/call` with MRTR `inputResponses`.
    pub async fn call_with_inputs(
        &self,
        tool: &str,
        arguments: JsonObject,
        inputs: InputResponses,
    ) -> Result<CallToolResponse, ServiceError> {
        let params = CallToolRequestParams::new(tool.to_string())
            .with_arguments(arguments)
            .with_input_responses(inputs);
        self.service.peer().call_tool_once(params).await
    }

    /// `tools/call` that must create a task; returns its id.
    pub async fn start_task(&self, tool: &str, arguments: Value) -> String {
        match self.call(tool, arguments).await.expect("tools/call") {
            CallToolResponse::Task(t) => t.task.task_id,
            other => panic!("expected a task from {tool}, got {other:?}"),
        }
    }

    /// `tasks/get`.
    pub async fn get(&self, task_id: &str) -> Result<GetTaskResult, ServiceError> {
        self.service
            .peer()
            .get_task(GetTaskParams::new(task_id))
            .await
    }

    /// `tasks/update` with `responses` as `inputResponses`.
    pub async fn update(&self, task_id: &str, responses: Value) -> Result<(), ServiceError> {
        let responses: InputResponses =
            serde_json::from_value(responses).expect("inputResponses map");
        self.service
            .peer()
            .update_task(UpdateTaskParams::new(task_id, responses))
            .await
    }

    /// `tasks/cancel`.
    pub async fn cancel(&self, task_id: &str) -> Result<(), ServiceError> {
        self.service
            .peer()
            .cancel_task(CancelTaskParams::new(task_id))
            .await
    }

    /// The names `tools/list` answers, listed again every 100 ms until
    /// `first` is among them (at most 30 s; then what was listed last): a
    /// front lists its upstreams in the background, so a list made in its
    /// first moments has the servers that answered by then, as a host that
    /// follows `notifications/tools/list_changed` would see.
    pub async fn tools_once_listed(&self, first: &str) -> Vec<String> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let tools = self
                .service
                .peer()
                .list_all_tools()
                .await
                .expect("tools/list");
            let names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
            if names.iter().any(|n| n == first) || tokio::time::Instant::now() >= deadline {
                return names;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Poll `tasks/get` until `done` says so (or panic after `timeout`).
    pub async fn wait_for(
        &self,
        task_id: &str,
        timeout: Duration,
        done: impl Fn(&GetTaskResult) -> bool,
    ) -> GetTaskResult {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let got = self.get(task_id).await.expect("tasks/get while waiting");
            if done(&got) {
                return got;
            }
            if tokio::time::Instant::now() >= deadline {
                panic!(
                    "task {task_id} did not reach the expected state in {timeout:?}; last: {got:?}"
                );
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Poll until the task is terminal.
    pub async fn wait_terminal(&self, task_id: &str, timeout: Duration) -> GetTaskResult {
        self.wait_for(task_id, timeout, |t| t.task.status().is_terminal())
            .await
    }

    /// Poll until the task has the given status.
    pub async fn wait_status(
        &self,
        task_id: &str,
        status: TaskStatus,
        timeout: Duration,
    ) -> GetTaskResult {
        self.wait_for(task_id, timeout, |t| t.task.status() == status)
            .await
    }

    /// Disconnect.
    pub async fn close(self) {
        let _ = self.service.cancel().await;
    }
}

/// The JSON wire form of a `tasks/get` result, for field-level assertions.
pub fn wire(result: &GetTaskResult) -> Value {
    serde_json::to_value(result).expect("serialize GetTaskResult")
}

/// The JSON-RPC error code of a failed request, if it was a JSON-RPC error.
pub fn error_code(e: &ServiceError) -> Option<i32> {
    match e {
        ServiceError::McpError(data) => Some(data.code.0),
        _ => None,
    }
}

/// A bound on every wait of a [`TaskListen`]: a hang is a failure.
const LISTEN_WAIT: Duration = Duration::from_secs(20);

/// A `subscriptions/listen` body for `task_ids`, declaring the tasks
/// extension or not.
pub fn listen_body(id: u64, task_ids: &[&str], declares_tasks: bool) -> String {
    let extensions = if declares_tasks {
        serde_json::json!({ "io.modelcontextprotocol/tasks": {} })
    } else {
        serde_json::json!({})
    };
    serde_json::json!({
        "jsonrpc": "2.0", "id": id, "method": "subscriptions/listen",
        "params": {
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "push-test", "version": "0"},
                "io.modelcontextprotocol/clientCapabilities": {"extensions": extensions},
            },
            "notifications": {"taskIds": task_ids},
        }
    })
    .to_string()
}

/// One open `subscriptions/listen` request, read raw (rmcp's client cannot
/// ask for `taskIds`): its JSON-RPC messages as they arrive (SSE `data:`
/// lines, or the single JSON body of an error).
pub struct TaskListen {
    response: reqwest::Response,
    buffer: String,
}

impl TaskListen {
    /// POST `body` (see [`listen_body`]) to `url`, with a bearer token if
    /// given, and keep the response open for [`TaskListen::next`].
    pub async fn open(url: &str, bearer: Option<&str>, body: String) -> TaskListen {
        // reqwest panics without a rustls provider when TLS is compiled in.
        mcptask_client::tls::install_crypto_provider();
        let mut request = reqwest::Client::new().post(url);
        if let Some(token) = bearer {
            request = request.bearer_auth(token);
        }
        let request = request
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", "2026-07-28")
            .header("Mcp-Method", "subscriptions/listen")
            .body(body)
            .send();
        let response = tokio::time::timeout(LISTEN_WAIT, request)
            .await
            .expect("no answer to subscriptions/listen")
            .expect("POST subscriptions/listen");
        TaskListen {
            response,
            buffer: String::new(),
        }
    }

    /// The next JSON-RPC message, or `None` when the stream ended.
    pub async fn next(&mut self) -> Option<Value> {
        // One deadline for the message, not per chunk: keep-alives arrive
        // while nothing else does.
        let deadline = tokio::time::Instant::now() + LISTEN_WAIT;
        loop {
            if let Some(message) = self.take_message() {
                return Some(message);
            }
            let chunk = tokio::time::timeout_at(deadline, self.response.chunk())
                .await
                .expect("the stream went silent")
                .expect("read the stream")?;
            self.buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    }

    fn take_message(&mut self) -> Option<Value> {
        let trimmed = self.buffer.trim_start();
        if trimmed.starts_with('{') {
            // A plain JSON body (an error answered without a stream).
            let message = serde_json::from_str(trimmed).ok()?;
            self.buffer.clear();
            return Some(message);
        }
        loop {
            let end = self.buffer.find("\n\n")?;
            let event: String = self.buffer.drain(..end + 2).collect();
            let data: String = event
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(str::trim_start)
                .collect();
            if let Ok(message) = serde_json::from_str(&data) {
                return Some(message);
            }
            // Keep-alives and priming events carry no message.
        }
    }
}
