//! The upstream servers as calls see them: each server's tool listing, the
//! [`Catalog`] of routes built from them (rebuilt when a server's tools
//! change), and the lanes (exclusive sessions) synchronous and SEP-1686 calls
//! run on.

pub mod catalog;
mod failures;
mod health;
mod readiness;

pub use readiness::{MAX_RETRY, list_until_listed};

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use mcptask_client::Tracker;
use mcptask_client::Transport;
use mcptask_client::remote::{RemoteError, Seen, Timeouts};
use mcptask_client::upstream::{LaneOptions, LanePool};

/// Sessions held at once per HTTP upstream for relayed calls.
const HTTP_LANES: usize = 64;
/// Sessions (child processes) held at once per stdio upstream.
const STDIO_LANES: usize = 4;
use rmcp::model::{ServerCapabilities, Tool};
use tokio::sync::watch;

use crate::config::DEFAULT_QUESTION_TIMEOUT_MS;
use catalog::{Catalog, Clash, Listing, Route};
use mcptask_core::call::ToolFacts;
use mcptask_core::protocol::Era;

pub use crate::config::Upstream;

/// The upstream side of the proxy: the tracker, the lanes, the catalog.
pub struct Upstreams {
    /// The tracker every call to these servers goes through.
    pub tracker: Tracker,
    /// The configured servers (replaced by a configuration reload).
    servers: RwLock<Vec<Upstream>>,
    /// Servers removed from the configuration whose live tasks the tracker
    /// still follows: no new calls, no catalog entry.
    retired: Mutex<std::collections::BTreeSet<String>>,
    catalog: RwLock<Arc<Catalog>>,
    /// Each server's last good listing: a server that is down keeps its
    /// tools (calls fail with the connection error) instead of vanishing.
    listings: Mutex<HashMap<String, Vec<(Tool, ToolFacts)>>>,
    /// How each server was met when last listed: the era it said it speaks
    /// (see `UpstreamInfo::era`) and the capabilities it declared.
    met: Mutex<HashMap<String, (Era, ServerCapabilities)>>,
    listed: AtomicBool,
    version: watch::Sender<u64>,
    lanes: Mutex<HashMap<String, LanePool>>,
    rebuilding: Mutex<()>,
    /// When each server was last listed because a call named a tool the
    /// catalog lacked.
    missed: Mutex<HashMap<String, Instant>>,
    /// How long a relayed question waits for its answer, in ms.
    question_timeout_ms: AtomicU64,
    /// The servers whose first listing is under way.
    first: readiness::FirstListings,
    /// The servers that cannot be listed now, and why (logged per change).
    failing: failures::ListingFailures,
    /// When this gateway began (the front's first `tools/list` waits for
    /// the first listings no longer than a grace after it).
    born: Instant,
    /// [`Upstreams::streams`] as last derived, with the
    /// [`mcptask_client::remote::answer_changes`] it was derived at
    /// (`u64::MAX`: derive again).
    streams_at: Mutex<(u64, bool)>,
}

/// Least time between two listings of a server for calls of tools the
/// catalog does not know.
pub const RELIST_ON_MISS: Duration = Duration::from_secs(5);

impl Upstreams {
    /// The upstream side for `servers`, over `tracker`; nothing is listed
    /// until the first catalog build.
    pub fn new(tracker: Tracker, servers: Vec<Upstream>) -> Arc<Self> {
        Arc::new(Self {
            tracker,
            servers: RwLock::new(servers),
            retired: Mutex::default(),
            catalog: RwLock::default(),
            listings: Mutex::default(),
            met: Mutex::default(),
            listed: AtomicBool::new(false),
            version: watch::channel(0).0,
            lanes: Mutex::default(),
            rebuilding: Mutex::default(),
            missed: Mutex::default(),
            question_timeout_ms: AtomicU64::new(DEFAULT_QUESTION_TIMEOUT_MS),
            first: readiness::FirstListings::default(),
            failing: failures::ListingFailures::default(),
            born: Instant::now(),
            streams_at: Mutex::new((u64::MAX, false)),
        })
    }

    /// How long a question an upstream asks through a call (relayed to the
    /// call's task as an input request) waits for its answer.
    pub fn question_timeout(&self) -> Duration {
        Duration::from_millis(self.question_timeout_ms.load(Ordering::Relaxed))
    }

    /// Set [`Upstreams::question_timeout`] (`[proxy] question_timeout_ms`).
    pub fn set_question_timeout(&self, timeout: Duration) {
        let ms = u64::try_from(timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        self.question_timeout_ms.store(ms, Ordering::Relaxed);
    }

    fn timeouts(&self) -> Timeouts {
        let config = self.tracker.config();
        Timeouts {
            connect: config.connect_timeout,
            call: config.call_timeout,
        }
    }

    /// How long opening a session with `server` may take (its
    /// `connect_timeout_ms`, else the tracker's, as its lanes apply it).
    pub fn connect_timeout(&self, server: &str) -> Duration {
        self.lanes(server).map_or(self.timeouts().connect, |pool| {
            pool.options().connect_timeout
        })
    }

    /// Whether `server` is reached over HTTP (not a stdio command).
    fn is_http(&self, server: &str) -> bool {
        self.tracker
            .servers()
            .get(server)
            .is_some_and(|(def, _)| matches!(def.transport, Transport::Http { .. }))
    }

    /// Whether every server was listed once (before that, an unknown tool
    /// may only be not listed yet).
    pub fn is_listed(&self) -> bool {
        self.listed.load(Ordering::SeqCst)
    }

    /// Ticks each time the catalog changes.
    pub fn catalog_changes(&self) -> watch::Receiver<u64> {
        self.version.subscribe()
    }

    /// Whether `server` was listed at least once (its tools are known).
    pub fn has_listing(&self, server: &str) -> bool {
        self.listings
            .lock()
            .expect("listings lock")
            .contains_key(server)
    }

    /// Whether `server` spoke 2026-07-28 or later when last listed: it keeps
    /// no session, so a call to it is one self-contained request.
    pub fn is_stateless(&self, server: &str) -> bool {
        self.met
            .lock()
            .expect("met lock")
            .get(server)
            .is_some_and(|(era, _)| era.is_stateless())
    }

    /// The configured servers that declared what `offers` asks for when
    /// last listed, in their configured order (the front offers logging and
    /// resource subscriptions when one of them does).
    pub fn offering(&self, offers: impl Fn(&ServerCapabilities) -> bool) -> Vec<String> {
        // The servers first: `set_servers` takes their lock before `met`.
        let names = self.server_names();
        let met = self.met.lock().expect("met lock");
        names
            .into_iter()
            .filter(|name| met.get(name).is_some_and(|(_, caps)| offers(caps)))
            .collect()
    }

    /// [`Upstreams::offering`], among the servers met in `era` only (what a
    /// server offers in its requests' era: `resources.subscribe` means
    /// `resources/subscribe` before 2026-07-28, a listen filter after).
    pub fn offering_in(
        &self,
        era: Era,
        offers: impl Fn(&ServerCapabilities) -> bool,
    ) -> Vec<String> {
        let names = self.server_names();
        let met = self.met.lock().expect("met lock");
        names
            .into_iter()
            .filter(|name| {
                met.get(name)
                    .is_some_and(|(met_in, caps)| *met_in == era && offers(caps))
            })
            .collect()
    }

    /// The bound on each call to `server`: its `call_timeout_ms`, else the
    /// tracker's. Every path that calls an upstream reads it here (through
    /// the route's decision).
    pub fn call_timeout(&self, server: &str) -> Duration {
        let default = self.tracker.config().call_timeout;
        self.tracker
            .servers()
            .get(server)
            .map_or(default, |(def, _)| def.call_timeout_or(default))
    }

    /// How long a call of `server`'s `tool` run as a task is waited for
    /// before its task is handed out (its `answer_within_ms`; zero: the task
    /// at once). Read through the route's decision.
    pub fn answer_within(&self, server: &str, tool: &str) -> Duration {
        self.servers
            .read()
            .expect("servers lock")
            .iter()
            .find(|s| s.name == server)
            .map_or(Duration::ZERO, |s| s.answer_within.of(tool))
    }

    /// Whether the front answers its callers with SSE streams rather than
    /// JSON bodies: when every configured HTTP upstream seen answering
    /// streamed (at least one), so the front answers as the servers behind
    /// it do (see `mcptask_client::remote::answers`). Derived again only
    /// after a style is learnt or the servers change, not per request.
    pub fn streams(&self) -> bool {
        let changes = mcptask_client::remote::answer_changes();
        let mut at = self.streams_at.lock().expect("streams lock");
        if at.0 != changes {
            let servers = self.tracker.servers();
            let mut seen = self.servers().into_iter().filter_map(|s| {
                let (def, _) = servers.get(&s.name)?;
                let Transport::Http { url, .. } = &def.transport else {
                    return None;
                };
                mcptask_client::remote::answers_of(url)
            });
            let first = seen.next();
            let streams = first == Some(mcptask_client::remote::AnswerStyle::Sse)
                && seen.all(|style| style == mcptask_client::remote::AnswerStyle::Sse);
            *at = (changes, streams);
        }
        at.1
    }

    /// The current catalog.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog.read().expect("catalog lock").clone()
    }

    /// The lane pool of `server` (exclusive sessions for synchronous calls
    /// and SEP-1686 tasks).
    pub fn lanes(&self, server: &str) -> Result<LanePool, String> {
        let mut pools = self.lanes.lock().expect("lanes lock");
        if let Some(pool) = pools.get(server) {
            return Ok(pool.clone());
        }
        let timeouts = self.timeouts();
        // A lane is a session held for one call: over HTTP it costs a few
        // requests, so enough of them that concurrent callers are not
        // queued behind four; over stdio each is a child process.
        let http = self.is_http(server);
        let pool = self
            .tracker
            .servers()
            .lanes(
                server,
                LaneOptions {
                    max_lanes: if http { HTTP_LANES } else { STDIO_LANES },
                    connect_timeout: timeouts.connect.max(Duration::from_secs(10)),
                    call_timeout: timeouts.call,
                    ..Default::default()
                },
            )
            .map_err(|e| e.to_string())?;
        pools.insert(server.to_string(), pool.clone());
        Ok(pool)
    }

    /// List every server's tools again (all at once) and rebuild the catalog. Returns the
    /// clashes (the clashing newcomers are left out) and the servers that
    /// could not be listed, with why.
    pub async fn refresh(&self) -> (Vec<Clash>, Vec<(String, String)>) {
        // Every server at once, and each one's listing put in the catalog
        // as it answers: one that is down or mute costs its connect timeout
        // to itself only, never the others' freshness.
        let names = self.server_names();
        let listed = futures::future::join_all(names.iter().map(|name| async move {
            self.relist(name).await?;
            self.rebuild();
            Ok::<_, String>(())
        }))
        .await;
        let failures = names
            .into_iter()
            .zip(listed)
            .filter_map(|(name, r)| r.err().map(|why| (name, why)))
            .collect();
        // The clashes of the whole catalog (unchanged by this last build).
        (self.rebuild(), failures)
    }

    /// List one server's tools again (it said they changed) and rebuild the
    /// catalog; returns the clashes.
    pub async fn refresh_server(&self, server: &str) -> Result<Vec<Clash>, String> {
        self.relist(server).await?;
        Ok(self.rebuild())
    }

    /// [`Upstreams::refresh_server`] for a server that said its tools
    /// changed: [`Upstreams::catalog_changes`] ticks even when the catalog
    /// reads the same (a front passes the server's word on to its own
    /// clients, as the server would have told them), and even when the
    /// listing failed (the last one is kept; the client lists when it will).
    pub async fn refresh_announced(&self, server: &str) -> Result<Vec<Clash>, String> {
        let listed = self.relist(server).await;
        let clashes = self.rebuild_telling(true);
        listed.map(|()| clashes)
    }

    /// The configured servers.
    pub fn servers(&self) -> Vec<Upstream> {
        self.servers.read().expect("servers lock").clone()
    }

    /// The configured server names.
    pub fn server_names(&self) -> Vec<String> {
        self.servers().into_iter().map(|s| s.name).collect()
    }

    /// Whether `server` is configured now (a retired server is not: it
    /// takes no new calls).
    pub fn is_configured(&self, server: &str) -> bool {
        self.servers
            .read()
            .expect("servers lock")
            .iter()
            .any(|s| s.name == server)
    }

    /// Replace the configured servers (a configuration reload). What the
    /// gateway knew of a server that is gone (its listing, its lanes) is
    /// forgotten; a `redefined` server's lanes are made anew from its new
    /// definition, and its last listing serves until
    /// [`Upstreams::refresh_server`] lists it again (so its tools never
    /// vanish from the front while a reload lists it). Returns the clashes
    /// of the catalog rebuilt without the removed servers.
    pub fn set_servers(&self, servers: Vec<Upstream>, redefined: &[String]) -> Vec<Clash> {
        {
            let mut current = self.servers.write().expect("servers lock");
            let kept: std::collections::HashSet<&str> =
                servers.iter().map(|s| s.name.as_str()).collect();
            let mut listings = self.listings.lock().expect("listings lock");
            let mut lanes = self.lanes.lock().expect("lanes lock");
            // What a server speaks is known again once it is listed again.
            let mut met = self.met.lock().expect("met lock");
            for name in current.iter().map(|s| &s.name) {
                if !kept.contains(name.as_str()) {
                    listings.remove(name);
                    lanes.remove(name);
                    met.remove(name);
                    self.failing.forget(name);
                }
            }
            for name in redefined {
                lanes.remove(name);
                met.remove(name);
            }
            // A configured server is not retired, whatever it was before.
            let mut retired = self.retired.lock().expect("retired lock");
            for s in &servers {
                retired.remove(&s.name);
            }
            *current = servers;
        }
        self.rebuild()
    }

    /// Mark `server` (no longer configured) as retired: the tracker keeps
    /// following its live tasks.
    pub fn retire(&self, server: &str) {
        self.retired
            .lock()
            .expect("retired lock")
            .insert(server.to_string());
    }

    /// Whether `server` is retired (removed, with live tasks still followed).
    pub fn is_retired(&self, server: &str) -> bool {
        self.retired.lock().expect("retired lock").contains(server)
    }

    /// The retired servers.
    pub fn retired(&self) -> Vec<String> {
        self.retired
            .lock()
            .expect("retired lock")
            .iter()
            .cloned()
            .collect()
    }

    /// `server` is retired no more (its last task ended).
    pub fn unretire(&self, server: &str) {
        self.retired.lock().expect("retired lock").remove(server);
    }

    async fn relist(&self, server: &str) -> Result<(), String> {
        match self.list(server).await {
            Ok(tools) => {
                self.listings
                    .lock()
                    .expect("listings lock")
                    .insert(server.to_string(), tools);
                self.failing.answered(server);
                Ok(())
            }
            Err(why) => {
                self.failing.failed(server, &why);
                Err(why)
            }
        }
    }

    /// Build the catalog from the listings made so far (a first listing
    /// round cut short: the servers that answered are served at once).
    /// Returns the clashes.
    pub fn rebuild_catalog(&self) -> Vec<Clash> {
        self.rebuild()
    }

    /// Build the catalog from the last listings; callers are told when it
    /// changed. Returns the clashes (the clashing newcomers are left out).
    fn rebuild(&self) -> Vec<Clash> {
        self.rebuild_telling(false)
    }

    /// [`Upstreams::rebuild`]; `always`: tell callers even if the catalog
    /// reads the same.
    fn rebuild_telling(&self, always: bool) -> Vec<Clash> {
        // One rebuild at a time, so that the last listing always wins.
        let _one = self.rebuilding.lock().expect("rebuild lock");
        let listings = {
            let known = self.listings.lock().expect("listings lock");
            self.servers()
                .iter()
                .filter_map(|s| {
                    known.get(&s.name).map(|tools| Listing {
                        server: s.name.clone(),
                        prefix: s.prefix.clone(),
                        interrupt: s.interrupt,
                        background: s.background.clone(),
                        tools: tools.clone(),
                    })
                })
                .collect()
        };
        let (catalog, clashes) = Catalog::build(listings);
        let same = {
            let old = self.catalog.read().expect("catalog lock");
            old.routes()
                .map(|r| (&r.front, &r.definition, r.facts))
                .eq(catalog.routes().map(|r| (&r.front, &r.definition, r.facts)))
        };
        *self.catalog.write().expect("catalog lock") = Arc::new(catalog);
        // The servers may have changed: derive `streams` again.
        self.streams_at.lock().expect("streams lock").0 = u64::MAX;
        let first = !self.listed.swap(true, Ordering::SeqCst);
        if first || !same || always {
            self.version.send_modify(|v| *v += 1);
        }
        clashes
    }

    async fn list(&self, server: &str) -> Result<Vec<(Tool, ToolFacts)>, String> {
        let info = self
            .tracker
            .servers()
            .relist(server, self.timeouts())
            .await
            .map_err(|e| e.to_string())?;
        self.met
            .lock()
            .expect("met lock")
            .insert(server.to_string(), (info.era(), info.capabilities.clone()));
        // The raw listing keeps what rmcp drops (`execution.taskSupport`)
        // and was taken on a session that declares elicitation, so tools a
        // server offers only to such clients are there too.
        let mut tools: Vec<Tool> = info
            .tools
            .iter()
            .filter_map(|raw| serde_json::from_value(raw.clone()).ok())
            .collect();
        if tools.is_empty() {
            tools = if self.is_http(server) {
                self.list_on_lane(server).await?
            } else {
                self.tracker
                    .list_tools(server)
                    .await
                    .map_err(|e| e.to_string())?
            };
        }
        let toolsets = self
            .tracker
            .servers()
            .get(server)
            .map(|(def, _)| def.toolsets)
            .unwrap_or_default();
        // A toolset's status and cancel tools are the tracker's to call;
        // callers see its submit tool only.
        let hidden = |name: &str| {
            toolsets
                .iter()
                .any(|t| t.status_tool == name || t.cancel_tool == name)
        };
        Ok(tools
            .into_iter()
            .filter(|tool| !hidden(&tool.name))
            .map(|tool| {
                let facts = ToolFacts {
                    protocol: info.protocol,
                    task_support: info.task_support(&tool.name),
                    toolset_submit: toolsets.iter().any(|t| t.submit_tool == tool.name),
                };
                (tool, facts)
            })
            .collect())
    }

    /// An HTTP `server`'s tools as rmcp decodes them, listed on a lane (a
    /// session of its own, bounded by the call timeout; every page, within
    /// the pooled connection's bounds on pages and tools), not on the
    /// tracker's one pooled connection: that one may be held by a connect
    /// made while the server was mute, up to its connect timeout, and the
    /// server's tools must appear as soon as it answers.
    async fn list_on_lane(&self, server: &str) -> Result<Vec<Tool>, String> {
        let pool = self.lanes(server)?;
        let bound = pool.options().call_timeout;
        let lane = self.lane(server).await.map_err(|e| e.to_string())?;
        let listed = mcptask_client::remote::tool_pages(lane.peer(), || {}, || {});
        let outcome = match tokio::time::timeout(bound, listed).await {
            Ok(listed) => listed,
            Err(_) => Err(RemoteError::Transient(format!(
                "tools/list: no answer within {bound:?} (the server's call timeout)"
            ))),
        };
        // A listing counts for the server's health like a call.
        self.saw(
            server,
            match &outcome {
                Ok(_) => Seen::Answered,
                Err(e) => Seen::of_remote(e),
            },
        );
        outcome.map_err(|e| format!("{server:?}: {e}"))
    }

    /// The route of `tool` on `server`; if the catalog has none, that
    /// server is listed again (a tool added since the last listing), at
    /// most once per [`RELIST_ON_MISS`] so that calls of unknown tools cost
    /// no listing each.
    pub async fn route_of(&self, server: &str, tool: &str) -> Option<Route> {
        if let Some(route) = self.catalog().of_upstream(server, tool) {
            return Some(route.clone());
        }
        let due = {
            let mut last = self.missed.lock().expect("missed lock");
            let now = Instant::now();
            match last.get(server) {
                Some(at) if now.duration_since(*at) < RELIST_ON_MISS => false,
                _ => {
                    last.insert(server.to_string(), now);
                    true
                }
            }
        };
        if !due || self.refresh_server(server).await.is_err() {
            return None;
        }
        self.catalog().of_upstream(server, tool).cloned()
    }
}
