//! The in-process event stream behind `Tracker::subscribe`.

use async_trait::async_trait;
use mcptask_core::client::TaskEvent;
use tokio::sync::broadcast;

use super::{Notifier, NotifyError};

/// In-process stream of events (`Tracker::subscribe`). Delivery succeeds
/// whether or not anyone listens; slow subscribers may miss events (they can
/// re-read the timeline from the store).
#[derive(Clone)]
pub struct ChannelNotifier {
    tx: broadcast::Sender<TaskEvent>,
}

impl ChannelNotifier {
    /// A stream keeping at most `capacity` events for slow subscribers.
    pub fn new(capacity: usize) -> Self {
        Self {
            tx: broadcast::channel(capacity.max(1)).0,
        }
    }

    /// Events delivered from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<TaskEvent> {
        self.tx.subscribe()
    }
}

#[async_trait]
impl Notifier for ChannelNotifier {
    async fn deliver(&self, event: &TaskEvent) -> Result<(), NotifyError> {
        let _ = self.tx.send(event.clone());
        Ok(())
    }

    fn name(&self) -> String {
        "subscribe".to_string()
    }
}
