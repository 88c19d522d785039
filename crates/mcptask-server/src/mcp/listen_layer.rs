//! Sets the tasks filter of `subscriptions/listen` aside before rmcp parses
//! the request, for Streamable HTTP servers.
//!
//! rmcp 3.11's `SubscriptionFilter` has no `taskIds`: parsed as is, the
//! request would reach the handler with the task ids silently dropped and be
//! acknowledged without them. This layer reads each POST body; when it is a
//! `subscriptions/listen` whose `notifications` names `taskIds`, it moves
//! `params.notifications` into the HTTP request's extensions as a
//! [`ListenFilter`]. Without `notifications` the request no longer parses as
//! rmcp's typed one and reaches [`DurableTaskServer`](super::DurableTaskServer)'s
//! custom-request handler, which serves it. Every other request passes
//! through unchanged (its body re-buffered).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Method, Request};
use http_body::Body;
use http_body_util::{BodyExt, Either, Full, Limited};
use serde_json::Value;

use super::listen::{LISTEN_METHOD, ListenFilter};

/// Bodies larger than this are passed through unread (rmcp's own body limit
/// then applies); `subscriptions/listen` requests are far smaller.
pub const DEFAULT_MAX_INSPECTED_BYTES: usize = 4 * 1024 * 1024;

/// A `tower` layer for rmcp's `StreamableHttpService` that lets
/// [`DurableTaskServer`](super::DurableTaskServer) serve task status
/// notifications (see the module docs).
///
/// Wrap rmcp's `StreamableHttpService` (or any HTTP service in front of a
/// [`DurableTaskServer`](super::DurableTaskServer)):
///
/// ```
/// use tower::Layer;
/// fn with_task_notifications<S>(http: S) -> mcptask_server::TaskListenService<S> {
///     mcptask_server::TaskListenLayer::new().layer(http)
/// }
/// /// ```
#[derive(Debug, Clone, Copy)]
pub struct TaskListenLayer {
    max_inspected_bytes: usize,
}

impl TaskListenLayer {
    /// A layer that inspects bodies up to [`DEFAULT_MAX_INSPECTED_BYTES`].
    pub fn new() -> Self {
        Self {
            max_inspected_bytes: DEFAULT_MAX_INSPECTED_BYTES,
        }
    }

    /// Inspect bodies up to `bytes` (set it to the service's own body limit).
    pub fn max_inspected_bytes(mut self, bytes: usize) -> Self {
        self.max_inspected_bytes = bytes;
        self
    }

    /// Wrap `inner` (what [`tower::Layer::layer`] does, without importing it).
    pub fn wrap<S>(self, inner: S) -> TaskListenService<S> {
        tower::Layer::layer(&self, inner)
    }
}

impl Default for TaskListenLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl<S> tower::Layer<S> for TaskListenLayer {
    type Service = TaskListenService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        TaskListenService {
            inner,
            max_inspected_bytes: self.max_inspected_bytes,
        }
    }
}

/// The service [`TaskListenLayer`] wraps around an HTTP MCP service.
#[derive(Debug, Clone)]
pub struct TaskListenService<S> {
    inner: S,
    max_inspected_bytes: usize,
}

/// The body the wrapped service sees: re-buffered after inspection, or the
/// original one when it was not read.
pub type ListenBody<B> = Either<Full<Bytes>, B>;

impl<S, B> tower::Service<Request<B>> for TaskListenService<S>
where
    S: tower::Service<Request<ListenBody<B>>> + Clone + Send + 'static,
    S::Future: Send,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        // The clone that was polled ready serves this request.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let limit = self.max_inspected_bytes;
        Box::pin(async move {
            let request = set_aside(request, limit).await;
            inner.call(request).await
        })
    }
}

/// Read a POST body (within `limit`) and set the tasks filter aside if it is
/// a `subscriptions/listen` that asks for tasks.
async fn set_aside<B>(request: Request<B>, limit: usize) -> Request<ListenBody<B>>
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let declared_len = request
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if request.method() != Method::POST || declared_len.is_some_and(|n| n > limit) {
        return request.map(Either::Right);
    }
    let (mut parts, body) = request.into_parts();
    let bytes = match Limited::new(body, limit).collect().await {
        Ok(collected) => collected.to_bytes(),
        // An unreadable or oversized body: rmcp answers the empty one as a
        // parse error, as it would have answered the original.
        Err(e) => {
            tracing::debug!(error = %e, "request body unreadable");
            Bytes::new()
        }
    };
    let bytes = match take_filter(&bytes) {
        Some((filter, rewritten)) => {
            parts.extensions.insert(filter);
            rewritten
        }
        None => bytes,
    };
    Request::from_parts(parts, Either::Left(Full::new(bytes)))
}

/// The filter and the body without it, if `body` is a `subscriptions/listen`
/// whose `notifications` names `taskIds`.
fn take_filter(body: &[u8]) -> Option<(ListenFilter, Bytes)> {
    // Most bodies are not listen requests: skip parsing them twice.
    if !body
        .windows(LISTEN_METHOD.len())
        .any(|w| w == LISTEN_METHOD.as_bytes())
    {
        return None;
    }
    let mut message: Value = serde_json::from_slice(body).ok()?;
    let filter = take_listen_filter(&mut message)?;
    let rewritten = serde_json::to_vec(&message).ok()?;
    Some((filter, Bytes::from(rewritten)))
}

/// Move `params.notifications` out of `message` if it is a
/// `subscriptions/listen` that names `taskIds` (whatever the transport).
pub(crate) fn take_listen_filter(message: &mut Value) -> Option<ListenFilter> {
    if message.get("method")?.as_str()? != LISTEN_METHOD {
        return None;
    }
    let params = message.get_mut("params")?.as_object_mut()?;
    params.get("notifications")?.get("taskIds")?;
    params.remove("notifications").map(ListenFilter)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_task_listen_request_loses_its_filter_to_the_extension() {
        let body = json!({"jsonrpc": "2.0", "id": 7, "method": "subscriptions/listen",
            "params": {"_meta": {"k": 1}, "notifications": {"taskIds": ["t1"]}}});
        let (filter, rewritten) = take_filter(body.to_string().as_bytes()).unwrap();
        assert_eq!(filter.0, json!({"taskIds": ["t1"]}));
        let rewritten: Value = serde_json::from_slice(&rewritten).unwrap();
        assert_eq!(rewritten["params"], json!({"_meta": {"k": 1}}));
        assert_eq!(rewritten["id"], 7);
    }

    #[test]
    fn other_requests_pass_through() {
        let listen_tools = json!({"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen",
            "params": {"notifications": {"toolsListChanged": true}}});
        assert!(take_filter(listen_tools.to_string().as_bytes()).is_none());
        let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "subscriptions/listen", "arguments": {}}});
        assert!(take_filter(call.to_string().as_bytes()).is_none());
        assert!(take_filter(b"not json subscriptions/listen").is_none());
    }
}
