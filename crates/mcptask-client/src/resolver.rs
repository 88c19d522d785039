//! Answering input requests from code (an approval policy, a model, a UI bridge).

use async_trait::async_trait;
use serde_json::Value;

/// What an input request is about.
#[derive(Debug, Clone)]
pub struct InputContext<'a> {
    /// Local task id; `None` while a `tools/call` is still in its
    /// multi-round-trip phase (before any task exists).
    pub task_id: Option<&'a str>,
    /// The server the tool lives on.
    pub server: &'a str,
    /// The tool that asks.
    pub tool: &'a str,
    /// The principal the call was made for.
    pub principal: Option<&'a str>,
    /// The request's key (answered once per task).
    pub key: &'a str,
    /// The request (`{"method": "elicitation/create", "params": …}` or similar).
    pub request: &'a Value,
}

/// Decides answers to input requests. Returning `None` leaves the request for
/// the application (API, dashboard) to answer. It may be asked more than once
/// for the same key (e.g. after a restart); the tracker stores an answer only
/// once per key.
#[async_trait]
pub trait InputResolver: Send + Sync + 'static {
    /// The answer to `input`, or `None` to leave it to the application.
    async fn resolve(&self, input: InputContext<'_>) -> Option<Value>;
}
