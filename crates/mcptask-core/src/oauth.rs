//! OAuth tokens for upstream servers: what a stored token row holds, and the
//! pure decisions about it (is it still good, is it time to refresh, may this
//! replica refresh it now, what to show of it).
//!
//! The token itself is never in these types in clear: a row carries an opaque
//! sealed blob (encrypted by the client crate before it reaches the store)
//! next to the few facts the decisions need (expiry, whether it can be
//! refreshed, the issuer, the refresh lease).
//!
//! ```
//! use mcptask_core::oauth::{TokenFreshness, freshness};
//! // A one-hour token obtained at t=0: fresh at first, due for refresh
//! // within its last minute, expired after the hour.
//! let hour = 3_600_000;
//! assert_eq!(freshness(Some(hour), 0, 1_000), TokenFreshness::Fresh);
//! assert_eq!(freshness(Some(hour), 0, hour - 30_000), TokenFreshness::RefreshDue);
//! assert_eq!(freshness(Some(hour), 0, hour), TokenFreshness::Expired);
//! assert_eq!(freshness(None, 0, 10 * hour), TokenFreshness::Fresh, "no expiry: used until refused");
//! ```

use serde::{Deserialize, Serialize};

/// A token row as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredToken {
    /// The server's registry name.
    pub server: String,
    /// The hash of the server's endpoint (`ServerDef::hash`): a token is only
    /// used for the endpoint it was obtained for.
    pub endpoint: String,
    /// The sealed (encrypted and authenticated) credentials.
    pub sealed: Vec<u8>,
    /// When the access token expires (epoch ms), if the server said.
    pub expires_at_ms: Option<i64>,
    /// Whether the sealed credentials hold a refresh token.
    pub refreshable: bool,
    /// The authorization server that issued it.
    pub issuer: Option<String>,
    /// The granted scopes, space separated.
    pub scopes: String,
    /// When the token was obtained or last refreshed (epoch ms).
    pub updated_at_ms: i64,
    /// Bumped by every save: a compare-and-set handle.
    pub version: i64,
    /// The replica refreshing the token right now, if any.
    pub lease_owner: Option<String>,
    /// Until when that replica's lease holds (epoch ms).
    pub lease_until_ms: Option<i64>,
    /// Why the last refresh failed (cleared by the next save).
    pub last_error: Option<String>,
    /// When it failed (epoch ms).
    pub last_error_at_ms: Option<i64>,
}

/// What a save writes (the store sets `version` and clears the lease).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewToken {
    /// The server's registry name.
    pub server: String,
    /// See [`StoredToken::endpoint`].
    pub endpoint: String,
    /// See [`StoredToken::sealed`].
    pub sealed: Vec<u8>,
    /// See [`StoredToken::expires_at_ms`].
    pub expires_at_ms: Option<i64>,
    /// See [`StoredToken::refreshable`].
    pub refreshable: bool,
    /// See [`StoredToken::issuer`].
    pub issuer: Option<String>,
    /// See [`StoredToken::scopes`].
    pub scopes: String,
}

/// How long before expiry a token is refreshed, at most (a short-lived token
/// is refreshed in the second half of its life instead).
pub const REFRESH_MARGIN_MS: i64 = 60_000;

/// How long one replica may hold the refresh of a token before another may
/// take it over.
pub const REFRESH_LEASE_MS: i64 = 30_000;

/// Longest stored refresh failure text.
pub const MAX_ERROR_CHARS: usize = 500;

/// Where a token stands at `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenFreshness {
    /// Good to use, not yet worth refreshing.
    Fresh,
    /// Still valid, but within its refresh margin: refresh now.
    RefreshDue,
    /// Past its expiry: refresh (or authorize again) before use.
    Expired,
}

/// Where a token that expires at `expires_at_ms` (obtained at
/// `obtained_at_ms`) stands at `now_ms`. The refresh margin is
/// [`REFRESH_MARGIN_MS`], or half the token's lifetime when that is shorter,
/// so a short-lived token is not refreshed on every call. A token without an
/// expiry is used until the server refuses it.
pub fn freshness(expires_at_ms: Option<i64>, obtained_at_ms: i64, now_ms: i64) -> TokenFreshness {
    let Some(expires_at) = expires_at_ms else {
        return TokenFreshness::Fresh;
    };
    if now_ms >= expires_at {
        return TokenFreshness::Expired;
    }
    let lifetime = (expires_at - obtained_at_ms).max(0);
    let margin = REFRESH_MARGIN_MS.min(lifetime / 2);
    if expires_at - now_ms <= margin {
        TokenFreshness::RefreshDue
    } else {
        TokenFreshness::Fresh
    }
}

/// Whether `holder` may take the refresh lease of `token` at `now_ms`: no one
/// holds it, its holder's time ran out, or `holder` holds it already. The
/// stores apply the same rule in one conditional statement.
pub fn lease_available(token: &StoredToken, holder: &str, now_ms: i64) -> bool {
    match (&token.lease_owner, token.lease_until_ms) {
        (None, _) => true,
        (Some(owner), _) if owner == holder => true,
        (Some(_), Some(until)) => until <= now_ms,
        (Some(_), None) => true,
    }
}

/// `text` cut to [`MAX_ERROR_CHARS`] characters.
pub fn bounded_error(text: &str) -> String {
    if text.chars().count() <= MAX_ERROR_CHARS {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(MAX_ERROR_CHARS - 1).collect();
    cut.push('…');
    cut
}

/// What the servers view shows of a server's token: never the token.
///
/// ```
/// use mcptask_core::oauth::{StoredToken, describe};
/// let token = StoredToken {
///     server: "s".into(), endpoint: "h".into(), sealed: vec![1, 2, 3],
///     expires_at_ms: Some(3_600_000), refreshable: true, issuer: None,
///     scopes: "read".into(), updated_at_ms: 0, version: 1,
///     lease_owner: None, lease_until_ms: None, last_error: None, last_error_at_ms: None,
/// };
/// assert_eq!(describe(Some(&token), 0), "oauth: token valid until 1970-01-01T01:00:00.000Z (refreshable)");
/// assert_eq!(describe(None, 0), "oauth: no token yet");
/// ```
pub fn describe(token: Option<&StoredToken>, now_ms: i64) -> String {
    let Some(token) = token else {
        return "oauth: no token yet".to_string();
    };
    let refresh = if token.refreshable {
        " (refreshable)"
    } else {
        ""
    };
    let state = match token.expires_at_ms {
        None => format!("oauth: token without expiry{refresh}"),
        Some(at) if at <= now_ms => format!(
            "oauth: token expired at {}{refresh}",
            crate::time::to_rfc3339(at)
        ),
        Some(at) => format!(
            "oauth: token valid until {}{refresh}",
            crate::time::to_rfc3339(at)
        ),
    };
    match &token.last_error {
        Some(e) => format!("{state}; last refresh failed: {e}"),
        None => state,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row() -> StoredToken {
        StoredToken {
            server: "s".into(),
            endpoint: "h".into(),
            sealed: vec![],
            expires_at_ms: None,
            refreshable: false,
            issuer: None,
            scopes: String::new(),
            updated_at_ms: 0,
            version: 1,
            lease_owner: None,
            lease_until_ms: None,
            last_error: None,
            last_error_at_ms: None,
        }
    }

    #[test]
    fn a_short_token_is_refreshed_in_the_second_half_of_its_life() {
        // 10 s token: margin is 5 s, not a minute.
        assert_eq!(freshness(Some(10_000), 0, 4_999), TokenFreshness::Fresh);
        assert_eq!(
            freshness(Some(10_000), 0, 5_000),
            TokenFreshness::RefreshDue
        );
        assert_eq!(freshness(Some(10_000), 0, 10_000), TokenFreshness::Expired);
    }

    #[test]
    fn the_lease_is_exclusive_until_it_runs_out() {
        let mut t = row();
        assert!(lease_available(&t, "a", 0));
        t.lease_owner = Some("a".into());
        t.lease_until_ms = Some(100);
        assert!(lease_available(&t, "a", 50));
        assert!(!lease_available(&t, "b", 50));
        assert!(lease_available(&t, "b", 100));
    }

    #[test]
    fn errors_are_bounded_and_shown() {
        let long = "x".repeat(2 * MAX_ERROR_CHARS);
        assert_eq!(bounded_error(&long).chars().count(), MAX_ERROR_CHARS);
        let mut t = row();
        t.last_error = Some("invalid_grant".into());
        assert_eq!(
            describe(Some(&t), 0),
            "oauth: token without expiry; last refresh failed: invalid_grant"
        );
    }
}
