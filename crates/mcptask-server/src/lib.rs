//! Durable SEP-2663 tasks for [`rmcp`] servers.
//!
//! A tool registered here runs as a task when the request declares the
//! `io.modelcontextprotocol/tasks` extension in its own `_meta` on protocol
//! 2026-07-28 or later. The task row is committed before `CreateTaskResult` is
//! returned; the process running it holds an owner lease; another replica that
//! shares the store recovers the task if that process dies, and `tasks/get`,
//! `tasks/update` and `tasks/cancel` work on any replica.
//!
//! ```no_run
//! use mcptask_server::{DurableTaskServer, TaskRuntime, TaskTool, ToolRegistry};
//! use rmcp::model::{CallToolResult, ContentBlock, Tool};
//! use std::sync::Arc;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let store = mcptask_sql::open("sqlite:mcptask.db").await?;
//! let mut tools = ToolRegistry::new();
//! tools.register(TaskTool::new(
//!     Tool::new("report", "Build a slow report", Arc::new(Default::default())),
//!     |call| async move {
//!         call.ctx.set_status_message("crunching").await?;
//!         Ok(CallToolResult::success(vec![ContentBlock::text("done")]))
//!     },
//! ));
//! let runtime = TaskRuntime::builder(store.server_tasks(), tools).start().await?;
//! let server = DurableTaskServer::new(runtime);
//! # let _ = server; Ok(()) }
//! ```

//! The crate is layered, and the modules show it:
//!
//! - [`tool`]: what a tool author writes against ([`TaskTool`], [`TaskContext`]).
//! - the engine (re-exported here): [`TaskRuntime`] and what keeps its promises:
//!   execution under an owner lease, recovery, TTL sweeps, signals.
//! - [`mcp`]: the rmcp adapter ([`DurableTaskServer`], wire conversions, principals).
//!
//! Every decision the engine carries out is a pure function in
//! [`mcptask_core::server`].
//!
//! What the runtime does under faults (each behaviour is a cell of the
//! `tests/faults` suite, on SQLite and PostgreSQL):
//!
//! - the owner heartbeat runs in its own loop: no purge or recovery backlog
//!   delays it;
//! - [`TaskRuntime::shutdown`] keeps the lease, the signal listener and the
//!   backstop alive until the drain ends, so answers and cancellations sent
//!   meanwhile reach the draining work;
//! - a panic anywhere in a handler (its synchronous part included) or its
//!   preflight fails that task or call with `tool panicked: …`;
//! - a task past its TTL stays `failed` even if its work finishes late;
//! - admission control refuses creates beyond
//!   [`RuntimeConfig::max_live_tasks`], [`RuntimeConfig::max_live_tasks_per_principal`]
//!   or [`RuntimeConfig::max_create_queue`] with [`SERVER_BUSY`], storing nothing;
//! - an input key asked again with a different request is an error to the tool;
//! - a created task's work starts from its commit, even if the caller has gone;
//! - transient store errors are retried with capped backoff; permanent ones
//!   ([`mcptask_core::StoreError::Rejected`]) fail the one operation at once.

#![deny(missing_docs)]

/// The crate's README, whose example is compiled as a doc test so that it
/// keeps matching the API (only then: it is not part of the documentation).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}

mod config;
mod engine;
mod error;
pub mod mcp;
pub mod task_manager;
pub mod tool;

/// docs/MIGRATING-FROM-RMCP-TASKS.md, whose before and after servers are
/// compiled as doc tests (only then: a packaged crate has no docs/ to read).
#[cfg(doctest)]
#[doc = include_str!("../../../docs/MIGRATING-FROM-RMCP-TASKS.md")]
mod migration_guide {}

pub use config::RuntimeConfig;
pub use engine::{
    CreateRequest, Incarnation, MAX_LIST_LIMIT, Maintenance, RuntimeBuilder, TaskChange,
    TaskOverview, TaskRuntime,
};
pub use error::{SERVER_BUSY, TASK_NOT_FOUND, TaskError, redact, redacted_error};
pub use mcp::{DurableTaskServer, Principal, TaskListenLayer, TaskListenService};
pub use mcptask_core::server::{InterruptPolicy, TaskSupport};
pub use tool::input;
pub use tool::{
    Lookup, Preflight, TaskContext, TaskExit, TaskTool, ToolCall, ToolRegistry, ToolSource,
};
