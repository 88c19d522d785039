//! Configures and starts a [`TaskRuntime`].
//!
//! Starting is where the runtime becomes visible to other replicas: it takes
//! a process slot ([`Incarnation`]) and adopts what its previous holder left,
//! the owner lease is registered before any task can be created, and the signal
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
use super::{Incarnation, RuntimeInner, TaskRuntime, maintenance, signals};
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
    pub(super) incarnation: Option<Incarnation>,
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

    /// Use this owner id (a fixed one in tests) and take no process slot:
    /// a dead process's work under any id is recovered when its lease
    /// lapses. By default the runtime takes a slot and its owner id is the
    /// slot's ([`RuntimeBuilder::start`]).
    pub fn owner_id(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }

    /// Use `incarnation`, a slot this process took already (for its other
    /// parts on the same store, such as a gateway's tracker), instead of
    /// taking one at start; the owner id is the slot's. An
    /// `Incarnation::default()` holds no slot: the runtime then adopts
    /// nothing at start and gets a fresh owner id.
    pub fn incarnation(mut self, incarnation: Incarnation) -> Self {
        self.incarnation = Some(incarnation);
        self
    }

    /// Take a process slot of the store ([`Incarnation::take`]) unless one
    /// was given, adopting at once the work its previous holder left (the
    /// same process killed and restarted: its tasks are rerun or failed by
    /// the first recovery pass, not when its lease would have lapsed);
    /// register the owner lease; start the maintenance loops.
    ///
    /// A database that cannot be reached at that moment (a restart, a
    /// failover) is waited for, up to 30 s, with a warning per attempt; a
    /// permanent error, or one lasting longer, is returned.
    pub async fn start(self) -> Result<TaskRuntime, StoreError> {
        let (owner, incarnation) = match (self.owner, self.incarnation) {
            (Some(owner), incarnation) => (owner, incarnation.unwrap_or_default()),
            (None, incarnation) => {
                let incarnation = match incarnation {
                    Some(given) => given,
                    None => Incarnation::take(&*self.store, &*self.clock).await,
                };
                let owner = incarnation
                    .owner_id("server")
                    .unwrap_or_else(|| ids::new_owner_id("server"));
                (owner, incarnation)
            }
        };
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
            incarnation,
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
        carry_on_when_the_slot_is_lost(&inner);
        Ok(TaskRuntime { inner })
    }
}

/// A runtime whose slot another process took (its PostgreSQL session was
/// cut meanwhile: a database restart cuts every session at once, and a
/// process starting then may take a slot its holder was about to take
/// again) carries on without a slot. What the other process adopted is the
/// other's: this one's writes to it are fenced off, and its local work on it
/// is stopped when its next heartbeat finds the lease lapsed; everything
/// else goes on here. (Stopping instead turned a database restart into
/// processes stopping themselves.)
fn carry_on_when_the_slot_is_lost(rt: &Arc<RuntimeInner>) {
    let (incarnation, stopped) = (rt.incarnation.clone(), rt.stopped.clone());
    tokio::spawn(async move {
        tokio::select! {
            _ = stopped.cancelled() => {}
            _ = incarnation.lost() => {
                tracing::warn!("this process's slot was taken by another process; carrying on without one (the work the other adopted is fenced off here)");
            }
        }
    });
}
