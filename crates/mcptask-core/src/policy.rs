//! Scheduling policies: exponential backoff and poll intervals with clamps and
//! jitter. Pure functions so tests can check them exactly.

/// Exponential backoff: `base * 2^failures`, capped.
///
/// ```
/// use mcptask_core::policy::Backoff;
/// let b = Backoff { base_ms: 1_000, max_ms: 30_000 };
/// assert_eq!(b.delay_ms(0), 1_000);
/// assert_eq!(b.delay_ms(3), 8_000);
/// assert_eq!(b.delay_ms(40), 30_000);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// First delay (ms).
    pub base_ms: i64,
    /// Upper bound (ms).
    pub max_ms: i64,
}

impl Backoff {
    /// Delay before the next attempt after `failures` consecutive failures.
    pub fn delay_ms(&self, failures: i64) -> i64 {
        let exp = failures.clamp(0, 30) as u32;
        self.base_ms
            .max(1)
            .saturating_mul(1_i64 << exp)
            .min(self.max_ms.max(1))
    }
}

/// How often to poll a remote task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollPolicy {
    /// Used when the server suggests no `pollIntervalMs`.
    pub default_ms: i64,
    /// Never poll faster than this, whatever the server says.
    pub min_ms: i64,
    /// Never wait longer than this between polls.
    pub max_ms: i64,
    /// Floor while the task waits for input (the answer path polls right away).
    pub input_required_min_ms: i64,
    /// Random spread, in per mille of the interval, to avoid thundering herds.
    pub jitter_permille: i64,
}

impl Default for PollPolicy {
    fn default() -> Self {
        Self {
            default_ms: 1_000,
            min_ms: 250,
            max_ms: 60_000,
            input_required_min_ms: 5_000,
            jitter_permille: 100,
        }
    }
}

impl PollPolicy {
    /// The interval before the next poll, honouring the server's suggestion
    /// within the clamps. `unit` in `[0, 1)` picks the jitter (pass a random number).
    ///
    /// ```
    /// use mcptask_core::policy::PollPolicy;
    /// let p = PollPolicy { jitter_permille: 0, ..Default::default() };
    /// assert_eq!(p.interval_ms(Some(5), false, 0.5), 250);      // clamped up
    /// assert_eq!(p.interval_ms(Some(2_000), false, 0.5), 2_000);
    /// assert_eq!(p.interval_ms(None, false, 0.5), 1_000);
    /// assert_eq!(p.interval_ms(Some(10_000_000), false, 0.5), 60_000); // clamped down
    /// assert_eq!(p.interval_ms(Some(1_000), true, 0.5), 5_000);
    /// ```
    pub fn interval_ms(&self, suggested: Option<i64>, input_required: bool, unit: f64) -> i64 {
        let mut interval = suggested.filter(|s| *s > 0).unwrap_or(self.default_ms);
        if input_required {
            interval = interval.max(self.input_required_min_ms);
        }
        let interval = interval.clamp(self.min_ms.max(1), self.max_ms.max(self.min_ms.max(1)));
        let spread = interval * self.jitter_permille.clamp(0, 1000) / 1000;
        let unit = if unit.is_finite() {
            unit.clamp(0.0, 1.0)
        } else {
            0.5
        };
        let offset = ((unit * 2.0 - 1.0) * spread as f64) as i64;
        (interval + offset).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn backoff_is_monotonic_and_capped(base in 1i64..10_000, max in 1i64..1_000_000, n in 0i64..100) {
            let b = Backoff { base_ms: base, max_ms: max };
            prop_assert!(b.delay_ms(n) <= max.max(1));
            prop_assert!(b.delay_ms(n) <= b.delay_ms(n + 1));
            prop_assert!(b.delay_ms(n) >= 1);
        }

        #[test]
        fn poll_interval_stays_within_jittered_clamps(
            suggested in proptest::option::of(-10i64..10_000_000),
            input in any::<bool>(),
            unit in 0.0f64..1.0,
        ) {
            let p = PollPolicy::default();
            let ms = p.interval_ms(suggested, input, unit);
            let lo = p.min_ms - p.min_ms * p.jitter_permille / 1000;
            let hi = p.max_ms + p.max_ms * p.jitter_permille / 1000;
            prop_assert!(ms >= lo && ms <= hi, "{ms} not in [{lo}, {hi}]");
            if input {
                let floor = p.input_required_min_ms - p.input_required_min_ms * p.jitter_permille / 1000;
                prop_assert!(ms >= floor);
            }
        }
    }
}
