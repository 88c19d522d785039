//! A plain HTTP client of the gateway API, its replies, and helpers for
//! task listings.

use std::time::Duration;

use serde_json::{Value, json};

use crate::WAIT;

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
        // reqwest panics without a TLS provider installed first.
        mcptask_client::tls::install_crypto_provider();
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
