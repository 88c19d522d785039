//! Helpers of the gateway tests (`gateway_api`, `dashboard_browser`): a real
//! `mcptask serve` process with its own `mcptask.toml`, an API client speaking
//! plain HTTP, a reader of the Server-Sent Events stream and a parser of the
//! Prometheus text format.
//!
//! The demo MCP server comes from `tests/common` (`DemoServer`).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{GATEWAY_LISTENING, LoggedChild, serve_command};

/// Generous bound on anything a test waits for (a busy 2-core machine).
pub const WAIT: Duration = Duration::from_secs(90);

/// Tokens of the gateways under test (each at least 8 characters).
pub const OPERATOR: &str = "operator-token-0123456789";
pub const ALICE: &str = "alice-token-0123456789";
pub const BOB: &str = "bob-token-0123456789";

pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
}

/// `<repo>`: two levels above this crate.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/mcptask is two levels below the repository root")
        .to_path_buf()
}

// ---------------------------------------------------------------------------
// Configuration

/// What goes into the gateway's `mcptask.toml`.
#[derive(Debug, Clone)]
pub struct GatewaySpec {
    pub database_url: String,
    /// `auth = "none"` instead of tokens.
    pub auth_none: bool,
    /// `(token, principal)`; no principal = operator token.
    pub tokens: Vec<(String, Option<String>)>,
    pub max_body_bytes: Option<usize>,
    /// `(name, Streamable HTTP URL)`.
    pub servers: Vec<(String, String)>,
}

impl GatewaySpec {
    /// Token auth with an operator token and two principal tokens (alice, bob).
    pub fn with_tokens(database_url: &str, servers: &[(&str, &str)]) -> Self {
        GatewaySpec {
            database_url: database_url.to_string(),
            auth_none: false,
            tokens: vec![
                (OPERATOR.into(), None),
                (ALICE.into(), Some("alice".into())),
                (BOB.into(), Some("bob".into())),
            ],
            max_body_bytes: None,
            servers: servers
                .iter()
                .map(|(n, u)| (n.to_string(), u.to_string()))
                .collect(),
        }
    }

    /// `auth = "none"`.
    pub fn open(database_url: &str, servers: &[(&str, &str)]) -> Self {
        GatewaySpec {
            auth_none: true,
            tokens: Vec::new(),
            ..Self::with_tokens(database_url, servers)
        }
    }

    /// The TOML text. The tracker polls briskly (also while input is
    /// required) so that tests see changes within a second or two.
    pub fn toml(&self) -> String {
        let q = |s: &str| serde_json::to_string(s).expect("a TOML basic string");
        let mut t = format!(
            "[database]\nurl = {}\n\n[api]\nlisten = \"127.0.0.1:0\"\nauth = {}\n",
            q(&self.database_url),
            if self.auth_none {
                "\"none\""
            } else {
                "\"token\""
            }
        );
        if let Some(n) = self.max_body_bytes {
            t.push_str(&format!("max_body_bytes = {n}\n"));
        }
        for (token, principal) in &self.tokens {
            t.push_str(&format!("\n[[api.tokens]]\ntoken = {}\n", q(token)));
            if let Some(p) = principal {
                t.push_str(&format!("principal = {}\n", q(p)));
            }
        }
        t.push_str(
            "\n[tracker]\npoll_default_ms = 250\npoll_min_ms = 100\npoll_max_ms = 1000\ninput_required_poll_ms = 250\nbackoff_base_ms = 100\nbackoff_max_ms = 1000\n",
        );
        for (name, url) in &self.servers {
            t.push_str(&format!(
                "\n[[servers]]\nname = {}\nurl = {}\n",
                q(name),
                q(url)
            ));
        }
        t
    }
}

// ---------------------------------------------------------------------------
// The gateway process

/// A running `mcptask serve` process with its own config directory. Killed
/// (SIGKILL) on drop; on a failing test its log is printed.
pub struct Gateway {
    process: LoggedChild,
    /// `http://127.0.0.1:PORT` (no trailing slash)
    pub base: String,
    _dir: tempfile::TempDir,
}

impl Gateway {
    /// Write `spec` to `mcptask.toml` in a fresh directory, start `mcptask
    /// serve --config` there and wait until it listens.
    pub async fn start(name: &str, spec: &GatewaySpec) -> Gateway {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = dir.path().join("mcptask.toml");
        std::fs::write(&config, spec.toml()).expect("write mcptask.toml");
        let mut command = serve_command(&config);
        command.current_dir(dir.path());
        let (process, url) =
            LoggedChild::spawn(name, command, GATEWAY_LISTENING, Duration::from_secs(60))
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        let base = url.trim_end_matches('/').to_string();
        assert!(
            base.starts_with("http://127.0.0.1:"),
            "unexpected listen line: {base:?}"
        );
        Gateway {
            process,
            base,
            _dir: dir,
        }
    }

    /// The process's stderr so far.
    pub fn log(&self) -> String {
        self.process.log()
    }

    /// A client sending `Authorization: Bearer TOKEN` (or nothing).
    pub fn client(&self, token: Option<&str>) -> Api {
        Api::new(&self.base, token)
    }
}

// ---------------------------------------------------------------------------
// HTTP

/// A plain HTTP client of the gateway API.
#[derive(Clone)]
pub struct Api {
    pub http: reqwest::Client,
    pub base: String,
    pub token: Option<String>,
}

/// What came back: status, content type, body text and the body as JSON.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub content_type: String,
    pub text: String,
    pub json: Value,
}

impl Reply {
    /// `error.code` of a JSON error body ("" when absent).
    pub fn code(&self) -> &str {
        self.json["error"]["code"].as_str().unwrap_or("")
    }

    /// Assert an API error: this HTTP status, a JSON body with this stable
    /// code and a non-empty message.
    #[track_caller]
    pub fn assert_error(&self, status: u16, code: &str) {
        assert_eq!(
            (self.status, self.code()),
            (status, code),
            "expected HTTP {status} {code:?}, got {self:#?}"
        );
        assert!(
            self.content_type.starts_with("application/json"),
            "errors are JSON: {self:#?}"
        );
        assert!(
            self.json["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "errors carry a message: {self:#?}"
        );
    }

    #[track_caller]
    pub fn assert_status(&self, status: u16) -> &Value {
        assert_eq!(self.status, status, "unexpected reply: {self:#?}");
        &self.json
    }
}

impl Api {
    pub fn new(base: &str, token: Option<&str>) -> Api {
        Api {
            http: reqwest::Client::builder()
                // A hang is a failure, not a stuck test.
                .timeout(Duration::from_secs(120))
                // A fresh connection per request: after refusing an oversized
                // body a server may close the connection, and a pooled one
                // would make the next request fail.
                .pool_max_idle_per_host(0)
                .build()
                .expect("reqwest client"),
            base: base.trim_end_matches('/').to_string(),
            token: token.map(str::to_string),
        }
    }

    pub fn with_token(&self, token: Option<&str>) -> Api {
        Api {
            token: token.map(str::to_string),
            ..self.clone()
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// A request with the bearer token applied.
    pub fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let r = self.http.request(method, self.url(path));
        match &self.token {
            Some(t) => r.bearer_auth(t),
            None => r,
        }
    }

    pub async fn send(&self, request: reqwest::RequestBuilder) -> Reply {
        let response = request.send().await.expect("HTTP request to the gateway");
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let text = response.text().await.expect("read the response body");
        let json = serde_json::from_str(&text).unwrap_or(Value::Null);
        Reply {
            status,
            content_type,
            text,
            json,
        }
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.send(self.request(reqwest::Method::GET, path)).await
    }

    /// POST a JSON body.
    pub async fn post(&self, path: &str, body: &Value) -> Reply {
        self.send(self.request(reqwest::Method::POST, path).json(body))
            .await
    }

    /// POST raw bytes with a content type.
    pub async fn post_raw(&self, path: &str, content_type: Option<&str>, body: Vec<u8>) -> Reply {
        let mut r = self.request(reqwest::Method::POST, path).body(body);
        if let Some(ct) = content_type {
            r = r.header(reqwest::header::CONTENT_TYPE, ct);
        }
        self.send(r).await
    }

    /// `POST /api/v1/calls` expecting a tracked task; returns its detail.
    pub async fn start_task(&self, tool: &str, arguments: Value) -> Value {
        self.start_task_with(json!({"server": "demo", "tool": tool, "arguments": arguments}))
            .await
    }

    pub async fn start_task_with(&self, body: Value) -> Value {
        let r = self.post("/api/v1/calls", &body).await;
        assert_eq!(r.status, 202, "expected a tracked task for {body}: {r:#?}");
        assert_eq!(r.json["outcome"], "task", "{r:#?}");
        r.json["task"].clone()
    }

    /// `GET /api/v1/tasks/{id}` (must succeed).
    pub async fn task(&self, id: &str) -> Value {
        let r = self.get(&format!("/api/v1/tasks/{id}")).await;
        assert_eq!(r.status, 200, "GET task {id}: {r:#?}");
        r.json
    }

    /// Poll the task until `done` holds; panics with the last state after `WAIT`.
    pub async fn wait_task(&self, id: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let t = self.task(id).await;
            if done(&t) {
                return t;
            }
            if tokio::time::Instant::now() >= deadline {
                panic!("task {id} did not become {what} within {WAIT:?}; last: {t:#}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub async fn wait_status(&self, id: &str, status: &str) -> Value {
        self.wait_task(id, status, |t| t["status"] == status).await
    }

    /// Every task of a (filtered) listing, following `nextCursor`.
    pub async fn list_all(&self, query: &str) -> Vec<Value> {
        let mut out = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut path = format!("/api/v1/tasks?{query}");
            if let Some(c) = &cursor {
                path.push_str(&format!("&cursor={}", encode(c)));
            }
            let r = self.get(&path).await;
            assert_eq!(r.status, 200, "GET {path}: {r:#?}");
            out.extend(r.json["tasks"].as_array().expect("tasks").iter().cloned());
            match r.json["nextCursor"].as_str() {
                Some(c) => cursor = Some(c.to_string()),
                None => return out,
            }
        }
    }
}

/// Percent-encode a query value (unreserved characters kept).
pub fn encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

pub fn ids(tasks: &[Value]) -> Vec<String> {
    tasks
        .iter()
        .map(|t| t["id"].as_str().expect("task id").to_string())
        .collect()
}

// ---------------------------------------------------------------------------
// Server-Sent Events

/// One message of an event stream.
#[derive(Debug, Clone, Default)]
pub struct SseMessage {
    pub event: String,
    pub data: String,
    pub id: Option<String>,
}

impl SseMessage {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or(Value::Null)
    }
}

/// A connected `GET /api/v1/events` stream, parsed incrementally.
pub struct SseStream {
    response: reqwest::Response,
    buffer: String,
    pub status: u16,
    pub content_type: String,
}

impl SseStream {
    /// Connect to `url` (with whatever auth the request carries).
    pub async fn connect(request: reqwest::RequestBuilder) -> SseStream {
        let response = request
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .send()
            .await
            .expect("connect to the event stream");
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        SseStream {
            response,
            buffer: String::new(),
            status,
            content_type,
        }
    }

    /// The next message (comments and keep-alives skipped); panics after `within`.
    pub async fn next(&mut self, within: Duration) -> SseMessage {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            // Normalise line endings, then take one complete message.
            if self.buffer.contains('\r') {
                self.buffer = self.buffer.replace("\r\n", "\n").replace('\r', "\n");
            }
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut message = SseMessage::default();
                let mut data = Vec::new();
                for line in block.lines() {
                    if line.is_empty() || line.starts_with(':') {
                        continue;
                    }
                    let (field, value) = line.split_once(':').unwrap_or((line, ""));
                    let value = value.strip_prefix(' ').unwrap_or(value);
                    match field {
                        "event" => message.event = value.to_string(),
                        "data" => data.push(value.to_string()),
                        "id" => message.id = Some(value.to_string()),
                        _ => {}
                    }
                }
                if data.is_empty() && message.event.is_empty() {
                    continue; // a keep-alive comment
                }
                message.data = data.join("\n");
                if message.event.is_empty() {
                    message.event = "message".into();
                }
                return message;
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match tokio::time::timeout(left, self.response.chunk()).await {
                Ok(Ok(Some(bytes))) => self.buffer.push_str(&String::from_utf8_lossy(&bytes)),
                Ok(Ok(None)) => panic!("the event stream ended; unparsed: {:?}", self.buffer),
                Ok(Err(e)) => panic!("reading the event stream: {e}"),
                Err(_) => panic!("no event within {within:?}; unparsed: {:?}", self.buffer),
            }
        }
    }

    /// Read messages until `wanted` holds for one (returned with everything
    /// seen before it).
    pub async fn until(
        &mut self,
        within: Duration,
        wanted: impl Fn(&SseMessage) -> bool,
    ) -> (SseMessage, Vec<SseMessage>) {
        let deadline = tokio::time::Instant::now() + within;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                panic!("no wanted event within {within:?}; seen: {seen:#?}");
            }
            let m = self.next(left).await;
            if wanted(&m) {
                return (m, seen);
            }
            seen.push(m);
        }
    }
}

// ---------------------------------------------------------------------------
// Prometheus text format

/// One sample: `name{labels} value`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// A parsed exposition.
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    pub samples: Vec<Sample>,
    /// `# TYPE` of each family.
    pub types: BTreeMap<String, String>,
}

fn is_metric_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn is_label_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Parse a sample value (floats, `+Inf`, `-Inf`, `NaN`).
fn parse_value(s: &str) -> Result<f64, String> {
    match s {
        "+Inf" | "Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        _ => s
            .parse::<f64>()
            .map_err(|e| format!("value {s:?} is not a float: {e}")),
    }
}

/// Parse `{a="x",b="y"}` starting at `rest` (after the `{`); returns the
/// labels and what follows the closing brace.
fn parse_labels(mut rest: &str) -> Result<(BTreeMap<String, String>, &str), String> {
    let mut labels = BTreeMap::new();
    loop {
        rest = rest.trim_start();
        if let Some(after) = rest.strip_prefix('}') {
            return Ok((labels, after));
        }
        let eq = rest
            .find('=')
            .ok_or_else(|| format!("label without '=' in {rest:?}"))?;
        let name = rest[..eq].trim();
        if !is_label_name(name) {
            return Err(format!("bad label name {name:?}"));
        }
        rest = rest[eq + 1..]
            .strip_prefix('"')
            .ok_or_else(|| format!("label {name} value is not quoted"))?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    other => return Err(format!("bad escape {other:?} in label {name}")),
                },
                Some((i, '"')) => break i,
                Some((_, c)) => value.push(c),
                None => return Err(format!("unterminated value of label {name}")),
            }
        };
        if labels.insert(name.to_string(), value).is_some() {
            return Err(format!("label {name} repeated"));
        }
        rest = rest[end + 1..].trim_start();
        if let Some(after) = rest.strip_prefix(',') {
            rest = after;
        } else if !rest.starts_with('}') {
            return Err(format!("expected ',' or '}}' in {rest:?}"));
        }
    }
}

/// Parse the Prometheus text exposition format (0.0.4): every non-comment
/// line must be `name{labels} value [timestamp]` with a float value; `# TYPE`
/// lines must name a known type, once per family.
pub fn parse_prometheus(text: &str) -> Result<Metrics, String> {
    let mut m = Metrics::default();
    for (n, line) in text.lines().enumerate() {
        let at = |e: String| format!("line {}: {e}: {line:?}", n + 1);
        let line = line.trim_end();
        if line.trim().is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            let mut words = comment.split_whitespace();
            if words.next() == Some("TYPE") {
                let name = words.next().ok_or_else(|| at("TYPE without name".into()))?;
                let kind = words.next().ok_or_else(|| at("TYPE without type".into()))?;
                if !is_metric_name(name) {
                    return Err(at(format!("bad metric name {name:?}")));
                }
                if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind) {
                    return Err(at(format!("unknown type {kind:?}")));
                }
                if m.types.insert(name.to_string(), kind.to_string()).is_some() {
                    return Err(at(format!("second TYPE line for {name}")));
                }
            }
            continue;
        }
        let name_end = line
            .find(|c: char| c == '{' || c.is_whitespace())
            .ok_or_else(|| at("no value".into()))?;
        let name = &line[..name_end];
        if !is_metric_name(name) {
            return Err(at(format!("bad metric name {name:?}")));
        }
        let (labels, rest) = match line[name_end..].strip_prefix('{') {
            Some(after) => parse_labels(after).map_err(at)?,
            None => (BTreeMap::new(), &line[name_end..]),
        };
        let mut fields = rest.split_whitespace();
        let value = parse_value(fields.next().ok_or_else(|| at("no value".into()))?).map_err(at)?;
        if let Some(ts) = fields.next() {
            ts.parse::<i64>()
                .map_err(|e| at(format!("bad timestamp {ts:?}: {e}")))?;
        }
        if fields.next().is_some() {
            return Err(at("trailing fields".into()));
        }
        m.samples.push(Sample {
            name: name.to_string(),
            labels,
            value,
        });
    }
    // Every sample belongs to a declared family (histograms and summaries
    // expose _bucket/_sum/_count series).
    for s in &m.samples {
        let family = [s.name.as_str()]
            .into_iter()
            .chain(
                ["_bucket", "_sum", "_count"]
                    .iter()
                    .filter_map(|suffix| s.name.strip_suffix(suffix)),
            )
            .find(|f| m.types.contains_key(*f));
        match family {
            Some(f) => {
                let kind = m.types[f].as_str();
                if kind == "histogram"
                    && s.name.ends_with("_bucket")
                    && !s.labels.contains_key("le")
                {
                    return Err(format!("histogram bucket without le: {s:?}"));
                }
                if kind == "counter" && s.value < 0.0 {
                    return Err(format!("negative counter: {s:?}"));
                }
            }
            None => return Err(format!("sample of an undeclared family: {s:?}")),
        }
    }
    Ok(m)
}

impl Metrics {
    /// The sum of the samples named `name` whose labels include `labels`
    /// (0 when there is none).
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.samples
            .iter()
            .filter(|s| s.name == name)
            .filter(|s| {
                labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|s| s.value)
            .sum()
    }

    /// Whether any sample named `name` exists.
    pub fn has(&self, name: &str) -> bool {
        self.samples.iter().any(|s| s.name == name)
    }
}
