//! The application-facing tracker: call tools, track handles, read, list,
//! cancel, answer, wait and subscribe.
//!
//! One concern per file: [`TrackerBuilder`] assembles a tracker, `call`
//! makes tool calls, `record` writes handles durably, `read` serves lookups,
//! `intent` stores cancel requests and answers, `wait` watches tasks change,
//! and `inner` holds the state the API shares with the [`workers`](crate::Workers).

mod builder;
mod call;
mod commit;
mod dead_letters;
mod error;
mod identity;
mod intent;
mod local;
mod read;
mod record;
mod tools;
mod toolset;
mod wait;

use std::sync::Arc;
use std::time::Duration;

use crate::shared::Inner;
pub use builder::TrackerBuilder;
pub use call::{CallOptions, CallOutcome};
pub use commit::{CommitWith, HandleCommit};
pub use error::TrackerError;

use crate::config::TrackerConfig;
use crate::remote::ServerRegistry;
use crate::workers::Workers;

/// Durable tracker of remote MCP tasks. Cheap to clone.
///
/// Built with [`Tracker::builder`]; see the [crate documentation](crate) for an example.
#[derive(Clone)]
pub struct Tracker {
    pub(crate) inner: Arc<Inner>,
}

impl Tracker {
    /// This process's claim owner id (fresh per start unless set on the builder).
    pub fn owner_id(&self) -> &str {
        &self.inner.owner
    }

    /// The servers this tracker calls (editable at run time).
    pub fn servers(&self) -> &ServerRegistry {
        &self.inner.servers
    }

    /// The settings the tracker runs with.
    pub fn config(&self) -> &TrackerConfig {
        &self.inner.config
    }

    /// Manual access to the workers' steps (tests with a manual clock).
    pub fn workers(&self) -> Workers {
        Workers {
            inner: self.inner.clone(),
        }
    }

    /// Stop claiming, let in-flight calls finish until `deadline`, then give
    /// their claims back (not counted as errors). Never hangs.
    pub async fn shutdown(&self, deadline: Duration) {
        let inner = &self.inner;
        inner.shutdown.cancel();
        inner.loops.close();
        if tokio::time::timeout(deadline, inner.loops.wait())
            .await
            .is_err()
        {
            tracing::warn!("tracker shutdown deadline passed; releasing in-flight claims");
        }
        inner.abort.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(5), inner.loops.wait()).await;
    }
}
