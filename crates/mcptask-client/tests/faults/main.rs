//! Fault-matrix cells that need only the client library (a real tracker on
//! SQLite and PostgreSQL, a real MCP server over Streamable HTTP that a test
//! can make misbehave). The matrix is in docs/RELIABILITY.md.

mod protocol;
mod slow_start;
