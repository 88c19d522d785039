//! The order in which SQLite's single writer connection is handed out.
//!
//! Every write of a store goes through one connection (`sqlite`), so a task
//! create, whose caller waits for its commit, queued behind whatever
//! background bookkeeping was waiting first: the tracker's poll claims and
//! applies, push hints, the notification outbox, heartbeats. Under load each
//! of those is a durable commit (an `fsync`), and the front's task create
//! waited for several of them (docs/BENCHMARKS.md, "Task create").
//!
//! The gate hands the writer to an *urgent* waiter (a write some caller is
//! waiting on: a task create) before any *normal* one, but never more than
//! [`MAX_URGENT_STREAK`] times in a row while normal writes wait, so a flood
//! of creates slows the background work down without stopping it (tasks
//! still settle, and admission control still sees them end). Within a class
//! waiters are served first come, first served.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

/// Urgent grants in a row while normal writes wait, before one of those goes.
pub(crate) const MAX_URGENT_STREAK: u32 = 4;

/// Who may use the writer next (see the module docs).
#[derive(Default)]
pub(crate) struct WriteGate {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// A permit is out (held, or on its way to a waiter).
    busy: bool,
    urgent: VecDeque<oneshot::Sender<Permit>>,
    normal: VecDeque<oneshot::Sender<Permit>>,
    /// Urgent grants since the last normal one.
    streak: u32,
}

/// The right to use the writer; passed on to the next waiter when dropped.
pub(crate) struct Permit {
    /// `None` once handed back by a waiter that gave up.
    gate: Option<Arc<WriteGate>>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(gate) = self.gate.take() {
            gate.pass_on();
        }
    }
}

impl WriteGate {
    /// Wait for the writer; `urgent` for a write a caller is waiting on.
    pub(crate) async fn enter(self: &Arc<Self>, urgent: bool) -> Permit {
        let rx = {
            let mut state = self.state.lock().expect("write gate");
            if !state.busy {
                state.busy = true;
                if urgent {
                    state.streak += 1;
                } else {
                    state.streak = 0;
                }
                return Permit {
                    gate: Some(self.clone()),
                };
            }
            let (tx, rx) = oneshot::channel();
            if urgent {
                state.urgent.push_back(tx);
            } else {
                state.normal.push_back(tx);
            }
            rx
        };
        // The sender is only dropped with the gate, which this holds.
        rx.await.expect("the write gate outlives its waiters")
    }

    /// Hand the writer to the next waiter, or mark it free.
    fn pass_on(self: &Arc<Self>) {
        loop {
            let next = {
                let mut state = self.state.lock().expect("write gate");
                let urgent_turn = !state.urgent.is_empty()
                    && (state.normal.is_empty() || state.streak < MAX_URGENT_STREAK);
                let next = if urgent_turn {
                    state.streak += 1;
                    state.urgent.pop_front()
                } else {
                    state.streak = 0;
                    state.normal.pop_front()
                };
                match next {
                    Some(next) => next,
                    None => {
                        state.busy = false;
                        return;
                    }
                }
            };
            // Outside the lock: a waiter that gave up hands the permit back
            // here, and that permit must not run its own hand-over.
            let permit = Permit {
                gate: Some(self.clone()),
            };
            match next.send(permit) {
                Ok(()) => return,
                Err(mut returned) => {
                    returned.gate = None;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Queue a waiter that records its `label` once it holds the writer,
    /// holds it for a moment, then lets go.
    fn waiter(
        gate: &Arc<WriteGate>,
        urgent: bool,
        label: &'static str,
        order: &Arc<Mutex<Vec<&'static str>>>,
    ) -> tokio::task::JoinHandle<()> {
        let gate = gate.clone();
        let order = order.clone();
        tokio::spawn(async move {
            let _permit = gate.enter(urgent).await;
            order.lock().unwrap().push(label);
            tokio::time::sleep(Duration::from_millis(1)).await;
        })
    }

    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn urgent_writes_go_before_background_ones_queued_earlier() {
        let gate = Arc::new(WriteGate::default());
        let order = Arc::new(Mutex::new(Vec::new()));
        let held = gate.enter(false).await;
        let mut jobs = Vec::new();
        for label in ["poll claim", "apply", "notify"] {
            jobs.push(waiter(&gate, false, label, &order));
            settle().await;
        }
        jobs.push(waiter(&gate, true, "create", &order));
        settle().await;
        drop(held);
        for job in jobs {
            job.await.unwrap();
        }
        assert_eq!(
            *order.lock().unwrap(),
            ["create", "poll claim", "apply", "notify"]
        );
    }

    #[tokio::test]
    async fn a_flood_of_urgent_writes_lets_background_ones_through() {
        let gate = Arc::new(WriteGate::default());
        let order = Arc::new(Mutex::new(Vec::new()));
        let held = gate.enter(true).await;
        let mut jobs = vec![waiter(&gate, false, "background", &order)];
        settle().await;
        for _ in 0..(MAX_URGENT_STREAK * 2) {
            jobs.push(waiter(&gate, true, "create", &order));
            settle().await;
        }
        drop(held);
        for job in jobs {
            job.await.unwrap();
        }
        let order = order.lock().unwrap();
        let at = order.iter().position(|l| *l == "background").unwrap();
        // The held permit was the first urgent grant of the streak.
        assert_eq!(at, MAX_URGENT_STREAK as usize - 1, "{order:?}");
    }

    #[tokio::test]
    async fn a_waiter_that_gives_up_does_not_keep_the_writer() {
        let gate = Arc::new(WriteGate::default());
        let held = gate.enter(false).await;
        let gone = tokio::spawn({
            let gate = gate.clone();
            async move {
                let _p = gate.enter(true).await;
            }
        });
        settle().await;
        gone.abort();
        let _ = gone.await;
        drop(held);
        tokio::time::timeout(Duration::from_secs(1), gate.enter(false))
            .await
            .expect("the writer is free again");
    }
}
