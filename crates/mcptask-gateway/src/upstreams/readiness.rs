//! Servers not listed yet: the front serves at once, and each server that
//! was down or mute when the gateway started (or when a reload added it)
//! is listed again, quickly at first and then every [`MAX_RETRY`], until
//! it answers; its tools appear then. A call of a tool that may be one of
//! its tools is told the server is not ready, not that the tool does not
//! exist.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Upstreams;

/// The first wait before listing a server again.
const FIRST_RETRY: Duration = Duration::from_millis(250);

/// The longest wait between two listings of a server not listed yet: its
/// tools appear within this long of it answering.
pub const MAX_RETRY: Duration = Duration::from_secs(2);

impl Upstreams {
    /// The configured servers whose tools were never listed.
    pub fn unlisted(&self) -> Vec<String> {
        self.server_names()
            .into_iter()
            .filter(|s| !self.has_listing(s))
            .collect()
    }

    /// The server not listed yet that may serve the front name `name`, and
    /// the tool's name there (a server under `prefix` serves `prefix__…`;
    /// one with no prefix may serve any name), if any.
    pub fn unlisted_owner(&self, name: &str) -> Option<(String, String)> {
        self.servers()
            .into_iter()
            .filter(|s| !self.has_listing(&s.name))
            .find_map(|s| {
                let tool = if s.prefix.is_empty() {
                    name
                } else {
                    name.strip_prefix(s.prefix.as_str())?.strip_prefix("__")?
                };
                Some((s.name, tool.to_string()))
            })
    }
}

/// List `server` until it answers (or is no longer configured, or `stop`),
/// then put its tools in the catalog. Backs off from `FIRST_RETRY` to
/// [`MAX_RETRY`].
pub fn list_until_listed(upstreams: Arc<Upstreams>, server: String, stop: CancellationToken) {
    tokio::spawn(async move {
        let mut wait = FIRST_RETRY;
        while upstreams.is_configured(&server) && !upstreams.has_listing(&server) {
            let listed = tokio::select! {
                _ = stop.cancelled() => return,
                listed = upstreams.refresh_server(&server) => listed,
            };
            match listed {
                Ok(clashes) => {
                    for clash in clashes {
                        tracing::warn!(%clash, "an upstream tool was left out of the catalog");
                    }
                    tracing::info!(%server, "the upstream server answered; its tools are listed");
                    return;
                }
                Err(_) => {
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(wait) => {}
                    }
                    wait = (wait * 2).min(MAX_RETRY);
                }
            }
        }
    });
}
