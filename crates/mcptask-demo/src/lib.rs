//! The demo MCP server bundled with mcptask (`mcptask demo-server`): a few
//! realistic demo tools and every fixture the conformance suite's task
//! scenarios call, served by a durable [`mcptask_server::TaskRuntime`], and
//! the fixtures of the suite's other server scenarios (synchronous tools,
//! prompts, resources, completions, list-change subscriptions), so the demo
//! server passes the whole 2026-07-28 server requirement set.
//!
//! Also a test fixture for the toolset driver: a stdio server whose long work
//! runs through three plain tools (submit, status, cancel), as servers
//! without SEP-2663 do ([`toolset_fixture`]).
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! let options = mcptask_demo::DemoServerOptions::new("sqlite:demo.db");
//! let runtime = mcptask_demo::start_runtime(&options).await?;
//! let stop = tokio_util::sync::CancellationToken::new();
//! let app = mcptask_demo::router(runtime, &options, stop);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! axum::serve(listener, app).await?;
//! # Ok(()) }
//! ```

#![deny(missing_docs)]

/// The crate's README, whose example is compiled as a doc test so that it
/// keeps matching the API (only then: it is not part of the documentation).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}

mod fixtures;
mod handler;
mod server;
pub mod tools;
pub mod toolset_fixture;

pub use fixtures::CANCELLED_WHILE_WAITING;
pub use server::{DemoServerOptions, router, serve_stdio, start_runtime};
