//! What a tool author writes against: the tool and its handler, the registry
//! that serves it, and the [`TaskContext`] a running handler uses to report
//! status, ask for input and notice cancellation.
//!
//! Nothing here knows about stores or transports; a handler written against
//! these types runs the same as a durable task or as a plain synchronous call.

mod context;
pub mod input;
mod registry;
mod source;
mod task_tool;

pub use context::{TaskContext, TaskExit};
pub use registry::ToolRegistry;
pub use source::{Lookup, ToolSource};
pub use task_tool::{Preflight, TaskTool, ToolCall};
