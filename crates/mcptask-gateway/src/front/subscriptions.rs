//! `resources/subscribe` and `resources/unsubscribe` through the front
//! (sessions before 2026-07-28; a 2026-07-28 caller has no such method).
//!
//! A subscription goes to the server the resource belongs to, found by the
//! rule `resources/read` follows (`Directory::resource_owner`), under the
//! same policy. The front keeps one session of its own per server for
//! subscriptions (a [`ResourceWatch`], opened at the first one): a URI is
//! subscribed there once, however many callers want it, and unsubscribed
//! when the last of them is gone, so the server's
//! `notifications/resources/updated` are heard once and handed to every
//! caller session subscribed to that URI. The front keeps the upstreams'
//! resource URIs as they are, so an update needs no rewriting.
//!
//! A caller session that has ended is dropped from the subscribers when an
//! update finds it closed, or at its URI's next subscription; an update
//! that finds nobody left unsubscribes the URI at the server. A watch
//! session that ended (the server restarted) is opened again at the next
//! subscription, with every URI still wanted subscribed anew; updates sent
//! meanwhile are lost, as they would be to a client whose session ended.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use mcptask_client::remote::{ResourceUpdates, ResourceWatch};
use rmcp::model::{ServerCapabilities, SubscribeRequestParams, UnsubscribeRequestParams};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, Peer, RoleServer};

use super::directory::{Directory, admit};
use crate::auth::Caller;
use crate::calls::Calls;
use crate::failure::Failure;
use crate::upstreams::Upstreams;
use mcptask_core::protocol::Era;

/// Whether a server declared `resources.subscribe` when it was met.
fn offers_subscriptions(capabilities: &ServerCapabilities) -> bool {
    capabilities
        .resources
        .as_ref()
        .and_then(|r| r.subscribe)
        .unwrap_or(false)
}

/// The servers the front relays `resources/subscribe` to: those that offer
/// it in an era that has it (before 2026-07-28; a 2026-07-28 server's
/// `resources.subscribe` is a filter of its listen streams, which the front
/// does not relay).
pub fn subscribable(upstreams: &Upstreams) -> Vec<String> {
    upstreams.offering_in(Era::Session, offers_subscriptions)
}

/// Which caller session a subscription belongs to: its `Mcp-Session-Id`
/// (over stdio, the one session of the process).
type SessionKey = Option<String>;

/// The session of `context`'s request.
fn session_of(context: &RequestContext<RoleServer>) -> SessionKey {
    context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.headers.get("mcp-session-id"))
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// The subscriptions of every caller, per server. Cheap to share.
#[derive(Default)]
pub struct Subscriptions {
    servers: Mutex<HashMap<String, Arc<Watched>>>,
}

/// One server's subscriptions. The lock is held across the exchanges with
/// the server, so a URI is subscribed there exactly once.
#[derive(Default)]
struct Watched {
    state: tokio::sync::Mutex<State>,
}

#[derive(Default)]
struct State {
    watch: Option<ResourceWatch>,
    /// URI → the caller sessions subscribed to it.
    uris: HashMap<String, HashMap<SessionKey, Peer<RoleServer>>>,
}

impl Subscriptions {
    fn watched(&self, server: &str) -> Arc<Watched> {
        self.servers
            .lock()
            .expect("subscriptions lock")
            .entry(server.to_string())
            .or_default()
            .clone()
    }

    /// Subscribe the caller session of `context` to `request.uri` at the
    /// server it belongs to.
    pub async fn subscribe(
        &self,
        calls: &Calls,
        directory: &Directory,
        caller: &Caller,
        request: SubscribeRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let server = owner(calls, directory, caller, &request.uri).await?;
        let watched = self.watched(&server);
        let mut state = watched.state.lock().await;
        state.prune(&request.uri);
        let open = state.watch.as_ref().is_some_and(|w| !w.is_closed());
        if !open {
            let (watch, updates) = calls
                .upstreams
                .lanes(&server)
                .map_err(|e| Failure::unreachable(&e))?
                .watch_resources()
                .await
                .map_err(|e| ErrorData::from(Failure::unreachable(&e)))?;
            let limit = calls
                .upstreams
                .lanes(&server)
                .map_or(DEFAULT_LIMIT, |pool| pool.options().call_timeout);
            tokio::spawn(hand_on(updates, Arc::downgrade(&watched), limit));
            // What was wanted before the old session ended is wanted still.
            for uri in state.uris.keys() {
                if let Err(e) = upstream_subscribe(calls, &server, &watch, uri).await {
                    tracing::warn!(server = %server, uri = %uri, error = %e.message, "cannot subscribe again to an upstream resource");
                }
            }
            state.watch = Some(watch);
        }
        if !state.uris.contains_key(&request.uri) {
            let watch = state.watch.as_ref().expect("opened above");
            upstream_subscribe(calls, &server, watch, &request.uri).await?;
        }
        state
            .uris
            .entry(request.uri)
            .or_default()
            .insert(session_of(context), context.peer.clone());
        Ok(())
    }

    /// Unsubscribe the caller session of `context` from `request.uri`; the
    /// server is told once no caller session wants it any more.
    pub async fn unsubscribe(
        &self,
        calls: &Calls,
        directory: &Directory,
        caller: &Caller,
        request: UnsubscribeRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let server = owner(calls, directory, caller, &request.uri).await?;
        let watched = self.watched(&server);
        let mut state = watched.state.lock().await;
        let Some(sessions) = state.uris.get_mut(&request.uri) else {
            return Ok(());
        };
        sessions.remove(&session_of(context));
        state.prune(&request.uri);
        if state.uris.contains_key(&request.uri) {
            return Ok(());
        }
        let Some(watch) = state.watch.as_ref().filter(|w| !w.is_closed()) else {
            return Ok(());
        };
        let peer = watch.peer().clone();
        let params = UnsubscribeRequestParams::new(request.uri);
        super::directory::on_peer(&calls.upstreams, &server, peer, |peer| async move {
            #[allow(deprecated)]
            peer.unsubscribe(params).await
        })
        .await
    }
}

impl State {
    /// Forget the ended sessions subscribed to `uri`, and `uri` once none is left.
    fn prune(&mut self, uri: &str) {
        if let Some(sessions) = self.uris.get_mut(uri) {
            sessions.retain(|_, peer| !peer.is_transport_closed());
            if sessions.is_empty() {
                self.uris.remove(uri);
            }
        }
    }
}

/// The server `uri` belongs to for `caller` (policy and fair limits as for
/// a read), or the error a read of it gets.
async fn owner(
    calls: &Calls,
    directory: &Directory,
    caller: &Caller,
    uri: &str,
) -> Result<String, ErrorData> {
    let access = admit(calls, caller).await?;
    let server = directory
        .resource_owner(&calls.upstreams, uri, &access)
        .await?;
    if !subscribable(&calls.upstreams).contains(&server) {
        return Err(ErrorData::invalid_params(
            format!("the server of {uri:?} offers no resource subscriptions"),
            None,
        ));
    }
    Ok(server)
}

async fn upstream_subscribe(
    calls: &Calls,
    server: &str,
    watch: &ResourceWatch,
    uri: &str,
) -> Result<(), ErrorData> {
    let params = SubscribeRequestParams::new(uri);
    super::directory::on_peer(
        &calls.upstreams,
        server,
        watch.peer().clone(),
        |peer| async move {
            #[allow(deprecated)]
            peer.subscribe(params).await
        },
    )
    .await
}

/// The bound on an unsubscription made when nobody wants a URI any more,
/// for a server whose pool is gone.
const DEFAULT_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Hand each update heard on a watch session to the caller sessions
/// subscribed to its URI, until the session ends or nobody keeps the
/// subscriptions any more. An update of a URI whose subscribers have all
/// ended unsubscribes it at the server (each exchange bounded by `limit`).
async fn hand_on(mut updates: ResourceUpdates, watched: Weak<Watched>, limit: std::time::Duration) {
    while let Some(update) = updates.recv().await {
        let Some(watched) = watched.upgrade() else {
            return;
        };
        let peers: Vec<Peer<RoleServer>> = {
            let mut state = watched.state.lock().await;
            state.prune(&update.uri);
            if !state.uris.contains_key(&update.uri)
                && let Some(watch) = state.watch.as_ref().filter(|w| !w.is_closed())
            {
                let peer = watch.peer().clone();
                let params = UnsubscribeRequestParams::new(update.uri.clone());
                // Not awaited under the lock: the server may be slow.
                tokio::spawn(async move {
                    #[allow(deprecated)]
                    let _ = tokio::time::timeout(limit, peer.unsubscribe(params)).await;
                });
            }
            state
                .uris
                .get(&update.uri)
                .map(|s| s.values().cloned().collect())
                .unwrap_or_default()
        };
        for peer in peers {
            // A session that ended meanwhile is pruned at the next update.
            let _ = peer.notify_resource_updated(update.clone()).await;
        }
    }
}
