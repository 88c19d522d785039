//! A misbehaving MCP server whose answers a test scripts: an HTTP proxy in
//! front of a real upstream (a `mcptask demo-server`). Every request is
//! recorded; a request matching a rule (JSON-RPC method, optionally the
//! task id) gets the rule's answer instead of the upstream's, as many times as
//! the rule says; everything else (initialize, sessions, SSE, the rest of the
//! task traffic) is forwarded unchanged, so only the scripted fault differs
//! from a well-behaved server.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::{StreamExt, TryStreamExt};
use serde_json::{Value, json};

/// What a scripted rule answers.
#[derive(Debug, Clone)]
pub enum Scripted {
    /// A JSON-RPC result (the request's id is filled in).
    Result(Value),
    /// A JSON-RPC error.
    Error(i64, String),
    /// Any HTTP response: status, content type, body.
    Raw(u16, String, Vec<u8>),
    /// An SSE stream that never answers and never ends (a keep-alive
    /// comment now and then): an upstream that holds the call.
    EndlessSse,
    /// A JSON-RPC result under an id that is not the request's (the
    /// request's id with `-crossed` appended, as a string).
    WrongId(Value),
    /// Two concurrent requests matching the rule are both forwarded, and
    /// each is answered with its own answer under the other's id: an
    /// upstream that swaps the ids of two calls' answers. A request that
    /// finds no partner within 30 s is forwarded as it is.
    Swap,
    /// An answer that never ends: status 200 with `content_type`, `head`
    /// at once, then `trickle` every `every` for as long as the client
    /// reads (an upstream streaming past any deadline).
    Endless {
        content_type: String,
        head: Vec<u8>,
        trickle: Vec<u8>,
        every: std::time::Duration,
    },
}

/// Answer requests of `method` (and task `task_id`, if set) with `answer`,
/// `times` times (`usize::MAX`: always).
#[derive(Debug, Clone)]
pub struct Rule {
    pub method: String,
    pub task_id: Option<String>,
    /// Only requests whose params hold this value at this JSON pointer
    /// (`Value::Null` matches an absent one).
    pub when: Option<(String, Value)>,
    pub times: usize,
    pub answer: Scripted,
}

impl Rule {
    pub fn new(method: &str, times: usize, answer: Scripted) -> Rule {
        Rule {
            method: method.into(),
            task_id: None,
            when: None,
            times,
            answer,
        }
    }

    /// Only requests whose params hold `value` at `pointer` (e.g.
    /// `"/cursor"`; `Value::Null` for an absent field).
    pub fn when(mut self, pointer: &str, value: Value) -> Rule {
        self.when = Some((pointer.into(), value));
        self
    }

    pub fn for_task(mut self, task_id: &str) -> Rule {
        self.task_id = Some(task_id.into());
        self
    }
}

/// One request the proxy received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    /// The request's JSON-RPC id (`Value::Null` for a notification): the
    /// caller's own when the front relayed the body as sent.
    pub id: Value,
    pub task_id: Option<String>,
    pub params: Value,
    pub authorization: Option<String>,
    pub headers: HeaderMap,
    /// Whether a rule answered it (not the upstream).
    pub scripted: bool,
}

#[derive(Default)]
struct Script {
    rules: Vec<Rule>,
    seen: Vec<Seen>,
    /// A [`Scripted::Swap`] request waiting for its partner.
    swapping: Option<Waiting>,
    /// How many pairs of answers were swapped.
    swaps: usize,
}

/// A request held for [`Scripted::Swap`]: what to forward, and where its
/// (swapped) answer goes.
struct Waiting {
    method: axum::http::Method,
    headers: HeaderMap,
    body: axum::body::Bytes,
    answer: tokio::sync::oneshot::Sender<Response>,
}

/// The proxy; stops serving on drop.
pub struct ScriptedServer {
    pub addr: SocketAddr,
    script: Arc<Mutex<Script>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ScriptedServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[derive(Clone)]
struct Proxy {
    upstream: String,
    http: reqwest::Client,
    script: Arc<Mutex<Script>>,
}

impl ScriptedServer {
    /// Proxy `upstream` (an MCP endpoint URL) on an ephemeral port.
    pub async fn start(upstream: &str) -> ScriptedServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the scripted server");
        let addr = listener.local_addr().expect("local addr");
        let script = Arc::new(Mutex::new(Script::default()));
        let proxy = Proxy {
            upstream: upstream.to_string(),
            http: crate::forwarding_client(),
            script: script.clone(),
        };
        let app = axum::Router::new().fallback(handle).with_state(proxy);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        ScriptedServer { addr, script, task }
    }

    /// The MCP endpoint to configure in a gateway.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// Add a rule (rules are tried in the order added).
    pub fn script(&self, rule: Rule) {
        self.script.lock().unwrap().rules.push(rule);
    }

    /// Drop every rule: from now on the upstream answers everything.
    pub fn clear(&self) {
        self.script.lock().unwrap().rules.clear();
    }

    /// Every request received so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.script.lock().unwrap().seen.clone()
    }

    /// How many pairs of answers [`Scripted::Swap`] swapped.
    pub fn swaps(&self) -> usize {
        self.script.lock().unwrap().swaps
    }

    /// Requests of `method` received so far.
    pub fn seen_method(&self, method: &str) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|s| s.method == method)
            .collect()
    }
}

async fn handle(State(proxy): State<Proxy>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, 64 * 1024 * 1024)
        .await
        .unwrap_or_default();
    let parsed: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let method = parsed["method"].as_str().unwrap_or_default().to_string();
    let task_id = parsed["params"]["taskId"].as_str().map(str::to_string);
    let answer = {
        let mut script = proxy.script.lock().unwrap();
        let rule = script.rules.iter_mut().find(|r| {
            r.times > 0
                && r.method == method
                && r.task_id
                    .as_ref()
                    .is_none_or(|t| Some(t) == task_id.as_ref())
                && r.when.as_ref().is_none_or(|(pointer, value)| {
                    parsed["params"].pointer(pointer).unwrap_or(&Value::Null) == value
                })
        });
        let answer = rule.map(|r| {
            r.times = r.times.saturating_sub(1);
            r.answer.clone()
        });
        if !method.is_empty() {
            script.seen.push(Seen {
                method: method.clone(),
                id: parsed["id"].clone(),
                task_id: task_id.clone(),
                params: parsed["params"].clone(),
                authorization: parts
                    .headers
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string),
                headers: parts.headers.clone(),
                scripted: answer.is_some(),
            });
        }
        answer
    };
    match answer {
        Some(Scripted::Swap) => swap(&proxy, parts.method, parts.headers, bytes).await,
        Some(answer) => scripted(&parsed, answer),
        None => forward(&proxy, parts.method, &parts.headers, bytes).await,
    }
}

/// [`Scripted::Swap`]: wait for a partner, forward both, swap the answers.
async fn swap(
    proxy: &Proxy,
    method: axum::http::Method,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let partner = proxy.script.lock().unwrap().swapping.take();
    let Some(partner) = partner else {
        let (answer, swapped) = tokio::sync::oneshot::channel();
        proxy.script.lock().unwrap().swapping = Some(Waiting {
            method: method.clone(),
            headers: headers.clone(),
            body: body.clone(),
            answer,
        });
        return match tokio::time::timeout(std::time::Duration::from_secs(30), swapped).await {
            Ok(Ok(response)) => response,
            _ => {
                proxy.script.lock().unwrap().swapping = None;
                forward(proxy, method, &headers, body).await
            }
        };
    };
    let id_of =
        |body: &[u8]| serde_json::from_slice::<Value>(body).unwrap_or(Value::Null)["id"].clone();
    let (my_id, their_id) = (id_of(&body), id_of(&partner.body));
    let (mine, theirs) = tokio::join!(
        buffered(proxy, method, &headers, body),
        buffered(proxy, partner.method, &partner.headers, partner.body),
    );
    proxy.script.lock().unwrap().swaps += 1;
    let _ = partner.answer.send(relabelled(theirs, &my_id).await);
    relabelled(mine, &their_id).await
}

/// `response` (a JSON body or an SSE stream, read whole) with the id of
/// every answer in it replaced by `id`.
async fn relabelled(response: Response, id: &Value) -> Response {
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX)
        .await
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes);
    let relabel = |json: &str| -> Option<String> {
        let mut message: Value = serde_json::from_str(json).ok()?;
        if message.get("method").is_some() || message.get("id").is_none() {
            return None;
        }
        message["id"] = id.clone();
        Some(message.to_string())
    };
    let out = match relabel(text.trim()) {
        Some(json) => json,
        None => text
            .split('\n')
            .map(|line| match line.strip_prefix("data:") {
                Some(data) => relabel(data.trim())
                    .map(|json| format!("data: {json}"))
                    .unwrap_or_else(|| line.to_string()),
                None => line.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n"),
    };
    Response::from_parts(parts, Body::from(out))
}

/// The upstream's whole answer to a request, read to its end.
async fn buffered(
    proxy: &Proxy,
    method: axum::http::Method,
    headers: &HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let response = forward(proxy, method, headers, body).await;
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, 64 * 1024 * 1024)
        .await
        .unwrap_or_default();
    Response::from_parts(parts, Body::from(bytes))
}

/// An SSE stream that never answers: a comment every 200 ms, forever.
fn endless_sse() -> Response {
    let beats = futures::stream::unfold((), |()| async {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        Some((
            Ok::<_, std::io::Error>(axum::body::Bytes::from_static(b": still here\n\n")),
            (),
        ))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(axum::http::header::CONTENT_TYPE, "text/event-stream")
        .body(Body::from_stream(beats))
        .expect("an SSE response")
}

fn scripted(request: &Value, answer: Scripted) -> Response {
    let json_body = |body: Value| {
        (
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            body.to_string(),
        )
            .into_response()
    };
    match answer {
        Scripted::Result(result) => {
            json_body(json!({"jsonrpc": "2.0", "id": request["id"], "result": result}))
        }
        Scripted::Error(code, message) => json_body(
            json!({"jsonrpc": "2.0", "id": request["id"], "error": {"code": code, "message": message}}),
        ),
        Scripted::EndlessSse => endless_sse(),
        Scripted::WrongId(result) => {
            let wrong = format!("{}-crossed", request["id"]);
            json_body(json!({"jsonrpc": "2.0", "id": wrong, "result": result}))
        }
        Scripted::Swap => unreachable!("answered by swap()"),
        Scripted::Raw(status, content_type, body) => {
            let mut response = Response::new(Body::from(body));
            *response.status_mut() = StatusCode::from_u16(status).expect("an HTTP status");
            response.headers_mut().insert(
                axum::http::header::CONTENT_TYPE,
                HeaderValue::from_str(&content_type).expect("a header value"),
            );
            response
        }
        Scripted::Endless {
            content_type,
            head,
            trickle,
            every,
        } => {
            let rest = futures::stream::unfold(trickle, move |trickle| async move {
                tokio::time::sleep(every).await;
                Some((trickle.clone(), trickle))
            });
            let chunks = futures::stream::once(async move { head })
                .chain(rest)
                .map(Ok::<_, std::io::Error>);
            let mut response = Response::new(Body::from_stream(chunks));
            response.headers_mut().insert(
                axum::http::header::CONTENT_TYPE,
                HeaderValue::from_str(&content_type).expect("a header value"),
            );
            response
        }
    }
}

async fn forward(
    proxy: &Proxy,
    method: axum::http::Method,
    headers: &HeaderMap,
    bytes: axum::body::Bytes,
) -> Response {
    let mut request = proxy.http.request(method, &proxy.upstream).body(bytes);
    for (name, value) in headers {
        if name != "host" && name != "content-length" {
            request = request.header(name, value);
        }
    }
    let upstream = match request.send().await {
        Ok(r) => r,
        Err(e) => {
            return (StatusCode::BAD_GATEWAY, format!("upstream: {e}")).into_response();
        }
    };
    let mut response = Response::builder().status(upstream.status().as_u16());
    for (name, value) in upstream.headers() {
        if name != "content-length" && name != "transfer-encoding" {
            response = response.header(name, value);
        }
    }
    // Streamed: the upstream's SSE streams stay open as long as it keeps them.
    let stream = upstream.bytes_stream().map_err(std::io::Error::other);
    response
        .body(Body::from_stream(stream))
        .expect("a proxied response")
}

/// A `tasks/get` result for `task_id` in `status`, plus `extra` fields.
pub fn task_result(task_id: &str, status: &str, extra: Value) -> Value {
    let mut v = json!({
        "resultType": "complete",
        "taskId": task_id,
        "status": status,
        "createdAt": "2026-01-01T00:00:00Z",
        "lastUpdatedAt": "2026-01-01T00:00:00Z",
        "ttlMs": null,
        "pollIntervalMs": 100,
    });
    if let (Some(obj), Value::Object(extra)) = (v.as_object_mut(), extra) {
        obj.extend(extra);
    }
    v
}

/// Brisk `[tracker]` settings for fault cells (changes show within a second).
pub const BRISK_TRACKER: &str = "poll_default_ms = 250\npoll_min_ms = 100\npoll_max_ms = 1000\ninput_required_poll_ms = 250\nbackoff_base_ms = 100\nbackoff_max_ms = 1000\n";

/// `mcptask.toml` with no API auth, an ephemeral port, brisk tracking and the
/// given raw `[[servers]]` text.
pub fn fault_gateway_toml(database_url: &str, servers: &str) -> String {
    format!(
        "[database]\nurl = {}\n\n[api]\nlisten = \"127.0.0.1:0\"\nauth = \"none\"\n\n[tracker]\n{BRISK_TRACKER}\n{servers}\n",
        serde_json::to_string(database_url).expect("a TOML string")
    )
}

/// Write `toml` to `dir/mcptask.toml` and run `mcptask serve` on it; returns
/// the process (SIGKILLed on drop) and an API client.
pub async fn start_gateway_with(
    name: &str,
    dir: &std::path::Path,
    toml: &str,
) -> (crate::LoggedChild, crate::Api) {
    let config = dir.join("mcptask.toml");
    std::fs::write(&config, toml).expect("write mcptask.toml");
    let mut command = crate::serve_command(&config);
    command.current_dir(dir);
    let (process, url) = crate::LoggedChild::spawn(
        name,
        command,
        crate::GATEWAY_LISTENING,
        std::time::Duration::from_secs(60),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    (process, crate::Api::new(url.trim_end_matches('/'), None))
}
