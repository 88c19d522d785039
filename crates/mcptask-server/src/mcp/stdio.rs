//! stdio with task notifications: the transport for a server on stdin and
//! stdout that serves `subscriptions/listen` with its `taskIds` filter.
//!
//! rmcp parses each request before a handler sees it and drops the filter
//! (its `SubscriptionFilter` has no `taskIds`). Over HTTP,
//! [`TaskListenLayer`](super::TaskListenLayer) sets it aside from the body;
//! here the transport reads each line itself, moves the filter into the
//! request's extensions as a [`ListenFilter`], and hands rmcp the request
//! without it. Every other message passes as rmcp's own stdio would pass it.

use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::model::{ClientRequest, JsonRpcMessage};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, Lines};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use super::listen_layer::take_listen_filter;

/// A newline-delimited JSON-RPC transport over `R`/`W` that carries the
/// task filter of `subscriptions/listen` to the handler.
pub struct TaskListenStdio<R, W> {
    lines: Lines<BufReader<R>>,
    out: Arc<Mutex<W>>,
    input_closed: Option<CancellationToken>,
}

/// [`TaskListenStdio`] on this process's stdin and stdout.
///
/// ```no_run
/// # async fn demo(server: mcptask_server::DurableTaskServer) -> Result<(), Box<dyn std::error::Error>> {
/// use rmcp::ServiceExt;
/// let running = server.serve(mcptask_server::mcp::stdio_with_listen()).await?;
/// running.waiting().await?;
/// # Ok(()) }
/// ```
pub fn stdio_with_listen() -> TaskListenStdio<tokio::io::Stdin, tokio::io::Stdout> {
    TaskListenStdio::new(tokio::io::stdin(), tokio::io::stdout())
}

impl<R, W> TaskListenStdio<R, W>
where
    R: AsyncRead + Unpin,
{
    /// Read requests from `input`, write answers and notifications to `output`.
    pub fn new(input: R, output: W) -> Self {
        Self {
            lines: BufReader::new(input).lines(),
            out: Arc::new(Mutex::new(output)),
            input_closed: None,
        }
    }

    /// Cancel `token` when the input ends: the client is gone, and the
    /// handlers of its requests still running can stop at once rather than
    /// when rmcp's drain gives up on them.
    pub fn on_input_closed(mut self, token: CancellationToken) -> Self {
        self.input_closed = Some(token);
        self
    }
}

/// Parse one line; the listen filter, if any, goes into the request's extensions.
fn parse(line: &str) -> Result<RxJsonRpcMessage<RoleServer>, serde_json::Error> {
    let mut value: Value = serde_json::from_str(line)?;
    let filter = take_listen_filter(&mut value);
    let mut message: RxJsonRpcMessage<RoleServer> = serde_json::from_value(value)?;
    if let (Some(filter), JsonRpcMessage::Request(request)) = (filter, &mut message)
        && let ClientRequest::CustomRequest(custom) = &mut request.request
    {
        custom.extensions.insert(filter);
    }
    Ok(message)
}

impl<R, W> Transport<RoleServer> for TaskListenStdio<R, W>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let out = self.out.clone();
        async move {
            let mut line = serde_json::to_vec(&item).map_err(std::io::Error::other)?;
            line.push(b'\n');
            let mut out = out.lock().await;
            out.write_all(&line).await?;
            out.flush().await
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            let Some(line) = self.lines.next_line().await.ok().flatten() else {
                if let Some(token) = &self.input_closed {
                    token.cancel();
                }
                return None;
            };
            if line.trim().is_empty() {
                continue;
            }
            match parse(&line) {
                Ok(message) => return Some(message),
                // What rmcp's own stdio does with a line it cannot read:
                // skip it and keep serving.
                Err(e) => tracing::warn!(error = %e, "unreadable JSON-RPC line on stdin"),
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.out.lock().await.flush().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    use crate::mcp::ListenFilter;

    #[test]
    fn a_task_listen_request_carries_its_filter_in_its_extensions() {
        let line = json!({"jsonrpc": "2.0", "id": 3, "method": "subscriptions/listen",
            "params": {"notifications": {"taskIds": ["a", "b"]}}})
        .to_string();
        let JsonRpcMessage::Request(request) = parse(&line).unwrap() else {
            panic!("a request");
        };
        let ClientRequest::CustomRequest(custom) = request.request else {
            panic!("a custom request");
        };
        assert_eq!(
            custom.extensions.get::<ListenFilter>().unwrap().0,
            json!({"taskIds": ["a", "b"]})
        );
    }

    #[tokio::test]
    async fn the_end_of_the_input_cancels_the_token() {
        let gone = CancellationToken::new();
        let input = b"{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"tools/list\"}\n".as_slice();
        let mut transport =
            TaskListenStdio::new(input, tokio::io::sink()).on_input_closed(gone.clone());
        assert!(transport.receive().await.is_some());
        assert!(
            !gone.is_cancelled(),
            "a request is not the end of the input"
        );
        assert!(transport.receive().await.is_none());
        assert!(gone.is_cancelled());
    }

    #[test]
    fn other_lines_parse_as_rmcp_parses_them() {
        let line = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string();
        assert!(matches!(
            parse(&line).unwrap(),
            JsonRpcMessage::Request(r) if matches!(r.request, ClientRequest::ListToolsRequest(_))
        ));
        assert!(parse("not json").is_err());
    }
}
