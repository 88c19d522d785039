//! The state every part of the engine shares.
//!
//! The public [`TaskRuntime`](crate::TaskRuntime), the executor, the
//! maintenance loops, the signal listener and each [`TaskContext`](crate::TaskContext)
//! hold one `Arc` of it, so a clone of the runtime is cheap and they all see
//! the same running work, owner id and shutdown state.

use std::sync::atomic::{AtomicBool, AtomicI64};

use mcptask_core::clock::SharedClock;
use mcptask_core::store::ServerTaskStore;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::batcher::CreateBatcher;
use super::feed::ChangeFeed;
use super::local::LocalWork;
use super::quota::LiveQuota;
use crate::config::RuntimeConfig;
use crate::tool::{ToolRegistry, ToolSource};

pub(crate) struct RuntimeInner {
    pub(crate) store: Arc<dyn ServerTaskStore>,
    pub(crate) clock: SharedClock,
    pub(crate) config: RuntimeConfig,
    /// The registry the runtime was built with (empty when built with a source).
    pub(crate) registry: ToolRegistry,
    /// Where tools are looked up and listed.
    pub(crate) source: Arc<dyn ToolSource>,
    /// Tasks recovery claimed whose tool the source could not resolve yet
    /// ([`Lookup::NotYet`](crate::tool::Lookup::NotYet)): retried at each
    /// recovery pass; if this process dies first, the claim lapses with its
    /// lease and another replica recovers them.
    pub(crate) deferred: std::sync::Mutex<Vec<mcptask_core::server::ServerTaskRecord>>,
    /// This process incarnation's owner id (the holder of its owner lease).
    pub(crate) owner: String,
    /// The process slot the owner id is named after (held while the
    /// runtime lives).
    pub(crate) incarnation: super::Incarnation,
    /// Task work running in this process.
    pub(crate) local: LocalWork,
    /// Group commit of new tasks.
    pub(crate) creator: CreateBatcher,
    /// Which tasks changed state, for `subscriptions/listen` streams.
    pub(crate) feed: ChangeFeed,
    /// Live-task counts and caps (admission control).
    pub(crate) quota: LiveQuota,
    /// Cancelled when shutdown begins (the drain): no new tasks, no recovery.
    pub(crate) shutdown: CancellationToken,
    /// Cancelled when the drain has ended: heartbeat, signals and backstop
    /// stop, store retries give up.
    pub(crate) stopped: CancellationToken,
    /// Whether new tasks are accepted (false once shutdown begins).
    pub(crate) accepting: AtomicBool,
    /// Every spawned piece of task work, so shutdown can wait for it.
    pub(crate) work: TaskTracker,
    /// When the owner lease was last extended.
    pub(crate) last_heartbeat_ok: AtomicI64,
}

impl RuntimeInner {
    /// Whether the drain has ended and the background loops have stopped.
    pub(crate) fn loops_stopped(&self) -> bool {
        self.stopped.is_cancelled()
    }
}
