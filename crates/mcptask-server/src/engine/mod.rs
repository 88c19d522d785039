//! The durable engine: owns the store, runs task work under an owner lease,
//! and keeps the promises a task makes to its client (it survives restarts,
//! it is recovered if its process dies, it expires on time).
//!
//! Each decision it carries out (recovery, what to store when work ends,
//! retention) is a pure function in [`mcptask_core::server`]; the files here
//! only do the I/O around them.

mod admission;
mod batcher;
mod builder;
mod executor;
mod feed;
mod incarnation;
mod inner;
mod local;
mod maintenance;
mod quota;
mod recovery;
mod retry;
mod runtime;
mod signals;
mod sync_call;

pub use builder::RuntimeBuilder;
pub(crate) use executor::panic_text;
pub use feed::TaskChange;
pub use incarnation::Incarnation;
pub(crate) use inner::RuntimeInner;
pub use maintenance::Maintenance;
pub use runtime::{CreateRequest, MAX_LIST_LIMIT, TaskOverview, TaskRuntime};
