//! Virtual servers: a named selection of what the upstreams offer, served
//! at its own endpoint (`/mcp/<name>`), to the principals it names.
//!
//! A virtual server adds no route of its own. Its selection is one more
//! [`Policy`] that every request through it must pass, next to the policy
//! in force, in the one place that reads policies
//! (`crate::route::access`): so `tools/list`, `tools/call` (both the full
//! way and the fast path), prompts, resources and completions see exactly
//! the selection, and anything outside it reads as something that does not
//! exist. The caller carries the virtual server it came through
//! ([`crate::auth::Caller::through`]).
//!
//! [`VirtualServer`] is the plain, serializable definition (the file's
//! `[[virtual_servers]]` today; a store can keep the same form later);
//! [`Through`] is that definition made ready for requests.

use std::sync::Arc;

use mcptask_core::access::{Caller, Item, Kind, Policy, Rule};
use serde::{Deserialize, Serialize};
use wildmatch::WildMatch;

/// A virtual server's definition.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VirtualServer {
    /// Its name: the endpoint is `/mcp/<name>`.
    pub name: String,
    /// `"server/tool"` globs of the tools it offers.
    pub tools: Vec<String>,
    /// `"server/prompt"` globs of the prompts it offers.
    pub prompts: Vec<String>,
    /// `"server/uri"` globs of the resources it offers.
    pub resources: Vec<String>,
    /// Principal globs of who may use it (`None`: anyone the gateway
    /// admits; a caller without a principal matches no glob).
    pub principals: Option<Vec<String>>,
}

/// A virtual server ready for requests: its selection as a policy.
#[derive(Debug)]
pub struct Through {
    name: String,
    selection: Policy,
    principals: Option<Vec<WildMatch>>,
}

impl VirtualServer {
    /// Made ready for requests.
    pub fn through(&self) -> Arc<Through> {
        let kinded = |kind: Kind, globs: &[String]| {
            globs
                .iter()
                .map(move |g| format!("{}{g}", kind.prefix()))
                .collect::<Vec<_>>()
        };
        let allow: Vec<String> = [
            kinded(Kind::Tool, &self.tools),
            kinded(Kind::Prompt, &self.prompts),
            kinded(Kind::Resource, &self.resources),
        ]
        .concat();
        // An empty allow list restricts nothing: a selection of nothing
        // denies everything instead.
        let rule = if allow.is_empty() {
            Rule {
                deny: vec!["*".into()],
                ..Rule::default()
            }
        } else {
            Rule {
                allow,
                ..Rule::default()
            }
        };
        Arc::new(Through {
            name: self.name.clone(),
            selection: Policy::new(vec![rule]),
            principals: self
                .principals
                .as_ref()
                .map(|globs| globs.iter().map(|g| WildMatch::new(g)).collect()),
        })
    }
}

impl Through {
    /// The virtual server's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether `item` is in the selection.
    pub fn selects(&self, item: Item<'_>) -> bool {
        self.selection.permits(&Caller::default(), item)
    }

    /// Whether a caller acting for `principal` may use this virtual server.
    pub fn admits(&self, principal: Option<&str>) -> bool {
        match &self.principals {
            None => true,
            Some(globs) => principal.is_some_and(|p| globs.iter().any(|g| g.matches(p))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_tools() -> Arc<Through> {
        VirtualServer {
            name: "ops".into(),
            tools: vec!["demo/greet".into(), "other/sl*".into()],
            principals: Some(vec!["alice".into(), "ops-*".into()]),
            ..VirtualServer::default()
        }
        .through()
    }

    #[test]
    fn the_selection_is_its_globs_of_their_kind_only() {
        let v = two_tools();
        assert!(v.selects(Item::tool("demo", "greet")));
        assert!(v.selects(Item::tool("other", "slow")));
        assert!(!v.selects(Item::tool("demo", "slow")));
        assert!(!v.selects(Item::prompt("demo", "greet")));
        assert!(!v.selects(Item::resource("demo", "demo://greet")));
        let nothing = VirtualServer::default().through();
        assert!(!nothing.selects(Item::tool("demo", "greet")));
    }

    #[test]
    fn principals_are_globs_and_an_anonymous_caller_matches_none() {
        let v = two_tools();
        assert!(v.admits(Some("alice")));
        assert!(v.admits(Some("ops-7")));
        assert!(!v.admits(Some("bob")));
        assert!(!v.admits(None));
        assert!(VirtualServer::default().through().admits(None));
    }
}
