//! Delivering task events to the application: at least once per event, with
//! `(task, version)` as the idempotency key.
//!
//! The notify worker reads each task's outbox (events past its delivered
//! version) and hands them, in version order, to one [`Notifier`]: the
//! tracker's [`FanoutNotifier`] over the in-process [`ChannelNotifier`]
//! (`Tracker::subscribe`) and any notifiers the application adds, such as a
//! signed [`WebhookNotifier`]. A transient failure is retried with backoff; a
//! permanent one, or a spent retry budget, dead-letters the event.

mod channel;
mod fanout;
mod webhook;

use async_trait::async_trait;
use mcptask_core::client::TaskEvent;

pub use channel::ChannelNotifier;
pub use fanout::FanoutNotifier;
pub use webhook::{IDEMPOTENCY_HEADER, SIGNATURE_HEADER, WebhookNotifier, sign, webhook_body};

/// Why a delivery failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NotifyError {
    /// Retry later (with backoff, within the retry budget).
    #[error("{0}")]
    Transient(String),
    /// Retrying cannot help: dead-letter this event now.
    #[error("{0}")]
    Permanent(String),
}

/// Receives task events. Implementations must tolerate duplicates (deduplicate
/// on [`TaskEvent::idempotency_key`]): delivery is at least once.
#[async_trait]
pub trait Notifier: Send + Sync + 'static {
    /// Deliver one event; `Ok` means it need not be sent again.
    async fn deliver(&self, event: &TaskEvent) -> Result<(), NotifyError>;
}
