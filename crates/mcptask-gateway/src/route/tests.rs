//! The route's pure part: what each face's ask means for a tool.

use mcptask_core::call::{Plan, Protocol, RunDriver, TrackDriver, plan};

use super::{Ask, wants};
use crate::upstreams::catalog::{Route, test_route};

fn route(protocol: Protocol, background: bool) -> Route {
    test_route(protocol, false, background)
}

fn planned(ask: Ask, route: &Route) -> Plan {
    plan(route.facts, wants(ask, route))
}

#[test]
fn a_declaring_caller_always_gets_a_kept_call() {
    assert_eq!(
        planned(Ask::Tasks, &route(Protocol::Sync, false)),
        Plan::Run(RunDriver::Sync)
    );
    assert_eq!(
        planned(Ask::Tasks, &route(Protocol::Sep2663, false)),
        Plan::Track(TrackDriver::Sep2663)
    );
}

#[test]
fn a_plain_caller_gets_the_answer_unless_the_tool_runs_in_the_background() {
    let plain = route(Protocol::Sync, false);
    assert_eq!(planned(Ask::Plain, &plain), Plan::PassThrough);
    let background = route(Protocol::Sync, true);
    assert_eq!(planned(Ask::Plain, &background), Plan::Run(RunDriver::Sync));
}

#[test]
fn rest_follows_background_unless_it_says_otherwise() {
    let plain = route(Protocol::Sync, false);
    let background = route(Protocol::Sync, true);
    assert_eq!(planned(Ask::Background(None), &plain), Plan::PassThrough);
    assert_eq!(
        planned(Ask::Background(None), &background),
        Plan::Run(RunDriver::Sync)
    );
    assert_eq!(
        planned(Ask::Background(Some(false)), &background),
        Plan::PassThrough
    );
    assert_eq!(
        planned(Ask::Background(Some(true)), &plain),
        Plan::Run(RunDriver::Sync)
    );
    // A SEP-2663 tool with no preference: tracked if it hands out a task.
    assert_eq!(
        planned(Ask::Background(None), &route(Protocol::Sep2663, false)),
        Plan::Track(TrackDriver::Sep2663)
    );
}
