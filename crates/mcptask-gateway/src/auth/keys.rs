//! An issuer's signing keys (its JSON Web Key Set), fetched and cached.
//!
//! The set is read from `jwks_url`, or from the `jwks_uri` of the issuer's
//! metadata. A token signed with a key the cache lacks makes the set be
//! fetched again (the issuer rotated its keys), at most once per
//! [`REFETCH_AT_MOST_EVERY`], so that tokens with made-up key ids cannot make
//! this gateway hammer the issuer; a fetch that fails keeps the last good
//! keys. The set is also fetched again once it is [`STALE_AFTER`] old, in
//! the background: a stale key still verifies meanwhile.
//!
//! A fetch is bounded: each request by [`REQUEST_TIMEOUT`], the whole fetch
//! (discovery and key set) by [`FETCH_DEADLINE`], and there is one fetch in
//! flight at a time, which every request needing it waits on (none starts
//! another or queues behind it). So an issuer that accepts connections and
//! never answers costs a token with an unknown key id at most
//! [`FETCH_DEADLINE`] before its refusal, however many such tokens arrive at
//! once, and costs tokens whose keys are known nothing.

use std::sync::{Arc, Mutex as SyncMutex};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{Jwk, JwkSet};
use serde_json::Value;
use tokio::sync::{RwLock, watch};

/// Least time between two fetches caused by unknown key ids.
pub const REFETCH_AT_MOST_EVERY: Duration = Duration::from_secs(10);
/// A key set older than this is fetched again when next used.
pub const STALE_AFTER: Duration = Duration::from_secs(3600);
/// The longest one request to the issuer may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// The longest a whole fetch (discovery, then the key set) may take.
pub const FETCH_DEADLINE: Duration = Duration::from_secs(4);

/// One issuer's keys. Cheap to clone (clones share the cache).
#[derive(Clone)]
pub struct KeySet {
    inner: Arc<Inner>,
}

struct Inner {
    issuer: String,
    jwks_url: Option<String>,
    http: reqwest::Client,
    keys: RwLock<Option<(JwkSet, Instant)>>,
    /// The `jwks_uri` the issuer's metadata named, once read.
    discovered: SyncMutex<Option<String>>,
    flight: SyncMutex<Flight>,
}

/// The fetch in flight, if any, and when the last one started.
#[derive(Default)]
struct Flight {
    started: Option<Instant>,
    /// Turns `true` when the fetch in flight has ended.
    running: Option<watch::Receiver<bool>>,
}

impl KeySet {
    pub fn new(issuer: &str, jwks_url: Option<String>, http: reqwest::Client) -> Self {
        Self {
            inner: Arc::new(Inner {
                issuer: issuer.trim_end_matches('/').to_string(),
                jwks_url,
                http,
                keys: RwLock::new(None),
                discovered: SyncMutex::new(None),
                flight: SyncMutex::new(Flight::default()),
            }),
        }
    }

    /// The key with id `kid` (or, for a token without one, the set's only
    /// key), fetching the set again if it lacks it.
    pub async fn key(&self, kid: Option<&str>) -> Option<Jwk> {
        {
            let keys = self.inner.keys.read().await;
            if let Some((set, at)) = keys.as_ref()
                && let Some(key) = find(set, kid)
            {
                if at.elapsed() >= STALE_AFTER {
                    // Not waited on: the known key verifies meanwhile.
                    drop(self.inner.start_fetch(true));
                }
                return Some(key);
            }
        }
        if let Some(mut done) = self.inner.start_fetch(false) {
            // Bounded by the fetch's own deadline.
            let _ = done.wait_for(|ended| *ended).await;
        }
        let keys = self.inner.keys.read().await;
        keys.as_ref().and_then(|(set, _)| find(set, kid))
    }
}

impl Inner {
    /// The fetch to wait on: the one in flight, or a new one unless one
    /// started within [`REFETCH_AT_MOST_EVERY`] (`stale`: the set is old,
    /// fetch whatever the last start). `None`: nothing to wait for.
    fn start_fetch(self: &Arc<Self>, stale: bool) -> Option<watch::Receiver<bool>> {
        let mut flight = self.flight.lock().expect("key fetch lock");
        if let Some(running) = &flight.running {
            return Some(running.clone());
        }
        if !stale
            && flight
                .started
                .is_some_and(|at| at.elapsed() < REFETCH_AT_MOST_EVERY)
        {
            return None;
        }
        let (ended, done) = watch::channel(false);
        flight.started = Some(Instant::now());
        flight.running = Some(done.clone());
        let this = self.clone();
        // Its own task: it completes whoever stops waiting for it.
        tokio::spawn(async move {
            match tokio::time::timeout(FETCH_DEADLINE, this.fetch()).await {
                Ok(Ok(set)) => *this.keys.write().await = Some((set, Instant::now())),
                Ok(Err(why)) => tracing::warn!(issuer = %this.issuer, error = %why,
                    "cannot fetch the issuer's signing keys; keeping the last ones"),
                Err(_) => tracing::warn!(issuer = %this.issuer,
                    "the issuer did not answer within {FETCH_DEADLINE:?}; keeping the last signing keys"),
            }
            this.flight.lock().expect("key fetch lock").running = None;
            let _ = ended.send(true);
        });
        Some(done)
    }

    async fn fetch(&self) -> Result<JwkSet, String> {
        let url = match &self.jwks_url {
            Some(url) => url.clone(),
            None => self.discover().await?,
        };
        let set = self.get_json(&url).await.and_then(|v| {
            serde_json::from_value::<JwkSet>(v)
                .map_err(|e| format!("{url}: not a JSON Web Key Set: {e}"))
        });
        if set.is_err() && self.jwks_url.is_none() {
            // The metadata may have moved the keys: read it again next time.
            *self.discovered.lock().expect("discovery lock") = None;
        }
        set
    }

    /// `jwks_uri` from the issuer's metadata (RFC 8414, else OpenID Connect
    /// discovery: both asked at once, RFC 8414's answer preferred), read
    /// once and kept.
    async fn discover(&self) -> Result<String, String> {
        if let Some(url) = self.discovered.lock().expect("discovery lock").clone() {
            return Ok(url);
        }
        let (scheme_host, path) = split_issuer(&self.issuer);
        let oauth = format!("{scheme_host}/.well-known/oauth-authorization-server{path}");
        let openid = format!("{}/.well-known/openid-configuration", self.issuer);
        let (a, b) = futures::future::join(self.get_json(&oauth), self.get_json(&openid)).await;
        let mut why = Vec::new();
        for (url, answer) in [(oauth, a), (openid, b)] {
            match answer {
                Ok(meta) => match meta.get("jwks_uri").and_then(Value::as_str) {
                    Some(jwks) => {
                        *self.discovered.lock().expect("discovery lock") = Some(jwks.to_string());
                        return Ok(jwks.to_string());
                    }
                    None => why.push(format!("{url}: no jwks_uri")),
                },
                Err(e) => why.push(e),
            }
        }
        Err(why.join("; "))
    }

    async fn get_json(&self, url: &str) -> Result<Value, String> {
        let response = self
            .http
            .get(url)
            .timeout(REQUEST_TIMEOUT)
            .send()
            .await
            .map_err(|e| format!("{url}: {e}"))?;
        if !response.status().is_success() {
            return Err(format!("{url}: HTTP {}", response.status()));
        }
        response
            .json::<Value>()
            .await
            .map_err(|e| format!("{url}: {e}"))
    }
}

fn find(set: &JwkSet, kid: Option<&str>) -> Option<Jwk> {
    match kid {
        Some(kid) => set.find(kid).cloned(),
        None => match set.keys.as_slice() {
            [only] => Some(only.clone()),
            _ => None,
        },
    }
}

/// `https://host/realm` → (`https://host`, `/realm`): RFC 8414 puts the
/// well-known segment between the host and the issuer's path.
fn split_issuer(issuer: &str) -> (&str, &str) {
    let after_scheme = issuer.find("://").map_or(0, |i| i + 3);
    match issuer[after_scheme..].find('/') {
        Some(i) => issuer.split_at(after_scheme + i),
        None => (issuer, ""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_urls_keep_the_issuers_path_after_the_well_known_segment() {
        assert_eq!(
            split_issuer("https://idp.example.com/realms/main"),
            ("https://idp.example.com", "/realms/main")
        );
        assert_eq!(
            split_issuer("http://127.0.0.1:9000"),
            ("http://127.0.0.1:9000", "")
        );
    }
}
