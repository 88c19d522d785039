//! The one decision of a call, for every face: who calls (the caller the
//! HTTP layer authenticated), what (the route, from the catalog, that the
//! tool policy lets this caller see), whether now (the fair limits), and
//! how ([`plan`] of the upstream's facts and what the caller wants).
//!
//! Every face maps its inputs to an [`Intent`] and calls [`decide`]: the
//! REST and CLI calls (`Calls::call`), the Rust API, the MCP front's full
//! way (`FrontServer::call_tool`, also behind `proxy --stdio`) and the
//! front's fast path, whose byte relay is only a transport chosen after the
//! decision (a [`Routed`] passed through to a stateless HTTP upstream). So
//! policy, limits, the upstream's call timeout and the plan are the same on
//! every path, by construction. What a face does with a [`Decided`] is its
//! own: run the plan (`crate::calls`) and render the outcome.
//!
//! Listings ask [`visible`]: a tool the caller may not call is neither
//! listed nor callable, and reads as one that does not exist. The front's
//! prompts, resources and completions ask the same policy and limits through
//! [`Access`]: one decision for every request kind.

mod access;
mod agent;
mod handoff;
#[cfg(test)]
mod tests;

use std::time::Duration;

use mcptask_core::call::{CallState, Face, Plan, RunDriver, Wants, plan};
use mcptask_core::outcome::Outcome;

pub use access::{Access, Item, Kind, allows};
pub use agent::AgentTool;
pub use handoff::Handoff;

use crate::auth::Caller;
use crate::calls::{Admitted, Calls, LiveCall};
use crate::failure::Failure;
use crate::metrics::{CallLabels, NO_DRIVER};
use crate::upstreams::catalog::Route;

/// Which tool a face names.
#[derive(Debug, Clone, Copy)]
pub enum Target<'a> {
    /// A front name (`<prefix>__<tool>`), as the MCP front's callers name
    /// tools.
    Front(&'a str),
    /// A configured server and its tool, as the REST API, the CLI and the
    /// Rust API name them.
    Upstream {
        /// The configured server.
        server: &'a str,
        /// The tool's name there.
        tool: &'a str,
    },
}

/// What the caller wants, as its face says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    /// An MCP caller that declares the tasks extension on this request:
    /// every call is kept, as a task.
    Tasks,
    /// An MCP caller that does not: the synchronous answer, or for a
    /// background tool an id to follow with the agent tools.
    Plain,
    /// The REST API, the CLI or the Rust API: `Some(true)` keeps the call
    /// whatever the tool, `Some(false)` wants the synchronous answer where
    /// the tool has one, `None` follows the tool's `background` setting.
    Background(Option<bool>),
}

/// One call, as a face asks for it.
#[derive(Debug, Clone, Copy)]
pub struct Intent<'a> {
    /// Who calls.
    pub caller: &'a Caller,
    /// Through which face (counted with the call's outcome).
    pub face: Face,
    /// Which tool.
    pub target: Target<'a>,
    /// What the caller wants.
    pub ask: Ask,
}

/// A call routed to an upstream tool and admitted.
pub struct Routed {
    /// The tool.
    pub route: Route,
    /// How the call is made.
    pub plan: Plan,
    /// Its place under the caller's fair limits (held until the call is
    /// answered).
    pub admitted: Admitted,
    /// Its place among the live calls, under the id the call is kept as
    /// (held until the call ends if it is kept).
    pub live: LiveCall,
    /// The bound on each call to the upstream (its `call_timeout_ms`, else
    /// the tracker's).
    pub timeout: Duration,
    /// The caller declares tasks: a kept call is answered as a task (else
    /// with the agent tools' "started" answer, or REST's).
    pub declares: bool,
    /// A call the front runs as a task for a caller that declares tasks
    /// is answered directly if it ends within this (the server's
    /// `answer_within_ms` for the tool); `None`: the task at once.
    pub answer_within: Option<Duration>,
    /// Who calls (`None`: anonymous), for the audit trail of its end.
    pub principal: Option<String>,
    /// The virtual server it came through, for the audit trail of its end.
    pub via: Option<String>,
}

/// What becomes of a call.
pub enum Decided {
    /// An upstream tool the catalog knows.
    Call(Box<Routed>),
    /// One of the front's own agent tools (a caller that does not declare
    /// tasks following its background tasks).
    Agent(AgentTool, Admitted),
    /// A configured server that was never listed (down since the gateway
    /// started): the call goes to the upstream, which says what it makes
    /// of it. `toolset`: the configuration names the tool a toolset's
    /// submit tool.
    Unlisted {
        /// The server.
        server: String,
        /// The tool.
        tool: String,
        /// A toolset's submit tool.
        toolset: bool,
        /// Its place under the caller's fair limits.
        admitted: Admitted,
        /// Its place among the live calls.
        live: LiveCall,
    },
}

/// Whether `caller` may see and call `tool` of `server` (the policy in
/// force now). Listings filter with it; [`decide`] refuses with it.
pub fn visible(calls: &Calls, caller: &Caller, server: &str, tool: &str) -> bool {
    access::sees(calls, caller, Item::tool(server, tool))
}

/// What the caller's ask means for `route`.
fn wants(ask: Ask, route: &Route) -> Wants {
    match ask {
        Ask::Tasks => Wants::Durable,
        // Not declaring tasks: the synchronous answer, unless the tool
        // runs in the background (configured, or it can only run as a task).
        Ask::Plain if route.background => Wants::Durable,
        Ask::Plain => Wants::Sync,
        Ask::Background(Some(true)) => Wants::Durable,
        Ask::Background(Some(false)) => Wants::Sync,
        Ask::Background(None) if route.background => Wants::Durable,
        Ask::Background(None) => Wants::Either,
    }
}

/// Decide a call: route, policy, limits, plan. A tool the caller may not
/// call reads as one that does not exist; a caller over its fair limits is
/// held a while (`calls::tarpit`) and refused; a call over a live-calls
/// limit (`calls::live`) is refused at once.
pub async fn decide(calls: &Calls, intent: Intent<'_>) -> Result<Decided, Failure> {
    let Intent {
        caller,
        face,
        target,
        ask,
    } = intent;
    let upstreams = &calls.upstreams;
    // A refusal, or a call of nothing the gateway knows, is a call's end
    // too: counted with its outcome (nothing was sent, so no driver).
    let refused = |outcome: Outcome, server: &str, tool: &str| {
        let labels = CallLabels::new(upstreams, server, tool, face, NO_DRIVER)
            .by(caller.principal.as_deref())
            .via(caller.via());
        crate::metrics::call_ended(&labels, outcome, Duration::ZERO);
    };
    // A call of a name the gateway cannot serve, counted as failed with the
    // class of what its caller is told.
    let unserved = |server: &str, tool: &str, failure: &Failure| {
        let labels = CallLabels::new(upstreams, server, tool, face, NO_DRIVER)
            .by(caller.principal.as_deref())
            .via(caller.via())
            .failed_with(failure.code());
        crate::metrics::call_ended(&labels, Outcome::Failed, Duration::ZERO);
    };
    let admit = |server: &str, tool: &str| {
        let (server, tool) = (server.to_string(), tool.to_string());
        async move {
            access::admit(calls, caller).await.inspect_err(|_| {
                refused(Outcome::RefusedLimit, &server, &tool);
            })
        }
    };
    let (server, tool, known) = match target {
        Target::Front(name) => {
            // The agent tools are the front's own, for callers that follow
            // background tasks with them (a declaring caller has tasks/*).
            if ask != Ask::Tasks
                && let Some(agent) = AgentTool::parse(name)
            {
                return Ok(Decided::Agent(agent, admit("", name).await?));
            }
            let unknown = || Failure::UnknownTool {
                server: None,
                tool: name.to_string(),
            };
            let mut catalog = upstreams.catalog();
            if upstreams.may_wait_for(&catalog, name) {
                // Right after the start the servers that may serve it may be
                // answering their first listing: this call waits for those
                // (only this call, and a bounded while), then is refused if
                // the name is still unlisted.
                upstreams.first_listings_for(name).await;
                catalog = upstreams.catalog();
            }
            let Some(route) = catalog.get(name) else {
                // Perhaps a tool of a server that has not answered yet
                // (said only to a caller the policy lets call it).
                let failure = match upstreams.unlisted_owner(name) {
                    Some((server, tool)) if visible(calls, caller, &server, &tool) => {
                        Failure::NotReady(server)
                    }
                    _ => unknown(),
                };
                // Counted, under no name of the caller's making.
                unserved("", name, &failure);
                return Err(failure);
            };
            if !visible(calls, caller, &route.server, &route.tool) {
                refused(Outcome::RefusedPolicy, &route.server, &route.tool);
                return Err(unknown());
            }
            (
                route.server.clone(),
                route.tool.clone(),
                Some(route.clone()),
            )
        }
        Target::Upstream { server, tool } => {
            let unknown = || Failure::UnknownTool {
                server: Some(server.to_string()),
                tool: tool.to_string(),
            };
            if !visible(calls, caller, server, tool) {
                refused(Outcome::RefusedPolicy, server, tool);
                return Err(unknown());
            }
            // A server removed by a reload (its live tasks still followed)
            // takes no new calls.
            if !upstreams.is_configured(server) {
                let failure = Failure::UnknownServer(server.to_string());
                unserved(server, tool, &failure);
                return Err(failure);
            }
            (server.to_string(), tool.to_string(), None)
        }
    };
    let admitted = admit(&server, &tool).await?;
    let live = match calls
        .limiter
        .live_call(caller.principal.as_deref(), &server)
    {
        Ok(live) => live,
        Err(busy) => {
            refused(Outcome::RefusedLimit, &server, &tool);
            return Err(Failure::RateLimited(busy));
        }
    };
    let route = match known {
        Some(route) => route,
        None => match upstreams.route_of(&server, &tool).await {
            Some(route) => route,
            None => {
                let toolset = upstreams
                    .tracker
                    .servers()
                    .get(&server)
                    .is_some_and(|(def, _)| def.toolset_for(&tool).is_some());
                // A listed server that lacks the tool: unknown. One never
                // listed (down) answers for itself.
                if !toolset && upstreams.has_listing(&server) {
                    let failure = Failure::UnknownTool {
                        server: Some(server.clone()),
                        tool: tool.clone(),
                    };
                    unserved(&server, &tool, &failure);
                    return Err(failure);
                }
                return Ok(Decided::Unlisted {
                    server,
                    tool,
                    toolset,
                    admitted,
                    live,
                });
            }
        },
    };
    let plan = plan(route.facts, wants(ask, &route));
    // Only a task the front itself makes of the call (a tracked upstream
    // decided for itself whether to hand out a task) for a caller that
    // asked for one may become a direct answer.
    let answer_within = (ask == Ask::Tasks && matches!(plan, Plan::Run(_)))
        .then(|| upstreams.answer_within(&route.server, &route.tool))
        .filter(|within| !within.is_zero());
    Ok(Decided::Call(Box::new(Routed {
        answer_within,
        timeout: upstreams.call_timeout(&route.server),
        route,
        plan,
        admitted,
        live,
        declares: ask == Ask::Tasks,
        principal: caller.principal.clone(),
        via: caller.via().map(str::to_string),
    })))
}

/// The state of a call task of `route` whose stored state cannot be read
/// (a front task written before states named their driver, which no
/// version since writes): planned as it was then, from the catalog.
pub fn legacy_state(route: &Route) -> CallState {
    let interrupt = route.interrupt;
    match plan(route.facts, Wants::Durable) {
        Plan::Track(driver) => CallState::tracked(driver),
        Plan::Run(driver) => CallState::run(driver, interrupt),
        Plan::PassThrough => CallState::run(RunDriver::Sync, interrupt),
    }
}
