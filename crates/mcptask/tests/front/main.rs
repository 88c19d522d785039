//! The MCP proxy's front (`mcptask serve` with `[proxy] enabled = true`), one
//! binary: the agent tools for callers that do not declare tasks
//! ([`proxy_agent_tools`]), the reference "everything" server behind it
//! ([`proxy_everything`]), front task notifications ([`proxy_push`]), two
//! replicas on one PostgreSQL ([`proxy_replicas`]) and a submit/status/cancel
//! toolset behind it ([`toolset`]); tool policy at the stdio face, the CLI,
//! the agent tools and across a live reload ([`policy`]); policy and limits
//! for prompts, resources, completions and tasks ([`policy_kinds`]); one call's spans,
//! exported over OTLP, as one trace with its caller's ([`telemetry`]); the
//! fast path of stateless pass-through calls ([`pass_through`]); a rule of
//! the call holding on every path ([`route`]); one answer on every path
//! when an upstream, a body or a header goes wrong ([`same_answer`]);
//! FastMCP's default client before two npm servers, directly and through
//! the front ([`fastmcp`]); how upstreams of each protocol era are met
//! ([`upstream_eras`]); the guards in front of every transport: `Host`,
//! slow request heads ([`guards`]); a virtual server at `/mcp/<name>`
//! ([`virtual_servers`]); a mute upstream that never holds the front's
//! listing, and a slow starter its calls still wait for ([`late_listing`]);
//! the front's own refusals shaped as an upstream's of the caller's era
//! ([`own_errors`]); resource subscriptions relayed to their servers and
//! their updates to the subscribed sessions ([`resource_subscriptions`]);
//! the front's name in its handshake, the upstream's in what it answers
//! ([`who_answers`]); each caller's own identity at an upstream, per
//! principal or by token exchange ([`identity`]).

mod answer_within;
mod audit;
mod call_timeout;
mod fastmcp;
mod guards;
mod health;
mod identity;
mod late_listing;
mod live_limits;
mod metrics;
mod one_call;
mod own_errors;
mod pass_through;
mod peers_behaviour;
mod policy;
mod policy_kinds;
mod proxy_agent_tools;
mod proxy_everything;
mod proxy_push;
mod proxy_replicas;
mod readiness;
mod resource_subscriptions;
mod route;
mod same_answer;
mod telemetry;
mod toolset;
mod upstream_eras;
mod virtual_servers;
mod who_answers;
