//! Helpers to build input requests for [`TaskContext::request_input`](crate::TaskContext::request_input).

use rmcp::model::InputRequest;
use serde_json::{Value, json};

/// A form elicitation (`elicitation/create`, mode `form`) asking the user to
/// fill `requested_schema` (a flat JSON Schema object of primitive properties).
///
/// ```
/// use serde_json::json;
/// let req = mcptask_server::input::elicit_form(
///     "Delete report.txt?",
///     json!({"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]}),
/// ).unwrap();
/// let wire = serde_json::to_value(&req).unwrap();
/// assert_eq!(wire["method"], "elicitation/create");
/// ```
pub fn elicit_form(
    message: impl Into<String>,
    requested_schema: Value,
) -> Result<InputRequest, serde_json::Error> {
    serde_json::from_value(json!({
        "method": "elicitation/create",
        "params": {"mode": "form", "message": message.into(), "requestedSchema": requested_schema}
    }))
}

/// The `content` object of an accepted elicitation answer, or `None` when the
/// user declined or cancelled.
///
/// ```
/// use serde_json::json;
/// let answer = json!({"action": "accept", "content": {"confirm": true}});
/// assert_eq!(mcptask_server::input::accepted(&answer).unwrap()["confirm"], true);
/// assert!(mcptask_server::input::accepted(&json!({"action": "decline"})).is_none());
/// ```
pub fn accepted(answer: &Value) -> Option<&serde_json::Map<String, Value>> {
    if answer.get("action").and_then(Value::as_str) != Some("accept") {
        return None;
    }
    answer.get("content").and_then(Value::as_object)
}
