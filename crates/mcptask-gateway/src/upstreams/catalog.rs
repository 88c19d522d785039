//! The front's tool names: each upstream tool under `<prefix>__<tool>`, and
//! the clashes that make a configuration ambiguous. Pure: no I/O.

use std::collections::BTreeMap;

use mcptask_core::call::ToolFacts;
use mcptask_core::server::InterruptPolicy;
use rmcp::model::Tool;

/// One front tool.
#[derive(Debug, Clone)]
pub struct Route {
    /// The name callers use.
    pub front: String,
    /// The configured server.
    pub server: String,
    /// The tool's name on that server.
    pub tool: String,
    /// What its server speaks and how the tool may run as a task.
    pub facts: ToolFacts,
    /// What a crash does to a synchronous call of this tool made now (its
    /// server's `interrupt`): decided when the call is made and kept with it.
    pub interrupt: InterruptPolicy,
    /// Run in the background for callers that do not declare tasks
    /// (`background = [...]` on the server).
    pub background: bool,
    /// The definition shown to callers (the upstream's, renamed).
    pub definition: Tool,
}

/// One server's listing, as the catalog is built from it.
pub struct Listing {
    /// The configured server's name.
    pub server: String,
    /// The prefix of its tools' front names.
    pub prefix: String,
    /// What a crash does to its synchronous calls.
    pub interrupt: InterruptPolicy,
    /// Upstream tool names run in the background for non-declaring callers.
    pub background: Vec<String>,
    /// Each tool with its facts.
    pub tools: Vec<(Tool, ToolFacts)>,
}

/// Two routes for one front name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Clash {
    /// The front tool name both routes claim.
    pub name: String,
    /// The route that has it (`server/tool`).
    pub first: String,
    /// The route that claims it again (`server/tool`), left out.
    pub second: String,
}

impl std::fmt::Display for Clash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "tool name {:?} is served by both {} and {}; set a distinct prefix on one of these servers",
            self.name, self.first, self.second
        )
    }
}

/// The name callers see for `tool` of a server with `prefix`.
pub fn front_name(prefix: &str, tool: &str) -> String {
    if prefix.is_empty() {
        tool.to_string()
    } else {
        format!("{prefix}__{tool}")
    }
}

/// MCP tool names: 1-128 characters of `[A-Za-z0-9_.-]`.
fn usable(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// Every front tool, by name, in listing order.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    routes: BTreeMap<String, Route>,
    order: Vec<String>,
    /// (server, upstream tool) → front name.
    by_upstream: BTreeMap<(String, String), String>,
    /// The servers whose listings it was built from (a server whose tools
    /// were all left out is still listed).
    listed: std::collections::BTreeSet<String>,
}

impl Catalog {
    /// Build the catalog; every clash is returned (none is resolved by
    /// picking one side). Names that are not valid MCP tool names, and names
    /// in the reserved `mcptask_` space, are left out.
    pub fn build(listings: Vec<Listing>) -> (Catalog, Vec<Clash>) {
        let mut catalog = Catalog::default();
        let mut clashes = Vec::new();
        for listing in listings {
            catalog.listed.insert(listing.server.clone());
            for (tool, facts) in listing.tools {
                let front = front_name(&listing.prefix, &tool.name);
                if !usable(&front) || front.starts_with("mcptask_") {
                    tracing::warn!(server = %listing.server, tool = %tool.name, name = %front,
                        "upstream tool left out of the proxy: its front name is not usable");
                    continue;
                }
                let origin = format!("{}/{}", listing.server, tool.name);
                if let Some(existing) = catalog.routes.get(&front) {
                    clashes.push(Clash {
                        name: front.clone(),
                        first: format!("{}/{}", existing.server, existing.tool),
                        second: origin,
                    });
                    continue;
                }
                let mut definition = tool.clone();
                definition.name = front.clone().into();
                catalog.order.push(front.clone());
                catalog.by_upstream.insert(
                    (listing.server.clone(), tool.name.to_string()),
                    front.clone(),
                );
                catalog.routes.insert(
                    front.clone(),
                    Route {
                        front,
                        server: listing.server.clone(),
                        tool: tool.name.to_string(),
                        facts,
                        interrupt: listing.interrupt,
                        background: listing.background.iter().any(|b| *b == *tool.name),
                        definition,
                    },
                );
            }
        }
        (catalog, clashes)
    }

    /// The route of a front name.
    pub fn get(&self, name: &str) -> Option<&Route> {
        self.routes.get(name)
    }

    /// Whether it was built from a listing of `server`.
    pub fn lists(&self, server: &str) -> bool {
        self.listed.contains(server)
    }

    /// The route of `tool` on `server`.
    pub fn of_upstream(&self, server: &str, tool: &str) -> Option<&Route> {
        self.by_upstream
            .get(&(server.to_string(), tool.to_string()))
            .and_then(|front| self.routes.get(front))
    }

    /// Every route, in listing order.
    pub fn routes(&self) -> impl Iterator<Item = &Route> {
        self.order.iter().filter_map(|n| self.routes.get(n))
    }
}

/// A route `s__t` (tool `t` of server `s`) whose server speaks `protocol`,
/// for the unit tests of what is decided about a route.
#[cfg(test)]
pub(crate) fn test_route(
    protocol: mcptask_core::call::Protocol,
    rerun: bool,
    background: bool,
) -> Route {
    Route {
        front: "s__t".into(),
        server: "s".into(),
        tool: "t".into(),
        facts: ToolFacts {
            protocol,
            task_support: mcptask_core::call::TaskSupport::Optional,
            toolset_submit: false,
        },
        interrupt: if rerun {
            InterruptPolicy::Rerun
        } else {
            InterruptPolicy::Fail
        },
        background,
        definition: Tool::new("s__t", "t", std::sync::Arc::new(Default::default())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn tool(name: &str) -> Tool {
        Tool::new(name.to_string(), "t", Arc::new(Default::default()))
    }

    fn listing(server: &str, prefix: &str, tools: &[&str]) -> Listing {
        Listing {
            server: server.into(),
            prefix: prefix.into(),
            interrupt: InterruptPolicy::Fail,
            background: Vec::new(),
            tools: tools
                .iter()
                .map(|t| {
                    let facts = ToolFacts {
                        protocol: mcptask_core::call::Protocol::Sync,
                        task_support: mcptask_core::call::TaskSupport::Forbidden,
                        toolset_submit: false,
                    };
                    (tool(t), facts)
                })
                .collect(),
        }
    }

    #[test]
    fn names_are_prefixed_and_an_empty_prefix_keeps_them() {
        let (catalog, clashes) = Catalog::build(vec![
            listing("a", "a", &["echo"]),
            listing("b", "", &["echo", "sum"]),
        ]);
        assert!(clashes.is_empty());
        let names: Vec<_> = catalog.routes().map(|r| r.front.as_str()).collect();
        assert_eq!(names, ["a__echo", "echo", "sum"]);
        let route = catalog.get("a__echo").unwrap();
        assert_eq!((route.server.as_str(), route.tool.as_str()), ("a", "echo"));
        assert_eq!(route.definition.name, "a__echo");
        assert_eq!(catalog.of_upstream("b", "echo").unwrap().front, "echo");
        assert!(catalog.of_upstream("a", "sum").is_none());
    }

    #[test]
    fn a_catalog_lists_the_servers_it_was_built_from_even_with_no_tool_kept() {
        let (catalog, _) = Catalog::build(vec![
            listing("a", "a", &["echo"]),
            listing("b", "b", &["not usable"]),
        ]);
        assert!(
            catalog.routes().all(|r| r.server == "a"),
            "b's tool left out"
        );
        assert!(catalog.lists("a") && catalog.lists("b"));
        assert!(!catalog.lists("c"), "a server not built from is not listed");
        assert!(!Catalog::default().lists("a"));
    }

    #[test]
    fn two_routes_for_one_name_are_a_clash_naming_both() {
        let (catalog, clashes) = Catalog::build(vec![
            listing("a", "", &["echo"]),
            listing("b", "", &["echo"]),
            listing("c", "x", &["y"]),
            listing("d", "", &["x__y"]),
        ]);
        assert_eq!(clashes.len(), 2);
        assert_eq!(clashes[0].first, "a/echo");
        assert_eq!(clashes[0].second, "b/echo");
        assert!(clashes[1].to_string().contains("x__y"));
        // The first route stays; nothing is silently rerouted.
        assert_eq!(catalog.get("echo").unwrap().server, "a");
    }

    #[test]
    fn unusable_and_reserved_names_are_left_out() {
        let (catalog, clashes) = Catalog::build(vec![listing(
            "a",
            "",
            &["ok", "has space", "mcptask_get_task"],
        )]);
        assert!(clashes.is_empty());
        assert_eq!(catalog.routes().count(), 1);
    }
}
