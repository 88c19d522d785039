//! `[[policy]]`: which callers may use which tools, prompts and resources,
//! the rules' check, and the [`Policy`] the route enforces.

use mcptask_core::access::{Kind, Policy, Rule};
use serde::Deserialize;

use super::{ClaimMatch, ConfigError, Reload, Source, Spans};

/// A policy rule (see `mcptask_core::access`): to whom it applies, and the
/// `"server/name"` globs it allows or denies (a tool's or prompt's name, a
/// resource's URI; `"tool:"`, `"prompt:"` or `"resource:"` first limits a
/// glob to that kind).
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
    /// `"server/name"` globs these callers may use; others are refused.
    #[serde(default)]
    pub allow: Vec<String>,
    /// `"server/name"` globs these callers may not use.
    #[serde(default)]
    pub deny: Vec<String>,
}

/// Whether `pattern` starts like a kind (`word:`) that is not one: a typo
/// such as `"prompts:"` would otherwise be read as a server's name and
/// match nothing, a deny that silently denies nothing.
fn unknown_kind(pattern: &str) -> bool {
    match pattern.split_once(':') {
        Some((word, _)) => {
            !word.is_empty()
                && word.chars().all(|c| c.is_ascii_alphabetic())
                && !Kind::ALL.iter().any(|k| k.prefix() == format!("{word}:"))
        }
        None => false,
    }
}

impl PolicySection {
    /// The policy is replaced by a reload, for new calls.
    pub const RELOAD: Reload = Reload::Live;

    /// Every rule allows or denies something, and names kinds that exist.
    pub(crate) fn check_all(
        rules: &[PolicySection],
        src: &Source,
        spans: &Spans,
    ) -> Result<(), ConfigError> {
        if let Some(i) = rules
            .iter()
            .position(|r| r.allow.is_empty() && r.deny.is_empty())
        {
            return Err(src.at(
                spans.policy(i),
                "this [[policy]] rule neither allows nor denies anything",
                "add allow = [\"server/tool\", …] or deny = [\"server/*\", …] (\"server/name\" globs)",
            ));
        }
        for (i, rule) in rules.iter().enumerate() {
            if let Some(pattern) = rule
                .allow
                .iter()
                .chain(&rule.deny)
                .find(|p| unknown_kind(p))
            {
                return Err(src.at(
                    spans.policy(i),
                    &format!("{pattern:?} starts with a kind that does not exist"),
                    "start a pattern with tool:, prompt: or resource:, or with none (every kind); \
                     match a ':' in a server name with '?'",
                ));
            }
        }
        Ok(())
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
