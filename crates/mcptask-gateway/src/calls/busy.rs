//! A refusal by one of the limits of `[limits]`: which limit, in words the
//! caller and the operator can act on, and when to try again. Its own
//! module, below both the rate and in-flight limiter (`limits`) and the
//! live-call places (`live`), which both refuse with it.

/// A limit of `[limits]`, by its key (a bounded label set for metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Limit {
    /// `per_principal_rate` (and its burst).
    PerPrincipalRate,
    /// `per_principal_in_flight`.
    PerPrincipalInFlight,
    /// `live_calls_per_principal`.
    LiveCallsPerPrincipal,
    /// `live_calls_per_server`.
    LiveCallsPerServer,
}

impl Limit {
    /// Every limit, for the metrics registered at zero.
    pub const ALL: [Limit; 4] = [
        Limit::PerPrincipalRate,
        Limit::PerPrincipalInFlight,
        Limit::LiveCallsPerPrincipal,
        Limit::LiveCallsPerServer,
    ];

    /// Its key under `[limits]`.
    pub fn key(self) -> &'static str {
        match self {
            Limit::PerPrincipalRate => "per_principal_rate",
            Limit::PerPrincipalInFlight => "per_principal_in_flight",
            Limit::LiveCallsPerPrincipal => "live_calls_per_principal",
            Limit::LiveCallsPerServer => "live_calls_per_server",
        }
    }
}

/// Why a call was refused, and when to try again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{why}; retry in {retry_after_ms} ms")]
pub struct Busy {
    /// In words, for the caller, naming the limit and its value.
    pub why: String,
    /// When a retry may succeed.
    pub retry_after_ms: i64,
    /// The limit reached.
    pub limit: Limit,
}

impl Busy {
    /// A refusal by `limit` (set to `value`), `why` in words: the words
    /// name the key and its value, so the caller and the operator know
    /// which setting refused it. Counted in `/metrics`.
    pub fn at(
        limit: Limit,
        value: impl std::fmt::Display,
        why: String,
        retry_after_ms: i64,
    ) -> Busy {
        crate::metrics::limits::refused(limit);
        Busy {
            why: format!("{why} ([limits] {} = {value})", limit.key()),
            retry_after_ms,
            limit,
        }
    }

    /// This refusal once held `held_ms`: that much less to wait.
    pub(super) fn after(self, held_ms: i64) -> Busy {
        Busy {
            retry_after_ms: (self.retry_after_ms - held_ms).max(0),
            ..self
        }
    }
}
