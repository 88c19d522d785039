//! The work running in this process, and how to reach it.
//!
//! Answers, cancellations, expiry and takeovers are written to the store and
//! then signalled; each signal must reach the one piece of running work it
//! concerns, without holding any lock across an await. Every entry remembers
//! the claim token its work runs under, so the end of an old attempt never
//! unregisters a newer one.

use std::collections::HashMap;
use std::sync::Mutex;

use mcptask_core::server::Fence;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// How to reach one task's running work.
pub(crate) struct Running {
    /// The claim token the work runs under.
    pub(crate) token: String,
    /// Bumped whenever the store may hold something new for the work (answers).
    pub(crate) wake: watch::Sender<u64>,
    /// Cooperative cancellation, as the client asked (`tasks/cancel`).
    pub(crate) cancel: CancellationToken,
    /// Abandon the work without writing: this process no longer holds the task.
    pub(crate) stop: CancellationToken,
}

/// Running work by task id.
#[derive(Default)]
pub(crate) struct LocalWork {
    running: Mutex<HashMap<String, Running>>,
}

impl LocalWork {
    fn with<R>(&self, f: impl FnOnce(&mut HashMap<String, Running>) -> R) -> R {
        f(&mut self.running.lock().expect("running map"))
    }

    pub(crate) fn insert(&self, task_id: String, running: Running) {
        self.with(|m| m.insert(task_id, running));
    }

    /// Unregister the work of `fence`, unless a newer claim replaced it.
    pub(crate) fn remove(&self, fence: &Fence) {
        self.with(|m| {
            if m.get(&fence.task_id)
                .is_some_and(|r| r.token == fence.token)
            {
                m.remove(&fence.task_id);
            }
        });
    }

    pub(crate) fn len(&self) -> usize {
        self.with(|m| m.len())
    }

    pub(crate) fn contains(&self, task_id: &str) -> bool {
        self.with(|m| m.contains_key(task_id))
    }

    pub(crate) fn ids(&self) -> Vec<String> {
        self.with(|m| m.keys().cloned().collect())
    }

    /// Tell the work to look at the store again (an answer arrived).
    pub(crate) fn wake(&self, task_id: &str) {
        self.with(|m| {
            if let Some(r) = m.get(task_id) {
                r.wake
                    .send_modify(|generation| *generation = generation.wrapping_add(1));
            }
        });
    }

    /// Request cooperative cancellation of the work.
    pub(crate) fn cancel(&self, task_id: &str) {
        self.with(|m| {
            if let Some(r) = m.get(task_id) {
                r.cancel.cancel();
            }
        });
    }

    /// Abandon the work: this process no longer holds the task.
    pub(crate) fn stop(&self, task_id: &str) {
        self.with(|m| {
            if let Some(r) = m.get(task_id) {
                r.stop.cancel();
            }
        });
    }

    /// Abandon all work; returns how much there was.
    pub(crate) fn stop_all(&self) -> usize {
        self.with(|m| {
            for r in m.values() {
                r.stop.cancel();
            }
            m.len()
        })
    }
}
