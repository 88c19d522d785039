//! The servers tasks live on: which exist and how to reach them
//! ([`ServerRegistry`], [`ServerDef`], [`Connection`]), how their answers are
//! read (`snapshot`: validated and bounded before anything enters the store),
//! and how their failures are classified ([`classify`]: transient or permanent).

mod answers;
mod cancel;
pub mod classify;
mod connection;
pub(crate) mod detect;
pub(crate) mod exchange;
mod follow;
pub(crate) mod handler;
mod handshake;
pub mod health;
pub(crate) mod lanes;
mod probe;
mod registry;
pub(crate) mod relabel;
mod server_def;
pub(crate) mod snapshot;
pub(crate) mod tap;
mod tools;
mod watch;
mod why;

pub(crate) use answers::saw;
pub use answers::{AnswerStyle, answer_changes, answers_of};
pub(crate) use cancel::cancel_remote;
pub use classify::RemoteError;
pub use connection::{Connection, Timeouts, UPSTREAM_IDLE, upstream_http_client};
pub(crate) use connection::{bounded, client_config, open_http_with};
pub use exchange::CROSSED_ANSWER;
pub use handshake::ProbeGuard;
pub use health::{Health, Seen};
pub use lanes::{Lane, LaneOptions, LanePool};
pub use registry::ServerRegistry;
pub use server_def::{ServerDef, Toolset, Transport};
pub use tools::tool_pages;
pub use watch::{ResourceUpdates, ResourceWatch};
