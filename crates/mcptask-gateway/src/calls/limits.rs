//! Fair limits per principal: a token bucket (calls per second, with a
//! burst) and a cap on calls in flight, so that one principal's flood is
//! refused and never delays another's calls.
//!
//! A refusal is held a while before it is answered ([`super::tarpit`]), so
//! that a client that ignores `Retry-After` cannot keep the cores busy.
//!
//! Anonymous callers share one budget. Memory stays bounded by the callers
//! active lately: a bucket that has refilled is forgotten (a caller idle
//! that long starts full anyway), and a principal with nothing in flight
//! has no counter.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use mcptask_core::clock::SharedClock;
use mcptask_core::limits::{Bucket, Rate};

pub use super::busy::{Busy, Limit};
use super::live::{LiveCall, LiveCalls};
use super::tarpit::Tarpit;

/// Buckets kept before full ones are swept out.
const SWEEP_ABOVE: usize = 1024;

pub use crate::config::Limits;

/// The limiter of one gateway process.
pub struct Limiter {
    limits: Mutex<Limits>,
    clock: SharedClock,
    buckets: Mutex<HashMap<String, Bucket>>,
    in_flight: Arc<Mutex<HashMap<String, usize>>>,
    tarpit: Tarpit,
    /// The live calls, under `limits.live`.
    live: LiveCalls,
}

/// A call admitted; dropping it ends the call's time in flight.
pub struct Admitted {
    key: Option<String>,
    in_flight: Arc<Mutex<HashMap<String, usize>>>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let Some(key) = self.key.take() else { return };
        let mut counts = self.in_flight.lock().expect("in-flight lock");
        if let Some(n) = counts.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&key);
            }
        }
    }
}

impl Limiter {
    /// A limiter enforcing `limits` (replaced on reload), timed by `clock`;
    /// no caller has spent anything yet.
    pub fn new(limits: Limits, clock: SharedClock) -> Self {
        crate::metrics::limits::configured(&limits);
        Self {
            limits: Mutex::new(limits),
            clock,
            buckets: Mutex::default(),
            in_flight: Arc::default(),
            tarpit: Tarpit::default(),
            live: LiveCalls::default(),
        }
    }

    /// The limits in force now.
    pub fn limits(&self) -> Limits {
        *self.limits.lock().expect("limits lock")
    }

    /// A place among the live calls for a tool call of `principal` to
    /// `server`, under a fresh id the call must be kept as
    /// ([`LiveCall::id`]), or the refusal naming the limit reached. Not
    /// held in the tarpit: a live call ends when its upstream finishes, so
    /// the refusal says so at once.
    pub fn live_call(&self, principal: Option<&str>, server: &str) -> Result<LiveCall, Busy> {
        self.live.take(
            self.limits().live,
            principal,
            server,
            mcptask_core::ids::new_local_task_id(),
        )
    }

    /// The live calls (their follower is started with the call runtime).
    pub fn live_calls(&self) -> &LiveCalls {
        &self.live
    }

    /// Put new limits in force (calls in flight keep their place).
    pub fn set(&self, limits: Limits) {
        crate::metrics::limits::configured(&limits);
        *self.limits.lock().expect("limits lock") = limits;
    }

    /// Admit a call of `principal`, or say why not.
    pub fn admit(&self, principal: Option<&str>) -> Result<Admitted, Busy> {
        let limits = *self.limits.lock().expect("limits lock");
        let key = principal.unwrap_or("").to_string();
        let mut admitted = Admitted {
            key: None,
            in_flight: self.in_flight.clone(),
        };
        if let Some(cap) = limits.in_flight {
            let mut counts = self.in_flight.lock().expect("in-flight lock");
            let n = counts.entry(key.clone()).or_insert(0);
            if *n >= cap {
                return Err(too_many_in_flight(principal, cap));
            }
            *n += 1;
            admitted.key = Some(key.clone());
        }
        if let Some(rate) = limits.rate {
            let now = self.clock.now_ms();
            let mut buckets = self.buckets.lock().expect("buckets lock");
            if buckets.len() > SWEEP_ABOVE {
                buckets.retain(|_, b| !b.is_full(&rate, now));
            }
            let bucket = buckets
                .entry(key)
                .or_insert_with(|| Bucket::full(&rate, now));
            if let Err(wait) = bucket.take(&rate, now) {
                // `admitted` drops here: the in-flight slot is given back.
                return Err(over_rate(principal, &rate, wait));
            }
        }
        Ok(admitted)
    }

    /// Whether a call of `principal` would be refused now, taking nothing:
    /// a flood is told so from its headers, before its body is read (the
    /// call itself is admitted later, by [`Limiter::admit`]).
    pub fn check(&self, principal: Option<&str>) -> Result<(), Busy> {
        let limits = *self.limits.lock().expect("limits lock");
        let key = principal.unwrap_or("");
        if let Some(cap) = limits.in_flight {
            let counts = self.in_flight.lock().expect("in-flight lock");
            if counts.get(key).is_some_and(|n| *n >= cap) {
                return Err(too_many_in_flight(principal, cap));
            }
        }
        if let Some(rate) = limits.rate {
            let now = self.clock.now_ms();
            let buckets = self.buckets.lock().expect("buckets lock");
            // A copy: looking takes no token.
            if let Some(mut bucket) = buckets.get(key).copied()
                && let Err(wait) = bucket.take(&rate, now)
            {
                return Err(over_rate(principal, &rate, wait));
            }
        }
        Ok(())
    }

    /// Hold `busy`, a refusal of `principal`, before it is answered (see
    /// `super::tarpit`): it comes back with the time held taken off its
    /// wait.
    pub async fn hold(&self, principal: Option<&str>, busy: Busy) -> Busy {
        let Some(hold) = self.held(principal, &busy) else {
            return busy;
        };
        tokio::time::sleep(std::time::Duration::from_millis(hold.ms as u64)).await;
        busy.after(hold.ms)
    }

    /// [`Limiter::admit`], a refusal held ([`Limiter::hold`]).
    pub async fn admit_or_hold(&self, principal: Option<&str>) -> Result<Admitted, Busy> {
        match self.admit(principal) {
            Ok(admitted) => Ok(admitted),
            Err(busy) => Err(self.hold(principal, busy).await),
        }
    }

    fn held(&self, principal: Option<&str>, busy: &Busy) -> Option<super::tarpit::Hold> {
        let rate = self.limits.lock().expect("limits lock").rate;
        // How far apart the principal's calls are let through.
        let spacing_ms = match rate {
            Some(rate) if rate.per_second > 0.0 => (1000.0 / rate.per_second).ceil() as i64,
            Some(_) => i64::MAX,
            None => 0,
        };
        self.tarpit
            .hold(principal.unwrap_or(""), busy.retry_after_ms, spacing_ms)
    }
}

fn who(principal: Option<&str>) -> String {
    principal.map_or("anonymous callers".to_string(), |p| {
        format!("principal {p:?}")
    })
}

fn too_many_in_flight(principal: Option<&str>, cap: usize) -> Busy {
    Busy::at(
        Limit::PerPrincipalInFlight,
        cap,
        format!("{} has {cap} calls in flight already", who(principal)),
        1000,
    )
}

fn over_rate(principal: Option<&str>, rate: &Rate, wait: i64) -> Busy {
    Busy::at(
        Limit::PerPrincipalRate,
        rate.per_second,
        format!(
            "{} is over {} calls per second (burst {})",
            who(principal),
            rate.per_second,
            rate.burst
        ),
        wait,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcptask_core::ManualClock;

    #[test]
    fn one_principals_flood_leaves_anothers_budget_alone() {
        let clock = Arc::new(ManualClock::new(0));
        let limiter = Limiter::new(
            Limits {
                rate: Some(Rate {
                    per_second: 10.0,
                    burst: 5,
                }),
                in_flight: Some(2),
                ..Default::default()
            },
            clock.clone(),
        );
        let mut held = Vec::new();
        for _ in 0..2 {
            held.push(limiter.admit(Some("flood")).unwrap());
        }
        let refused = limiter.admit(Some("flood")).err().unwrap();
        assert!(refused.why.contains("2 calls in flight"), "{refused}");
        // Another principal is not touched by it.
        assert!(limiter.admit(Some("calm")).is_ok());
        held.clear();
        // The flood's rate budget (burst 5, two spent) runs out next.
        for _ in 0..3 {
            drop(limiter.admit(Some("flood")).unwrap());
        }
        let refused = limiter.admit(Some("flood")).err().unwrap();
        assert_eq!(refused.retry_after_ms, 100, "{refused}");
        clock.advance(100);
        assert!(limiter.admit(Some("flood")).is_ok());
        assert!(limiter.admit(None).is_ok());
    }

    #[test]
    fn counters_of_idle_principals_are_forgotten() {
        let clock = Arc::new(ManualClock::new(0));
        let limiter = Limiter::new(
            Limits {
                rate: None,
                in_flight: Some(1),
                ..Default::default()
            },
            clock,
        );
        for i in 0..100 {
            drop(limiter.admit(Some(&format!("p{i}"))).unwrap());
        }
        assert!(limiter.in_flight.lock().unwrap().is_empty());
    }

    fn limiter(rate: Option<Rate>, in_flight: Option<usize>) -> (Arc<ManualClock>, Limiter) {
        let clock = Arc::new(ManualClock::new(0));
        let limiter = Limiter::new(
            Limits {
                rate,
                in_flight,
                ..Default::default()
            },
            clock.clone(),
        );
        (clock, limiter)
    }

    #[test]
    fn a_check_says_what_admission_would_and_takes_nothing() {
        let rate = Rate {
            per_second: 10.0,
            burst: 2,
        };
        let (clock, limiter) = limiter(Some(rate), Some(1));
        for _ in 0..5 {
            assert!(limiter.check(Some("p")).is_ok());
        }
        let first = limiter.admit(Some("p")).unwrap();
        let busy = limiter.check(Some("p")).err().unwrap();
        assert!(busy.why.contains("1 calls in flight"), "{busy}");
        assert_eq!(busy.retry_after_ms, 1000);
        assert!(limiter.check(Some("other")).is_ok());
        drop(first);
        drop(limiter.admit(Some("p")).unwrap());
        let busy = limiter.check(Some("p")).err().unwrap();
        assert_eq!(busy, limiter.admit(Some("p")).err().unwrap());
        assert_eq!(busy.retry_after_ms, 100);
        clock.advance(100);
        assert!(limiter.check(Some("p")).is_ok());
        assert!(limiter.admit(Some("p")).is_ok());
    }

    #[test]
    fn a_principals_held_refusals_are_spaced_by_its_rate() {
        let rate = Rate {
            per_second: 20.0,
            burst: 1,
        };
        let (_clock, limiter) = limiter(Some(rate), None);
        drop(limiter.admit(Some("flood")).unwrap());
        let busy = limiter.admit(Some("flood")).err().unwrap();
        assert_eq!(busy.retry_after_ms, 50);
        let holds: Vec<_> = (0..3)
            .map(|_| limiter.held(Some("flood"), &busy).unwrap())
            .collect();
        let ms: Vec<i64> = holds.iter().map(|h| h.ms).collect();
        assert_eq!(ms, [50, 100, 150]);
        // Held at least as long as it was told to wait: nothing left to.
        assert_eq!(busy.clone().after(holds[2].ms).retry_after_ms, 0);
        // Told to wait past the cap: the rest of the wait is still told.
        let slow = Busy {
            why: String::new(),
            retry_after_ms: 2500,
            limit: Limit::PerPrincipalRate,
        };
        let hold = limiter.held(None, &slow).unwrap();
        assert_eq!(hold.ms, super::super::tarpit::HOLD_CAP_MS);
        assert_eq!(slow.after(hold.ms).retry_after_ms, 1500);
    }

    #[tokio::test]
    async fn a_held_refusal_is_answered_with_the_time_held_taken_off() {
        let rate = Rate {
            per_second: 1000.0,
            burst: 1,
        };
        let (_clock, limiter) = limiter(Some(rate), None);
        let _first = limiter.admit_or_hold(Some("p")).await.unwrap();
        let busy = limiter.admit_or_hold(Some("p")).await.err().unwrap();
        assert_eq!(busy.retry_after_ms, 0, "{busy}");
        // The hold is over: its place is free.
        assert_eq!(limiter.tarpit.held_in_all(), 0);
    }
}
