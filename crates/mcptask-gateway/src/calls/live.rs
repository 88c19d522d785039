//! Live calls per principal and per server (`[limits]
//! live_calls_per_principal`, `live_calls_per_server`): the one rule, at
//! every face, on how many kept calls may be unfinished at once.
//!
//! A call takes its place when it is routed ([`crate::route::decide`]),
//! under the id it will be kept as, so that a call in the making counts as
//! much as a kept one and concurrent calls cannot overshoot. A call answered
//! without being kept gives its place back when its request ends; a kept
//! call ([`LiveCall::keep`]) holds it until the call is seen terminal.
//! Nothing runs per live call: one follower ([`LiveCalls::follow`]) reads a
//! held call back only when the tracker says that it changed (here or at
//! another replica).
//!
//! The counts are this process's: the calls it routed since it started.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use mcptask_client::{Tracker, TrackerError};
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use super::busy::{Busy, Limit};
use crate::config::LiveLimits;

/// How long a caller refused for its live calls is told to wait: a live
/// call ends when its upstream finishes, which nothing here can foresee.
const RETRY_AFTER_MS: i64 = 1000;

#[derive(Default)]
struct Held {
    /// Each live call's principal (`""`: anonymous callers, together) and
    /// server.
    calls: HashMap<String, (String, String)>,
    by_principal: HashMap<String, usize>,
    by_server: HashMap<String, usize>,
}

impl Held {
    fn release(&mut self, id: &str) -> bool {
        let Some((principal, server)) = self.calls.remove(id) else {
            return false;
        };
        for (counts, key) in [
            (&mut self.by_principal, principal),
            (&mut self.by_server, server),
        ] {
            if let Some(n) = counts.get_mut(&key) {
                *n -= 1;
                if *n == 0 {
                    counts.remove(&key);
                }
            }
        }
        true
    }
}

/// The live calls of one gateway process. Cheap to clone.
#[derive(Clone, Default)]
pub struct LiveCalls {
    held: Arc<Mutex<Held>>,
}

/// A call's place among the live calls: given back when dropped, unless
/// the call was kept ([`LiveCall::keep`]).
pub struct LiveCall {
    id: String,
    held: Arc<Mutex<Held>>,
    kept: bool,
}

impl LiveCall {
    /// The id the call must be kept under (its place is held by it).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The call was kept: its place is held until it is seen terminal.
    pub fn keep(mut self) {
        self.kept = true;
    }
}

impl Drop for LiveCall {
    fn drop(&mut self) {
        if !self.kept {
            self.held.lock().expect("live calls lock").release(&self.id);
        }
    }
}

fn who(principal: &str) -> String {
    if principal.is_empty() {
        "anonymous callers".to_string()
    } else {
        format!("principal {principal:?}")
    }
}

impl LiveCalls {
    /// A place for a call `id` of `principal` to `server` under `limits`,
    /// or the refusal naming the limit reached.
    pub fn take(
        &self,
        limits: LiveLimits,
        principal: Option<&str>,
        server: &str,
        id: String,
    ) -> Result<LiveCall, Busy> {
        let principal = principal.unwrap_or("");
        let mut held = self.held.lock().expect("live calls lock");
        if let Some(cap) = limits.per_principal
            && held.by_principal.get(principal).copied().unwrap_or(0) >= cap
        {
            return Err(Busy::at(
                Limit::LiveCallsPerPrincipal,
                cap,
                format!("{} has {cap} live calls already", who(principal)),
                RETRY_AFTER_MS,
            ));
        }
        if let Some(cap) = limits.per_server
            && held.by_server.get(server).copied().unwrap_or(0) >= cap
        {
            return Err(Busy::at(
                Limit::LiveCallsPerServer,
                cap,
                format!("server {server:?} has {cap} live calls already"),
                RETRY_AFTER_MS,
            ));
        }
        *held.by_principal.entry(principal.to_string()).or_default() += 1;
        *held.by_server.entry(server.to_string()).or_default() += 1;
        held.calls
            .insert(id.clone(), (principal.to_string(), server.to_string()));
        Ok(LiveCall {
            id,
            held: self.held.clone(),
            kept: false,
        })
    }

    /// Live calls held now (for tests and the dashboard's curiosity).
    pub fn count(&self) -> usize {
        self.held.lock().expect("live calls lock").calls.len()
    }

    fn holds(&self, id: &str) -> bool {
        self.held
            .lock()
            .expect("live calls lock")
            .calls
            .contains_key(id)
    }

    fn release(&self, id: &str) {
        self.held.lock().expect("live calls lock").release(id);
    }

    /// Read `id` back and give its place back if it ended (or is gone).
    async fn settle(&self, tracker: &Tracker, id: &str) {
        match tracker.get(id).await {
            Ok(record) if record.is_terminal() => self.release(id),
            Err(TrackerError::NotFound(_)) => self.release(id),
            // Not over, or unreadable now: its next change is heard again.
            _ => {}
        }
    }

    /// Until `stop`: give a kept call's place back once the tracker's
    /// change feed (this process's changes and every replica's) shows it
    /// terminal. Only the changes of held calls are read back.
    pub fn follow(&self, tracker: Tracker, stop: CancellationToken) {
        let live = self.clone();
        let mut changes = tracker.changes();
        tokio::spawn(async move {
            loop {
                let change = tokio::select! {
                    _ = stop.cancelled() => return,
                    c = changes.recv() => c,
                };
                match change {
                    Ok(id) if live.holds(&id) => live.settle(&tracker, &id).await,
                    Ok(_) => {}
                    // Changes were missed: every held call is read back once.
                    Err(RecvError::Lagged(_)) => {
                        let ids: Vec<String> = live
                            .held
                            .lock()
                            .expect("live calls lock")
                            .calls
                            .keys()
                            .cloned()
                            .collect();
                        for id in ids {
                            live.settle(&tracker, &id).await;
                        }
                    }
                    Err(RecvError::Closed) => return,
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(per_principal: usize, per_server: usize) -> LiveLimits {
        LiveLimits {
            per_principal: Some(per_principal),
            per_server: Some(per_server),
        }
    }

    #[test]
    fn a_principal_at_its_cap_is_refused_naming_the_limit_and_another_is_not() {
        let live = LiveCalls::default();
        let limits = caps(2, 10);
        let a = live.take(limits, Some("alice"), "s", "c1".into()).unwrap();
        a.keep();
        let b = live.take(limits, Some("alice"), "s", "c2".into()).unwrap();
        let refused = live
            .take(limits, Some("alice"), "s", "c3".into())
            .err()
            .unwrap();
        assert_eq!(refused.limit, Limit::LiveCallsPerPrincipal);
        assert!(
            refused.to_string().contains("live_calls_per_principal = 2"),
            "{refused}"
        );
        assert!(live.take(limits, Some("bob"), "s", "c4".into()).is_ok());
        // A call answered without being kept gives its place back.
        drop(b);
        let c = live.take(limits, Some("alice"), "s", "c5".into()).unwrap();
        c.keep();
        // A kept call holds it until released.
        assert!(live.take(limits, Some("alice"), "s", "c6".into()).is_err());
        live.release("c1");
        assert!(live.take(limits, Some("alice"), "s", "c7".into()).is_ok());
    }

    #[test]
    fn a_server_at_its_cap_is_refused_for_everyone() {
        let live = LiveCalls::default();
        let limits = caps(10, 1);
        live.take(limits, Some("alice"), "s", "c1".into())
            .unwrap()
            .keep();
        let refused = live
            .take(limits, Some("bob"), "s", "c2".into())
            .err()
            .unwrap();
        assert!(
            refused.to_string().contains("live_calls_per_server = 1"),
            "{refused}"
        );
        assert!(live.take(limits, Some("bob"), "t", "c3".into()).is_ok());
        live.release("c1");
        live.release("c1");
        assert_eq!(live.count(), 0);
        assert!(live.held.lock().unwrap().by_principal.is_empty());
    }
}
