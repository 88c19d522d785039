//! `[[webhooks]]`: endpoints receiving every task event, their check, and
//! the notifier each becomes.

use std::sync::Arc;
use std::time::Duration;

use mcptask_client::{Notifier, WebhookNotifier};
use serde::Deserialize;
use toml::Spanned;

use super::url::is_http_url;
use super::{ConfigError, Reload, Source};

/// A webhook receiving every task event (JSON POST, HMAC-SHA256 signed).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookSection {
    /// The receiving endpoint (`http://` or `https://`).
    pub url: Spanned<String>,
    /// The HMAC key of the `X-Mcptask-Signature` header.
    pub secret: String,
    /// Bound on one delivery (default: the tracker's).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

/// `timeout_ms` unset.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

impl WebhookSection {
    /// Webhooks are replaced by a reload, for the events delivered from then on.
    pub const RELOAD: Reload = Reload::Live;

    /// The URL is http(s).
    pub(crate) fn check(&self, src: &Source) -> Result<(), ConfigError> {
        let url = self.url.get_ref();
        if !is_http_url(url) {
            return Err(src.at(
                self.url.span(),
                &format!("webhook url {url:?} is not http(s)"),
                "use a full URL such as \"https://example.com/hooks/mcptask\"",
            ));
        }
        Ok(())
    }

    /// The tracker's notifier for this webhook (refused when the HTTP
    /// client cannot be built for its URL).
    pub fn notifier(&self) -> Result<Arc<dyn Notifier>, String> {
        let timeout = self
            .timeout_ms
            .map_or(DEFAULT_TIMEOUT, Duration::from_millis);
        WebhookNotifier::new(
            self.url.get_ref().clone(),
            self.secret.clone().into_bytes(),
            timeout,
        )
        .map(|n| Arc::new(n) as Arc<dyn Notifier>)
    }
}
