//! A call's W3C trace context (`traceparent`, `tracestate`), kept with the
//! call so that the work done for it later (polls, driver steps, deliveries,
//! on any replica and after restarts) joins the trace the call was made in.
//!
//! Only the two header values are kept, as received or produced: parsing and
//! generating them is the tracing library's job, not the core's.

use serde::{Deserialize, Serialize};

/// The W3C Trace Context of a call, as its two header values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceContext {
    /// `traceparent`: `00-<trace id>-<parent span id>-<flags>`.
    pub traceparent: String,
    /// `tracestate`: vendor entries, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
}

impl TraceContext {
    /// The trace id (32 lowercase hex digits) of a well-formed `traceparent`.
    pub fn trace_id(&self) -> Option<&str> {
        let id = self.traceparent.split('-').nth(1)?;
        (id.len() == 32).then_some(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trace_id_is_the_second_field() {
        let cx = TraceContext {
            traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
            tracestate: None,
        };
        assert_eq!(cx.trace_id(), Some("4bf92f3577b34da6a3ce929d0e0e4736"));
        let bad = TraceContext {
            traceparent: "garbage".into(),
            tracestate: None,
        };
        assert_eq!(bad.trace_id(), None);
    }
}
