//! The call model: every tool call mcptask keeps is one durable task with one
//! id, whichever face made it (the Rust API, REST, the CLI, the MCP front)
//! and whatever its upstream speaks. The upstreams' tools are served by one
//! task runtime (`source`), whose work is each route's driver.

mod busy;
mod execute;
mod limits;
mod live;
mod local;
mod make;
mod source;
mod tarpit;

use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::Context;
use mcptask_core::access::Policy;
use mcptask_server::TaskRuntime;
use tokio_util::sync::CancellationToken;

pub use execute::{Executed, Execution, Relay};
pub use limits::{Admitted, Busy, Limit, Limiter, Limits};
pub use live::{LiveCall, LiveCalls};
pub(crate) use make::count_answer;
pub use make::{CallError, CallRequest, Started};
pub use source::Source;

use crate::config::Config;
use crate::upstreams::{Upstream, Upstreams, list_until_listed};

/// How often the catalog is listed again when no upstream says it changed.
const REFRESH_EVERY: Duration = Duration::from_secs(300);

/// Wait before listing a server again after it said its tools changed: a
/// server registering several tools says so once per tool.
const SETTLE: Duration = Duration::from_millis(200);

/// The calls of a gateway: the upstreams and the runtime of call tasks.
/// Cheap to clone.
#[derive(Clone)]
pub struct Calls {
    /// The upstream servers, their catalog and lanes.
    pub upstreams: Arc<Upstreams>,
    /// The runtime of call tasks (durable, recovered on any replica).
    pub runtime: TaskRuntime,
    /// Which callers may call which tools (replaced whole on a change).
    policy: Arc<RwLock<Arc<Policy>>>,
    /// Fair limits per principal, at every face.
    pub limiter: Arc<Limiter>,
    store: mcptask_sql::Store,
    /// The list-change follower of each server (stopped when it is removed
    /// or redefined).
    followers: Arc<std::sync::Mutex<std::collections::HashMap<String, CancellationToken>>>,
    stop: CancellationToken,
}

/// List `server`'s tools again each time one of its sessions sends
/// `notifications/tools/list_changed` (a session the gateway holds at that
/// moment: lanes of calls in flight or idle; a stateless server's changes
/// are caught by the timer).
fn follow_list_changes(upstreams: Arc<Upstreams>, server: String, stop: CancellationToken) {
    let Ok(pool) = upstreams.lanes(&server) else {
        return;
    };
    let mut changed = pool.tools_changed();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                r = changed.changed() => if r.is_err() { return },
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(SETTLE) => {}
            }
            changed.borrow_and_update();
            match upstreams.refresh_announced(&server).await {
                Ok(clashes) => {
                    for clash in clashes {
                        tracing::warn!(%clash, "an upstream tool was left out of the catalog");
                    }
                }
                Err(why) => tracing::warn!(%server, error = %why, "cannot list the changed tools"),
            }
        }
    });
}

impl Calls {
    /// Begin listing every upstream (in the background: nothing here waits
    /// for one), and start the call runtime on `call_tasks`, the task flows
    /// of `store` (maybe seen through a
    /// [`StoreLayer`](crate::gateway::StoreLayer)): call tasks interrupted by
    /// a crash are recovered here or on any replica sharing the store.
    /// `incarnation` is the process's slot ([`crate::incarnation`]), which
    /// the call runtime's owner lease is named after.
    pub async fn start(
        tracker: mcptask_client::Tracker,
        config: &Config,
        store: &mcptask_sql::Store,
        call_tasks: Arc<dyn mcptask_core::store::ServerTaskStore>,
        incarnation: crate::incarnation::Incarnation,
        stop: CancellationToken,
    ) -> anyhow::Result<Calls> {
        let upstreams = Upstreams::new(tracker, config.upstreams());
        upstreams.set_question_timeout(config.proxy.question_timeout());
        // Nothing waits for the upstreams: each server is listed in the
        // background, its tools served (and announced to the front's
        // callers) as soon as it answers; one down or mute is listed again
        // until it does. A clash between two servers' names leaves the
        // later server's clashing tools out, and is logged.
        for server in upstreams.server_names() {
            list_until_listed(upstreams.clone(), server, stop.child_token());
        }
        let runtime =
            TaskRuntime::builder_with_source(call_tasks, Arc::new(Source(upstreams.clone())))
                .config(config.proxy.runtime_config())
                .incarnation(incarnation)
                .start()
                .await
                .context("starting the call runtime")?;
        // The tracker follows SEP-1686 and synchronous calls through it.
        upstreams
            .tracker
            .set_local_work(Arc::new(local::RuntimeWork(runtime.clone())));
        local::relay_changes(&runtime, upstreams.tracker.clone(), stop.clone());
        let followers: Arc<std::sync::Mutex<std::collections::HashMap<_, _>>> = Arc::default();
        for server in upstreams.server_names() {
            let token = stop.child_token();
            follow_list_changes(upstreams.clone(), server.clone(), token.clone());
            followers
                .lock()
                .expect("followers lock")
                .insert(server, token);
        }
        tokio::spawn({
            let stop = stop.clone();
            let upstreams = upstreams.clone();
            async move {
                loop {
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(REFRESH_EVERY) => {}
                    }
                    let (clashes, _) = upstreams.refresh().await;
                    for clash in clashes {
                        tracing::warn!(%clash, "an upstream tool was left out of the catalog");
                    }
                }
            }
        });
        let limiter = Arc::new(Limiter::new(
            config.limits.limits(),
            Arc::new(mcptask_core::SystemClock),
        ));
        limiter
            .live_calls()
            .follow(upstreams.tracker.clone(), stop.clone());
        Ok(Calls {
            upstreams,
            runtime,
            policy: Arc::new(RwLock::new(Arc::new(config.policy()))),
            limiter,
            store: store.clone(),
            followers,
            stop,
        })
    }

    /// Front `servers` from now on (a configuration reload; the tracker's
    /// registry already holds their definitions). `relist` names the servers
    /// whose tools must be listed (again): those added or redefined. Returns
    /// the servers that could not be listed, with why (their calls fail with
    /// the connection error until they can be), and the clashes (the
    /// clashing newcomers are left out of the catalog).
    pub async fn set_servers(
        &self,
        servers: Vec<Upstream>,
        relist: &[String],
    ) -> (Vec<crate::upstreams::catalog::Clash>, Vec<(String, String)>) {
        let names: Vec<String> = servers.iter().map(|s| s.name.clone()).collect();
        let mut clashes = self.upstreams.set_servers(servers, relist);
        {
            let mut followers = self.followers.lock().expect("followers lock");
            followers.retain(|name, token| {
                let keep = names.contains(name) && !relist.contains(name);
                if !keep {
                    token.cancel();
                }
                keep
            });
        }
        let listed = futures::future::join_all(
            relist
                .iter()
                .map(|name| async move { (name, self.upstreams.refresh_server(name).await) }),
        )
        .await;
        let mut failures = Vec::new();
        for (name, r) in listed {
            match r {
                Ok(more) => clashes.extend(more),
                Err(why) => {
                    // A server never listed is listed again until it
                    // answers; one listed before keeps its last listing.
                    if !self.upstreams.has_listing(name) {
                        list_until_listed(
                            self.upstreams.clone(),
                            name.clone(),
                            self.stop.child_token(),
                        );
                    }
                    failures.push((name.clone(), why));
                }
            }
        }
        let mut followers = self.followers.lock().expect("followers lock");
        for name in names {
            if let std::collections::hash_map::Entry::Vacant(slot) = followers.entry(name) {
                let token = self.stop.child_token();
                follow_list_changes(self.upstreams.clone(), slot.key().clone(), token.clone());
                slot.insert(token);
            }
        }
        (clashes, failures)
    }

    /// The store the calls live in.
    pub fn store(&self) -> &mcptask_sql::Store {
        &self.store
    }

    /// Put `policy` in force for calls made from now on (calls already
    /// made keep running).
    pub fn set_policy(&self, policy: Policy) {
        *self.policy.write().expect("policy lock") = Arc::new(policy);
    }

    /// The policy in force now.
    pub fn policy(&self) -> Arc<Policy> {
        self.policy.read().expect("policy lock").clone()
    }

    /// Drain the call tasks running here (the rest is left to recovery).
    pub async fn shutdown(&self, deadline: Duration) {
        self.runtime.shutdown(deadline).await;
    }
}
