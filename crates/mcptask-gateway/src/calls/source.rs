//! The upstream catalog as the call runtime's [`ToolSource`]: every route is
//! a task tool whose work is its driver.

use std::sync::Arc;

use mcptask_server::TaskTool;
use mcptask_server::tool::{Lookup, ToolSource};
use rmcp::model::Tool;
use tokio::sync::watch;

use crate::drivers;
use crate::upstreams::Upstreams;
use crate::upstreams::catalog::Route;

/// [`Upstreams`] as the call runtime's tool source.
#[derive(Clone)]
pub struct Source(pub Arc<Upstreams>);

impl Source {
    /// The task tool of a route: one handler for every tool, running the
    /// route's driver.
    pub fn task_tool(&self, route: &Route) -> TaskTool {
        let upstreams = self.0.clone();
        let route_for_work = route.clone();
        let route_for_recovery = route.clone();
        // A tracked or SEP-1686 task resumes (or reports its loss) in the
        // driver; a synchronous call as it was made to (its stored state).
        TaskTool::new(route.definition.clone(), move |call| {
            let upstreams = upstreams.clone();
            let route = route_for_work.clone();
            async move { drivers::run(&upstreams, &route, call).await }
        })
        .interrupt_by(move |record| drivers::interrupt_of(&route_for_recovery, record))
    }
}

impl ToolSource for Source {
    fn lookup(&self, name: &str) -> Lookup {
        let catalog = self.0.catalog();
        match catalog.get(name) {
            Some(route) => Lookup::Found(self.task_tool(route)),
            // Before every server was listed, a name may be one of a
            // server's that has not answered yet (judged on this catalog:
            // recovery at a start must not fail a call whose server's
            // listing is being published right now).
            None if !self.0.is_listed() || self.0.may_list_later(&catalog, name) => Lookup::NotYet,
            None => Lookup::Unknown,
        }
    }

    fn definitions(&self) -> Vec<Tool> {
        self.0
            .catalog()
            .routes()
            .map(|r| r.definition.clone())
            .collect()
    }

    fn changed(&self) -> watch::Receiver<u64> {
        self.0.catalog_changes()
    }
}
