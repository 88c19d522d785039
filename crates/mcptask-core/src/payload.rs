//! Bounds on what enters the store from the network.
//!
//! Every JSON payload that crosses a trust boundary (tool arguments, results,
//! input responses, error texts) is measured before it is stored. Oversized
//! arguments are rejected; oversized results are replaced by a bounded stand-in
//! that says it was truncated, so a task still settles.

use serde_json::{Value, json};

/// Default bound on one HTTP request body, for every listener mcptask runs
/// (the gateway API and the MCP server). One figure everywhere, and room for
/// the largest default arguments object even when every character of it is
/// escaped once more inside a JSON-RPC or API envelope.
///
/// ```
/// use mcptask_core::payload::{DEFAULT_MAX_BODY_BYTES, PayloadLimits};
/// assert!(DEFAULT_MAX_BODY_BYTES >= 2 * PayloadLimits::default().max_arguments_bytes);
/// ```
pub const DEFAULT_MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// Configurable payload limits, in bytes of serialized JSON.
///
/// ```
/// let limits = mcptask_core::payload::PayloadLimits::default();
/// assert!(limits.max_arguments_bytes >= 64 * 1024);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PayloadLimits {
    /// Largest accepted `tools/call` arguments object.
    pub max_arguments_bytes: usize,
    /// Largest stored result; larger results are stored truncated with a flag.
    pub max_result_bytes: usize,
    /// Largest accepted single input response (`tasks/update` entry).
    pub max_input_response_bytes: usize,
    /// Longest stored error or status message text, in bytes.
    pub max_message_bytes: usize,
}

impl Default for PayloadLimits {
    fn default() -> Self {
        Self {
            max_arguments_bytes: 1024 * 1024,
            max_result_bytes: 4 * 1024 * 1024,
            max_input_response_bytes: 256 * 1024,
            max_message_bytes: 4 * 1024,
        }
    }
}

impl PayloadLimits {
    /// Why an answer to an input request cannot be accepted, if it cannot:
    /// it must be a JSON object within `max_input_response_bytes`.
    ///
    /// ```
    /// use serde_json::json;
    /// let limits = mcptask_core::payload::PayloadLimits { max_input_response_bytes: 64, ..Default::default() };
    /// assert!(limits.check_input_response(&json!({"action": "accept"})).is_ok());
    /// assert_eq!(limits.check_input_response(&json!("yes")).unwrap_err(), "must be a JSON object");
    /// assert!(limits.check_input_response(&json!({"x": "y".repeat(100)})).unwrap_err().contains("the limit is 64"));
    /// ```
    pub fn check_input_response(&self, value: &Value) -> Result<(), String> {
        if !value.is_object() {
            return Err("must be a JSON object".into());
        }
        let size = json_size(value);
        if size > self.max_input_response_bytes {
            return Err(format!(
                "is {size} bytes; the limit is {}",
                self.max_input_response_bytes
            ));
        }
        Ok(())
    }

    /// A JSON-RPC error object fit for storage: kept as is when small, else
    /// reduced to its code and a bounded message, flagged as truncated.
    ///
    /// ```
    /// use serde_json::json;
    /// let limits = mcptask_core::payload::PayloadLimits { max_message_bytes: 16, ..Default::default() };
    /// let small = json!({"code": -1, "message": "no"});
    /// assert_eq!(limits.bound_error(small.clone()), small);
    /// let big = limits.bound_error(json!({"code": -2, "message": "m".repeat(200), "data": [1, 2, 3]}));
    /// assert_eq!(big["code"], -2);
    /// assert_eq!(big["data"]["truncated"], true);
    /// ```
    pub fn bound_error(&self, error: Value) -> Value {
        if json_size(&error) <= self.max_message_bytes * 4 {
            return error;
        }
        let message = error.get("message").and_then(Value::as_str).unwrap_or("");
        json!({
            "code": error.get("code").cloned().unwrap_or(Value::from(-32603)),
            "message": truncate_text(message, self.max_message_bytes),
            "data": {"truncated": true}
        })
    }
}

/// Serialized size of a JSON value.
pub fn json_size(value: &Value) -> usize {
    serde_json::to_vec(value)
        .map(|v| v.len())
        .unwrap_or(usize::MAX)
}

/// Cut `text` to at most `max_bytes` bytes on a char boundary, marking the cut.
///
/// ```
/// use mcptask_core::payload::truncate_text;
/// assert_eq!(truncate_text("hello", 10), "hello");
/// let cut = truncate_text(&"é".repeat(100), 20);
/// assert!(cut.len() <= 20 + "…[truncated]".len());
/// assert!(cut.ends_with("…[truncated]"));
/// ```
pub fn truncate_text(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_string();
    }
    let mut end = max_bytes;
    while end > 0 && !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…[truncated]", &text[..end])
}

/// Outcome of bounding a result payload.
#[derive(Debug, Clone, PartialEq)]
pub struct Bounded {
    /// The value to store.
    pub value: Value,
    /// Whether the original was too large and `value` is a stand-in.
    pub truncated: bool,
    /// Size of the original, in bytes.
    pub original_bytes: usize,
}

/// Bound a `CallToolResult`-shaped JSON object. A result within the limit is
/// kept as is; a larger one becomes a valid `CallToolResult` whose single text
/// block holds a prefix of the original serialization and says it was cut, with
/// `_meta["io.mcptask/truncated"]` describing the cut.
///
/// ```
/// use serde_json::json;
/// use mcptask_core::payload::bound_tool_result;
/// let small = json!({"content": [{"type": "text", "text": "ok"}]});
/// assert!(!bound_tool_result(small.clone(), 1024).truncated);
/// let big = json!({"content": [{"type": "text", "text": "x".repeat(10_000)}]});
/// let b = bound_tool_result(big, 1024);
/// assert!(b.truncated);
/// assert!(serde_json::to_vec(&b.value).unwrap().len() <= 1024 + 512);
/// ```
pub fn bound_tool_result(value: Value, max_bytes: usize) -> Bounded {
    let serialized = serde_json::to_string(&value).unwrap_or_default();
    let original_bytes = serialized.len();
    if original_bytes <= max_bytes {
        return Bounded {
            value,
            truncated: false,
            original_bytes,
        };
    }
    let is_error = value
        .get("isError")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let prefix = truncate_text(&serialized, max_bytes.saturating_sub(256));
    Bounded {
        value: json!({
            "content": [{
                "type": "text",
                "text": format!("result truncated: {original_bytes} bytes exceeds the {max_bytes}-byte limit; prefix follows\n{prefix}")
            }],
            "isError": is_error,
            "_meta": {"io.mcptask/truncated": {"originalBytes": original_bytes, "limitBytes": max_bytes}}
        }),
        truncated: true,
        original_bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn truncate_never_exceeds_bound_and_keeps_prefix(s in ".{0,200}", max in 0usize..120) {
            let out = truncate_text(&s, max);
            if s.len() <= max {
                prop_assert_eq!(out, s);
            } else {
                let body = out.strip_suffix("…[truncated]").unwrap();
                prop_assert!(body.len() <= max);
                prop_assert!(s.starts_with(body));
            }
        }

        #[test]
        fn bounded_results_fit(n in 0usize..20_000, max in 300usize..5_000) {
            let v = json!({"content": [{"type": "text", "text": "y".repeat(n)}], "isError": true});
            let b = bound_tool_result(v, max);
            prop_assert!(json_size(&b.value) <= max + 400);
            prop_assert_eq!(b.value["isError"].as_bool(), Some(true));
        }
    }
}
