//! Servers not listed yet: the front never waits for them. Every server is
//! listed in the background from the start (and when a reload adds it),
//! each one's tools entering the catalog as soon as it answers (callers
//! hear `notifications/tools/list_changed`); a server down or mute is
//! listed again, quickly at first and then every [`MAX_RETRY`], until it
//! answers. A call of a tool that may be one of its tools is told the
//! server is not ready, not that the tool does not exist.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::Upstreams;
use super::catalog::Catalog;

/// The first wait before listing a server again.
const FIRST_RETRY: Duration = Duration::from_millis(250);

/// The longest wait between two listings of a server not listed yet: its
/// tools appear within this long (and one listing) of it answering.
pub const MAX_RETRY: Duration = Duration::from_secs(1);

/// The servers whose first listing is under way (not answered, not failed
/// yet), watched by those who may wait for them a little.
#[derive(Default)]
pub(super) struct FirstListings {
    pending: tokio::sync::watch::Sender<BTreeSet<String>>,
}

impl FirstListings {
    fn begin(&self, server: &str) {
        self.pending.send_modify(|p| {
            p.insert(server.to_string());
        });
    }

    fn end(&self, server: &str) {
        self.pending.send_if_modified(|p| p.remove(server));
    }
}

impl Upstreams {
    /// The configured servers whose tools were never listed.
    pub fn unlisted(&self) -> Vec<String> {
        self.server_names()
            .into_iter()
            .filter(|s| !self.has_listing(s))
            .collect()
    }

    /// Whether a configured server that `catalog` was not built from may
    /// serve the front name `name`: the name is not known *yet* to that
    /// catalog. Asked of the snapshot the name was missing from, not of
    /// the listings: a server's listing is stored a moment before the
    /// catalog built from it is published, and a name looked up in between
    /// is neither in the catalog nor of an unlisted server.
    pub fn may_list_later(&self, catalog: &Catalog, name: &str) -> bool {
        self.servers()
            .iter()
            .any(|s| !catalog.lists(&s.name) && may_serve(s, name).is_some())
    }

    /// Whether a call of the front name `name`, missing from `catalog`,
    /// waits for first listings ([`Upstreams::first_listings_for`]) before
    /// it is refused. Asked of the snapshot the name is missing from, not of
    /// the listings: a call arriving between a server's listing and the
    /// catalog built from it waits a moment for that catalog rather than
    /// being told the tool does not exist.
    pub fn may_wait_for(&self, catalog: &Catalog, name: &str) -> bool {
        catalog.get(name).is_none() && self.may_list_later(catalog, name)
    }

    /// The server not listed yet that may serve the front name `name`, and
    /// the tool's name there, if any.
    pub fn unlisted_owner(&self, name: &str) -> Option<(String, String)> {
        self.servers()
            .into_iter()
            .filter(|s| !self.has_listing(&s.name))
            .find_map(|s| Some((s.name.clone(), may_serve(&s, name)?.to_string())))
    }

    /// Until no server whose first listing is under way may serve the front
    /// name `name` (each answered or failed), at most the longest connect
    /// timeout among them (what one listing attempt of theirs may take): a
    /// call naming one of its tools right after the start (a stdio server
    /// takes a moment to speak, seconds on a loaded host) is made rather
    /// than refused "not ready", while a mute server holds only the calls
    /// that may be of its tools, and only that long. With several servers
    /// without a prefix, a name may be any of theirs: the call waits for
    /// each.
    pub async fn first_listings_for(&self, name: &str) {
        let servers = self.servers();
        let owners: BTreeSet<String> = servers
            .iter()
            .filter(|s| may_serve(s, name).is_some())
            .map(|s| s.name.clone())
            .collect();
        let bound = owners
            .iter()
            .map(|s| self.connect_timeout(s))
            .max()
            .unwrap_or_default();
        let mut pending = self.first.pending.subscribe();
        let none_pending = pending.wait_for(|p| p.is_disjoint(&owners));
        let _ = tokio::time::timeout(bound, none_pending).await;
    }

    /// Until every first listing under way has answered or failed, or until
    /// `grace` after the gateway began listing: the front's first
    /// `tools/list` gets the servers that answer at once, and a slow or mute
    /// one never holds it longer (its tools are announced when they come).
    pub async fn first_listings(&self, grace: Duration) {
        let deadline = self.born + grace;
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        let mut pending = self.first.pending.subscribe();
        let _ = tokio::time::timeout(left, pending.wait_for(BTreeSet::is_empty)).await;
    }
}

/// The tool's name at `server` if `server` may serve the front name `name`:
/// a server under `prefix` serves `prefix__…`; one with no prefix may serve
/// any name.
fn may_serve<'n>(server: &super::Upstream, name: &'n str) -> Option<&'n str> {
    if server.prefix.is_empty() {
        Some(name)
    } else {
        name.strip_prefix(server.prefix.as_str())?
            .strip_prefix("__")
    }
}

/// The first bound on one listing attempt of an HTTP server not listed yet.
const FIRST_ATTEMPT: Duration = Duration::from_secs(2);

/// The bound on listing attempt `n` (from 0) of an HTTP server not listed
/// yet: [`FIRST_ATTEMPT`], doubling up to the server's `connect` timeout. A
/// mute server (one that takes the request and never answers) holds an
/// attempt until its bound and answers only a later one: its tools appear
/// within one bound of it answering, not one connect timeout (30 s by
/// default), while a server slow to answer is still given its whole
/// connect timeout within a few attempts.
fn attempt_limit(n: u32, connect: Duration) -> Duration {
    FIRST_ATTEMPT
        .saturating_mul(1 << n.min(16))
        .min(connect.max(FIRST_ATTEMPT))
}

/// List `server` until it answers (or is no longer configured, or `stop`),
/// then put its tools in the catalog (callers are told the catalog
/// changed). The first attempt is made at once; then the waits back off
/// from `FIRST_RETRY` to [`MAX_RETRY`]. An HTTP server's attempts are
/// bounded by [`attempt_limit`]: cutting one costs a request. A stdio
/// server's never are: its attempt is a child process starting (Node
/// through `npx` takes seconds), which a cut would kill, so that the next
/// attempt would start it from nothing again and a slow starter would
/// never be listed in time for the calls waiting for it.
pub fn list_until_listed(upstreams: Arc<Upstreams>, server: String, stop: CancellationToken) {
    upstreams.first.begin(&server);
    tokio::spawn(async move {
        let mut wait = FIRST_RETRY;
        let mut attempt = 0;
        let (begun, connect) = (Instant::now(), upstreams.connect_timeout(&server));
        let cut_short = upstreams.is_http(&server);
        while upstreams.is_configured(&server) && !upstreams.has_listing(&server) {
            // `Duration::MAX`: tokio's timeout then never fires.
            let limit = if cut_short {
                attempt_limit(attempt, connect)
            } else {
                Duration::MAX
            };
            attempt += 1;
            let (listed, cut) = tokio::select! {
                _ = stop.cancelled() => break,
                listed = tokio::time::timeout(limit, upstreams.refresh_server(&server)) => match listed {
                    Ok(listed) => (listed, false),
                    Err(_) => {
                        // One text for every cut attempt: logged once, not
                        // once per bound.
                        let why = "it takes requests and answers none of them yet".to_string();
                        upstreams.failing.failed(&server, &why);
                        (Err(why), true)
                    }
                },
            };
            // Calls of its tools wait for its first listing as long as one
            // uncut attempt would have taken (its connect timeout): a server
            // slow to answer is called, not refused "not ready".
            if !cut || begun.elapsed() >= connect {
                upstreams.first.end(&server);
            }
            match listed {
                Ok(clashes) => {
                    for clash in clashes {
                        tracing::warn!(%clash, "an upstream tool was left out of the catalog");
                    }
                    tracing::info!(%server, "the upstream server answered; its tools are listed");
                    break;
                }
                Err(_) => {
                    tokio::select! {
                        _ = stop.cancelled() => break,
                        _ = tokio::time::sleep(wait) => {}
                    }
                    wait = (wait * 2).min(MAX_RETRY);
                }
            }
        }
        upstreams.first.end(&server);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    use mcptask_core::call::{Protocol, TaskSupport, ToolFacts};

    /// A listing stored while the catalog built from it is not published
    /// yet: a call looking the name up in between waits (it was refused as
    /// an unknown tool: the server no longer counted as unlisted, and the
    /// catalog it read did not have the tool yet).
    #[tokio::test]
    async fn a_call_between_a_listing_and_its_catalog_waits_for_the_catalog() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("gw.db").display());
        let text = format!(
            "[api]\nauth = \"none\"\n\n[database]\nurl = \"{url}\"\n\n[[servers]]\nname = \"demo\"\nurl = \"http://127.0.0.1:9/mcp\"\n"
        );
        let config = crate::config::Config::parse("(test)", &text).unwrap();
        let store = mcptask_sql::open(&url).await.unwrap();
        let tracker = mcptask_client::Tracker::builder(store.remote_tasks())
            .config(config.tracker.clone())
            .start()
            .await
            .unwrap();
        let upstreams = Upstreams::new(tracker, config.upstreams());
        let name = "demo__slow_compute";
        let before = upstreams.catalog();
        assert!(upstreams.may_wait_for(&before, name), "not listed yet");

        // The listing is stored; the catalog is not rebuilt yet.
        let tool: rmcp::model::Tool = serde_json::from_value(serde_json::json!({
            "name": "slow_compute", "inputSchema": {"type": "object"}
        }))
        .unwrap();
        upstreams.listings.lock().unwrap().insert(
            "demo".into(),
            vec![(
                tool,
                ToolFacts {
                    protocol: Protocol::Sep2663,
                    task_support: TaskSupport::Optional,
                    toolset_submit: false,
                },
            )],
        );
        let stale = upstreams.catalog();
        assert!(stale.get(name).is_none());
        assert!(
            upstreams.unlisted_owner(name).is_none(),
            "the server counts as listed"
        );
        assert!(
            upstreams.may_wait_for(&stale, name),
            "the stale catalog is waited past"
        );

        upstreams.rebuild_catalog();
        let published = upstreams.catalog();
        assert!(published.get(name).is_some());
        assert!(!upstreams.may_wait_for(&published, name));
        // A name no server may serve is never waited for.
        assert!(!upstreams.may_wait_for(&published, "other__tool"));
    }

    #[test]
    fn listing_attempts_grow_from_2_s_to_the_connect_timeout() {
        let connect = Duration::from_secs(30);
        let limits: Vec<u64> = (0..6)
            .map(|n| attempt_limit(n, connect).as_secs())
            .collect();
        assert_eq!(limits, [2, 4, 8, 16, 30, 30]);
        assert_eq!(attempt_limit(100, connect), connect);
        // A connect timeout below the first bound: the first bound.
        assert_eq!(attempt_limit(0, Duration::from_millis(500)), FIRST_ATTEMPT);
    }
}
