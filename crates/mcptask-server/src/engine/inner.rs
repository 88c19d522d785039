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
use super::local::LocalWork;
use crate::config::RuntimeConfig;
use crate::tool::ToolRegistry;

pub(crate) struct RuntimeInner {
    pub(crate) store: Arc<dyn ServerTaskStore>,
    pub(crate) clock: SharedClock,
    pub(crate) config: RuntimeConfig,
    pub(crate) registry: ToolRegistry,
    /// This process incarnation's owner id (the holder of its owner lease).
    pub(crate) owner: String,
    /// Task work running in this process.
    pub(crate) local: LocalWork,
    /// Group commit of new tasks.
    pub(crate) creator: CreateBatcher,
    /// Cancelled when shutdown begins: loops stop, retries give up.
    pub(crate) shutdown: CancellationToken,
    /// Whether new tasks are accepted (false once shutdown begins).
    pub(crate) accepting: AtomicBool,
    /// Every spawned piece of task work, so shutdown can wait for it.
    pub(crate) work: TaskTracker,
    /// When the owner lease was last extended.
    pub(crate) last_heartbeat_ok: AtomicI64,
}
