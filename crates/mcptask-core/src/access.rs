//! Who may call which tool: per-principal tool policy, one pure decision
//! every face asks the same way.
//!
//! A [`Rule`] applies to a caller if each selector it has matches (its
//! principal glob, a scope the caller's token grants, a claim value); a rule
//! without selectors applies to everyone. Tools are named
//! `"<server>/<tool>"` (the configured server name and the upstream tool
//! name, whatever the front calls it) and matched with `*` and `?` globs.
//!
//! - a tool any applicable rule **denies** is refused;
//! - otherwise, if some applicable rule has an **allow** list, the tool must
//!   be in one of them;
//! - otherwise it is permitted (no policy: everything is).
//!
//! ```
//! use mcptask_core::access::{Caller, Policy, Rule};
//! let policy = Policy::new(vec![
//!     Rule { principal: Some("bob".into()), deny: vec!["deploy/*".into()], ..Rule::default() },
//!     Rule { principal: Some("intern-*".into()), allow: vec!["reports/*".into()], ..Rule::default() },
//! ]);
//! let bob = Caller { principal: Some("bob"), ..Caller::default() };
//! assert!(!policy.permits(&bob, "deploy", "rollout"));
//! assert!(policy.permits(&bob, "reports", "export"));
//! let intern = Caller { principal: Some("intern-7"), ..Caller::default() };
//! assert!(policy.permits(&intern, "reports", "export"));
//! assert!(!policy.permits(&intern, "mail", "send"));
//! ```

use serde_json::Value;
use wildmatch::WildMatch;

/// One allow/deny rule.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rule {
    /// Applies to principals matching this glob.
    pub principal: Option<String>,
    /// Applies to callers whose token grants this scope.
    pub scope: Option<String>,
    /// Applies to callers whose token has this value in this claim
    /// (`(claim, value)`; an array claim counts if it holds the value).
    pub claim: Option<(String, String)>,
    /// `"server/tool"` globs the caller may call (others are refused).
    pub allow: Vec<String>,
    /// `"server/tool"` globs the caller may not call.
    pub deny: Vec<String>,
}

/// What a rule can select a caller by.
#[derive(Debug, Clone, Copy, Default)]
pub struct Caller<'a> {
    /// The authenticated principal, if any.
    pub principal: Option<&'a str>,
    /// The scopes its token grants.
    pub scopes: &'a [String],
    /// Its token's claims, if it has a token with claims.
    pub claims: Option<&'a Value>,
}

struct Compiled {
    principal: Option<WildMatch>,
    scope: Option<String>,
    claim: Option<(String, String)>,
    allow: Vec<WildMatch>,
    deny: Vec<WildMatch>,
}

impl Compiled {
    fn applies(&self, caller: &Caller<'_>) -> bool {
        let principal = self
            .principal
            .as_ref()
            .is_none_or(|glob| caller.principal.is_some_and(|p| glob.matches(p)));
        let scope = self
            .scope
            .as_ref()
            .is_none_or(|s| caller.scopes.iter().any(|granted| granted == s));
        let claim = self.claim.as_ref().is_none_or(|(name, value)| {
            match caller.claims.and_then(|c| c.get(name)) {
                Some(Value::String(v)) => v == value,
                Some(Value::Array(list)) => list.iter().any(|v| v.as_str() == Some(value)),
                _ => false,
            }
        });
        principal && scope && claim
    }
}

/// A compiled set of rules.
#[derive(Default)]
pub struct Policy {
    rules: Vec<Compiled>,
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Policy({} rules)", self.rules.len())
    }
}

impl Policy {
    /// Compile `rules`.
    pub fn new(rules: Vec<Rule>) -> Self {
        let globs = |list: Vec<String>| list.iter().map(|g| WildMatch::new(g)).collect();
        Policy {
            rules: rules
                .into_iter()
                .map(|r| Compiled {
                    principal: r.principal.as_deref().map(WildMatch::new),
                    scope: r.scope,
                    claim: r.claim,
                    allow: globs(r.allow),
                    deny: globs(r.deny),
                })
                .collect(),
        }
    }

    /// Whether there are no rules (everything is permitted).
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Whether `caller` may call `tool` of `server`.
    pub fn permits(&self, caller: &Caller<'_>, server: &str, tool: &str) -> bool {
        let name = format!("{server}/{tool}");
        let mut restricted = false;
        let mut allowed = false;
        for rule in self.rules.iter().filter(|r| r.applies(caller)) {
            if rule.deny.iter().any(|g| g.matches(&name)) {
                return false;
            }
            if !rule.allow.is_empty() {
                restricted = true;
                allowed |= rule.allow.iter().any(|g| g.matches(&name));
            }
        }
        !restricted || allowed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn rule(f: impl FnOnce(&mut Rule)) -> Rule {
        let mut r = Rule::default();
        f(&mut r);
        r
    }

    #[test]
    fn deny_wins_and_allow_lists_restrict_only_their_callers() {
        let policy = Policy::new(vec![
            rule(|r| r.allow = vec!["*/*".into()]),
            rule(|r| {
                r.principal = Some("bob".into());
                r.deny = vec!["deploy/*".into()];
            }),
            rule(|r| {
                r.scope = Some("readonly".into());
                r.allow = vec!["*/get_*".into(), "*/list_*".into()];
            }),
        ]);
        let bob = Caller {
            principal: Some("bob"),
            ..Caller::default()
        };
        assert!(!policy.permits(&bob, "deploy", "rollout"));
        assert!(policy.permits(&bob, "deployx", "rollout"));
        let readonly = ["readonly".to_string()];
        let reader = Caller {
            principal: Some("carol"),
            scopes: &readonly,
            ..Caller::default()
        };
        // The everyone-rule allows */*: one applicable allow is enough.
        assert!(policy.permits(&reader, "db", "drop_table"));
        let only_readers = Policy::new(vec![rule(|r| {
            r.scope = Some("readonly".into());
            r.allow = vec!["*/get_*".into()];
        })]);
        assert!(!only_readers.permits(&reader, "db", "drop_table"));
        assert!(only_readers.permits(&reader, "db", "get_row"));
        // A caller the rule does not apply to is not restricted by it.
        assert!(only_readers.permits(&bob, "db", "drop_table"));
    }

    #[test]
    fn claims_select_by_value_or_membership() {
        let policy = Policy::new(vec![rule(|r| {
            r.claim = Some(("groups".into(), "ops".into()));
            r.deny = vec!["prod/*".into()];
        })]);
        let claims = json!({"groups": ["dev", "ops"]});
        let ops = Caller {
            principal: Some("dave"),
            claims: Some(&claims),
            ..Caller::default()
        };
        assert!(!policy.permits(&ops, "prod", "restart"));
        let anonymous = Caller::default();
        assert!(policy.permits(&anonymous, "prod", "restart"));
    }

    proptest! {
        /// No rules: everything is permitted; a rule denying `*` for
        /// everyone: nothing is.
        #[test]
        fn the_empty_policy_permits_and_deny_all_refuses(server in "[a-z]{1,8}", tool in "[a-z_]{1,12}", who in proptest::option::of("[a-z]{1,6}")) {
            let caller = Caller { principal: who.as_deref(), ..Caller::default() };
            prop_assert!(Policy::default().permits(&caller, &server, &tool));
            let none = Policy::new(vec![Rule { deny: vec!["*".into()], ..Rule::default() }]);
            prop_assert!(!none.permits(&caller, &server, &tool));
        }
    }
}
