//! The state a tracker's API and its workers share.

use std::sync::Arc;

use mcptask_core::client::Phase;
use mcptask_core::clock::SharedClock;
use mcptask_core::store::RemoteTaskStore;
use tokio::sync::{Notify, broadcast};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::TrackerConfig;
use crate::local::LocalWork;
use crate::notify::{ChannelNotifier, Targets};
use crate::remote::{ServerRegistry, Timeouts};
use crate::resolver::InputResolver;

/// The ids this process changed, on their way to the change feed's
/// publisher (`crate::feed`, which makes both ends).
pub(crate) type Outbox = tokio::sync::mpsc::UnboundedSender<String>;

/// One wake-up per worker loop. A write that makes work due now (a new
/// handle, a cancel intent, a stored answer, a new event) pokes the loop that
/// does it instead of letting it sleep out its idle tick. Wake-ups are hints:
/// the loops find due work in the store either way.
#[derive(Default)]
pub(crate) struct Wakers {
    pub poll: Notify,
    pub cancel: Notify,
    pub update: Notify,
    pub notify: Notify,
}

impl Wakers {
    /// The wake-up of a claim phase's loop.
    pub fn phase(&self, phase: Phase) -> &Notify {
        match phase {
            Phase::Poll => &self.poll,
            Phase::Cancel => &self.cancel,
            Phase::Update => &self.update,
        }
    }
}

pub(crate) struct Inner {
    pub store: Arc<dyn RemoteTaskStore>,
    pub servers: ServerRegistry,
    pub clock: SharedClock,
    pub config: TrackerConfig,
    pub owner: String,
    /// The notify targets, each with its own delivery state (replaced whole
    /// when the application changes its notifiers).
    pub targets: std::sync::RwLock<Arc<Targets>>,
    pub channel: ChannelNotifier,
    pub resolver: Option<Arc<dyn InputResolver>>,
    /// Local hints that a task changed (ids), for views of every task (the
    /// API's event stream, the push listeners).
    pub changes: broadcast::Sender<String>,
    /// The same hints, to the watchers of one task only (`wait`, a front
    /// call's mirror).
    pub watches: Arc<crate::watch::Watches>,
    /// The same hints, on their way to the other replicas (`crate::feed`).
    pub outbox: Outbox,
    /// Stop claiming new work.
    pub shutdown: CancellationToken,
    /// Give up on in-flight calls (the shutdown deadline passed).
    pub abort: CancellationToken,
    pub wakers: Wakers,
    pub loops: TaskTracker,
    /// The call runtime of this process, once the application gave it.
    pub local: std::sync::OnceLock<Arc<dyn LocalWork>>,
    /// Calls in flight to each server, for its `max_in_flight`.
    pub server_slots: crate::slots::ServerSlots,
    /// Tasks whose questions the input resolver is being asked about now
    /// (`workers::resolve`): a later poll that sees the same questions
    /// while the resolver thinks does not ask it again.
    pub resolving: std::sync::Mutex<std::collections::HashSet<String>>,
    /// What each call carries to its upstream (`crate::identity`).
    pub identities: crate::identity::Identities,
}

impl Inner {
    /// The notify targets in force now.
    pub(crate) fn targets(&self) -> Arc<Targets> {
        self.targets.read().expect("targets lock").clone()
    }

    /// The connection a later exchange of call `record` (a poll, a cancel,
    /// an answer) is made on: the server's pooled session, pinned to the
    /// endpoint the call was made on, acting with the call's own credential
    /// where the server takes the caller's identity (`crate::identity`).
    /// The one place the tracker's exchanges of a call get their
    /// credential.
    pub(crate) async fn connect_for(
        &self,
        record: &mcptask_core::client::RemoteTaskRecord,
    ) -> Result<crate::remote::Connection, crate::remote::RemoteError> {
        let conn = self
            .servers
            .connect(&record.server, Some(&record.server_hash), self.timeouts())
            .await?;
        let credential = self
            .credential_for(&record.server, &record.id, record.principal.as_deref())
            .await?;
        Ok(conn.acting_as(credential))
    }

    /// What a later exchange of call `call_id` of `principal` to `server`
    /// carries (`crate::identity::Identities::for_call`).
    pub(crate) async fn credential_for(
        &self,
        server: &str,
        call_id: &str,
        principal: Option<&str>,
    ) -> Result<Option<crate::identity::CallCredential>, crate::remote::RemoteError> {
        let Some((def, _)) = self.servers.get(server) else {
            return Ok(None);
        };
        self.identities
            .for_call(
                server,
                &def.identity,
                call_id,
                principal,
                self.clock.now_ms(),
            )
            .await
    }

    /// The tracker-wide bounds for servers that set none.
    pub(crate) fn timeouts(&self) -> Timeouts {
        Timeouts {
            connect: self.config.connect_timeout,
            call: self.config.call_timeout,
        }
    }

    /// Make `task_id`'s poll due now and wake the poll loop (a hint that it
    /// changed: the poll reads it as usual).
    pub(crate) async fn expedite(&self, task_id: &str) -> Result<(), mcptask_core::StoreError> {
        if self
            .store
            .expedite_poll(task_id, self.clock.now_ms())
            .await?
        {
            self.wakers.poll.notify_one();
        }
        Ok(())
    }

    /// Tell local waiters and live views, and every other replica's, that
    /// `task_id` changed.
    pub(crate) fn changed(&self, task_id: &str) {
        self.watches.changed(task_id);
        let _ = self.changes.send(task_id.to_string());
        let _ = self.outbox.send(task_id.to_string());
    }
}
