//! Sending an answer to a kept call's question: `tasks answer` and the
//! questions `call --wait` asks on a terminal take this one path (the
//! gateway checks the answer against the question before storing it).

use serde_json::{Value, json};

use super::client::{ApiFailure, GatewayClient};

/// Send `response` (a full response, e.g. `{"action": "accept", "content":
/// {…}}`) to question `key` of call `id`; the gateway's answer. A refused
/// answer is the gateway's [`ApiFailure`] (see [`refused`]).
pub async fn send(
    gw: &GatewayClient,
    id: &str,
    key: &str,
    response: &Value,
) -> anyhow::Result<Value> {
    gw.post(
        &format!("/api/v1/tasks/{id}/answers"),
        &json!({"answers": {key: response}}),
    )
    .await
}

/// Whether the gateway stored the answer (otherwise the key was not an
/// outstanding question: never asked, or answered already).
pub fn stored(answered: &Value) -> bool {
    answered["stored"].as_array().is_some_and(|s| !s.is_empty())
}

/// The gateway's refusal of an answer that does not fit its question
/// (nothing was stored; the message names the field).
pub fn refused(e: &anyhow::Error) -> Option<&ApiFailure> {
    e.downcast_ref::<ApiFailure>()
        .filter(|f| f.code == "invalid_answer")
}
