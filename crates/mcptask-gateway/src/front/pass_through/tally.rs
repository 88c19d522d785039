//! Counting a relayed call: the byte relay never reads its answer as a
//! message, so how the call ended is told from the bytes as they pass (a
//! member `"isError": true` is the tool's error; an `"error": {"code": …`
//! member, the JSON-RPC error of an answer that failed), and the count is
//! made when the answer's stream ends or is dropped (the caller went away).
//! Inside a JSON string a quote is escaped, so these can only be members;
//! a tool whose structured result itself holds such a member would be
//! misread, which costs a count, never an answer.

use std::time::Instant;

use mcptask_core::outcome::Outcome;

use crate::metrics::CallLabels;

/// The bytes kept from one chunk to the next, so that an `"isError": true`
/// split between two chunks is seen.
const KEEP: usize = 32;

/// One relayed answer's end, counted when dropped.
pub(super) struct Tally {
    labels: CallLabels,
    started: Instant,
    /// The end of the bytes seen so far (at most [`KEEP`]).
    tail: Vec<u8>,
    tool_error: bool,
    rpc_error: bool,
    cut: bool,
    finished: bool,
}

impl Tally {
    pub(super) fn new(labels: CallLabels, started: Instant) -> Self {
        Tally {
            labels,
            started,
            tail: Vec::new(),
            tool_error: false,
            rpc_error: false,
            cut: false,
            finished: false,
        }
    }

    /// A chunk of the answer passed (`None`: the answer was cut).
    pub(super) fn saw(&mut self, chunk: Option<&[u8]>) {
        let Some(bytes) = chunk else {
            self.cut = true;
            return;
        };
        if self.tool_error || self.rpc_error {
            return;
        }
        let mut window = std::mem::take(&mut self.tail);
        window.extend_from_slice(bytes);
        self.tool_error = has_member(&window, b"\"isError\"", b"true");
        self.rpc_error = has_member(&window, b"\"error\"", b"{\"code\"");
        self.tail = window[window.len().saturating_sub(KEEP)..].to_vec();
    }

    /// The answer ended as the upstream (or the deadline) ended it.
    pub(super) fn finished(&mut self) {
        self.finished = true;
    }
}

impl Drop for Tally {
    fn drop(&mut self) {
        let (outcome, labels) = if !self.finished {
            (Outcome::Cancelled, self.labels.clone())
        } else if self.rpc_error {
            // The upstream's JSON-RPC error, relayed as it is.
            (
                Outcome::Failed,
                self.labels.clone().failed_with("remote_error"),
            )
        } else if self.cut {
            // The answer broke off: told as an upstream that could not serve.
            (
                Outcome::Failed,
                self.labels.clone().failed_with("unavailable"),
            )
        } else {
            (Outcome::answered(self.tool_error), self.labels.clone())
        };
        crate::metrics::call_ended(&labels, outcome, self.started.elapsed());
    }
}

/// Whether `bytes` hold a JSON member named `key` (quoted) whose value
/// starts with `value` (spaces around the colon allowed).
fn has_member(bytes: &[u8], key: &[u8], value: &[u8]) -> bool {
    let skip_space = |b: &[u8]| -> usize {
        b.iter()
            .take_while(|c| matches!(c, b' ' | b'\t' | b'\r' | b'\n'))
            .count()
    };
    bytes.windows(key.len()).enumerate().any(|(at, w)| {
        if w != key {
            return false;
        }
        let rest = &bytes[at + key.len()..];
        let rest = &rest[skip_space(rest)..];
        let Some(rest) = rest.strip_prefix(b":") else {
            return false;
        };
        rest[skip_space(rest)..].starts_with(value)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_error_is_seen_whatever_the_spacing_and_the_chunks() {
        let says = |bytes: &[u8]| has_member(bytes, b"\"isError\"", b"true");
        assert!(says(br#"{"result":{"content":[],"isError":true}}"#));
        assert!(says(br#"{"isError" :  true}"#));
        assert!(!says(br#"{"isError":false}"#));
        assert!(!says(br#"{"text":"\"isError\":true"}"#));
        let failed = br#"{"jsonrpc":"2.0","id":7,"error":{"code":-32602,"message":"x"}}"#;
        assert!(has_member(failed, b"\"error\"", b"{\"code\""));
        let answer = br#"data: {"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":true}}"#;
        for split in 1..answer.len() {
            let labels = CallLabels::for_tests();
            let mut tally = Tally::new(labels, Instant::now());
            tally.saw(Some(&answer[..split]));
            tally.saw(Some(&answer[split..]));
            assert!(tally.tool_error, "split at {split}");
            tally.finished();
        }
    }
}
