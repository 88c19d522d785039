//! Fair limits: how many calls a caller may make per second (a token
//! bucket) and how many it may have in flight, as pure decisions over an
//! injected time.
//!
//! ```
//! use mcptask_core::limits::{Bucket, Rate};
//! let rate = Rate { per_second: 2.0, burst: 3 };
//! let mut bucket = Bucket::full(&rate, 0);
//! for _ in 0..3 {
//!     assert!(bucket.take(&rate, 0).is_ok());
//! }
//! // Empty: the next token comes in 500 ms.
//! assert_eq!(bucket.take(&rate, 0), Err(500));
//! assert!(bucket.take(&rate, 500).is_ok());
//! ```

/// A sustained rate with a burst.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    /// Calls per second, sustained.
    pub per_second: f64,
    /// Calls allowed at once after a quiet spell.
    pub burst: u32,
}

/// One caller's token bucket.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bucket {
    tokens: f64,
    at_ms: i64,
}

impl Bucket {
    /// A full bucket at `now_ms`.
    pub fn full(rate: &Rate, now_ms: i64) -> Self {
        Bucket {
            tokens: rate.burst.max(1) as f64,
            at_ms: now_ms,
        }
    }

    /// Take one token at `now_ms`; when there is none, how many
    /// milliseconds until there is one.
    pub fn take(&mut self, rate: &Rate, now_ms: i64) -> Result<(), i64> {
        let burst = rate.burst.max(1) as f64;
        let elapsed = (now_ms - self.at_ms).max(0) as f64;
        self.tokens = (self.tokens + elapsed * rate.per_second / 1000.0).min(burst);
        self.at_ms = now_ms.max(self.at_ms);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return Ok(());
        }
        if rate.per_second <= 0.0 {
            return Err(i64::MAX);
        }
        let wait = ((1.0 - self.tokens) * 1000.0 / rate.per_second).ceil() as i64;
        Err(wait.max(1))
    }

    /// Whether the bucket is full again at `now_ms` (nothing to remember:
    /// a caller idle that long starts from a full bucket anyway).
    pub fn is_full(&self, rate: &Rate, now_ms: i64) -> bool {
        let elapsed = (now_ms - self.at_ms).max(0) as f64;
        self.tokens + elapsed * rate.per_second / 1000.0 >= rate.burst.max(1) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Over any span, no more than burst + rate × span calls are let
        /// through, and a refused caller that waits the time it was told is
        /// let through.
        #[test]
        fn never_more_than_burst_plus_rate(per_second in 0.5f64..200.0, burst in 1u32..50,
                                          gaps in proptest::collection::vec(0i64..200, 1..300)) {
            let rate = Rate { per_second, burst };
            let mut bucket = Bucket::full(&rate, 0);
            let mut now = 0;
            let mut let_through = 0u64;
            for gap in gaps {
                now += gap;
                match bucket.take(&rate, now) {
                    Ok(()) => let_through += 1,
                    Err(wait) => {
                        let mut later = bucket;
                        prop_assert!(later.take(&rate, now + wait).is_ok());
                    }
                }
            }
            let bound = burst as f64 + per_second * now as f64 / 1000.0;
            prop_assert!(let_through as f64 <= bound + 1e-6, "{let_through} > {bound}");
        }
    }

    #[test]
    fn a_quiet_caller_refills_to_the_burst_only() {
        let rate = Rate {
            per_second: 10.0,
            burst: 2,
        };
        let mut bucket = Bucket::full(&rate, 0);
        assert!(bucket.take(&rate, 0).is_ok());
        assert!(!bucket.is_full(&rate, 0));
        assert!(bucket.is_full(&rate, 100));
        assert!(bucket.take(&rate, 60_000).is_ok());
        assert!(bucket.take(&rate, 60_000).is_ok());
        assert_eq!(bucket.take(&rate, 60_000), Err(100));
    }
}
