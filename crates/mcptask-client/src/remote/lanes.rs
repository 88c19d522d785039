//! Lanes: exclusive upstream sessions, a small pool per server.
//!
//! A server→client request (elicitation, sampling) cannot be attributed to
//! one of several calls in flight on a shared session, so a synchronous
//! call, or a SEP-1686 task, gets a session of its own for its duration.
//! Idle lanes are reused; a lane idle longer than `idle_ttl` is closed (its
//! stdio child killed), and so is every idle lane when the pool is dropped.
//! A lane whose call was cancelled is not reused: the upstream may still
//! work on it and send requests or progress a later call would take for its own.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use rmcp::{Peer, RoleClient};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio_util::sync::CancellationToken;

use super::RemoteError;
use super::connection::{UpstreamSession, open_upstream};
use super::detect::UpstreamInfo;
use super::detect::classify;
use super::handler::{ListSignals, UpstreamHandler};
use super::server_def::{ServerDef, Transport};
use super::tap::Tap;
use super::watch::{ResourceUpdates, ResourceWatch};

/// Sizing and timing of a [`LanePool`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaneOptions {
    /// Most sessions open at once to the server (default 4).
    pub max_lanes: usize,
    /// An idle session is closed after this long (default 60 s).
    pub idle_ttl: Duration,
    /// Bound on opening a session (the definition's own wins; default 10 s).
    pub connect_timeout: Duration,
    /// Bound on the short calls made on a lane (`tools/list`, `tasks/get`, `tasks/cancel`;
    /// the definition's own wins; default 30 s).
    pub call_timeout: Duration,
}

impl Default for LaneOptions {
    fn default() -> Self {
        Self {
            max_lanes: 4,
            idle_ttl: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(10),
            call_timeout: Duration::from_secs(30),
        }
    }
}

pub(crate) struct LaneSession {
    pub(crate) service: UpstreamSession,
    pub(crate) handler: UpstreamHandler,
    pub(crate) tap: Option<Arc<Tap>>,
    pub(crate) info: UpstreamInfo,
    /// Whether this session has listed the server's tools (see
    /// [`Lane::ensure_listed`]).
    pub(crate) listed: bool,
}

struct PoolInner {
    def: ServerDef,
    opts: LaneOptions,
    permits: Arc<Semaphore>,
    idle: Mutex<Vec<(LaneSession, Instant)>>,
    /// Bumped when the server says one of its lists changed (on a lane, or
    /// on the stream [`LanePool::follow_lists`] holds).
    lists: ListSignals,
    /// Whether [`LanePool::follow_lists`] was called.
    following: AtomicBool,
    /// Ends the list follower with the pool.
    stop: CancellationToken,
}

impl Drop for PoolInner {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl PoolInner {
    fn prune(&self) {
        let mut idle = self.idle.lock().expect("lanes lock");
        let ttl = self.opts.idle_ttl;
        // Dropping a session closes it (and kills its child).
        idle.retain(|(s, at)| at.elapsed() < ttl && !s.service.is_transport_closed());
    }
}

/// The lanes to one upstream server (cheap to clone).
///
/// ```no_run
/// use mcptask_client::ServerDef;
/// use mcptask_client::remote::{LaneOptions, LanePool};
/// # async fn demo() -> Result<(), mcptask_client::remote::RemoteError> {
/// let pool = LanePool::new(ServerDef::stdio("everything", "npx", vec!["server-everything".into(), "stdio".into()]), LaneOptions::default());
/// let lane = pool.acquire().await?; // waits while all lanes are busy
/// println!("{:?}", lane.info().protocol);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LanePool {
    inner: Arc<PoolInner>,
}

impl LanePool {
    /// A pool for `def`; opens nothing until the first [`LanePool::acquire`].
    pub fn new(def: ServerDef, mut opts: LaneOptions) -> Self {
        opts.max_lanes = opts.max_lanes.max(1);
        if let Some(t) = def.connect_timeout {
            opts.connect_timeout = t;
        }
        opts.call_timeout = def.call_timeout_or(opts.call_timeout);
        let inner = Arc::new(PoolInner {
            def,
            opts,
            permits: Arc::new(Semaphore::new(opts.max_lanes)),
            idle: Mutex::new(Vec::new()),
            lists: ListSignals::new(),
            following: AtomicBool::new(false),
            stop: CancellationToken::new(),
        });
        // Closes lanes idle too long even when nobody acquires; ends with the pool.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let weak: Weak<PoolInner> = Arc::downgrade(&inner);
            let period = (opts.idle_ttl / 2).max(Duration::from_millis(100));
            rt.spawn(async move {
                loop {
                    tokio::time::sleep(period).await;
                    match weak.upgrade() {
                        Some(inner) => inner.prune(),
                        None => return,
                    }
                }
            });
        }
        Self { inner }
    }

    /// The server this pool reaches.
    pub fn def(&self) -> &ServerDef {
        &self.inner.def
    }

    /// Changes each time a server session of this pool sends
    /// `notifications/tools/list_changed` (its tools are then worth listing
    /// again, e.g. with [`Lane::relist`]).
    pub fn tools_changed(&self) -> watch::Receiver<u64> {
        self.inner.lists.tools.subscribe()
    }

    /// Changes each time the server says its prompts changed.
    pub fn prompts_changed(&self) -> watch::Receiver<u64> {
        self.inner.lists.prompts.subscribe()
    }

    /// Changes each time the server says its resources changed.
    pub fn resources_changed(&self) -> watch::Receiver<u64> {
        self.inner.lists.resources.subscribe()
    }

    /// Hear the server's list changes between calls too, from now until the
    /// pool is dropped (once per pool; later calls do nothing). A 2026-07-28
    /// server tells of them only on an open `subscriptions/listen` stream:
    /// one is held open on a session of its own while the server advertises
    /// `listChanged`, and opened again when it ends (HTTP servers only; see
    /// `remote::follow`).
    pub fn follow_lists(&self) {
        if self.inner.following.swap(true, Ordering::SeqCst)
            || !matches!(self.inner.def.transport, Transport::Http { .. })
        {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        rt.spawn(super::follow::follow(
            self.inner.def.clone(),
            self.inner.lists.clone(),
            self.inner.stop.clone(),
            self.inner.opts.connect_timeout,
        ));
    }

    /// A session of the server's own for resource subscriptions, outside
    /// the lanes (see [`ResourceWatch`]); its list changes count as the
    /// lanes' do.
    pub async fn watch_resources(&self) -> Result<(ResourceWatch, ResourceUpdates), RemoteError> {
        ResourceWatch::open(
            &self.inner.def,
            self.inner.lists.clone(),
            self.inner.opts.connect_timeout,
        )
        .await
    }

    /// The pool's options (with the definition's timeouts applied).
    pub fn options(&self) -> LaneOptions {
        self.inner.opts
    }

    /// An exclusive session: an idle one if there is one, else a new one;
    /// waits while `max_lanes` are in use (bound it with a timeout if needed).
    pub async fn acquire(&self) -> Result<Lane, RemoteError> {
        let permit = self
            .inner
            .permits
            .clone()
            .acquire_owned()
            .await
            .expect("lane semaphore is never closed");
        self.inner.prune();
        let reused = self.inner.idle.lock().expect("lanes lock").pop();
        let session = match reused {
            Some((s, _)) => s,
            None => self.open().await?,
        };
        Ok(Lane {
            timeout: None,
            session: Some(session),
            pool: Arc::downgrade(&self.inner),
            reusable: true,
            _permit: permit,
        })
    }

    async fn open(&self) -> Result<LaneSession, RemoteError> {
        let def = &self.inner.def;
        let timeout = self.inner.opts.connect_timeout;
        let handler = UpstreamHandler::default().on_lists_changed(self.inner.lists.clone());
        let connect = async {
            let (service, tap) = open_upstream(def, handler.clone()).await?;
            let info = describe(&self.inner, &service, tap.as_deref()).await?;
            let listed = tap.is_some();
            Ok::<_, RemoteError>(LaneSession {
                service,
                handler,
                tap,
                info,
                listed,
            })
        };
        match tokio::time::timeout(timeout, connect).await {
            Ok(r) => r,
            Err(_) => Err(RemoteError::Transient(format!(
                "cannot connect to {:?}: no session within {timeout:?}",
                def.name
            ))),
        }
    }
}

/// Detect the protocol. Tools are listed (which fills the tap) only when
/// there is a tap to read them from.
async fn describe(
    pool: &PoolInner,
    service: &UpstreamSession,
    tap: Option<&Tap>,
) -> Result<UpstreamInfo, RemoteError> {
    let peer_info = service.peer_info();
    let negotiated = peer_info.as_ref().map(|i| &i.protocol_version);
    let declared = peer_info.as_ref().map(|i| &i.capabilities);
    let Some(tap) = tap else {
        return Ok(classify(None, negotiated, declared, Vec::new()));
    };
    let init = tap.initialize();
    let lists_tools = init
        .as_ref()
        .is_some_and(|i| i.pointer("/capabilities/tools").is_some());
    if lists_tools {
        let list = service.peer().list_all_tools();
        match tokio::time::timeout(pool.opts.call_timeout, list).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                return Err(RemoteError::Transient(format!(
                    "{:?}: tools/list failed: {e}",
                    pool.def.name
                )));
            }
            Err(_) => {
                return Err(RemoteError::Transient(format!(
                    "{:?}: tools/list timed out",
                    pool.def.name
                )));
            }
        }
    }
    Ok(classify(init.as_ref(), negotiated, declared, tap.tools()))
}

/// One exclusive upstream session, leased from a [`LanePool`]; it goes back
/// to the pool when dropped (unless it was spoiled, see [`Lane::discard`]).
pub struct Lane {
    session: Option<LaneSession>,
    /// The bound of the call this lane carries, when its route decided one
    /// ([`Lane::bounded_by`]); else the pool's.
    timeout: Option<Duration>,
    pool: Weak<PoolInner>,
    reusable: bool,
    _permit: OwnedSemaphorePermit,
}

impl Lane {
    fn session(&self) -> &LaneSession {
        self.session
            .as_ref()
            .expect("lane session present until drop")
    }

    /// The rmcp peer of this session.
    pub fn peer(&self) -> &Peer<RoleClient> {
        self.session().service.peer()
    }

    /// What the server is (detected when the session opened).
    pub fn info(&self) -> &UpstreamInfo {
        &self.session().info
    }

    /// List the server's tools again on this session and detect afresh
    /// (what [`Lane::info`] says after this). Over HTTP without a tap the
    /// tool list stays empty, as when the lane opened.
    pub async fn relist(&mut self) -> Result<&UpstreamInfo, RemoteError> {
        let pool = self
            .pool
            .upgrade()
            .ok_or_else(|| RemoteError::Transient("the lane pool is gone".into()))?;
        let session = self
            .session
            .as_mut()
            .expect("lane session present until drop");
        session.info = describe(&pool, &session.service, session.tap.as_deref()).await?;
        session.listed |= session.tap.is_some();
        Ok(&session.info)
    }

    /// Make sure this session has seen the server's tools listed: rmcp's
    /// HTTP transport mirrors `x-mcp-header` tool parameters into
    /// `Mcp-Param-*` headers (SEP-2243) only for tools it has seen listed on
    /// that session. Lists once per session, before its first call; a
    /// failed listing only costs the headers, never the call.
    pub(crate) async fn ensure_listed(&mut self) {
        let timeout = self.call_timeout();
        let Some(session) = self.session.as_mut() else {
            return;
        };
        if session.listed {
            return;
        }
        session.listed = true;
        let lists_tools = session
            .service
            .peer_info()
            .is_some_and(|i| i.capabilities.tools.is_some());
        if !lists_tools {
            return;
        }
        let list = session.service.peer().list_all_tools();
        match tokio::time::timeout(timeout, list).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::debug!(error = %e, "tools/list before a call failed"),
            Err(_) => tracing::debug!("tools/list before a call timed out"),
        }
    }

    /// Bound on short calls on this lane: the one its call's route decided
    /// ([`Lane::bounded_by`]), else the pool's.
    pub fn call_timeout(&self) -> Duration {
        self.timeout.unwrap_or_else(|| {
            self.pool
                .upgrade()
                .map(|p| p.opts.call_timeout)
                .unwrap_or(LaneOptions::default().call_timeout)
        })
    }

    /// This lane with each exchange bounded by `timeout`, as the route of the
    /// call it carries decided it (not the pool's, recomputed).
    pub fn bounded_by(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Close this session instead of returning it to the pool (the upstream
    /// may still be working on a withdrawn call).
    pub fn discard(&mut self) {
        self.reusable = false;
    }

    pub(crate) fn handler(&self) -> &UpstreamHandler {
        &self.session().handler
    }

    pub(crate) fn tap(&self) -> Option<&Arc<Tap>> {
        self.session().tap.as_ref()
    }
}

impl Drop for Lane {
    fn drop(&mut self) {
        let Some(session) = self.session.take() else {
            return;
        };
        if !self.reusable || session.service.is_transport_closed() {
            return;
        }
        if let Some(pool) = self.pool.upgrade() {
            pool.idle
                .lock()
                .expect("lanes lock")
                .push((session, Instant::now()));
        }
    }
}
