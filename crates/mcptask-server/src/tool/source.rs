//! Where the runtime finds its tools: a fixed [`ToolRegistry`], or a source
//! whose tools appear, change and disappear while the runtime runs (a proxy
//! in front of other servers).
//!
//! The runtime asks the source on every call, create and recovery, and lists
//! `tools/list` from it, so a source that changes is seen at once. A source
//! may also answer [`Lookup::NotYet`]: it cannot tell yet whether it will
//! serve a name (it has not finished listing its tools). Recovery then leaves
//! the task alone and retries it at a later recovery pass, instead of failing
//! it as "tool not available".

use std::sync::OnceLock;

use rmcp::model::Tool;
use tokio::sync::watch;

use super::registry::ToolRegistry;
use super::task_tool::TaskTool;

/// The answer of [`ToolSource::lookup`].
// A lookup lives for one call, create or recovery and is matched at once:
// boxing the tool would cost an allocation per call to save stack bytes.
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
pub enum Lookup {
    /// The source serves this tool.
    Found(TaskTool),
    /// The source does not serve this tool (and will not: a call fails, a
    /// recovered task fails "tool not available").
    Unknown,
    /// The source cannot tell yet (it is still learning its tools). A call is
    /// refused like an unknown tool; a recovered task is left for a later
    /// recovery pass.
    NotYet,
}

impl Lookup {
    /// The tool, if found.
    pub fn found(self) -> Option<TaskTool> {
        match self {
            Lookup::Found(tool) => Some(tool),
            Lookup::Unknown | Lookup::NotYet => None,
        }
    }
}

/// The tools a [`TaskRuntime`](crate::TaskRuntime) serves.
///
/// [`ToolRegistry`] implements it for a fixed set of tools; give the runtime
/// another implementation with
/// [`TaskRuntime::builder_with_source`](crate::TaskRuntime::builder_with_source)
/// when the set changes while the runtime runs.
///
/// ```
/// use std::sync::{Arc, RwLock};
/// use mcptask_server::tool::{Lookup, ToolSource};
/// use mcptask_server::{TaskTool, ToolRegistry};
/// use rmcp::model::Tool;
/// use tokio::sync::watch;
///
/// /// Tools added at run time; `NotYet` until the first listing arrives.
/// struct Dynamic {
///     tools: RwLock<Option<ToolRegistry>>,
///     version: watch::Sender<u64>,
/// }
///
/// impl ToolSource for Dynamic {
///     fn lookup(&self, name: &str) -> Lookup {
///         match &*self.tools.read().unwrap() {
///             None => Lookup::NotYet,
///             Some(r) => r.lookup(name),
///         }
///     }
///     fn definitions(&self) -> Vec<Tool> {
///         self.tools.read().unwrap().as_ref().map(|r| r.definitions()).unwrap_or_default()
///     }
///     fn changed(&self) -> watch::Receiver<u64> {
///         self.version.subscribe()
///     }
/// }
///
/// let source = Dynamic { tools: RwLock::new(None), version: watch::channel(0).0 };
/// assert!(matches!(source.lookup("echo"), Lookup::NotYet));
/// let mut listing = ToolRegistry::new();
/// listing.register(TaskTool::new(
///     Tool::new("echo", "echo", Arc::new(Default::default())),
///     |_call| async { Ok(rmcp::model::CallToolResult::success(vec![])) },
/// ));
/// *source.tools.write().unwrap() = Some(listing);
/// source.version.send_modify(|v| *v += 1);
/// assert!(matches!(source.lookup("echo"), Lookup::Found(_)));
/// assert_eq!(*source.changed().borrow(), 1);
/// ```
pub trait ToolSource: Send + Sync + 'static {
    /// The tool called `name` (for a call, a create and recovery).
    fn lookup(&self, name: &str) -> Lookup;
    /// The definitions `tools/list` answers with, in listing order (a cheap
    /// snapshot: it is called on every `tools/list`).
    fn definitions(&self) -> Vec<Tool>;
    /// A receiver whose value changes each time the tool list changes (its
    /// value is a version number and means nothing else).
    fn changed(&self) -> watch::Receiver<u64>;
}

/// A sender that lives as long as the process: its receivers never change and
/// never see the channel closed.
fn never_changes() -> watch::Receiver<u64> {
    static NEVER: OnceLock<watch::Sender<u64>> = OnceLock::new();
    NEVER.get_or_init(|| watch::channel(0).0).subscribe()
}

/// A registry is a fixed source: `Found` or `Unknown`, and it never changes.
///
/// ```
/// use mcptask_server::ToolRegistry;
/// use mcptask_server::tool::{Lookup, ToolSource};
/// let registry = ToolRegistry::new();
/// assert!(matches!(registry.lookup("missing"), Lookup::Unknown));
/// assert!(ToolSource::definitions(&registry).is_empty());
/// assert!(!registry.changed().has_changed().unwrap());
/// ```
impl ToolSource for ToolRegistry {
    fn lookup(&self, name: &str) -> Lookup {
        match self.get(name) {
            Some(tool) => Lookup::Found(tool.clone()),
            None => Lookup::Unknown,
        }
    }

    fn definitions(&self) -> Vec<Tool> {
        ToolRegistry::definitions(self)
    }

    fn changed(&self) -> watch::Receiver<u64> {
        never_changes()
    }
}
