//! Delivering task events to the application: at least once per event, with
//! `(task, version)` as the idempotency key.
//!
//! The notify worker reads each task's outbox (events past its delivered
//! version) and hands them, in version order, to every *target*: the
//! in-process [`ChannelNotifier`] (`Tracker::subscribe`) and each notifier the
//! application adds, such as a signed [`WebhookNotifier`]. Each target has
//! its own delivery state, stored by its [`Notifier::name`]: a target that
//! fails transiently falls behind on its own (a lag row, retried with backoff
//! by the redelivery worker) while the others keep receiving. A target gives
//! an event up (a dead letter of that target) when it refuses it for good
//! (`Permanent`, e.g. a 4xx) or when the retry budget (`notify_budget_ms`,
//! counted from the event) runs out; dead letters can be redriven.

mod channel;
mod fanout;
mod targets;
mod webhook;

use async_trait::async_trait;
use mcptask_core::client::TaskEvent;

pub use channel::ChannelNotifier;
pub use fanout::FanoutNotifier;
pub(crate) use targets::Targets;
pub use webhook::{
    IDEMPOTENCY_HEADER, SIGNATURE_HEADER, WebhookNotifier, redact_url, sign, webhook_body,
};

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

    /// The name a target's delivery state and dead letters are stored by.
    /// Keep it stable across restarts (a webhook uses its URL); two
    /// notifiers with the same name get `#2`, `#3`… in registration order.
    fn name(&self) -> String {
        std::any::type_name::<Self>().to_string()
    }
}
