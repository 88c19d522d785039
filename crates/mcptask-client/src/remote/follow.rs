//! Following an upstream's list changes between calls.
//!
//! A 2026-07-28 server is stateless: it tells of a changed tool, prompt or
//! resource list only on an open `subscriptions/listen` stream (SEP-2575),
//! never on the short-lived sessions of calls. A front that shows the
//! server's lists as its own keeps one such stream open per HTTP server that
//! advertises `listChanged`, on a session of its own, and bumps the pool's
//! [`ListSignals`] for every notification heard on it. An older server
//! tells on its session: that session is simply held open.
//!
//! Stdio servers are not followed: a session there is a process of its
//! own, too dear to keep for notifications; their changes are heard on the
//! sessions of calls and by the periodic re-listing.

use std::time::Duration;

use rmcp::model::{
    ClientRequest, ServerCapabilities, SubscriptionFilter, SubscriptionsListenRequest,
    SubscriptionsListenRequestParams,
};
use rmcp::service::{PeerRequestOptions, ServiceError};
use tokio_util::sync::CancellationToken;

use super::connection::open_http_with;
use super::handler::{ListSignals, UpstreamHandler};
use super::server_def::ServerDef;

/// Wait before the first reconnection; doubled after each failed one.
const FIRST_RETRY: Duration = Duration::from_secs(1);
/// The longest wait between reconnections.
const MAX_RETRY: Duration = Duration::from_secs(60);

/// How one watch ended.
#[derive(Debug, PartialEq)]
enum Ended {
    /// The server advertises no list changes: nothing to follow.
    NothingToFollow,
    /// The stream (or the session) was open, then ended: open it again.
    Closed,
    /// The server could not be reached or refused the stream.
    Failed(String),
}

/// The list-changed notifications `capabilities` advertise.
pub(crate) fn advertised(capabilities: &ServerCapabilities) -> SubscriptionFilter {
    let mut filter = SubscriptionFilter::new();
    let yes = |b: Option<bool>| (b == Some(true)).then_some(true);
    filter.tools_list_changed = yes(capabilities.tools.as_ref().and_then(|t| t.list_changed));
    filter.prompts_list_changed = yes(capabilities.prompts.as_ref().and_then(|p| p.list_changed));
    filter.resources_list_changed =
        yes(capabilities.resources.as_ref().and_then(|r| r.list_changed));
    filter
}

/// Bump the signal of every list `filter` names: changes made while no
/// stream was open went unheard, so each such list may have changed.
fn bump_all(signals: &ListSignals, filter: &SubscriptionFilter) {
    let kinds = [
        (filter.tools_list_changed, &signals.tools),
        (filter.prompts_list_changed, &signals.prompts),
        (filter.resources_list_changed, &signals.resources),
    ];
    for (asked, signal) in kinds {
        if asked == Some(true) {
            signal.send_modify(|v| *v = v.wrapping_add(1));
        }
    }
}

/// Follow `def`'s list changes into `signals` until `stop` (reconnecting
/// with a growing wait), or until the server turns out to advertise none.
pub(crate) async fn follow(
    def: ServerDef,
    signals: ListSignals,
    stop: CancellationToken,
    connect_timeout: Duration,
) {
    let mut wait = FIRST_RETRY;
    let mut missed = false;
    loop {
        let ended = tokio::select! {
            _ = stop.cancelled() => return,
            ended = watch_once(&def, &signals, connect_timeout, missed) => ended,
        };
        match ended {
            Ended::NothingToFollow => {
                tracing::debug!(server = %def.name, "advertises no list changes; not followed");
                return;
            }
            Ended::Closed => wait = FIRST_RETRY,
            Ended::Failed(why) => {
                tracing::debug!(server = %def.name, error = %why, ?wait, "cannot follow list changes; retrying");
            }
        }
        missed = true;
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        wait = (wait * 2).min(MAX_RETRY);
    }
}

/// One session: open it, ask for the advertised list changes, and hold it
/// until it ends. `missed`: an earlier watch ended, so changes may have gone
/// unheard in between.
async fn watch_once(
    def: &ServerDef,
    signals: &ListSignals,
    connect_timeout: Duration,
    missed: bool,
) -> Ended {
    let handler = UpstreamHandler::default().on_lists_changed(signals.clone());
    let session = match tokio::time::timeout(connect_timeout, open_http_with(def, handler)).await {
        Ok(Ok(session)) => session,
        Ok(Err(e)) => return Ended::Failed(e.to_string()),
        Err(_) => return Ended::Failed(format!("no session within {connect_timeout:?}")),
    };
    let Some(info) = session.peer_info() else {
        return Ended::Failed("the session has no server information".into());
    };
    let filter = advertised(&info.capabilities);
    if filter == SubscriptionFilter::new() {
        return Ended::NothingToFollow;
    }
    if !mcptask_core::protocol::is_modern(info.protocol_version.as_str()) {
        // The server notifies on the session itself.
        if missed {
            bump_all(signals, &filter);
        }
        let _ = session.waiting().await;
        return Ended::Closed;
    }
    let request = ClientRequest::SubscriptionsListenRequest(SubscriptionsListenRequest::new(
        SubscriptionsListenRequestParams::new(filter.clone()),
    ));
    // No timeout: the request lasts as long as the stream.
    let handle = match session
        .peer()
        .send_cancellable_request(request, PeerRequestOptions::no_options())
        .await
    {
        Ok(handle) => handle,
        Err(e) => return Ended::Failed(format!("cannot send subscriptions/listen: {e}")),
    };
    if missed {
        bump_all(signals, &filter);
    }
    let ended = match handle.await_response().await {
        // A graceful end (the server is going away, say): listen again.
        Ok(_) => Ended::Closed,
        Err(ServiceError::McpError(e)) => Ended::Failed(format!(
            "subscriptions/listen refused: {} ({})",
            e.message, e.code.0
        )),
        Err(e) => Ended::Failed(format!("the stream was lost: {e}")),
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), session.cancel()).await;
    ended
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_asks_for_what_the_server_advertises() {
        let caps = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_prompts()
            .enable_resources()
            .enable_resources_list_changed()
            .build();
        let filter = advertised(&caps);
        assert_eq!(filter.tools_list_changed, Some(true));
        assert_eq!(filter.prompts_list_changed, None);
        assert_eq!(filter.resources_list_changed, Some(true));
        assert_eq!(filter.resource_subscriptions, None);
        let none = ServerCapabilities::builder().enable_tools().build();
        assert_eq!(advertised(&none), SubscriptionFilter::new());
    }
}
