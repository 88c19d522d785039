//! Sessions at `/mcp` belong to the caller that opened them.
//!
//! A legacy (initialize-based) session is named by its `Mcp-Session-Id`
//! alone, and rmcp serves any request that names a live one. An id is not a
//! credential: it travels in logs, proxies and browser tools. So the front
//! records who opened each session (the principal of the `initialize`
//! request's token) and serves a request naming the session, its SSE GET
//! stream or its `DELETE`, only for that same caller. Anyone else gets the
//! very answer an unknown id gets (404 "Session not found"), so a stolen id
//! tells its holder nothing, and the session goes on working for its owner.
//!
//! Two pieces share one [`SessionOwners`] map: [`OwnedSessions`], a tower
//! layer in front of the Streamable HTTP service, records an owner when a
//! response hands out a new session id and checks it on every request that
//! names one; [`Owned`], a wrapper of rmcp's session manager, forgets a
//! session when rmcp closes it (its `DELETE`, its idle timeout, its worker
//! ending), so the map never outgrows the live sessions.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use axum::body::Body;
use axum::http::{Request, Response, StatusCode};
use futures::Stream;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::common::server_side_http::ServerSseMessage;
use rmcp::transport::streamable_http_server::session::{
    EventStore, RestoreOutcome, SessionId, SessionManager,
};

use crate::auth::Caller;

/// The header that names a session.
const SESSION_HEADER: &str = "mcp-session-id";

/// Who a session belongs to: the identity of the token that opened it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Owner {
    principal: Option<String>,
    operator: bool,
    /// The virtual server the session was opened through: a session serves
    /// one selection.
    through: Option<String>,
}

impl Owner {
    fn of(caller: &Caller) -> Self {
        Self {
            principal: caller.principal.clone(),
            operator: caller.operator,
            through: caller.through.as_ref().map(|v| v.name().to_string()),
        }
    }
}

/// The owner of every live session at `/mcp`. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct SessionOwners {
    owners: Arc<Mutex<HashMap<String, Owner>>>,
}

impl SessionOwners {
    /// Whether `caller` may use session `id`: only the caller that opened
    /// it. An id never seen here (unknown, or ended) is refused too: every
    /// session is opened through [`OwnedSessions`], which records it.
    fn admits(&self, id: &str, caller: &Caller) -> bool {
        self.owners
            .lock()
            .expect("session owners lock")
            .get(id)
            .is_some_and(|owner| *owner == Owner::of(caller))
    }

    fn record(&self, id: &str, caller: &Caller) {
        self.owners
            .lock()
            .expect("session owners lock")
            .insert(id.to_string(), Owner::of(caller));
    }

    fn forget(&self, id: &str) {
        self.owners.lock().expect("session owners lock").remove(id);
    }

    /// How many sessions are recorded (for tests and metrics).
    pub fn len(&self) -> usize {
        self.owners.lock().expect("session owners lock").len()
    }

    /// Whether no session is recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The answer to a request naming a session its caller may not use: the
/// same as rmcp's for an id it does not know.
fn not_found() -> Response<Body> {
    Response::builder()
        .status(StatusCode::NOT_FOUND)
        .body(Body::from("Not Found: Session not found"))
        .expect("a static response")
}

/// The tower layer of the front's MCP service that binds sessions to their
/// callers (see the module docs).
#[derive(Clone)]
pub struct OwnedSessions<S> {
    inner: S,
    owners: SessionOwners,
}

impl<S> OwnedSessions<S> {
    pub(super) fn new(inner: S, owners: SessionOwners) -> Self {
        Self { inner, owners }
    }
}

impl<S> tower::Service<Request<Body>> for OwnedSessions<S>
where
    S: tower::Service<Request<Body>, Response = Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        // The HTTP layer authenticated the request; without its caller
        // (a misassembled router) nobody owns anything.
        let caller = request.extensions().get::<Caller>().cloned();
        let named = request
            .headers()
            .get(SESSION_HEADER)
            .map(|v| v.to_str().unwrap_or_default().to_string());
        let owners = self.owners.clone();
        // The clone that was made ready is the one that serves.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(async move {
            let Some(caller) = caller else {
                return Ok(not_found());
            };
            match named {
                Some(id) => {
                    if !owners.admits(&id, &caller) {
                        return Ok(not_found());
                    }
                    let ending = request.method() == axum::http::Method::DELETE;
                    let mut response = inner.call(request).await?;
                    // rmcp accepts a session's end with 202; the SDKs take
                    // 200 or 204 as "ended" (the Python SDK warns "Session
                    // termination failed: 202"), and nothing is left to
                    // process: it is done.
                    if ending && response.status() == StatusCode::ACCEPTED {
                        *response.status_mut() = StatusCode::OK;
                    }
                    Ok(response)
                }
                None => {
                    let response = inner.call(request).await?;
                    // A new session (an `initialize` answered): its owner
                    // is recorded before the caller can learn its id.
                    if let Some(id) = response
                        .headers()
                        .get(SESSION_HEADER)
                        .and_then(|v| v.to_str().ok())
                    {
                        owners.record(id, &caller);
                    }
                    Ok(response)
                }
            }
        })
    }
}

/// rmcp's session manager `M`, forgetting a session's owner when the
/// session closes, whatever closes it.
pub struct Owned<M> {
    inner: M,
    owners: SessionOwners,
}

impl<M> Owned<M> {
    pub(super) fn new(inner: M, owners: SessionOwners) -> Self {
        Self { inner, owners }
    }
}

impl<M: SessionManager> SessionManager for Owned<M> {
    type Error = M::Error;
    type Transport = M::Transport;

    fn create_session(
        &self,
    ) -> impl Future<Output = Result<(SessionId, Self::Transport), Self::Error>> + Send {
        self.inner.create_session()
    }

    fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<ServerJsonRpcMessage, Self::Error>> + Send {
        self.inner.initialize_session(id, message)
    }

    fn has_session(
        &self,
        id: &SessionId,
    ) -> impl Future<Output = Result<bool, Self::Error>> + Send {
        self.inner.has_session(id)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        self.owners.forget(id);
        self.inner.close_session(id).await
    }

    fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> impl Future<
        Output = Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>,
    > + Send {
        self.inner.create_stream(id, message)
    }

    fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.accept_message(id, message)
    }

    fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> impl Future<
        Output = Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>,
    > + Send {
        self.inner.create_standalone_stream(id)
    }

    fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> impl Future<
        Output = Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>,
    > + Send {
        self.inner.resume(id, last_event_id)
    }

    fn restore_session(
        &self,
        id: SessionId,
    ) -> impl Future<Output = Result<RestoreOutcome<Self::Transport>, Self::Error>> + Send {
        self.inner.restore_session(id)
    }

    fn event_store(&self) -> Option<Arc<dyn EventStore>> {
        self.inner.event_store()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(principal: Option<&str>, operator: bool) -> Caller {
        Caller {
            principal: principal.map(str::to_string),
            operator,
            ..Caller::default()
        }
    }

    #[test]
    fn a_session_admits_only_the_caller_that_opened_it() {
        let owners = SessionOwners::default();
        let alice = caller(Some("alice"), false);
        owners.record("s1", &alice);
        assert!(owners.admits("s1", &alice));
        assert!(!owners.admits("s1", &caller(Some("bob"), false)));
        // An operator is not the session's owner either: ids are not shared.
        assert!(!owners.admits("s1", &caller(None, true)));
        // An alice token that is also an operator's is another identity.
        assert!(!owners.admits("s1", &caller(Some("alice"), true)));
        // An id never recorded (or forgotten) admits nobody.
        assert!(!owners.admits("s2", &alice));
        owners.forget("s1");
        assert!(!owners.admits("s1", &alice));
        assert!(owners.is_empty());
    }
}
