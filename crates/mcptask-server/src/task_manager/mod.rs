//! rmcp's task API over the durable runtime: an rmcp server made durable by
//! changing a `use` line and a constructor.
//!
//! An rmcp server keeps its tasks in `rmcp::task_manager::TaskManager`; this
//! module has a [`TaskManager`] with the same methods, a [`TaskContext`] with
//! the same methods, and rmcp's own [`TaskOptions`], [`TaskExit`] and
//! [`TaskFuture`], so the closures an rmcp server hands to `spawn` compile
//! unchanged but for the durable writes (`.await?`). docs/MIGRATING-FROM-RMCP-TASKS.md
//! walks through a server and lists every difference.
//!
//! ```no_run
//! // use rmcp::task_manager::{TaskExit, TaskManager, TaskOptions};
//! use mcptask_server::task_manager::{TaskExit, TaskManager, TaskOptions};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! // let tasks = TaskManager::new();
//! let tasks = TaskManager::open(mcptask_sql::open("sqlite:tasks.db").await?.server_tasks()).await?;
//! # let _ = (tasks, TaskOptions::default(), TaskExit::Cancelled); Ok(()) }
//! ```

mod context;
mod exit;
mod manager;
mod tools;

pub use context::{StatusWrite, TaskContext};
pub use exit::{cancelled, exit_error};
pub use manager::{SHUTDOWN_GRACE, TaskManager, TaskManagerBuilder};
/// rmcp's own: `TaskOptions::default()` takes its TTL and poll interval
/// from these constants, here as in rmcp, and `current_timestamp` gives an
/// RFC 3339 time as the wire's `createdAt` is written.
pub use rmcp::task_manager::{
    DEFAULT_POLL_INTERVAL_MS, DEFAULT_TASK_TTL_MS, TaskExit, TaskFuture, TaskOptions,
    current_timestamp,
};
pub use tools::{CLOSURE_TOOL, RERUNNABLE_PREFIX};
