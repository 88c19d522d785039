//! Named MCP servers, their definition hashes, health, and one pooled
//! connection each.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use tokio::sync::Mutex;

use super::RemoteError;
use super::connection::{Connection, Heard, Slot, Timeouts, open};
use super::detect::UpstreamInfo;
use super::health::{Health, Seen};
use super::lanes::{LaneOptions, LanePool};
use super::server_def::{ServerDef, Transport};
use mcptask_core::protocol::Era;

struct Entry {
    def: ServerDef,
    hash: String,
    session: Slot,
    heard: Heard,
    health: std::sync::Mutex<Health>,
    /// Detected (or configured) tasks protocol, for `protocol`.
    upstream: std::sync::Mutex<Option<UpstreamInfo>>,
    /// Exclusive sessions for relayed calls, made on first use.
    lanes: std::sync::OnceLock<LanePool>,
}

/// The servers a tracker knows, each with one pooled connection.
///
/// Definitions can be replaced or removed at run time; tasks created on
/// another endpoint, or on a removed server, then fail with a "connection
/// unavailable" reason.
#[derive(Clone, Default)]
pub struct ServerRegistry {
    entries: Arc<RwLock<HashMap<String, Arc<Entry>>>>,
}

impl ServerRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add or replace a definition. Replacing drops the pooled connection; the
    /// live tasks of the server stay reachable unless its endpoint changed
    /// (see [`ServerDef::hash`]).
    pub fn upsert(&self, def: ServerDef) {
        let hash = def.hash();
        let entry = Arc::new(Entry {
            def: def.clone(),
            hash,
            session: Arc::new(Mutex::new(Default::default())),
            heard: Default::default(),
            health: std::sync::Mutex::new(Health {
                state: "unknown",
                ..Default::default()
            }),
            upstream: Default::default(),
            lanes: Default::default(),
        });
        let mut map = self.entries.write().expect("server registry lock");
        // Only an identical definition keeps the pooled connection: a rotated
        // token must reach the server on a fresh one.
        if map.get(&def.name).is_some_and(|e| e.def == entry.def) {
            return;
        }
        map.insert(def.name.clone(), entry);
    }

    /// Forget a server; its tasks fail as "connection unavailable" at their next step.
    pub fn remove(&self, name: &str) -> bool {
        self.entries
            .write()
            .expect("server registry lock")
            .remove(name)
            .is_some()
    }

    /// The definition of `name` and its hash.
    pub fn get(&self, name: &str) -> Option<(ServerDef, String)> {
        let map = self.entries.read().expect("server registry lock");
        map.get(name).map(|e| (e.def.clone(), e.hash.clone()))
    }

    /// What the tracker last saw of `name` (`None` if not configured).
    pub fn health(&self, name: &str) -> Option<Health> {
        let map = self.entries.read().expect("server registry lock");
        map.get(name)
            .map(|e| e.health.lock().expect("health lock").clone())
    }

    /// Record what an exchange with `name` said about it (the one rule:
    /// [`Seen`]). An operator watching the log learns when a server starts
    /// failing and when it is back: once per change, not once per call.
    pub fn observe(&self, name: &str, seen: Seen) {
        let map = self.entries.read().expect("server registry lock");
        let Some(entry) = map.get(name) else { return };
        let mut h = entry.health.lock().expect("health lock");
        let now = mcptask_core::time::to_rfc3339(now_ms());
        match seen {
            Seen::Answered => {
                if h.state == "error" {
                    tracing::warn!(
                        server = name,
                        since = h.last_ok_at.as_deref().unwrap_or("start"),
                        "server recovered: calls succeed again"
                    );
                }
                h.state = "ok";
                h.last_ok_at = Some(now);
            }
            Seen::Failed(e) => {
                if h.state != "error" {
                    tracing::warn!(
                        server = name,
                        error = %e,
                        "server degraded: calls fail; its tasks are retried within their error budget"
                    );
                }
                h.state = "error";
                h.last_error = Some(bounded_message(&e, LAST_ERROR_MAX_BYTES));
                h.last_error_at = Some(now);
            }
            Seen::Nothing => {}
        }
    }

    fn entry(&self, name: &str) -> Result<Arc<Entry>, RemoteError> {
        self.entries
            .read()
            .expect("server registry lock")
            .get(name)
            .cloned()
            .ok_or_else(|| RemoteError::ConnectionUnavailable(format!("no server named {name:?}")))
    }

    /// The exclusive-session pool of `name` for relayed calls
    /// (`upstream::sync_call`, `upstream::sep1686`). Made on first use with
    /// `options` (later calls get the same pool); replacing the definition
    /// with [`ServerRegistry::upsert`] starts a new one.
    pub fn lanes(&self, name: &str, options: LaneOptions) -> Result<LanePool, RemoteError> {
        let entry = self.entry(name)?;
        Ok(entry
            .lanes
            .get_or_init(|| LanePool::new(entry.def.clone(), options))
            .clone())
    }

    /// Which tasks protocol `name` speaks, detected once per definition on a
    /// lane (then reused for calls) and cached. The lane meets the server
    /// the 2026-07-28 way first (`server/discover`, `initialize` only for a
    /// server that does not know it), and the version the server agreed to
    /// decides its era ([`UpstreamInfo::era`]). For a session-era server the
    /// raw `initialize` and `tools/list` answers decide the rest: read by
    /// the stdio tap, or, over HTTP, by a one-shot raw probe session (rmcp's
    /// HTTP client drops SEP-1686's fields). [`ServerRegistry::set_protocol`]
    /// overrides detection.
    ///
    /// ```no_run
    /// # async fn demo(registry: mcptask_client::ServerRegistry, t: mcptask_client::remote::Timeouts) -> Result<(), mcptask_client::remote::RemoteError> {
    /// use mcptask_client::upstream::{Protocol, TaskSupport};
    /// let info = registry.protocol("everything", t).await?;
    /// if info.protocol == Protocol::Sep1686 && info.task_support("simulate-research-query") == TaskSupport::Required {
    ///     // drive it with upstream::sep1686
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn protocol(
        &self,
        name: &str,
        timeouts: Timeouts,
    ) -> Result<UpstreamInfo, RemoteError> {
        let entry = self.entry(name)?;
        if let Some(info) = entry.upstream.lock().expect("upstream lock").clone() {
            return Ok(info);
        }
        self.detect(name, timeouts, false).await
    }

    /// [`ServerRegistry::protocol`] detected again with the server's tools
    /// listed afresh (after its `notifications/tools/list_changed`, or on a
    /// timer); the cache then holds the new answer. On failure the cache
    /// keeps the last one.
    pub async fn relist(
        &self,
        name: &str,
        timeouts: Timeouts,
    ) -> Result<UpstreamInfo, RemoteError> {
        self.detect(name, timeouts, true).await
    }

    async fn detect(
        &self,
        name: &str,
        timeouts: Timeouts,
        fresh: bool,
    ) -> Result<UpstreamInfo, RemoteError> {
        let entry = self.entry(name)?;
        let options = LaneOptions {
            connect_timeout: timeouts.connect,
            call_timeout: timeouts.call,
            ..LaneOptions::default()
        };
        // A listing counts for the server's health like a call.
        let met = async {
            let mut lane = self
                .lanes(name, options)?
                .acquire()
                .await
                .inspect_err(|e| {
                    self.observe(name, Seen::Failed(e.to_string()));
                })?;
            let info = if fresh {
                lane.relist().await.cloned()
            } else {
                Ok(lane.info().clone())
            };
            self.observe(
                name,
                match &info {
                    Ok(_) => Seen::Answered,
                    Err(e) => Seen::of_remote(e),
                },
            );
            info
        };
        let mut info = met.await?;
        if needs_raw_probe(&info, &entry.def) {
            let (init, tools) =
                tokio::time::timeout(timeouts.call, super::probe::discover(&entry.def))
                    .await
                    .map_err(|_| RemoteError::Transient(format!("probing {name:?} timed out")))??;
            info = super::detect::classify(Some(&init), None, None, tools);
        }
        *entry.upstream.lock().expect("upstream lock") = Some(info.clone());
        Ok(info)
    }

    /// Say what `name` speaks instead of detecting it (configuration; the
    /// hook for HTTP servers speaking SEP-1686).
    pub fn set_protocol(&self, name: &str, info: UpstreamInfo) -> Result<(), RemoteError> {
        *self.entry(name)?.upstream.lock().expect("upstream lock") = Some(info);
        Ok(())
    }

    /// Configured server names, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .entries
            .read()
            .expect("server registry lock")
            .keys()
            .cloned()
            .collect();
        names.sort();
        names
    }

    /// The pooled connection to `name`, (re)connecting if there is none or the
    /// transport closed. `expected_hash` pins the definition a task started with;
    /// `defaults` apply where the definition sets no timeouts.
    pub async fn connect(
        &self,
        name: &str,
        expected_hash: Option<&str>,
        defaults: Timeouts,
    ) -> Result<Connection, RemoteError> {
        let entry = {
            let map = self.entries.read().expect("server registry lock");
            map.get(name).cloned()
        };
        let Some(entry) = entry else {
            return Err(RemoteError::ConnectionUnavailable(format!(
                "server {name:?} is no longer configured; the task cannot be reached"
            )));
        };
        if let Some(hash) = expected_hash
            && !entry.def.pins(hash)
        {
            return Err(RemoteError::ConnectionUnavailable(format!(
                "server {name:?} was redefined with another endpoint (URL, or command/args/cwd) since this task started; the task cannot be reached there"
            )));
        }
        let call_timeout = entry.def.call_timeout_or(defaults.call);
        let connection = |session: Arc<super::connection::Session>| Connection {
            peer: session.peer().clone(),
            call_timeout,
            session,
            slot: entry.session.clone(),
            stdio: matches!(entry.def.transport, Transport::Stdio { .. }),
            heard: entry.heard.clone(),
            acting: None,
        };
        let arrived = std::time::Instant::now();
        // Per server: only this server's callers wait here, and while one of
        // them connects the others wait for its outcome rather than each
        // starting a connect of their own.
        let mut slot = entry.session.lock().await;
        if let Some(session) = slot.session.as_ref()
            && !session.peer().is_transport_closed()
        {
            return Ok(connection(session.clone()));
        }
        if let Some((at, e)) = &slot.failed
            && *at >= arrived
        {
            return Err(e.clone());
        }
        let connect_timeout = entry.def.connect_timeout.unwrap_or(defaults.connect);
        let opened = match tokio::time::timeout(connect_timeout, open(&entry.def)).await {
            Ok(result) => result,
            Err(_) => Err(RemoteError::Transient(match &entry.def.transport {
                Transport::Stdio { .. } => format!(
                    "{name:?} did not answer MCP's initialize within {connect_timeout:?} (is its command an MCP server speaking on stdio? if it is just slow to start, raise its connect_timeout_ms)"
                ),
                _ => format!(
                    "connecting to {name:?} timed out after {connect_timeout:?} (is the host reachable? if the server is just slow to start, raise its connect_timeout_ms)"
                ),
            })),
        };
        let session = match opened {
            Ok(session) => {
                self.observe(name, Seen::Answered);
                Arc::new(session)
            }
            Err(e) => {
                // No session opened: whatever the reason, it cannot serve.
                self.observe(name, Seen::Failed(e.to_string()));
                slot.failed = Some((std::time::Instant::now(), e.clone()));
                return Err(e);
            }
        };
        slot.session = Some(session.clone());
        slot.failed = None;
        *entry.heard.lock().expect("heard lock") = Some(std::time::Instant::now());
        Ok(connection(session))
    }
}

/// Whether what a lane learnt of a server is to be completed by the raw
/// `initialize` probe: only for an HTTP server of the session era, the only
/// one that may speak SEP-1686 (whose fields rmcp's HTTP client drops). A
/// server that answered `server/discover` is stateless and is never asked
/// `initialize`: one that refuses it would never be listed, and one that
/// answers it would be recorded as of the era it was asked in, not the one
/// it speaks.
fn needs_raw_probe(info: &UpstreamInfo, def: &ServerDef) -> bool {
    info.era() == Era::Session && matches!(def.transport, Transport::Http { .. })
}

/// Bound on a health `lastError`: room for a URL, the cause and its fix.
const LAST_ERROR_MAX_BYTES: usize = 1000;

/// `text` cut to at most `max` bytes, at a word boundary where there is one
/// near the end (else a character boundary), marked with an ellipsis.
fn bounded_message(text: &str, max: usize) -> String {
    const ELLIPSIS: &str = "…";
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max.saturating_sub(ELLIPSIS.len());
    while end > 0 && !text.is_char_boundary(end) {
        end -= 1;
    }
    let head = &text[..end];
    // A word cut in half reads as a different word; back off to the last
    // space unless that would drop most of a long unbroken token (a URL).
    let head = match head.rfind(char::is_whitespace) {
        Some(space) if end - space <= 60 => &head[..space],
        _ => head,
    };
    format!("{}{ELLIPSIS}", head.trim_end())
}

fn now_ms() -> i64 {
    use mcptask_core::Clock;
    mcptask_core::SystemClock.now_ms()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_message_is_cut_between_words_with_an_ellipsis() {
        let text = "cannot connect to \"a\": ".to_string() + &"wörd ".repeat(300);
        let cut = bounded_message(&text, 100);
        assert!(cut.len() <= 100, "{} bytes", cut.len());
        assert!(cut.ends_with("wörd…"), "{cut}");
        let unbroken = "é".repeat(600);
        let cut = bounded_message(&unbroken, 101);
        assert!(cut.len() <= 101 && cut.ends_with("é…"), "{cut}");
        assert_eq!(bounded_message("short", 100), "short");
    }

    #[test]
    fn health_keeps_the_whole_cause_of_a_long_failure() {
        let registry = ServerRegistry::new();
        registry.upsert(ServerDef::http("s", "http://127.0.0.1:9/mcp"));
        let cause = format!(
            "cannot connect to \"s\" at http://{}.example/mcp: connection refused (is the server running?)",
            "h".repeat(400)
        );
        registry.observe("s", Seen::Failed(cause.clone()));
        let health = registry.health("s").unwrap();
        assert_eq!(health.state, "error");
        assert_eq!(health.last_error.as_deref(), Some(cause.as_str()));
        registry.observe("s", Seen::Failed("x ".repeat(2000)));
        let cut = registry.health("s").unwrap().last_error.unwrap();
        assert!(
            cut.len() <= LAST_ERROR_MAX_BYTES && cut.ends_with("x…"),
            "{cut}"
        );
    }
}
