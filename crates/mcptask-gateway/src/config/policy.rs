//! `[[policy]]`: which callers may call which tools, the rules' check, and
//! the [`Policy`] the calls enforce.

use mcptask_core::access::{Policy, Rule};
use serde::Deserialize;

use super::{ClaimMatch, ConfigError, Reload, Source, Spans};

/// A tool policy rule (see `mcptask_core::access`): to whom it applies, and
/// the `"server/tool"` globs it allows or denies.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct PolicySection {
    /// Applies to principals matching this glob (`*`, `?`).
    #[serde(default)]
    pub principal: Option<String>,
    /// Applies to callers whose OAuth token grants this scope.
    #[serde(default)]
    pub scope: Option<String>,
    /// Applies to callers whose OAuth token holds this claim value.
    #[serde(default)]
    pub claim: Option<ClaimMatch>,
    /// `"server/tool"` globs these callers may call; others are refused.
    #[serde(default)]
    pub allow: Vec<String>,
    /// `"server/tool"` globs these callers may not call.
    #[serde(default)]
    pub deny: Vec<String>,
}

impl PolicySection {
    /// The policy is replaced by a reload, for new calls.
    pub const RELOAD: Reload = Reload::Live;

    /// Every rule allows or denies something.
    pub(crate) fn check_all(
        rules: &[PolicySection],
        src: &Source,
        spans: &Spans,
    ) -> Result<(), ConfigError> {
        match rules
            .iter()
            .position(|r| r.allow.is_empty() && r.deny.is_empty())
        {
            Some(i) => Err(src.at(
                spans.policy(i),
                "this [[policy]] rule neither allows nor denies anything",
                "add allow = [\"server/tool\", …] or deny = [\"server/*\", …] (\"server/tool\" globs)",
            )),
            None => Ok(()),
        }
    }

    /// This rule as the calls apply it.
    pub fn rule(&self) -> Rule {
        Rule {
            principal: self.principal.clone(),
            scope: self.scope.clone(),
            claim: self
                .claim
                .as_ref()
                .map(|c| (c.claim.clone(), c.value.clone())),
            allow: self.allow.clone(),
            deny: self.deny.clone(),
        }
    }

    /// The rules, in order, as one policy.
    pub fn policy(rules: &[PolicySection]) -> Policy {
        Policy::new(rules.iter().map(PolicySection::rule).collect())
    }

    /// This rule as a reload compares it.
    pub(crate) fn print(&self) -> serde_json::Value {
        serde_json::json!({"principal": self.principal, "scope": self.scope,
            "claim": self.claim.as_ref().map(|c| format!("{}={}", c.claim, c.value)),
            "allow": self.allow, "deny": self.deny})
    }
}
