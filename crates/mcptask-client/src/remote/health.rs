//! Each server's health, from what its calls and listings do. One rule,
//! [`Seen`], says what an exchange with a server tells of it; every path
//! that talks to a server (the pooled connection, the lanes, listings, the
//! tracker's workers, the gateway's calls and its byte relay) reports what
//! it saw with [`ServerRegistry::observe`](super::ServerRegistry::observe),
//! and the server's [`Health`] follows: the first failed exchange turns it
//! `error` with the reason, the next answer turns it `ok`.
//!
//! What counts against a server is what says it cannot serve: it could not
//! be reached, its transport failed, it (or a proxy in front of it)
//! answered HTTP 5xx or a page instead of MCP, it did not answer in time,
//! or it refused the gateway's credentials. A server that answers, even
//! with a JSON-RPC error it chose to send or a tool result with `isError`,
//! is up: those are the call's outcome, not the server's state.

use serde::Serialize;

use super::RemoteError;
use crate::upstream::UpstreamError;

/// What the tracker last saw of a server.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Health {
    /// `ok`, `error` or `unknown` (not contacted yet).
    pub state: &'static str,
    /// When a call last succeeded (RFC 3339).
    pub last_ok_at: Option<String>,
    /// Why the last failed exchange failed, bounded.
    pub last_error: Option<String>,
    /// When it happened (RFC 3339).
    pub last_error_at: Option<String>,
}

impl Health {
    /// Whether the server answers (its last exchange did).
    pub fn is_up(&self) -> bool {
        self.state == "ok"
    }
}

/// What one exchange with a server says about its health.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// The server answered (a result, or an error of its own choosing).
    Answered,
    /// The server could not serve, and why.
    Failed(String),
    /// Nothing about the server (the call was withdrawn, or the server is
    /// not configured as the task was made).
    Nothing,
}

impl Seen {
    /// What a classified failure says: a transient one (unreachable, a
    /// dropped transport, a timeout, HTTP 5xx, a proxy's page) is the
    /// server failing; anything else came from a server that answered.
    pub fn of_remote(e: &RemoteError) -> Seen {
        match e {
            RemoteError::Transient(why) => Seen::Failed(why.clone()),
            // One call's authorization says nothing of the server.
            RemoteError::ConnectionUnavailable(_) | RemoteError::Unauthorized(_) => Seen::Nothing,
            RemoteError::NotFound(_) | RemoteError::Protocol(_) | RemoteError::Rpc(_) => {
                Seen::Answered
            }
        }
    }

    /// What the outcome of a relayed call says ([`Seen::of_remote`] for the
    /// transport's failures; silence and a refusal of the gateway's
    /// credentials are the server failing its callers).
    pub fn of_upstream(e: &UpstreamError) -> Seen {
        match e {
            UpstreamError::Rpc(_) => Seen::Answered,
            UpstreamError::Remote(e) => Seen::of_remote(e),
            UpstreamError::Timeout { .. } | UpstreamError::Refused { .. } => {
                Seen::Failed(e.to_string())
            }
            UpstreamError::Cancelled => Seen::Nothing,
        }
    }

    /// [`Seen::of_upstream`] of a call's outcome (`Ok`: answered).
    pub fn of_result<T>(outcome: &Result<T, UpstreamError>) -> Seen {
        match outcome {
            Ok(_) => Seen::Answered,
            Err(e) => Seen::of_upstream(e),
        }
    }

    /// An HTTP answer of `status` to `operation` that carries no MCP
    /// message (the gateway's byte relay reads the status itself).
    pub fn of_http(operation: &str, status: u16) -> Seen {
        Seen::Failed(format!(
            "{operation}: the server answered HTTP {status} without an MCP message"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::ErrorData;

    #[test]
    fn only_a_server_that_cannot_serve_is_failing() {
        let down = RemoteError::Transient("connection refused".into());
        assert_eq!(
            Seen::of_remote(&down),
            Seen::Failed("connection refused".into())
        );
        let own_error = UpstreamError::Rpc(ErrorData::invalid_params("no such city", None));
        assert_eq!(Seen::of_upstream(&own_error), Seen::Answered);
        let broken = RemoteError::Protocol("garbage".into());
        assert_eq!(Seen::of_remote(&broken), Seen::Answered);
        let silent = UpstreamError::Timeout {
            operation: "tools/call".into(),
            after: std::time::Duration::from_secs(1),
        };
        assert!(matches!(Seen::of_upstream(&silent), Seen::Failed(_)));
        let refused = UpstreamError::Refused {
            operation: "tools/call".into(),
            status: 401,
        };
        assert!(matches!(Seen::of_upstream(&refused), Seen::Failed(_)));
        assert_eq!(Seen::of_upstream(&UpstreamError::Cancelled), Seen::Nothing);
        assert_eq!(
            Seen::of_result::<()>(&Err(UpstreamError::Remote(
                RemoteError::ConnectionUnavailable("gone".into())
            ))),
            Seen::Nothing
        );
        assert!(matches!(Seen::of_http("tools/call", 502), Seen::Failed(w) if w.contains("502")));
    }
}
