//! Where the gateway's calls report what they saw of their upstream: every
//! path (the full way's pass-through, the synchronous and SEP-1686 drivers,
//! the byte relay; the tracker and the listings report on their own) tells
//! the one rule ([`Seen`], in `mcptask_client::remote::health`), so a
//! server's health in `GET /api/v1/servers`, the dashboard, `/readyz` and
//! `mcptask_upstream_up` follows what its calls actually do.

use mcptask_client::remote::{Lane, RemoteError, Seen};
use mcptask_client::upstream::UpstreamError;

use super::Upstreams;

impl Upstreams {
    /// What an exchange with `server` said about it.
    pub fn saw(&self, server: &str, seen: Seen) {
        self.tracker.servers().observe(server, seen);
    }

    /// [`Upstreams::saw`] of a call's outcome.
    pub fn saw_outcome<T>(&self, server: &str, outcome: &Result<T, UpstreamError>) {
        self.saw(server, Seen::of_result(outcome));
    }

    /// An exclusive session with `server` for one call. A session that
    /// cannot be opened is the server failing (whatever the reason: no
    /// call can be made); a session reused from the pool says nothing yet.
    pub async fn lane(&self, server: &str) -> Result<Lane, RemoteError> {
        let pool = self
            .lanes(server)
            .map_err(RemoteError::ConnectionUnavailable)?;
        pool.acquire().await.inspect_err(|e| {
            self.saw(server, Seen::Failed(e.to_string()));
        })
    }

    /// The configured servers and whether each answers now (its last
    /// exchange did; a server not contacted yet does not).
    pub fn up(&self) -> Vec<(String, bool)> {
        let registry = self.tracker.servers();
        self.server_names()
            .into_iter()
            .map(|name| {
                let up = registry.health(&name).is_some_and(|h| h.is_up());
                (name, up)
            })
            .collect()
    }

    /// What `/readyz` says of the upstream servers: how many answer now
    /// and, while some were never listed (their tools are not offered
    /// yet), how many: `upstream servers answering: 1 of 2; not ready
    /// (tools not listed yet): 1`. A host or a test waits for every
    /// server by reading it; which ones are not ready is told to those who
    /// may see the servers (`GET /api/v1/servers`, `ready`), and a server
    /// not ready never makes the gateway unready.
    pub fn readiness(&self) -> String {
        let servers = self.up();
        let answering = servers.iter().filter(|(_, up)| *up).count();
        let mut said = format!(
            "upstream servers answering: {answering} of {}",
            servers.len()
        );
        let unlisted = self.unlisted().len();
        if unlisted > 0 {
            said.push_str(&format!("; not ready (tools not listed yet): {unlisted}"));
        }
        said
    }
}
