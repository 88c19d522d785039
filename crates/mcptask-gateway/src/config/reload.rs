//! What a reload does with each part of the file: [`Reload`], declared by
//! each section next to its keys, and the settings read only at start as a
//! reload compares them (secrets as short hashes). `Fingerprint` and
//! `Changes` (`crate::live`) are made from these; nothing else decides
//! which settings wait for a restart.

use std::collections::BTreeMap;

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::{ApiSection, Config, DatabaseSection, OAuthGlobalSection, ProxySection};
use crate::telemetry::TelemetrySection;

/// When a changed setting takes effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reload {
    /// From the reload on: [`crate::Gateway::reload`] puts it in force.
    Live,
    /// At the next start: read once; a reload that changes it says so and
    /// leaves it as it was.
    AtStart,
}

/// `[tracker]`: the tracker is built once, at start.
pub const TRACKER_RELOAD: Reload = Reload::AtStart;

/// A short hash of `value`: enough to tell two values apart, nothing to
/// recover a secret from.
pub(crate) fn short_hash(value: &impl Serialize) -> String {
    let bytes = serde_json::to_vec(value).unwrap_or_default();
    Sha256::digest(&bytes)
        .iter()
        .take(6)
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl Config {
    /// The settings a reload leaves for the next start (their sections
    /// declare [`Reload::AtStart`]), name → print.
    pub fn at_start(&self) -> BTreeMap<String, String> {
        let settings = [
            (
                "[database] url",
                DatabaseSection::RELOAD,
                short_hash(&self.database.url),
            ),
            (
                "[api] listen",
                ApiSection::LISTENER_RELOAD,
                self.api.listen.to_string(),
            ),
            (
                "[api] max_body_bytes",
                ApiSection::LISTENER_RELOAD,
                self.api.max_body_bytes.to_string(),
            ),
            ("[proxy]", ProxySection::RELOAD, self.proxy.print()),
            (
                "[telemetry]",
                TelemetrySection::RELOAD,
                self.telemetry.print(),
            ),
            (
                "[tracker]",
                TRACKER_RELOAD,
                short_hash(&self.spans.tracker_keys()),
            ),
            ("[oauth]", OAuthGlobalSection::RELOAD, self.oauth.print()),
            ("[audit]", super::AuditSection::RELOAD, self.audit.print()),
        ];
        settings
            .into_iter()
            .filter(|(_, reload, _)| *reload == Reload::AtStart)
            .map(|(name, _, print)| (name.to_string(), print))
            .collect()
    }
}
