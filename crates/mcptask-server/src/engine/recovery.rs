//! Carries out recovery's decision for a task claimed from a dead owner.
//!
//! The decision itself (expired, cancelled, tool missing, `Fail` or `Rerun`)
//! is [`mcptask_core::server::recovery::decide`]; here it is written to the
//! store under the new claim, or the tool is started again.
//!
//! A task whose tool the [`ToolSource`](crate::tool::ToolSource) cannot
//! resolve *yet* ([`Lookup::NotYet`]) is neither settled nor run: it keeps
//! the claim and waits in `deferred` for the next recovery pass (or, if this
//! process dies meanwhile, for the claim to lapse with its lease).

use std::sync::Arc;

use mcptask_core::server::ServerTaskRecord;
use mcptask_core::server::recovery::{self, Recovery};

use super::RuntimeInner;
use super::executor::spawn_work;
use crate::tool::Lookup;

impl RuntimeInner {
    /// Settle or rerun a task this process just claimed from a lapsed owner.
    pub(crate) async fn adopt(self: &Arc<Self>, record: ServerTaskRecord) {
        let Some(fence) = record.fence() else { return };
        let now = self.clock.now_ms();
        let tool = match self.source.lookup(&record.tool) {
            Lookup::Found(tool) => Some(tool),
            Lookup::Unknown => None,
            Lookup::NotYet if record.is_overdue(now) || record.cancel_requested => None,
            Lookup::NotYet => {
                tracing::info!(task_id = %record.id, tool = %record.tool, "tool not known yet; recovery retries the task later");
                self.deferred.lock().expect("deferred").push(record);
                return;
            }
        };
        let policy = tool.as_ref().map(|t| t.interrupt_for(&record));
        let tool = match recovery::decide(&record, policy, now) {
            Recovery::Settle(outcome) => {
                self.settle(&fence, record.expires_at(), outcome).await;
                return;
            }
            Recovery::Rerun => tool.expect("recovery reruns only a registered tool"),
        };
        // Said in the status (and so in a tracked call's timeline): the
        // progress the caller saw belonged to the attempt that stopped.
        let message = mcptask_core::attempt::rerun_message(record.attempt + 1, &fence.owner);
        match self
            .retrying("begin rerun", || {
                self.store.begin_rerun(&fence, now, &message)
            })
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

    /// Retry the tasks an earlier pass deferred (their tool was not known
    /// yet). Returns how many were retried.
    pub(crate) async fn retry_deferred(self: &Arc<Self>) -> usize {
        let deferred = std::mem::take(&mut *self.deferred.lock().expect("deferred"));
        let n = deferred.len();
        for record in deferred {
            // Re-read it: a cancellation may have been requested, or the task
            // settled, while it waited. Only a task still under this claim is
            // adopted again.
            match self.store.get_task(&record.id).await {
                Ok(Some(view))
                    if view.record.claim_token == record.claim_token
                        && !view.record.status.is_terminal() =>
                {
                    self.adopt(view.record).await
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(task_id = %record.id, error = %e, "could not re-read a deferred task; retrying later");
                    self.deferred.lock().expect("deferred").push(record);
                }
            }
        }
        n
    }
}
