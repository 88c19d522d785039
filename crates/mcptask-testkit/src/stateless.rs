//! A stateless 2026-07-28 `tools/call` as a client without an MCP SDK
//! posts it: the raw request, headers and all, and its answer read back.

use serde_json::{Value, json};

/// `tools/call` of `tool` with `arguments`, posted to the MCP endpoint
/// `mcp` with the protocol's routing headers, `bearer` as the credential
/// (if any), the caller's `traceparent` header and `meta` as the request's
/// `_meta`. Returns the JSON-RPC answer: a JSON body, or the one message of
/// an SSE stream.
pub async fn post_tools_call(
    mcp: &str,
    bearer: Option<&str>,
    traceparent: &str,
    tool: &str,
    arguments: Value,
    meta: Value,
) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": tool, "arguments": arguments, "_meta": meta}});
    let mut request = reqwest::Client::new()
        .post(mcp)
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "tools/call")
        .header("Mcp-Name", tool)
        .header("traceparent", traceparent)
        .json(&body);
    if let Some(token) = bearer {
        request = request.bearer_auth(token);
    }
    let text = request
        .send()
        .await
        .expect("POST /mcp")
        .text()
        .await
        .expect("the answer");
    let json = text
        .lines()
        .find_map(|l| l.strip_prefix("data:"))
        .unwrap_or(&text);
    serde_json::from_str(json.trim()).unwrap_or_else(|e| panic!("{e}: {text}"))
}
