//! Where the checks point when a section type carries no span of its own:
//! the `[api]` and `[limits]` tables, each `[[policy]]` rule and each
//! `[tracker]` key (its type, `mcptask_client::TrackerConfig`, is the
//! client's). Read by serde from the same parsed document as [`Config`],
//! so every position is the parser's.
//!
//! [`Config`]: super::Config

use std::collections::BTreeMap;
use std::ops::Range;

use serde::Deserialize;
use serde::de::IgnoredAny;
use toml::Spanned;

/// The positions of the file's tables and keys the checks name.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct Spans {
    #[serde(default)]
    api: Option<Spanned<IgnoredAny>>,
    #[serde(default)]
    limits: Option<Spanned<IgnoredAny>>,
    #[serde(default)]
    policy: Vec<Spanned<IgnoredAny>>,
    /// The `[tracker]` keys as written, with their positions.
    #[serde(default)]
    tracker: BTreeMap<Spanned<String>, toml::Value>,
}

/// Start of the file: where an error about a table the file lacks points.
const TOP: Range<usize> = 0..0;

impl Spans {
    /// The `[api]` table.
    pub fn api(&self) -> Range<usize> {
        self.api.as_ref().map_or(TOP, Spanned::span)
    }

    /// The `[limits]` table.
    pub fn limits(&self) -> Range<usize> {
        self.limits.as_ref().map_or(TOP, Spanned::span)
    }

    /// The `index`th `[[policy]]` rule.
    pub fn policy(&self, index: usize) -> Range<usize> {
        self.policy.get(index).map_or(TOP, Spanned::span)
    }

    /// The key `key` of `[tracker]`.
    pub fn tracker_key(&self, key: &str) -> Range<usize> {
        self.tracker
            .keys()
            .find(|k| k.get_ref() == key)
            .map_or(TOP, Spanned::span)
    }

    /// The `[tracker]` keys as written, without positions: what a reload
    /// compares (moving a key or adding a comment changes nothing).
    pub fn tracker_keys(&self) -> BTreeMap<&str, &toml::Value> {
        self.tracker
            .iter()
            .map(|(k, v)| (k.get_ref().as_str(), v))
            .collect()
    }
}
