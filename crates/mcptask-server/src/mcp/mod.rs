//! The MCP face of the runtime, for rmcp: a ready-made [`ServerHandler`](rmcp::ServerHandler),
//! the conversions between stored tasks and SEP-2663 wire types, and who the
//! caller is.
//!
//! Everything protocol-shaped lives here so the engine and the tool API stay
//! independent of how requests arrive; servers with their own handler use
//! these pieces directly.

mod handler;
pub mod principal;
mod validate;
pub mod wire;

pub use handler::{DurableTaskServer, declares_tasks, is_modern};
pub use principal::Principal;
