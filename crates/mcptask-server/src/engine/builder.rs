//! Configures and starts a [`TaskRuntime`].
//!
//! Starting is where the runtime becomes visible to other replicas: the owner
//! lease is registered before any task can be created, and the signal
//! subscription is in place before `start` returns, so no cancellation sent
//! after start is missed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64};

use mcptask_core::clock::SharedClock;
use mcptask_core::store::ServerTaskStore;
use mcptask_core::{StoreError, ids};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::batcher::CreateBatcher;
use super::feed::ChangeFeed;
use super::quota::LiveQuota;
use super::{RuntimeInner, TaskRuntime, maintenance, signals};
use crate::config::RuntimeConfig;
use crate::tool::{ToolRegistry, ToolSource};

/// Builder for a [`TaskRuntime`]; see [`TaskRuntime::builder`].
pub struct RuntimeBuilder {
    pub(super) store: Arc<dyn ServerTaskStore>,
    pub(super) registry: ToolRegistry,
    pub(super) source: Arc<dyn ToolSource>,
    pub(super) clock: SharedClock,
    pub(super) config: RuntimeConfig,
    pub(super) owner: Option<String>,
}

impl RuntimeBuilder {
    /// Read time from `clock` instead of the system clock (tests move it by hand).
    pub fn clock(mut self, clock: SharedClock) -> Self {
        self.clock = clock;
        self
    }

    /// Replace the default settings.
    pub fn config(mut self, config: RuntimeConfig) -> Self {
        self.config = config;
        self
    }

    /// Use this owner id (a process slot's, see `mcptask_sql::slot`; or a
    /// fixed one in tests); by default each process start gets a fresh one.
    pub fn owner_id(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }

    /// Register the owner lease and start the maintenance loops.
    ///
    /// A database that cannot be reached at that moment (a restart, a
    /// failover) is waited for, up to 30 s, with a warning per attempt; a
    /// permanent error, or one lasting longer, is returned.
    pub async fn start(self) -> Result<TaskRuntime, StoreError> {
        let owner = self.owner.unwrap_or_else(|| ids::new_owner_id("server"));
        let now =
            super::retry::register_owner(&*self.store, &*self.clock, &owner, self.config.lease_ms)
                .await?;
        let creator = CreateBatcher::start(
            self.store.clone(),
            self.config
                .create_writers
                .unwrap_or_else(|| self.store.create_writers())
                .max(1),
            self.config.max_create_batch,
            self.config.max_create_queue,
        );
        let quota = LiveQuota::new(
            self.config.max_live_tasks,
            self.config.max_live_tasks_per_principal,
        );
        let stopped = CancellationToken::new();
        let feed = ChangeFeed::start(self.store.clone(), stopped.clone()).await;
        let inner = Arc::new(RuntimeInner {
            store: self.store,
            clock: self.clock,
            config: self.config,
            registry: self.registry,
            source: self.source,
            deferred: Default::default(),
            owner,
            local: Default::default(),
            creator,
            feed,
            quota,
            shutdown: CancellationToken::new(),
            stopped,
            accepting: AtomicBool::new(true),
            work: TaskTracker::new(),
            last_heartbeat_ok: AtomicI64::new(now),
        });
        if inner.config.background {
            maintenance::spawn_loops(inner.clone());
        }
        // The push channel is not time-driven, so it runs even when tests drive
        // the maintenance steps by hand.
        signals::spawn_listener(inner.clone()).await;
        Ok(TaskRuntime { inner })
    }
}
