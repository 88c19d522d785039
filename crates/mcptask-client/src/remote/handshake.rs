//! A transport wrapper for the session handshake: the answer to an abandoned
//! `server/discover` probe is dropped instead of being read as the answer to
//! `initialize`.
//!
//! rmcp's `Auto` lifecycle probes with `server/discover` and, when no answer
//! comes within 10 s, falls back to `initialize` on the same connection. A
//! server that is merely slow to start (an `npx` download, a loaded machine,
//! an OAuth authorization inside the probe) answers the probe late, and rmcp
//! then takes that answer (a `-32601` from a legacy server, a discover result
//! from a modern one) as the reply to `initialize`: "conflict initialized
//! response id" / "uncorrelated error response", and the session fails
//! although the server is fine. Here every request the handshake sent and gave
//! up on is remembered, and a late answer to it never reaches rmcp.

use std::borrow::Cow;
use std::collections::HashSet;
use std::future::Future;

use rmcp::RoleClient;
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, JsonRpcMessage, RequestId};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;

/// Wraps a client transport; see the module docs.
///
/// ```
/// # use mcptask_client::remote::ProbeGuard;
/// # fn wrap<T: rmcp::transport::Transport<rmcp::RoleClient>>(transport: T) -> ProbeGuard<T> {
/// ProbeGuard::new(transport)
/// # }
/// ```
pub struct ProbeGuard<T> {
    inner: T,
    /// The `server/discover` requests sent and not yet answered.
    probing: HashSet<RequestId>,
    /// Probes the handshake gave up on (it went on to `initialize`).
    abandoned: HashSet<RequestId>,
}

impl<T> ProbeGuard<T> {
    /// Guard `inner`'s handshake.
    pub fn new(inner: T) -> Self {
        ProbeGuard {
            inner,
            probing: HashSet::new(),
            abandoned: HashSet::new(),
        }
    }

    fn on_send(&mut self, item: &ClientJsonRpcMessage) {
        let JsonRpcMessage::Request(request) = item else {
            return;
        };
        match &request.request {
            ClientRequest::DiscoverRequest(_) => {
                self.probing.insert(request.id.clone());
            }
            // The handshake fell back while a probe was unanswered.
            ClientRequest::InitializeRequest(_) => self.abandoned.extend(self.probing.drain()),
            _ => {}
        }
    }

    /// Whether `message` answers an abandoned probe (and is to be dropped).
    fn is_stale(&mut self, message: &RxJsonRpcMessage<RoleClient>) -> bool {
        let id = match message {
            JsonRpcMessage::Response(r) => &r.id,
            JsonRpcMessage::Error(e) => match &e.id {
                Some(id) => id,
                None => return false,
            },
            _ => return false,
        };
        self.probing.remove(id);
        self.abandoned.remove(id)
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for ProbeGuard<T> {
    type Error = T::Error;

    fn name() -> Cow<'static, str> {
        T::name()
    }

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.on_send(&item);
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            let message = self.inner.receive().await?;
            if self.is_stale(&message) {
                tracing::debug!("dropped the late answer to an abandoned server/discover probe");
                continue;
            }
            return Some(message);
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{
        DiscoverRequest, DiscoverRequestMethod, DiscoverRequestParams, ErrorData,
        InitializeRequest, JsonRpcError, JsonRpcVersion2_0, NumberOrString,
    };

    fn discover(id: i64) -> ClientJsonRpcMessage {
        JsonRpcMessage::request(
            ClientRequest::DiscoverRequest(DiscoverRequest::new(DiscoverRequestParams {})),
            NumberOrString::Number(id),
        )
    }

    fn initialize(id: i64) -> ClientJsonRpcMessage {
        JsonRpcMessage::request(
            ClientRequest::InitializeRequest(InitializeRequest::new(super::super::client_config())),
            NumberOrString::Number(id),
        )
    }

    fn error(id: i64) -> RxJsonRpcMessage<RoleClient> {
        JsonRpcMessage::Error(JsonRpcError {
            jsonrpc: JsonRpcVersion2_0,
            id: Some(NumberOrString::Number(id)),
            error: ErrorData::method_not_found::<DiscoverRequestMethod>(),
        })
    }

    #[test]
    fn a_late_answer_to_an_abandoned_probe_is_stale_and_only_once() {
        let mut guard = ProbeGuard::new(());
        guard.on_send(&discover(0));
        guard.on_send(&initialize(1));
        assert!(guard.is_stale(&error(0)));
        assert!(!guard.is_stale(&error(0)), "forgotten once dropped");
        assert!(!guard.is_stale(&error(1)), "initialize's answer passes");
    }

    #[test]
    fn an_answered_probe_is_never_stale() {
        let mut guard = ProbeGuard::new(());
        guard.on_send(&discover(0));
        assert!(!guard.is_stale(&error(0)), "the probe's own answer passes");
        guard.on_send(&initialize(1));
        assert!(!guard.is_stale(&error(0)));
        assert!(!guard.is_stale(&error(1)));
    }
}
