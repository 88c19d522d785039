//! Fair limits per principal: a token bucket (calls per second, with a
//! burst) and a cap on calls in flight, so that one principal's flood is
//! refused at once and never delays another's calls.
//!
//! Anonymous callers share one budget. Memory stays bounded by the callers
//! active lately: a bucket that has refilled is forgotten (a caller idle
//! that long starts full anyway), and a principal with nothing in flight
//! has no counter.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use mcptask_core::clock::SharedClock;
use mcptask_core::limits::{Bucket, Rate};

/// Buckets kept before full ones are swept out.
const SWEEP_ABOVE: usize = 1024;

/// The limits of `[limits]`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Limits {
    /// Calls per second and burst per principal; `None`: no rate limit.
    pub rate: Option<Rate>,
    /// Calls in flight per principal; `None`: no cap.
    pub in_flight: Option<usize>,
}

impl Limits {
    /// The limits of a configuration's `[limits]` (a burst left out is
    /// twice the rate, at least one call).
    pub fn from_config(config: &crate::config::Config) -> Limits {
        let l = &config.limits;
        Limits {
            rate: l.per_principal_rate.map(|per_second| Rate {
                per_second,
                burst: l
                    .per_principal_burst
                    .unwrap_or(((per_second * 2.0).ceil() as u32).max(1)),
            }),
            in_flight: l.per_principal_in_flight,
        }
    }
}

/// Why a call was refused, and when to try again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{why}; retry in {retry_after_ms} ms")]
pub struct Busy {
    /// In words, for the caller.
    pub why: String,
    /// When a retry may succeed.
    pub retry_after_ms: i64,
}

/// The limiter of one gateway process.
pub struct Limiter {
    limits: Mutex<Limits>,
    clock: SharedClock,
    buckets: Mutex<HashMap<String, Bucket>>,
    in_flight: Arc<Mutex<HashMap<String, usize>>>,
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
    pub fn new(limits: Limits, clock: SharedClock) -> Self {
        Self {
            limits: Mutex::new(limits),
            clock,
            buckets: Mutex::default(),
            in_flight: Arc::default(),
        }
    }

    /// Put new limits in force (calls in flight keep their place).
    pub fn set(&self, limits: Limits) {
        *self.limits.lock().expect("limits lock") = limits;
    }

    /// Admit a call of `principal`, or say why not.
    pub fn admit(&self, principal: Option<&str>) -> Result<Admitted, Busy> {
        let limits = *self.limits.lock().expect("limits lock");
        let key = principal.unwrap_or("").to_string();
        let who = principal.map_or("anonymous callers".to_string(), |p| {
            format!("principal {p:?}")
        });
        let mut admitted = Admitted {
            key: None,
            in_flight: self.in_flight.clone(),
        };
        if let Some(cap) = limits.in_flight {
            let mut counts = self.in_flight.lock().expect("in-flight lock");
            let n = counts.entry(key.clone()).or_insert(0);
            if *n >= cap {
                return Err(Busy {
                    why: format!("{who} has {cap} calls in flight already"),
                    retry_after_ms: 1000,
                });
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
                return Err(Busy {
                    why: format!(
                        "{who} is over {} calls per second (burst {})",
                        rate.per_second, rate.burst
                    ),
                    retry_after_ms: wait,
                });
            }
        }
        Ok(admitted)
    }
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
            },
            clock,
        );
        for i in 0..100 {
            drop(limiter.admit(Some(&format!("p{i}"))).unwrap());
        }
        assert!(limiter.in_flight.lock().unwrap().is_empty());
    }
}
