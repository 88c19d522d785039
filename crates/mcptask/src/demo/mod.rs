//! The bundled demo MCP server (`mcptask demo-server`).

pub mod server;
pub mod tools;
pub mod walkthrough;
