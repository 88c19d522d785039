//! Durable tracking of remote MCP tasks (SEP-2663) for agent hosts and gateways.
//!
//! A [`Tracker`] calls tools on named MCP servers while declaring the tasks
//! extension on every request. When a server answers with a task handle, the
//! handle is written to the store *before* the caller gets a local id back;
//! from then on background workers own it: they poll `tasks/get` within the
//! server's `pollIntervalMs` (clamped, with jitter), deliver stored answers
//! with `tasks/update`, turn cancel intents into `tasks/cancel`, and notify
//! the application of every event at least once. Every claim is leased and
//! every claim-owned write is fenced, so any number of tracker processes can
//! share a PostgreSQL store and be killed at any moment.
//!
//! The modules follow the layers a task passes through:
//!
//! - `tracker/`: the application's API ([`Tracker`], [`TrackerBuilder`],
//!   [`TrackerError`]): calling tools, recording handles, reads, cancel and
//!   answer intents, waiting.
//! - `workers/`: the background phases (poll, cancel, update, notify) that
//!   claim due tasks, call the servers and apply what they learned, fenced.
//! - [`remote`]: the servers themselves: registry and pooled connections,
//!   validating what they send, and classifying their failures.
//! - [`upstream`]: calling servers that do not speak durable tasks (plain
//!   synchronous tools, SEP-1686) for a proxy, on exclusive sessions.
//! - [`notify`]: where events go (in-process stream, signed webhooks).
//! - [`LocalWork`]: calls whose work runs in this process (a gateway's
//!   SEP-1686 and synchronous calls), followed like an upstream's task.
//! - `config`: [`TrackerConfig`], the one home of every tracker setting.
//!
//! Every decision about a task's state is a pure function in
//! `mcptask_core::client::transition`; this crate observes, classifies and
//! stores through the [`RemoteTaskStore`] trait, never SQL.
//!
//! ```no_run
//! use mcptask_client::{CallOptions, CallOutcome, ServerDef, Tracker};
//! use serde_json::json;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let store = mcptask_sql::open("sqlite:mcptask.db").await?;
//! let tracker = Tracker::builder(store.remote_tasks())
//!     .server(ServerDef::http("reports", "http://127.0.0.1:8080/mcp"))
//!     .start()
//!     .await?;
//! match tracker.call_tool("reports", "slow_compute", json!({"seconds": 5}), CallOptions::default()).await? {
//!     CallOutcome::Completed(result) => println!("done at once: {result:?}"),
//!     CallOutcome::Task(task) => {
//!         let done = tracker.wait(&task.id, std::time::Duration::from_secs(60)).await?;
//!         println!("{} ended {}", done.id, done.status);
//!     }
//! }
//! # Ok(()) }
//! ```

#![deny(missing_docs)]

/// The crate's README, whose example is compiled as a doc test so that it
/// keeps matching the API (only then: it is not part of the documentation).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}

mod config;
mod feed;
pub mod identity;
mod local;
pub mod notify;
pub mod oauth;
mod push;
pub mod remote;
mod resolver;
mod shared;
mod slots;
pub mod tls;
pub mod trace;
mod tracker;
pub mod upstream;
mod watch;
mod workers;

pub use config::{InvalidSetting, TrackerConfig};
pub use local::{LocalTask, LocalWork};
pub use notify::{
    ChannelNotifier, FanoutNotifier, Notifier, NotifyError, WebhookNotifier, redact_url,
};
pub use remote::{Health, ServerDef, ServerRegistry, Toolset, Transport};
pub use resolver::{InputContext, InputResolver};
pub use tracker::{
    CallOptions, CallOutcome, CommitWith, HandleCommit, Tracker, TrackerBuilder, TrackerError,
};
pub use watch::TaskWatch;
pub use workers::Workers;

// The core types this crate's API takes and returns, so that applications
// need not depend on `mcptask-core` themselves.
pub use mcptask_core::client::delivery::{DeadLetter, DeadLetterFilter};
pub use mcptask_core::client::{
    AnswerResult, Cursor, EventKind, ListFilter, Phase, RemoteInput, RemoteTaskRecord, TaskEvent,
    TrackerPolicy,
};
pub use mcptask_core::clock::{Clock, SharedClock, SystemClock};
pub use mcptask_core::payload::PayloadLimits;
pub use mcptask_core::policy::{Backoff, PollPolicy};
pub use mcptask_core::store::RemoteTaskStore;
pub use mcptask_core::{StoreError, TaskStatus};
