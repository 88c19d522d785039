//! `logging/setLevel` through the front: the front has no log of its own
//! to offer, so it offers logging when an upstream server does (see
//! `Upstreams::offering`) and hands the level to every such server.
// Logging is deprecated by SEP-2577, yet sessions before 2026-07-28 use it
// and the servers behind the front still offer it.
#![allow(deprecated)]

use futures::future::join_all;
use rmcp::ErrorData;
use rmcp::model::{ServerCapabilities, SetLevelRequestParams};

use super::directory::{admit, on_lane};
use crate::auth::Caller;
use crate::calls::Calls;

/// Whether a server declared `logging` when it was met.
pub fn offers_logging(capabilities: &ServerCapabilities) -> bool {
    capabilities.logging.is_some()
}

/// Send `request` to every server that offers logging, on the front's
/// sessions with them, at once; answered once each has answered. One that
/// refuses or cannot be reached is logged and left out; the request fails
/// only when every one of them failed (then with the first one's error),
/// or when none offers logging (method not found, as for a server without it).
pub async fn set_level(
    calls: &Calls,
    caller: &Caller,
    request: SetLevelRequestParams,
) -> Result<(), ErrorData> {
    let _access = admit(calls, caller).await?;
    let upstreams = &calls.upstreams;
    let servers = upstreams.offering(offers_logging);
    if servers.is_empty() {
        return Err(ErrorData::method_not_found::<
            rmcp::model::SetLevelRequestMethod,
        >());
    }
    let answers = join_all(servers.iter().map(|server| {
        let request = request.clone();
        on_lane(upstreams, server, |peer| async move {
            peer.set_level(request).await
        })
    }))
    .await;
    let mut first_error = None;
    let mut answered = false;
    for (server, answer) in servers.iter().zip(answers) {
        match answer {
            Ok(()) => answered = true,
            Err(e) => {
                tracing::warn!(server = %server, error = %e.message, "an upstream server refused logging/setLevel");
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) if !answered => Err(e),
        _ => Ok(()),
    }
}
