//! Carries out recovery's decision for a task claimed from a dead owner.
//!
//! The decision itself (expired, cancelled, tool missing, `Fail` or `Rerun`)
//! is [`mcptask_core::server::recovery::decide`]; here it is written to the
//! store under the new claim, or the tool is started again.

use std::sync::Arc;

use mcptask_core::server::ServerTaskRecord;
use mcptask_core::server::recovery::{self, Recovery};

use super::RuntimeInner;
use super::executor::spawn_work;

impl RuntimeInner {
    /// Settle or rerun a task this process just claimed from a lapsed owner.
    pub(crate) async fn adopt(self: &Arc<Self>, record: ServerTaskRecord) {
        let Some(fence) = record.fence() else { return };
        let now = self.clock.now_ms();
        let tool = self.registry.get(&record.tool).cloned();
        let policy = tool.as_ref().map(|t| t.interrupt);
        let tool = match recovery::decide(&record, policy, now) {
            Recovery::Settle(outcome) => {
                self.settle(&fence, record.expires_at(), outcome).await;
                return;
            }
            Recovery::Rerun => tool.expect("recovery reruns only a registered tool"),
        };
        match self
            .retrying("begin rerun", || self.store.begin_rerun(&fence, now))
            .await
        {
            Ok(Some(attempt)) => {
                tracing::info!(task_id = %record.id, attempt, "rerunning interrupted task");
                // Recovered work counts against the caps but is never refused.
                let slot = self.quota.force(record.principal.as_deref());
                spawn_work(self, &tool, ServerTaskRecord { attempt, ..record }, slot);
            }
            Ok(None) => {}
            Err(_) => {
                tracing::warn!(task_id = %record.id, "could not start the rerun; the claim will lapse and be retried")
            }
        }
    }
}
