//! An issuer's signing keys (its JSON Web Key Set), fetched and cached.
//!
//! The set is read from `jwks_url`, or from the `jwks_uri` of the issuer's
//! metadata. A token signed with a key the cache lacks makes the set be
//! fetched again (the issuer rotated its keys), at most once per
//! [`REFETCH_AT_MOST_EVERY`], so that tokens with made-up key ids cannot make
//! this gateway hammer the issuer; a fetch that fails keeps the last good
//! keys. The set is also fetched again once it is [`STALE_AFTER`] old.

use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{Jwk, JwkSet};
use serde_json::Value;
use tokio::sync::{Mutex, RwLock};

/// Least time between two fetches caused by unknown key ids.
pub const REFETCH_AT_MOST_EVERY: Duration = Duration::from_secs(10);
/// A key set older than this is fetched again when next used.
pub const STALE_AFTER: Duration = Duration::from_secs(3600);

/// One issuer's keys.
pub struct KeySet {
    issuer: String,
    jwks_url: Option<String>,
    http: reqwest::Client,
    keys: RwLock<Option<(JwkSet, Instant)>>,
    /// When a fetch last started (one at a time).
    fetching: Mutex<Option<Instant>>,
}

impl KeySet {
    pub fn new(issuer: &str, jwks_url: Option<String>, http: reqwest::Client) -> Self {
        Self {
            issuer: issuer.trim_end_matches('/').to_string(),
            jwks_url,
            http,
            keys: RwLock::new(None),
            fetching: Mutex::new(None),
        }
    }

    /// The key with id `kid` (or, for a token without one, the set's only
    /// key), fetching the set again if it lacks it.
    pub async fn key(&self, kid: Option<&str>) -> Option<Jwk> {
        {
            let keys = self.keys.read().await;
            if let Some((set, at)) = keys.as_ref()
                && at.elapsed() < STALE_AFTER
                && let Some(key) = find(set, kid)
            {
                return Some(key);
            }
        }
        self.refetch().await;
        let keys = self.keys.read().await;
        keys.as_ref().and_then(|(set, _)| find(set, kid))
    }

    /// Fetch the set again unless a fetch ran within the last
    /// [`REFETCH_AT_MOST_EVERY`]; keep the old set when it fails.
    async fn refetch(&self) {
        let mut last = self.fetching.lock().await;
        if last.is_some_and(|at| at.elapsed() < REFETCH_AT_MOST_EVERY) {
            return;
        }
        *last = Some(Instant::now());
        match self.fetch().await {
            Ok(set) => *self.keys.write().await = Some((set, Instant::now())),
            Err(why) => {
                tracing::warn!(issuer = %self.issuer, error = %why,
                    "cannot fetch the issuer's signing keys; keeping the last ones")
            }
        }
    }

    async fn fetch(&self) -> Result<JwkSet, String> {
        let url = match &self.jwks_url {
            Some(url) => url.clone(),
            None => self.discover().await?,
        };
        let set: JwkSet = self.get_json(&url).await.and_then(|v| {
            serde_json::from_value(v).map_err(|e| format!("{url}: not a JSON Web Key Set: {e}"))
        })?;
        Ok(set)
    }

    /// `jwks_uri` from the issuer's metadata (RFC 8414, then OpenID
    /// Connect discovery).
    async fn discover(&self) -> Result<String, String> {
        let (scheme_host, path) = split_issuer(&self.issuer);
        let candidates = [
            format!("{scheme_host}/.well-known/oauth-authorization-server{path}"),
            format!("{}/.well-known/openid-configuration", self.issuer),
        ];
        let mut why = Vec::new();
        for url in candidates {
            match self.get_json(&url).await {
                Ok(meta) => {
                    if let Some(jwks) = meta.get("jwks_uri").and_then(Value::as_str) {
                        return Ok(jwks.to_string());
                    }
                    why.push(format!("{url}: no jwks_uri"));
                }
                Err(e) => why.push(e),
            }
        }
        Err(why.join("; "))
    }

    async fn get_json(&self, url: &str) -> Result<Value, String> {
        let response = self
            .http
            .get(url)
            .timeout(Duration::from_secs(10))
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
