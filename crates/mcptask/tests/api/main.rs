//! The gateway's faces over real HTTP, one binary: the REST API
//! ([`gateway_api`]), what the dashboard's console reads ([`console`]),
//! answers and pre-task input ([`answers`],
//! [`pre_task_input`]), tool discovery ([`tools`]), the demo server's
//! Streamable HTTP edges ([`http_edges`]), https:// end to end ([`tls`]),
//! a database of the previous release upgraded in place ([`upgrade`]) and
//! databases holding live calls of every driver upgraded in place, each
//! call then settling ([`upgrade_live`]).
//! Real `mcptask serve` and `mcptask demo-server` processes (see
//! `mcptask_testkit`); run one part with e.g.
//! `cargo test -p mcptask --test api gateway_api::`.

mod answers;
mod console;
mod gateway_api;
mod http_edges;
mod pre_task_input;
mod tls;
mod tools;
mod upgrade;
mod upgrade_live;
