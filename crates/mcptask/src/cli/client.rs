//! A small client for the gateway API, used by the CLI commands.

use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::Value;

/// Where the gateway is and how to authenticate.
#[derive(Debug, Clone, clap::Args)]
pub struct GatewayArgs {
    /// GatewayClient base URL.
    #[arg(
        long,
        env = "MCPTASK_GATEWAY",
        default_value = "http://127.0.0.1:7777",
        global = true
    )]
    pub gateway: String,
    /// API token (see [[api.tokens]] in mcptask.toml).
    #[arg(long, env = "MCPTASK_API_TOKEN", global = true, hide_env_values = true)]
    pub token: Option<String>,
}

/// An error answer of the gateway API (`{"error": {code, message, details}}`),
/// kept whole so a command can act on its code and details (e.g. the
/// questions of a 409 `input_needed`).
#[derive(Debug)]
pub struct ApiFailure {
    pub status: u16,
    pub code: String,
    pub message: String,
    pub details: Value,
}

impl std::fmt::Display for ApiFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}, HTTP {})", self.message, self.code, self.status)
    }
}

impl std::error::Error for ApiFailure {}

/// The gateway could not be reached (nothing listens, the connection broke,
/// no answer in time): nothing was answered, so a command that only reads,
/// such as following a call, may try again.
#[derive(Debug)]
pub struct Unreachable {
    message: String,
    source: Option<reqwest::Error>,
}

impl Unreachable {
    /// Whether `e` (or one of its causes) says the gateway was not reached.
    pub fn is(e: &anyhow::Error) -> bool {
        e.chain().any(|c| c.is::<Unreachable>())
    }
}

impl std::fmt::Display for Unreachable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Unreachable {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_ref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

pub struct GatewayClient {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl GatewayClient {
    pub fn new(args: &GatewayArgs) -> anyhow::Result<Self> {
        let http = mcptask_client::tls::build_http_client(|| {
            reqwest::Client::builder()
                .timeout(Duration::from_secs(330))
                .user_agent(format!(
                    "{}{}",
                    mcptask_gateway::api::CLI_USER_AGENT,
                    env!("CARGO_PKG_VERSION")
                ))
        })
        .context("building the HTTP client")?;
        let base = args.gateway.trim_end_matches('/');
        // Without a scheme the request would fail as "cannot reach the
        // gateway", blaming a gateway that may well be running.
        match reqwest::Url::parse(base) {
            Ok(url) if matches!(url.scheme(), "http" | "https") && url.has_host() => {}
            _ => bail!(
                "--gateway {base:?} is not an http(s) URL\n  fix: include the scheme, e.g. http://{}",
                base.split("://").last().unwrap_or(base)
            ),
        }
        Ok(Self {
            base: base.to_string(),
            token: args.token.clone(),
            http,
        })
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> anyhow::Result<Value> {
        let request = match &self.token {
            Some(t) => request.bearer_auth(t),
            None => request,
        };
        let response = match request.send().await {
            Ok(response) => response,
            Err(e) => return Err(self.unreachable(e).into()),
        };
        let status = response.status();
        let body: Option<Value> = response.json().await.ok();
        // Every answer of the gateway API is JSON, and every error carries
        // `error.code`: anything else comes from something that is not an
        // mcptask gateway (a web server, a proxy, an MCP server's port).
        let not_a_gateway = || {
            anyhow::anyhow!(
                "{} answered HTTP {} without an mcptask API answer: is it an mcptask gateway?\n  fix: point --gateway (or MCPTASK_GATEWAY) at `mcptask serve`'s [api] listen address, e.g. http://127.0.0.1:7777",
                self.base,
                status.as_u16()
            )
        };
        let Some(body) = body else {
            return Err(not_a_gateway());
        };
        if status.is_success() {
            return Ok(body);
        }
        let (Some(code), Some(message)) = (
            body["error"]["code"].as_str(),
            body["error"]["message"].as_str(),
        ) else {
            return Err(not_a_gateway());
        };
        if code == "not_found" && message.starts_with("task") {
            bail!(
                "{message} (HTTP {})\n  fix: `mcptask tasks list` shows the ids of the tasks this token can see",
                status.as_u16()
            );
        }
        if code == "unauthorized" {
            bail!("{message}\n  fix: pass --token or set MCPTASK_API_TOKEN");
        }
        Err(ApiFailure {
            status: status.as_u16(),
            code: code.to_string(),
            message: message.to_string(),
            details: body["error"]["details"].clone(),
        }
        .into())
    }

    /// What a failed send says: a refused connection (nothing listens
    /// there, the common case) in one line; anything else keeps its causes.
    fn unreachable(&self, e: reqwest::Error) -> Unreachable {
        let refused = std::iter::successors(Some(&e as &(dyn std::error::Error + 'static)), |e| {
            e.source()
        })
        .filter_map(|e| e.downcast_ref::<std::io::Error>())
        .any(|e| e.kind() == std::io::ErrorKind::ConnectionRefused);
        if refused {
            return Unreachable {
                message: format!(
                    "cannot reach the gateway at {}: connection refused (is `mcptask serve` running?)\n  fix: start it, or point --gateway (or MCPTASK_GATEWAY) at the address it listens on",
                    self.base
                ),
                source: None,
            };
        }
        Unreachable {
            message: format!(
                "cannot reach the gateway at {} (is `mcptask serve` running?)",
                self.base
            ),
            source: Some(e),
        }
    }

    /// The gateway's base URL, as given.
    pub fn base(&self) -> &str {
        &self.base
    }

    pub async fn get(&self, path: &str) -> anyhow::Result<Value> {
        self.send(self.http.get(format!("{}{path}", self.base)))
            .await
    }

    /// GET `path` with query parameters, each name and value encoded (a
    /// server name or target with `&`, `#` or spaces must not break the query).
    pub async fn get_query(&self, path: &str, query: &[(&str, &str)]) -> anyhow::Result<Value> {
        let mut url = reqwest::Url::parse(&format!("{}{path}", self.base))
            .with_context(|| format!("{}{path} is not a URL", self.base))?;
        url.query_pairs_mut().extend_pairs(query);
        self.send(self.http.get(url)).await
    }

    pub async fn put(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        self.send(self.http.put(format!("{}{path}", self.base)).json(body))
            .await
    }

    pub async fn delete(&self, path: &str) -> anyhow::Result<Value> {
        self.send(self.http.delete(format!("{}{path}", self.base)))
            .await
    }

    pub async fn post(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        self.send(self.http.post(format!("{}{path}", self.base)).json(body))
            .await
    }
}
