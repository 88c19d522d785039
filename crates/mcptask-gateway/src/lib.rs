//! The mcptask gateway as a library: one call model behind every face.
//!
//! A **call** is one tool call mcptask keeps: one durable task with one id,
//! one status/result/questions/cancel surface, one row in every list, one
//! stream of events to webhooks and the event stream, bound to the caller's
//! principal. Every face makes calls the same way: this crate's Rust API,
//! the REST API (`/api/v1`) and the dashboard, the CLI (through REST), and
//! the MCP front (`/mcp`, `mcptask proxy --stdio`).
//!
//! A call's **driver** follows its upstream: SEP-2663 tasks and
//! submit/status/cancel toolsets are tracked by the tracker
//! ([`mcptask_client`]); the 2025-11-25 tasks protocol (SEP-1686) and plain
//! synchronous tools run as durable work of the call runtime
//! ([`mcptask_server`]), on exclusive upstream sessions.
//!
//! The modules follow the layers of a call, bottom up:
//!
//! - [`config`]: `mcptask.toml`, with positioned errors;
//! - [`auth`]: who is calling ([`auth::Caller`]);
//! - [`upstreams`]: the configured servers' tools (the catalog of routes) and
//!   their lanes;
//! - `drivers`: the work of a call task, per driver;
//! - [`calls`]: the call model ([`Calls`]);
//! - [`front`] (MCP) and [`api`] (REST, dashboard, event stream, metrics):
//!   the faces;
//! - [`Gateway`]: all of it assembled from a configuration.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! let config = mcptask_gateway::Config::load(std::path::Path::new("mcptask.toml"))?;
//! let gateway = mcptask_gateway::Gateway::start(config).await?;
//! let listener = tokio::net::TcpListener::bind(gateway.config.api.listen).await?;
//! gateway.serve(listener, None).await?;
//! gateway.shutdown().await;
//! # Ok(()) }
//! ```

#![deny(missing_docs)]

/// The crate's README, whose example is compiled as a doc test so that it
/// keeps matching the API (only then: it is not part of the documentation).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}

pub mod admin;
pub mod api;
pub mod audit;
pub mod auth;
pub mod calls;
pub mod config;
pub mod drain;
mod drivers;
pub mod failure;
pub mod front;
mod gateway;
pub mod guard;
pub mod incarnation;
pub mod live;
pub mod metrics;
pub mod route;
pub mod serve;
pub mod spans;
pub use config::telemetry;
pub mod upstreams;
pub mod virtual_server;

pub use calls::Calls;
pub use config::{Config, ConfigError};
pub use gateway::{Gateway, StoreLayer};
pub use live::{Changes, Fingerprint, LiveConfig};
