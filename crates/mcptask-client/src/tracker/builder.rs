//! Assembling a [`Tracker`]: store, servers, clock, settings, notifiers and
//! resolver, then starting its workers.

use std::sync::Arc;

use mcptask_core::clock::SharedClock;
use mcptask_core::store::RemoteTaskStore;
use mcptask_core::{SystemClock, ids};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{Tracker, TrackerError};
use crate::config::TrackerConfig;
use crate::notify::{ChannelNotifier, Notifier, Targets};
use crate::remote::{ServerDef, ServerRegistry};
use crate::resolver::InputResolver;
use crate::shared::Inner;

/// Builder for a [`Tracker`] (see [`Tracker::builder`]).
pub struct TrackerBuilder {
    store: Arc<dyn RemoteTaskStore>,
    servers: ServerRegistry,
    clock: SharedClock,
    config: TrackerConfig,
    notifiers: Vec<Arc<dyn Notifier>>,
    resolver: Option<Arc<dyn InputResolver>>,
    owner: Option<String>,
}

impl Tracker {
    /// Start configuring a tracker on `store` (e.g. `mcptask_sql::Store::remote_tasks()`).
    ///
    /// Servers are connected on first use, so a tracker starts with its
    /// servers down:
    ///
    /// ```
    /// use mcptask_client::{ServerDef, Tracker, TrackerConfig};
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let dir = tempfile::tempdir()?;
    /// let url = format!("sqlite:{}", dir.path().join("tracker.db").display());
    /// let store = mcptask_sql::open(&url).await?;
    /// let tracker = Tracker::builder(store.remote_tasks())
    ///     .server(ServerDef::http("reports", "http://127.0.0.1:9/mcp"))
    ///     .server(ServerDef::stdio("local", "my-mcp-server", vec!["--stdio".into()]))
    ///     .config(TrackerConfig::default())
    ///     .start()
    ///     .await?;
    /// // ... call_tool, get, answer, cancel, wait ...
    /// tracker.shutdown(Duration::from_secs(5)).await;
    /// # Ok(()) }
    /// ```
    pub fn builder(store: Arc<dyn RemoteTaskStore>) -> TrackerBuilder {
        TrackerBuilder {
            store,
            servers: ServerRegistry::new(),
            clock: Arc::new(SystemClock),
            config: TrackerConfig::default(),
            notifiers: Vec::new(),
            resolver: None,
            owner: None,
        }
    }
}

impl TrackerBuilder {
    /// Add (or replace) a server definition.
    pub fn server(self, def: ServerDef) -> Self {
        self.servers.upsert(def);
        self
    }

    /// Share a registry (e.g. one the application edits at run time).
    pub fn servers(mut self, registry: ServerRegistry) -> Self {
        self.servers = registry;
        self
    }

    /// The clock for every timestamp and schedule (tests inject a manual one).
    pub fn clock(mut self, clock: SharedClock) -> Self {
        self.clock = clock;
        self
    }

    /// Replace the default settings.
    pub fn config(mut self, config: TrackerConfig) -> Self {
        self.config = config;
        self
    }

    /// Add a notifier (in addition to the in-process stream of `subscribe`):
    /// a target with its own delivery state, named by [`Notifier::name`].
    pub fn notifier(mut self, notifier: Arc<dyn Notifier>) -> Self {
        self.notifiers.push(notifier);
        self
    }

    /// Answer input requests from code (before any task exists, and while tasks wait).
    pub fn resolver(mut self, resolver: Arc<dyn InputResolver>) -> Self {
        self.resolver = Some(resolver);
        self
    }

    /// Use this owner id (a process slot's, see `mcptask_sql::slot`; or a
    /// fixed one in tests); each process start gets a fresh one by default.
    pub fn owner_id(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }

    /// Start the workers (unless `config.background` is false).
    pub async fn start(self) -> Result<Tracker, TrackerError> {
        let channel = ChannelNotifier::new(4096);
        let mut targets: Vec<Arc<dyn Notifier>> = vec![Arc::new(channel.clone())];
        targets.extend(self.notifiers);
        let (outbox, outgoing) = crate::feed::outbox();
        let inner = Arc::new(Inner {
            outbox,
            store: self.store,
            servers: self.servers,
            clock: self.clock,
            config: self.config,
            owner: self.owner.unwrap_or_else(|| ids::new_owner_id("tracker")),
            targets: std::sync::RwLock::new(Arc::new(Targets::new(targets))),
            channel,
            resolver: self.resolver,
            changes: broadcast::channel(4096).0,
            watches: Default::default(),
            shutdown: CancellationToken::new(),
            abort: CancellationToken::new(),
            wakers: Default::default(),
            loops: TaskTracker::new(),
            local: Default::default(),
            server_slots: Default::default(),
            resolving: Default::default(),
            identities: Default::default(),
        });
        // Every tracker hears and tells the other replicas' changes, also
        // one that only records handles (its inserts wake their waiters).
        crate::feed::spawn(&inner, outgoing);
        if inner.config.background {
            crate::workers::spawn_all(&inner);
            if inner.config.push {
                crate::push::spawn(&inner);
            }
        }
        Ok(Tracker { inner })
    }
}
