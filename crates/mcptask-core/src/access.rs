//! Who may use what: per-principal policy over everything a server offers
//! (tools, prompts, resources), one pure decision every face asks the same
//! way.
//!
//! A [`Rule`] applies to a caller if each selector it has matches (its
//! principal glob, a scope the caller's token grants, a claim value); a rule
//! without selectors applies to everyone. What a server offers is an
//! [`Item`]: its kind, the configured server name, and its name there: a
//! tool's or a prompt's name (whatever the front calls it), a resource's
//! URI, a resource template's URI template. A pattern names it
//! `"<server>/<name>"`, matched with `*` and `?` globs (`*` crosses `/`, so
//! `"files/file:///home/*"` holds every URI under it), and matches every
//! kind unless it starts with one ([`Kind`]: `"tool:"`, `"prompt:"`,
//! `"resource:"`). So `"server/*"` closes a server whole.
//!
//! - an item any applicable rule **denies** is refused;
//! - otherwise, if some applicable rule has an **allow** list, the item must
//!   be in one of them;
//! - otherwise it is permitted (no policy: everything is).
//!
//! ```
//! use mcptask_core::access::{Caller, Item, Policy, Rule};
//! let policy = Policy::new(vec![
//!     Rule { principal: Some("bob".into()), deny: vec!["deploy/*".into()], ..Rule::default() },
//!     Rule { principal: Some("intern-*".into()), allow: vec!["reports/*".into()], ..Rule::default() },
//!     Rule { principal: Some("eve".into()), deny: vec!["prompt:*/*".into()], ..Rule::default() },
//! ]);
//! let bob = Caller { principal: Some("bob"), ..Caller::default() };
//! assert!(!policy.permits(&bob, Item::tool("deploy", "rollout")));
//! assert!(!policy.permits(&bob, Item::resource("deploy", "file:///etc/hosts")));
//! assert!(policy.permits(&bob, Item::tool("reports", "export")));
//! let intern = Caller { principal: Some("intern-7"), ..Caller::default() };
//! assert!(policy.permits(&intern, Item::prompt("reports", "summary")));
//! assert!(!policy.permits(&intern, Item::tool("mail", "send")));
//! let eve = Caller { principal: Some("eve"), ..Caller::default() };
//! assert!(!policy.permits(&eve, Item::prompt("reports", "summary")));
//! assert!(policy.permits(&eve, Item::tool("reports", "summary")));
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
    /// Patterns of what the caller may use (anything else is refused).
    pub allow: Vec<String>,
    /// Patterns of what the caller may not use.
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

/// The kinds of things a server offers, as a pattern may single one out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A tool (`tools/list`, `tools/call`, and the tasks of its calls).
    Tool,
    /// A prompt (`prompts/list`, `prompts/get`, completions of its
    /// arguments).
    Prompt,
    /// A resource by URI or a resource template by URI template
    /// (`resources/list`, `resources/templates/list`, `resources/read`,
    /// completions of a template's variables).
    Resource,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 3] = [Kind::Tool, Kind::Prompt, Kind::Resource];

    /// How a pattern starts to name only this kind (`"tool:"` …).
    pub const fn prefix(self) -> &'static str {
        match self {
            Kind::Tool => "tool:",
            Kind::Prompt => "prompt:",
            Kind::Resource => "resource:",
        }
    }
}

/// One thing of one server that a caller asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Item<'a> {
    /// Its kind.
    pub kind: Kind,
    /// The configured server's name.
    pub server: &'a str,
    /// Its name there: a tool's or prompt's name, a resource's URI or a
    /// template's URI template.
    pub name: &'a str,
}

impl<'a> Item<'a> {
    /// The tool `name` of `server`.
    pub const fn tool(server: &'a str, name: &'a str) -> Self {
        Item {
            kind: Kind::Tool,
            server,
            name,
        }
    }

    /// The prompt `name` of `server`.
    pub const fn prompt(server: &'a str, name: &'a str) -> Self {
        Item {
            kind: Kind::Prompt,
            server,
            name,
        }
    }

    /// The resource at `uri` (or the template `uri`) of `server`.
    pub const fn resource(server: &'a str, uri: &'a str) -> Self {
        Item {
            kind: Kind::Resource,
            server,
            name: uri,
        }
    }
}

/// A pattern: the kind it is limited to, if any, and its glob.
struct Pattern {
    kind: Option<Kind>,
    glob: WildMatch,
}

impl Pattern {
    fn new(text: &str) -> Self {
        let (kind, glob) = Kind::ALL
            .into_iter()
            .find_map(|k| text.strip_prefix(k.prefix()).map(|rest| (Some(k), rest)))
            .unwrap_or((None, text));
        Pattern {
            kind,
            glob: WildMatch::new(glob),
        }
    }

    /// `named` is the item's `"<server>/<name>"`.
    fn matches(&self, item: &Item<'_>, named: &str) -> bool {
        self.kind.is_none_or(|k| k == item.kind) && self.glob.matches(named)
    }
}

struct Compiled {
    principal: Option<WildMatch>,
    scope: Option<String>,
    claim: Option<(String, String)>,
    allow: Vec<Pattern>,
    deny: Vec<Pattern>,
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
        let globs = |list: Vec<String>| list.iter().map(|p| Pattern::new(p)).collect();
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

    /// Whether `caller` may use `item`: see it listed, call, get or read it.
    pub fn permits(&self, caller: &Caller<'_>, item: Item<'_>) -> bool {
        let named = format!("{}/{}", item.server, item.name);
        let mut restricted = false;
        let mut allowed = false;
        for rule in self.rules.iter().filter(|r| r.applies(caller)) {
            if rule.deny.iter().any(|p| p.matches(&item, &named)) {
                return false;
            }
            if !rule.allow.is_empty() {
                restricted = true;
                allowed |= rule.allow.iter().any(|p| p.matches(&item, &named));
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
        assert!(!policy.permits(&bob, Item::tool("deploy", "rollout")));
        assert!(policy.permits(&bob, Item::tool("deployx", "rollout")));
        let readonly = ["readonly".to_string()];
        let reader = Caller {
            principal: Some("carol"),
            scopes: &readonly,
            ..Caller::default()
        };
        // The everyone-rule allows */*: one applicable allow is enough.
        assert!(policy.permits(&reader, Item::tool("db", "drop_table")));
        let only_readers = Policy::new(vec![rule(|r| {
            r.scope = Some("readonly".into());
            r.allow = vec!["*/get_*".into()];
        })]);
        assert!(!only_readers.permits(&reader, Item::tool("db", "drop_table")));
        assert!(only_readers.permits(&reader, Item::tool("db", "get_row")));
        // A caller the rule does not apply to is not restricted by it.
        assert!(only_readers.permits(&bob, Item::tool("db", "drop_table")));
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
        assert!(!policy.permits(&ops, Item::tool("prod", "restart")));
        let anonymous = Caller::default();
        assert!(policy.permits(&anonymous, Item::tool("prod", "restart")));
    }

    #[test]
    fn a_pattern_names_every_kind_unless_it_starts_with_one() {
        let policy = Policy::new(vec![
            rule(|r| {
                r.principal = Some("alice".into());
                r.deny = vec!["priv/*".into(), "prompt:pub/secret_*".into()];
            }),
            rule(|r| {
                r.principal = Some("rita".into());
                r.allow = vec!["pub/get_*".into(), "resource:pub/file:///public/*".into()];
            }),
        ]);
        let alice = Caller {
            principal: Some("alice"),
            ..Caller::default()
        };
        for item in [
            Item::tool("priv", "x"),
            Item::prompt("priv", "x"),
            Item::resource("priv", "file:///x"),
            Item::resource("priv", "test://template/{id}/data"),
        ] {
            assert!(!policy.permits(&alice, item), "{item:?}");
        }
        assert!(!policy.permits(&alice, Item::prompt("pub", "secret_plan")));
        assert!(policy.permits(&alice, Item::tool("pub", "secret_plan")));
        assert!(policy.permits(&alice, Item::resource("pub", "secret_plan")));
        let rita = Caller {
            principal: Some("rita"),
            ..Caller::default()
        };
        // `*` crosses `/`: a URI prefix holds everything under it.
        assert!(policy.permits(&rita, Item::resource("pub", "file:///public/a/b")));
        assert!(!policy.permits(&rita, Item::resource("pub", "file:///private/a")));
        assert!(!policy.permits(&rita, Item::tool("pub", "file:///public/a")));
        assert!(policy.permits(&rita, Item::prompt("pub", "get_help")));
        assert!(!policy.permits(&rita, Item::prompt("pub", "other")));
    }

    proptest! {
        /// No rules: everything is permitted; a rule denying `*` for
        /// everyone: nothing is.
        #[test]
        fn the_empty_policy_permits_and_deny_all_refuses(server in "[a-z]{1,8}", tool in "[a-z_]{1,12}", who in proptest::option::of("[a-z]{1,6}")) {
            let caller = Caller { principal: who.as_deref(), ..Caller::default() };
            prop_assert!(Policy::default().permits(&caller, Item::tool(&server, &tool)));
            let none = Policy::new(vec![Rule { deny: vec!["*".into()], ..Rule::default() }]);
            prop_assert!(!none.permits(&caller, Item::tool(&server, &tool)));
        }

        /// `"<server>/*"` closes the server whole: every kind, every name.
        #[test]
        fn a_server_glob_closes_the_server_for_every_kind(server in "[a-z]{1,8}", name in "[ -~]{0,24}", kind in 0..3usize) {
            let item = Item { kind: Kind::ALL[kind], server: &server, name: &name };
            let closed = Policy::new(vec![Rule { deny: vec![format!("{server}/*")], ..Rule::default() }]);
            prop_assert!(!closed.permits(&Caller::default(), item));
            let other = Policy::new(vec![Rule { deny: vec![format!("{server}x/*")], ..Rule::default() }]);
            prop_assert!(other.permits(&Caller::default(), item));
        }
    }
}
