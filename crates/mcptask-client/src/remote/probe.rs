//! A raw one-shot discovery over Streamable HTTP: `initialize`, then
//! `tools/list`, read as plain JSON. rmcp's HTTP client decodes answers
//! before any hook could see them, dropping SEP-1686's
//! `capabilities.tasks` and each tool's `execution`; this is how an HTTP
//! server's tasks protocol is detected without configuration.
//!
//! Only for a server already met as one of the session era (it did not
//! know `server/discover`, or named only older revisions there): SEP-1686
//! lives on `initialize` sessions, and a 2026-07-28 server is never asked
//! `initialize` (see `ServerRegistry::protocol`).

use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};

use super::RemoteError;
use super::server_def::{ServerDef, Transport};

const SESSION: &str = "mcp-session-id";

/// The raw `initialize` result and tool definitions of a session-era HTTP
/// server.
pub(crate) async fn discover(def: &ServerDef) -> Result<(Value, Vec<Value>), RemoteError> {
    let Transport::Http { url, headers } = &def.transport else {
        return Err(RemoteError::ConnectionUnavailable(format!(
            "{:?} is not an HTTP server",
            def.name
        )));
    };
    let fail = |e: String| RemoteError::Transient(format!("probing {:?} at {url}: {e}", def.name));
    let mut base = HeaderMap::new();
    for (k, v) in headers {
        let name: HeaderName = k
            .parse()
            .map_err(|_| fail(format!("bad header name {k:?}")))?;
        let value: HeaderValue = v
            .parse()
            .map_err(|_| fail(format!("bad value for {k:?}")))?;
        base.insert(name, value);
    }
    // An OAuth server: the token its sessions use (by the time a probe runs,
    // a session has authorized), presented anew on each request (a DPoP
    // proof is for one request only).
    let oauth = match &def.oauth {
        Some(settings) => {
            let runtime = settings
                .runtime
                .get()
                .unwrap_or_else(crate::oauth::OAuthRuntime::fallback);
            let auth = runtime.server(&def.name, url, &def.hash(), settings);
            let credential = auth.credential().await.map_err(fail)?;
            credential.map(|c| (auth, c))
        }
        None => None,
    };
    let authorized = |headers: &HeaderMap, method: &str| -> Result<HeaderMap, RemoteError> {
        let mut headers = headers.clone();
        if let Some((auth, credential)) = &oauth {
            headers.extend(auth.authorization(credential, method, url).map_err(fail)?);
        }
        Ok(headers)
    };
    base.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    base.insert(
        ACCEPT,
        HeaderValue::from_static("application/json, text/event-stream"),
    );
    // No redirects: the probe carries the configured credentials.
    let http = crate::tls::build_http_client(|| {
        reqwest::Client::builder().redirect(reqwest::redirect::Policy::none())
    })
    .map_err(|e| fail(e.to_string()))?;

    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {"elicitation": {}, "sampling": {}},
        "clientInfo": {"name": "mcptask-probe", "version": env!("CARGO_PKG_VERSION")}}});
    let resp = http
        .post(url)
        .headers(authorized(&base, "POST")?)
        .json(&init)
        .send()
        .await
        .map_err(|e| fail(e.to_string()))?;
    let session = resp.headers().get(SESSION).cloned();
    let init_result = answer(resp, 1).await.map_err(fail)?;
    let mut headers = base;
    if let Some(s) = session.clone() {
        headers.insert(SESSION, s);
    }
    if let Some(v) = init_result
        .get("protocolVersion")
        .and_then(Value::as_str)
        .and_then(|v| HeaderValue::from_str(v).ok())
    {
        headers.insert("mcp-protocol-version", v);
    }
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    http.post(url)
        .headers(authorized(&headers, "POST")?)
        .json(&initialized)
        .send()
        .await
        .map_err(|e| fail(e.to_string()))?;

    let mut tools = Vec::new();
    let mut cursor: Option<String> = None;
    for id in 2..102 {
        let params = match &cursor {
            Some(c) => json!({ "cursor": c }),
            None => json!({}),
        };
        let list = json!({"jsonrpc": "2.0", "id": id, "method": "tools/list", "params": params});
        let resp = http
            .post(url)
            .headers(authorized(&headers, "POST")?)
            .json(&list)
            .send()
            .await
            .map_err(|e| fail(e.to_string()))?;
        let page = answer(resp, id).await.map_err(fail)?;
        if let Some(items) = page.get("tools").and_then(Value::as_array) {
            tools.extend(items.iter().cloned());
        }
        cursor = page
            .get("nextCursor")
            .and_then(Value::as_str)
            .map(str::to_string);
        if cursor.is_none() {
            break;
        }
    }
    if session.is_some() {
        // Best effort: let the server drop the probe's session now.
        if let Ok(headers) = authorized(&headers, "DELETE") {
            let _ = http.delete(url).headers(headers).send().await;
        }
    }
    Ok((init_result, tools))
}

/// The `result` of the JSON-RPC answer with `id`, from a JSON or SSE body.
async fn answer(resp: reqwest::Response, id: i64) -> Result<Value, String> {
    let status = resp.status();
    let sse = resp
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let body = resp.text().await.map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(format!(
            "HTTP {status}: {}",
            body.chars().take(200).collect::<String>()
        ));
    }
    let messages: Vec<Value> = if sse {
        body.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str(d.trim()).ok())
            .collect()
    } else {
        serde_json::from_str(&body)
            .map(|v| vec![v])
            .map_err(|e| e.to_string())?
    };
    let msg = messages
        .into_iter()
        .find(|m| m.get("id").and_then(Value::as_i64) == Some(id))
        .ok_or_else(|| format!("no answer to request {id}"))?;
    if let Some(err) = msg.get("error") {
        return Err(format!("JSON-RPC error: {err}"));
    }
    msg.get("result")
        .cloned()
        .ok_or_else(|| format!("answer to request {id} has no result"))
}
