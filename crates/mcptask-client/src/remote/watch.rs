//! A session of its own for a server's resource subscriptions.
//!
//! A server before 2026-07-28 tells of a changed resource
//! (`notifications/resources/updated`) on the session that subscribed to
//! it, for as long as that session lives. The lanes are no place for that:
//! an idle lane is closed after a while and a busy one carries one call at
//! a time. A [`ResourceWatch`] is a session outside the lanes (it takes no
//! lane's place), held by whoever keeps the subscriptions, whose updates
//! come out of a channel.

use rmcp::model::ResourceUpdatedNotificationParam;
use rmcp::{Peer, RoleClient};
use tokio::sync::mpsc;

use super::RemoteError;
use super::connection::{UpstreamSession, open_upstream};
use super::handler::{ListSignals, UpstreamHandler};
use super::server_def::ServerDef;

/// The updates a [`ResourceWatch`] hears, in the order the server sent them;
/// the channel ends when the session does.
pub type ResourceUpdates = mpsc::UnboundedReceiver<ResourceUpdatedNotificationParam>;

/// An upstream session kept for resource subscriptions; closed when dropped.
pub struct ResourceWatch {
    service: UpstreamSession,
}

impl ResourceWatch {
    /// Open a session to `def` (within `timeout`) whose resource updates
    /// come out of the returned channel, and whose list changes bump `lists`.
    pub(crate) async fn open(
        def: &ServerDef,
        lists: ListSignals,
        timeout: std::time::Duration,
    ) -> Result<(Self, ResourceUpdates), RemoteError> {
        let (sink, updates) = mpsc::unbounded_channel();
        let handler = UpstreamHandler::default()
            .on_lists_changed(lists)
            .on_resource_updates(sink);
        match tokio::time::timeout(timeout, open_upstream(def, handler)).await {
            Ok(Ok((service, _tap))) => Ok((Self { service }, updates)),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(RemoteError::Transient(format!(
                "cannot connect to {:?}: no session within {timeout:?}",
                def.name
            ))),
        }
    }

    /// The session's peer: `resources/subscribe` and `…/unsubscribe` go here.
    pub fn peer(&self) -> &Peer<RoleClient> {
        self.service.peer()
    }

    /// Whether the session has ended (its subscriptions with it).
    pub fn is_closed(&self) -> bool {
        self.service.is_transport_closed()
    }
}
