//! The upstream's answer as the byte relay hands it on: the bytes as they
//! come, until the upstream ends it or the call's deadline does.
//!
//! The status line is sent before the answer's end is known, so an answer
//! cut short (the deadline passed, the upstream's connection broke) cannot
//! become an error status any more; ending its body as if it were whole
//! would hand the caller a truncated message that looks complete. What the
//! caller gets instead depends on where the cut falls:
//!
//! - before the first byte, or (an SSE stream) between two events: a
//!   JSON-RPC error for the request's id (as the JSON body, or as a final
//!   event), in the one mapping's words: a whole message, the same the full
//!   way would have answered;
//! - anywhere else: the body is aborted (no last chunk), which every HTTP
//!   client reports as an incomplete message. Buffering a JSON answer
//!   until its end would allow a clean error there too, at the cost of
//!   holding every answer whole in memory and of its first byte's latency;
//!   an answer cut mid-way is rare and aborting it is enough to keep it
//!   from passing as whole.

use std::pin::Pin;
use std::time::Duration;

use axum::body::Bytes;
use futures::{Stream, StreamExt};
use rmcp::model::ErrorData;
use serde_json::{Value, json};

use crate::failure::Failure;

/// How the upstream answered: its content type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Style {
    /// One JSON message (`application/json`).
    Json,
    /// An SSE stream (`text/event-stream`).
    Sse,
}

/// What ends an answer before the upstream did.
#[derive(Debug, thiserror::Error)]
#[error("the upstream's answer was cut short")]
pub(super) struct Cut;

/// The relay's state: where the answer is and how it may still end.
struct Relay<S> {
    upstream: Pin<Box<S>>,
    deadline: Pin<Box<tokio::time::Sleep>>,
    style: Style,
    /// The request's id, for a closing error.
    id: Value,
    /// The bound the deadline stands for, in the closing error's words.
    timeout: Duration,
    /// Nothing sent yet.
    fresh: bool,
    /// The last bytes sent (at most 4): whether an SSE event just ended.
    tail: Vec<u8>,
    ended: bool,
}

/// `upstream`'s bytes for the caller, ended at `deadline` (which stands for
/// `timeout`), the request `id`'s error said or the body aborted at a cut.
pub(super) fn relayed<S>(
    upstream: S,
    style: Style,
    id: Value,
    deadline: tokio::time::Instant,
    timeout: Duration,
) -> impl Stream<Item = Result<Bytes, Cut>> + Send + 'static
where
    S: Stream<Item = reqwest::Result<Bytes>> + Send + 'static,
{
    let relay = Relay {
        upstream: Box::pin(upstream),
        deadline: Box::pin(tokio::time::sleep_until(deadline)),
        style,
        id,
        timeout,
        fresh: true,
        tail: Vec::new(),
        ended: false,
    };
    futures::stream::unfold(relay, |mut relay| async move {
        if relay.ended {
            return None;
        }
        let failure = tokio::select! {
            // The deadline first: an upstream that always has bytes ready
            // is cut all the same.
            biased;
            _ = &mut relay.deadline => Failure::no_answer("tools/call", relay.timeout),
            chunk = relay.upstream.next() => match chunk {
                Some(Ok(bytes)) => {
                    relay.sent(&bytes);
                    return Some((Ok(bytes), relay));
                }
                Some(Err(e)) => Failure::unreachable(&e),
                None => return None,
            },
        };
        relay.ended = true;
        let last = relay.closing(failure);
        Some((last, relay))
    })
}

impl<S> Relay<S> {
    fn sent(&mut self, bytes: &Bytes) {
        if bytes.is_empty() {
            return;
        }
        self.fresh = false;
        self.tail
            .extend_from_slice(&bytes[bytes.len().saturating_sub(4)..]);
        let excess = self.tail.len().saturating_sub(4);
        self.tail.drain(..excess);
    }

    /// Whether a whole message may still follow what was sent.
    fn between_messages(&self) -> bool {
        self.fresh
            || (self.style == Style::Sse
                && (self.tail.ends_with(b"\n\n")
                    || self.tail.ends_with(b"\r\r")
                    || self.tail.ends_with(b"\r\n\r\n")))
    }

    /// The end of an answer cut by `failure`.
    fn closing(&self, failure: Failure) -> Result<Bytes, Cut> {
        tracing::debug!(reason = %failure.message(), "a relayed answer was cut");
        if !self.between_messages() {
            return Err(Cut);
        }
        let error: ErrorData = failure.into();
        let message = json!({"jsonrpc": "2.0", "id": self.id, "error": error});
        Ok(Bytes::from(match self.style {
            Style::Json => message.to_string(),
            Style::Sse => format!("event: message\ndata: {message}\n\n"),
        }))
    }
}
