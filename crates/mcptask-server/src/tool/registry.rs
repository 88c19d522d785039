//! The tools a runtime serves, by name.
//!
//! `tools/list` must list tools in the order the server registered them, while
//! calls look tools up by name; the registry keeps both.

use std::collections::BTreeMap;

use rmcp::model::Tool;

use super::task_tool::TaskTool;

/// A registered tool and its place in `tools/list`.
#[derive(Clone)]
struct Registered {
    order: usize,
    tool: TaskTool,
}

/// Tools by name, listed in registration order.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Registered>,
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add or replace a tool.
    pub fn register(&mut self, tool: TaskTool) -> &mut Self {
        let order = self
            .tools
            .get(tool.name())
            .map(|r| r.order)
            .unwrap_or(self.tools.len());
        self.tools
            .insert(tool.name().to_string(), Registered { order, tool });
        self
    }

    /// The tool called `name`, if registered.
    pub fn get(&self, name: &str) -> Option<&TaskTool> {
        self.tools.get(name).map(|r| &r.tool)
    }

    /// Definitions for `tools/list`.
    pub fn definitions(&self) -> Vec<Tool> {
        let mut all: Vec<_> = self.tools.values().collect();
        all.sort_by_key(|r| r.order);
        all.into_iter().map(|r| r.tool.tool.clone()).collect()
    }

    /// How many tools are registered.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// Whether no tool is registered.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}
