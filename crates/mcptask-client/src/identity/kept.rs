//! An exchanged token kept with its call in the store, sealed with the
//! process's secret key (as the servers' own OAuth tokens are, one row of
//! the token store each), so a call outlives the gateway process that made
//! its exchange: a replica or a restarted process that adopts the call
//! reads it back. Kept only where the process has a key and a store (an
//! [`OAuthRuntime`]); without one the token lives in that process alone.

use serde::{Deserialize, Serialize};

use crate::oauth::{Exchanged, OAuthRuntime, Secret};

/// The token store's row of call `call_id` to `server`: a newline never
/// appears in a server's name, so no server's own row is ever this one.
fn row(server: &str, call_id: &str) -> String {
    format!("{server}\ncall {call_id}")
}

/// What the sealed blob holds.
#[derive(Serialize, Deserialize)]
struct Blob {
    access: String,
    refresh: Option<String>,
    expires_at_ms: Option<i64>,
}

/// Keep `token` for call `call_id`.
pub(super) async fn save(
    runtime: &OAuthRuntime,
    server: &str,
    call_id: &str,
    token: &Exchanged,
) -> Result<(), String> {
    let inner = &runtime.inner;
    let key = row(server, call_id);
    let blob = Blob {
        access: token.access.expose().to_string(),
        refresh: token.refresh.as_ref().map(|r| r.expose().to_string()),
        expires_at_ms: token.expires_at_ms,
    };
    let plain = serde_json::to_vec(&blob).map_err(|e| e.to_string())?;
    let sealed = inner.key.seal(&key, &plain).map_err(|e| e.to_string())?;
    inner
        .store
        .save_token(
            &mcptask_core::oauth::NewToken {
                server: key,
                endpoint: String::new(),
                sealed,
                expires_at_ms: token.expires_at_ms,
                refreshable: token.refresh.is_some(),
                issuer: None,
                scopes: String::new(),
            },
            inner.clock.now_ms(),
        )
        .await
        .map(|_| ())
        .map_err(|e| format!("keeping the exchanged token of the call: {e}"))
}

/// The token kept for call `call_id`, if any.
pub(super) async fn load(
    runtime: &OAuthRuntime,
    server: &str,
    call_id: &str,
) -> Result<Option<Exchanged>, String> {
    let inner = &runtime.inner;
    let key = row(server, call_id);
    let Some(stored) = inner
        .store
        .load_token(&key)
        .await
        .map_err(|e| format!("reading the exchanged token of the call: {e}"))?
    else {
        return Ok(None);
    };
    let plain = inner.key.open(&key, &stored.sealed).map_err(|e| {
        format!("opening the exchanged token of the call (another secret key?): {e}")
    })?;
    let blob: Blob = serde_json::from_slice(&plain).map_err(|e| e.to_string())?;
    Ok(Some(Exchanged {
        access: Secret(blob.access),
        refresh: blob.refresh.map(Secret),
        expires_at_ms: blob.expires_at_ms,
    }))
}

/// Delete what is kept for call `call_id` (in the background: the call
/// ended, and nothing waits for this).
pub(super) fn delete(runtime: &OAuthRuntime, server: &str, call_id: &str) {
    let store = runtime.inner.store.clone();
    let key = row(server, call_id);
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        handle.spawn(async move {
            if let Err(e) = store.delete_token(&key).await {
                tracing::debug!(error = %e, "cannot delete a call's exchanged token; it stays sealed");
            }
        });
    }
}
