//! The demo MCP server bundled with mcptask (`mcptask demo-server`): every
//! fixture tool the conformance suite's task scenarios call, and a few
//! realistic demo tools, served by a durable [`mcptask_server::TaskRuntime`].
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

mod server;
pub mod tools;
pub mod toolset_fixture;

pub use server::{DemoServerOptions, router, serve_stdio, start_runtime};
