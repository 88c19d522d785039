//! Tracker push: for servers that serve SEP-2663 task status notifications,
//! a `subscriptions/listen` stream per server whose notifications make the
//! task's poll due now.
//!
//! Polling stays the truth: a notification only moves the task's next poll
//! to now (`RemoteTaskStore::expedite_poll`) and wakes the poll loop, which
//! reads the task with `tasks/get` and applies it through the usual fenced
//! transition. A server that refuses the method, a lost stream, a
//! notification that never comes: each leaves the task on its normal poll
//! schedule, and the listener reconnects with backoff. Only Streamable HTTP
//! servers are listened to (a stdio server would need a second child
//! process). Enabled by [`TrackerConfig::push`](crate::TrackerConfig::push)
//! (on by default).

mod listener;
mod subscription;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::remote::Transport;
use crate::shared::Inner;

/// How often the set of servers is compared with the running listeners.
const RECONCILE_EVERY: Duration = Duration::from_secs(5);

/// Start the supervisor that runs one listener per HTTP server in the
/// registry (servers added later get one within [`RECONCILE_EVERY`]).
pub(crate) fn spawn(inner: &Arc<Inner>) {
    let inner2 = inner.clone();
    inner.loops.spawn(async move { supervise(inner2).await });
}

async fn supervise(inner: Arc<Inner>) {
    let mut listeners: HashMap<String, JoinHandle<()>> = HashMap::new();
    loop {
        listeners.retain(|_, handle| !handle.is_finished());
        for name in inner.servers.names() {
            let http = inner
                .servers
                .get(&name)
                .is_some_and(|(def, _)| matches!(def.transport, Transport::Http { .. }));
            if http && !listeners.contains_key(&name) {
                let handle = inner
                    .loops
                    .spawn(listener::run(inner.clone(), name.clone()));
                listeners.insert(name, handle);
            }
        }
        tokio::select! {
            _ = inner.shutdown.cancelled() => return,
            _ = tokio::time::sleep(RECONCILE_EVERY) => {}
        }
    }
}
