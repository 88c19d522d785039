//! One notifier in front of several.

use std::sync::Arc;

use async_trait::async_trait;
use mcptask_core::client::TaskEvent;

use super::{Notifier, NotifyError};

/// Deliver to several notifiers as one target; an event counts as delivered
/// only when all accepted it (so a retry may repeat it to some: they
/// deduplicate). A tracker gives each notifier added with
/// `TrackerBuilder::notifier` a delivery state of its own; this is for
/// notifiers that must succeed or fail together.
#[derive(Clone, Default)]
pub struct FanoutNotifier {
    targets: Vec<Arc<dyn Notifier>>,
}

impl FanoutNotifier {
    /// Deliver to every one of `targets`.
    pub fn new(targets: Vec<Arc<dyn Notifier>>) -> Self {
        Self { targets }
    }
}

#[async_trait]
impl Notifier for FanoutNotifier {
    async fn deliver(&self, event: &TaskEvent) -> Result<(), NotifyError> {
        let mut transient = None;
        for t in &self.targets {
            match t.deliver(event).await {
                Ok(()) => {}
                Err(NotifyError::Permanent(e)) => return Err(NotifyError::Permanent(e)),
                Err(NotifyError::Transient(e)) => transient = Some(e),
            }
        }
        transient.map_or(Ok(()), |e| Err(NotifyError::Transient(e)))
    }
}
