//! stdio with task notifications: the transport for a server on stdin and
//! stdout that serves `subscriptions/listen` with its `taskIds` filter.
//!
//! rmcp parses each request before a handler sees it and drops the filter
//! (its `SubscriptionFilter` has no `taskIds`). Over HTTP,
//! [`TaskListenLayer`](super::TaskListenLayer) sets it aside from the body;
//! here the transport reads each line itself, moves the filter into the
//! request's extensions as a [`ListenFilter`], and hands rmcp the request
//! without it. Every other message passes as rmcp's own stdio would pass it.
//!
//! A line is read up to a bound ([`TaskListenStdio::max_line_bytes`]): a
//! peer that sends more without a newline (a broken host, or `/dev/zero`)
//! is not speaking newline-delimited JSON-RPC, and nothing it sends next
//! can be trusted to start a message. The input then ends, as at its end
//! of file, and [`InputEnd`] says why (the server exits with an error).
//! A line that is not JSON-RPC is skipped, as rmcp's stdio skips it.

use std::sync::{Arc, OnceLock};

use rmcp::RoleServer;
use rmcp::model::{ClientRequest, JsonRpcMessage};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use super::listen_layer::take_listen_filter;

/// A newline-delimited JSON-RPC transport over `R`/`W` that carries the
/// task filter of `subscriptions/listen` to the handler.
pub struct TaskListenStdio<R, W> {
    input: BufReader<R>,
    /// The line being read (a line split across reads).
    line: Vec<u8>,
    max_line_bytes: usize,
    out: Arc<Mutex<W>>,
    input_closed: Option<CancellationToken>,
    end: InputEnd,
}

/// Why the input of a [`TaskListenStdio`] ended, once it has. Cheap to
/// clone: keep one ([`TaskListenStdio::input_end`]) before handing the
/// transport to rmcp.
#[derive(Clone, Debug, Default)]
pub struct InputEnd(Arc<OnceLock<Ended>>);

/// How the input ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ended {
    /// End of file: the client closed its side.
    Closed,
    /// A line longer than the bound: the client is not speaking
    /// newline-delimited JSON-RPC.
    LineTooLong {
        /// The bound, in bytes.
        max: usize,
    },
    /// The input could not be read (or a line is not UTF-8).
    Unreadable(String),
}

impl std::fmt::Display for Ended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ended::Closed => f.write_str("the input was closed"),
            Ended::LineTooLong { max } => write!(
                f,
                "a line on stdin is longer than {max} bytes without a newline: not newline-delimited JSON-RPC, the session ends"
            ),
            Ended::Unreadable(why) => write!(f, "stdin cannot be read: {why}"),
        }
    }
}

impl InputEnd {
    /// Why the input ended; `None` while it has not.
    pub fn get(&self) -> Option<&Ended> {
        self.0.get()
    }

    /// The input's end as an error, for an end that is not the client's
    /// end of file.
    pub fn error(&self) -> Option<&Ended> {
        self.get().filter(|e| **e != Ended::Closed)
    }
}

/// How long a line [`TaskListenStdio`] reads unless told otherwise: the
/// largest request body the HTTP transports accept by default.
pub const DEFAULT_MAX_LINE_BYTES: usize = mcptask_core::payload::DEFAULT_MAX_BODY_BYTES;

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
    /// Read requests from `input`, write answers and notifications to
    /// `output`; lines up to [`DEFAULT_MAX_LINE_BYTES`].
    pub fn new(input: R, output: W) -> Self {
        Self {
            input: BufReader::new(input),
            line: Vec::new(),
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            out: Arc::new(Mutex::new(output)),
            input_closed: None,
            end: InputEnd::default(),
        }
    }

    /// Read lines up to `max` bytes (a JSON-RPC message is one line): a
    /// longer one ends the input ([`Ended::LineTooLong`]).
    pub fn max_line_bytes(mut self, max: usize) -> Self {
        self.max_line_bytes = max;
        self
    }

    /// Where to read, once it ended, why the input ended.
    pub fn input_end(&self) -> InputEnd {
        self.end.clone()
    }

    /// The next line, without its newline; `Err` when the input ends.
    async fn next_line(&mut self) -> Result<Vec<u8>, Ended> {
        loop {
            let available = match self.input.fill_buf().await {
                Ok(available) => available,
                Err(e) => return Err(Ended::Unreadable(e.to_string())),
            };
            if available.is_empty() {
                // A last line without a newline is still a line.
                if self.line.is_empty() {
                    return Err(Ended::Closed);
                }
                return Ok(std::mem::take(&mut self.line));
            }
            let (taken, complete) = match available.iter().position(|b| *b == b'\n') {
                Some(at) => (at, true),
                None => (available.len(), false),
            };
            if self.line.len() + taken > self.max_line_bytes {
                return Err(Ended::LineTooLong {
                    max: self.max_line_bytes,
                });
            }
            self.line.extend_from_slice(&available[..taken]);
            self.input.consume(taken + usize::from(complete));
            if complete {
                return Ok(std::mem::take(&mut self.line));
            }
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
            let line = match self.next_line().await.and_then(|line| {
                String::from_utf8(line).map_err(|_| Ended::Unreadable("a line is not UTF-8".into()))
            }) {
                Ok(line) => line,
                Err(ended) => {
                    if ended != Ended::Closed {
                        tracing::error!(reason = %ended, "the stdio session ends");
                    }
                    let _ = self.end.0.set(ended);
                    if let Some(token) = &self.input_closed {
                        token.cancel();
                    }
                    return None;
                }
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
    use tokio::io::AsyncReadExt;

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

    /// A line over the bound ends the input without reading the rest of
    /// it (an endless line, `/dev/zero`, is never held whole), and says so.
    #[tokio::test]
    async fn a_line_over_the_bound_ends_the_input() {
        let gone = CancellationToken::new();
        let request = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string();
        let input = tokio::io::repeat(b'x').take(10_000_000);
        let input = std::io::Cursor::new(format!("{request}\n")).chain(input);
        let mut transport = TaskListenStdio::new(input, tokio::io::sink())
            .max_line_bytes(1024)
            .on_input_closed(gone.clone());
        let end = transport.input_end();
        assert!(
            transport.receive().await.is_some(),
            "a line within the bound"
        );
        assert!(transport.receive().await.is_none());
        assert!(gone.is_cancelled());
        assert_eq!(end.error(), Some(&Ended::LineTooLong { max: 1024 }));
    }

    #[tokio::test]
    async fn a_last_line_without_a_newline_is_read_then_the_input_is_closed() {
        let input = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string();
        let mut transport = TaskListenStdio::new(std::io::Cursor::new(input), tokio::io::sink());
        let end = transport.input_end();
        assert!(transport.receive().await.is_some());
        assert!(transport.receive().await.is_none());
        assert_eq!(end.get(), Some(&Ended::Closed));
        assert_eq!(end.error(), None);
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
