//! Whether a call's `Mcp-Param-*` headers say what its body says.
//!
//! A 2026-07-28 tool may mark arguments (`x-mcp-header` on a property of
//! its input schema) that a client mirrors into `Mcp-Param-<Name>` headers
//! (SEP-2243), so a load balancer or a firewall can act on them without
//! reading the body. An intermediary may then have acted on a header the
//! body contradicts: the server must refuse such a request (-32020, HTTP
//! 400) rather than act on the body.
//!
//! The full way's transport (rmcp) checks the headers against the tool's
//! definition and refuses a mismatch before the call is made. The byte
//! relay decides nothing of its own here: it carries a call only when its
//! headers provably agree with its body, and steps aside for anything else
//! (a contradiction, a missing or repeated header, a Base64-wrapped value,
//! a header the tool does not declare), which goes the full way to be
//! judged and refused there, once, in the one answer every path gives.

use axum::body::Bytes;
use axum::http::HeaderMap;
use rmcp::model::JsonObject;
use serde::Deserialize;
use serde_json::Value;

/// The header name prefix, lower-case as `HeaderMap` keeps names.
const PREFIX: &str = "mcp-param-";

/// Whether the `Mcp-Param-*` headers of a `tools/call` whose body is
/// `body` agree with it, for the tool whose input schema is `schema`.
pub(super) fn agree(headers: &HeaderMap, schema: &JsonObject, body: &Bytes) -> bool {
    let mut marked = Vec::new();
    annotations(schema.get("properties"), &mut Vec::new(), &mut marked);
    let sent = headers
        .keys()
        .filter(|name| name.as_str().starts_with(PREFIX));
    // The common case: no parameter mirrored, none sent; the body is not
    // read again.
    if marked.is_empty() {
        return sent.count() == 0;
    }
    let names: Vec<String> = marked
        .iter()
        .map(|(_, header)| format!("{PREFIX}{}", header.to_ascii_lowercase()))
        .collect();
    if sent
        .into_iter()
        .any(|name| !names.iter().any(|n| n == name.as_str()))
    {
        return false;
    }
    let Ok(call) = serde_json::from_slice::<CallArguments>(body) else {
        return false;
    };
    let arguments = call.params.and_then(|p| p.arguments);
    marked.iter().zip(&names).all(|((path, _), name)| {
        let said = arguments
            .as_ref()
            .and_then(|a| path.iter().try_fold(a, |v, key| v.get(key)))
            .filter(|v| !v.is_null())
            .and_then(plain);
        let mut values = headers.get_all(name.as_str()).iter();
        match (values.next(), values.next(), said) {
            (None, _, None) => true,
            (Some(header), None, Some(said)) => header
                .to_str()
                .is_ok_and(|header| header == said && !wrapped(header)),
            _ => false,
        }
    })
}

/// A tool call's arguments, all [`agree`] reads of its body.
#[derive(Deserialize)]
struct CallArguments {
    params: Option<Arguments>,
}

#[derive(Deserialize)]
struct Arguments {
    arguments: Option<Value>,
}

/// Each `x-mcp-header` annotation reached from the schema's root through
/// `properties` alone, as (property path, header suffix): the ones the
/// protocol gives a header.
fn annotations<'a>(
    properties: Option<&'a Value>,
    path: &mut Vec<&'a str>,
    out: &mut Vec<(Vec<&'a str>, &'a str)>,
) {
    let Some(Value::Object(properties)) = properties else {
        return;
    };
    for (name, property) in properties {
        path.push(name);
        if let Some(Value::String(header)) = property.get("x-mcp-header")
            && !header.is_empty()
        {
            out.push((path.clone(), header));
        }
        annotations(property.get("properties"), path, out);
        path.pop();
    }
}

/// A primitive argument as its header carries it in plain text.
fn plain(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// A value in the protocol's Base64 wrapper (`=?base64?…?=`): decoded
/// before it is compared, which the full way does.
fn wrapped(header: &str) -> bool {
    header.starts_with("=?base64?") && header.ends_with("?=")
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderName, HeaderValue};
    use serde_json::json;

    fn schema() -> JsonObject {
        json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "where": {"type": "object", "properties": {
                "zone": {"type": "integer", "x-mcp-header": "Zone"}
            }},
            "note": {"type": "string"}
        }})
        .as_object()
        .cloned()
        .unwrap()
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    fn body(arguments: Value) -> Bytes {
        Bytes::from(
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "t", "arguments": arguments}})
            .to_string(),
        )
    }

    #[test]
    fn headers_that_say_what_the_body_says_agree() {
        let args = json!({"region": "eu-west1", "where": {"zone": 3}, "note": "x"});
        let sent = headers(&[("Mcp-Param-Region", "eu-west1"), ("Mcp-Param-Zone", "3")]);
        assert!(agree(&sent, &schema(), &body(args)));
        // Nothing mirrored, nothing sent.
        assert!(agree(&headers(&[]), &schema(), &body(json!({"note": "x"}))));
        let plain = JsonObject::new();
        assert!(agree(&headers(&[]), &plain, &body(json!({}))));
    }

    #[test]
    fn anything_else_is_left_to_the_full_way() {
        let args = json!({"region": "eu-west1", "where": {"zone": 3}});
        for sent in [
            // A contradiction.
            vec![("Mcp-Param-Region", "us-east1"), ("Mcp-Param-Zone", "3")],
            // A value of the body without its header.
            vec![("Mcp-Param-Region", "eu-west1")],
            // A header twice.
            vec![
                ("Mcp-Param-Region", "eu-west1"),
                ("Mcp-Param-Region", "eu-west1"),
                ("Mcp-Param-Zone", "3"),
            ],
            // A header the tool does not declare.
            vec![
                ("Mcp-Param-Region", "eu-west1"),
                ("Mcp-Param-Zone", "3"),
                ("Mcp-Param-Other", "x"),
            ],
            // Base64, which only the full way decodes.
            vec![
                ("Mcp-Param-Region", "=?base64?ZXUtd2VzdDE=?="),
                ("Mcp-Param-Zone", "3"),
            ],
        ] {
            assert!(
                !agree(&headers(&sent), &schema(), &body(args.clone())),
                "{sent:?}"
            );
        }
        // A header for an argument the body does not have.
        let sent = headers(&[("Mcp-Param-Region", "eu-west1")]);
        assert!(!agree(&sent, &schema(), &body(json!({}))));
        // A header sent for a tool that mirrors nothing.
        assert!(!agree(&sent, &JsonObject::new(), &body(json!({}))));
    }
}
