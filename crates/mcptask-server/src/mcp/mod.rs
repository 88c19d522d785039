//! The MCP face of the runtime, for rmcp: a ready-made [`ServerHandler`](rmcp::ServerHandler),
//! the conversions between stored tasks and SEP-2663 wire types, and who the
//! caller is.
//!
//! Everything protocol-shaped lives here so the engine and the tool API stay
//! independent of how requests arrive; servers with their own handler use
//! these pieces directly.

mod handler;
mod listen;
mod listen_layer;
pub mod principal;
mod stdio;
pub(crate) mod validate;
pub mod wire;

pub use handler::{DurableTaskServer, declares_tasks, is_modern};
pub use listen::{LISTEN_METHOD, ListenFilter, MAX_LISTEN_TASKS};
pub use listen_layer::{
    DEFAULT_MAX_INSPECTED_BYTES, ListenBody, TaskListenLayer, TaskListenService,
};
pub use principal::Principal;
pub use stdio::{DEFAULT_MAX_LINE_BYTES, Ended, InputEnd, TaskListenStdio, stdio_with_listen};
