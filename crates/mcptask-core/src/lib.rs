#![deny(missing_docs)]
//! Core of mcptask: the domain types, state machines and policies shared by the
//! server runtime and the client tracker, plus the store traits the SQL backends
//! implement.
//!
//! Nothing in this crate performs I/O. Time comes from a [`Clock`], ids from
//! [`ids`], and every store operation takes `now` explicitly so that lease, TTL
//! and backoff behaviour can be tested exactly.
//!
//! ```
//! use mcptask_core::{Clock, ManualClock, TaskStatus};
//!
//! let clock = ManualClock::new(1_000);
//! clock.advance(500);
//! assert_eq!(clock.now_ms(), 1_500);
//! assert!(TaskStatus::Completed.is_terminal());
//! ```

/// The crate's README, whose example is compiled as a doc test so that it
/// keeps matching the API (only then: it is not part of the documentation).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}

pub mod access;
pub mod admin;
pub mod attempt;
pub mod audit;
pub mod call;
pub mod client;
pub mod clock;
pub mod elicit;
pub mod error;
pub mod front;
pub mod ids;
pub mod lease;
pub mod limits;
pub mod oauth;
pub mod outcome;
pub mod payload;
pub mod policy;
pub mod protocol;
pub mod redact;
pub mod server;
pub mod slot;
pub mod status;
pub mod store;
pub mod time;
pub mod trace;

pub use clock::{Clock, ManualClock, SharedClock, SystemClock};
pub use error::StoreError;
pub use status::TaskStatus;
