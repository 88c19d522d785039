//! `[limits]`: fair limits per principal, their check, and the [`Limits`]
//! the calls enforce.

use mcptask_core::limits::Rate;
use serde::{Deserialize, Serialize};

use super::{ConfigError, Reload, Source, Spans};

/// `[limits]`: what one principal (anonymous callers together count as
/// one) may ask of this gateway process, at every face.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct LimitsSection {
    /// Tool calls per second, sustained (none: no rate limit).
    #[serde(default)]
    pub per_principal_rate: Option<f64>,
    /// Tool calls at once after a quiet spell (default: twice the rate,
    /// at least 1).
    #[serde(default)]
    pub per_principal_burst: Option<u32>,
    /// Tool calls in flight at once (none: no cap).
    #[serde(default)]
    pub per_principal_in_flight: Option<usize>,
    /// Live calls (kept, not yet completed, failed or cancelled) of one
    /// principal at once, whatever the face that made them (default
    /// [`DEFAULT_LIVE_CALLS_PER_PRINCIPAL`]; `0`: no cap).
    #[serde(default)]
    pub live_calls_per_principal: Option<usize>,
    /// Live calls of all principals to one `[[servers]]` entry at once
    /// (none: no cap).
    #[serde(default)]
    pub live_calls_per_server: Option<usize>,
}

/// `[limits] live_calls_per_principal` unset: the cap the front's call
/// runtime always had, now on every face.
pub const DEFAULT_LIVE_CALLS_PER_PRINCIPAL: usize = 1_000;

/// The limits of `[limits]`, as the calls enforce them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Limits {
    /// Calls per second and burst per principal; `None`: no rate limit.
    pub rate: Option<Rate>,
    /// Calls in flight per principal; `None`: no cap.
    pub in_flight: Option<usize>,
    /// Live calls per principal and per server.
    pub live: LiveLimits,
}

/// The caps on live calls (kept calls not yet terminal); `None`: no cap.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LiveLimits {
    /// `live_calls_per_principal`.
    pub per_principal: Option<usize>,
    /// `live_calls_per_server`.
    pub per_server: Option<usize>,
}

impl LimitsSection {
    /// The limiter is given new limits by a reload, for new calls.
    pub const RELOAD: Reload = Reload::Live;

    /// Every limit set is positive.
    pub(crate) fn check(&self, src: &Source, spans: &Spans) -> Result<(), ConfigError> {
        let bad = self
            .per_principal_rate
            .is_some_and(|r| !(r > 0.0 && r.is_finite()))
            || self.per_principal_burst == Some(0)
            || self.per_principal_in_flight == Some(0);
        if bad {
            return Err(src.at(
                spans.limits(),
                "a limit under [limits] is zero or not a number",
                "give positive values (leave a key out for no limit), e.g. per_principal_rate = 20",
            ));
        }
        if self.live_calls_per_server == Some(0) {
            return Err(src.at(
                spans.limits(),
                "[limits] live_calls_per_server = 0 would refuse every call",
                "give a positive number of live calls per server, or leave the key out for no cap",
            ));
        }
        Ok(())
    }

    /// The limits (a burst left out is twice the rate, at least one call).
    pub fn limits(&self) -> Limits {
        Limits {
            rate: self.per_principal_rate.map(|per_second| Rate {
                per_second,
                burst: self
                    .per_principal_burst
                    .unwrap_or(((per_second * 2.0).ceil() as u32).max(1)),
            }),
            in_flight: self.per_principal_in_flight,
            live: LiveLimits {
                per_principal: match self.live_calls_per_principal {
                    None => Some(DEFAULT_LIVE_CALLS_PER_PRINCIPAL),
                    Some(0) => None,
                    Some(n) => Some(n),
                },
                per_server: self.live_calls_per_server,
            },
        }
    }
}
