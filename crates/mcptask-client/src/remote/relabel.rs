//! The caller's progress token on the wire to the upstream.
//!
//! rmcp stamps a progress token of its own on every request it sends
//! (`Peer::send_request_with_option` overwrites `_meta.progressToken`, and
//! its token provider cannot be chosen), so a front relaying a call would
//! show the upstream mcptask's numbers instead of its caller's token. A
//! request that must carry the caller's token holds it as an in-memory
//! extension ([`CallerProgressToken`], never serialized), and the session's
//! transport ([`Relabel`]) writes it into `_meta` just before the request
//! leaves. The token is unique on the upstream session as long as the
//! caller's is: a relayed call holds its lane alone (one call at a time),
//! and the upstream's progress comes back under the caller's token to the
//! session's handler, which routes it to that call whatever its token.

use std::borrow::Cow;
use std::future::Future;

use rmcp::RoleClient;
use rmcp::model::{GetExtensions, GetMeta, JsonRpcMessage, ProgressToken};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;

/// The progress token a request must carry upstream in place of rmcp's own
/// (an extension of the request, read by [`Relabel`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CallerProgressToken(pub(crate) ProgressToken);

/// A transport that puts each request's [`CallerProgressToken`], if any,
/// in its `_meta.progressToken` as it is sent; everything else passes as is.
pub(crate) struct Relabel<T> {
    inner: T,
}

impl<T> Relabel<T> {
    pub(crate) fn new(inner: T) -> Self {
        Relabel { inner }
    }
}

/// Give `message` its caller's progress token, if it names one.
fn relabel(message: &mut TxJsonRpcMessage<RoleClient>) {
    let JsonRpcMessage::Request(request) = message else {
        return;
    };
    let Some(CallerProgressToken(token)) = request
        .request
        .extensions()
        .get::<CallerProgressToken>()
        .cloned()
    else {
        return;
    };
    request.request.get_meta_mut().set_progress_token(token);
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Relabel<T> {
    type Error = T::Error;

    fn name() -> Cow<'static, str> {
        T::name()
    }

    fn send(
        &mut self,
        mut item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        relabel(&mut item);
        self.inner.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.inner.receive()
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{CallToolRequest, CallToolRequestParams, ClientRequest, NumberOrString};

    fn call(caller: Option<&str>) -> TxJsonRpcMessage<RoleClient> {
        let mut request = ClientRequest::CallToolRequest(CallToolRequest::new(
            CallToolRequestParams::new("echo"),
        ));
        // What rmcp stamps on every request.
        request
            .get_meta_mut()
            .set_progress_token(ProgressToken(NumberOrString::Number(1)));
        if let Some(token) = caller {
            request
                .extensions_mut()
                .insert(CallerProgressToken(ProgressToken(NumberOrString::String(
                    token.into(),
                ))));
        }
        JsonRpcMessage::request(request, NumberOrString::Number(7))
    }

    fn token_on_the_wire(message: &TxJsonRpcMessage<RoleClient>) -> serde_json::Value {
        serde_json::to_value(message).expect("serialize")["params"]["_meta"]["progressToken"]
            .clone()
    }

    #[test]
    fn the_callers_token_replaces_rmcps_and_nothing_else_changes() {
        let mut named = call(Some("caller-1"));
        relabel(&mut named);
        assert_eq!(token_on_the_wire(&named), "caller-1");
        let mut plain = call(None);
        relabel(&mut plain);
        assert_eq!(token_on_the_wire(&plain), 1);
    }
}
