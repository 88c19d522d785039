//! Every replica applies what any replica stored: a sync at each wake-up
//! of the store's channel, and every [`RE_READ`] in case one was lost.

use std::sync::Arc;

use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use super::{Admin, RE_READ};
use crate::Gateway;

impl Admin {
    /// Sync on every change signal and every [`RE_READ`], until `stop`.
    pub fn spawn_watch(self: &Arc<Self>, gateway: Gateway, stop: CancellationToken) {
        let admin = self.clone();
        tokio::spawn(async move {
            let mut signals = match admin.store.listen_admin_changes().await {
                Ok(Some(stream)) => stream,
                Ok(None) => futures::stream::pending().boxed(),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot listen for admin API changes; they are picked up by the periodic re-read");
                    futures::stream::pending().boxed()
                }
            };
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    signal = signals.next() => {
                        if signal.is_none() {
                            // The channel ended: the re-read carries on alone.
                            signals = futures::stream::pending().boxed();
                        }
                    }
                    () = tokio::time::sleep(RE_READ) => {}
                }
                match admin.sync(&gateway, false).await {
                    Ok(Some(changes)) if !changes.is_empty() => {
                        tracing::info!("admin API changes applied: {}", changes.lines().join("; "));
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::error!(
                            "admin API changes not applied; the configuration in force stays: {e}"
                        );
                    }
                }
            }
        });
    }
}
