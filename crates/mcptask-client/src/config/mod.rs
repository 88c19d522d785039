//! Tracker settings with production defaults.
//!
//! A setting lives in one place: a field of [`TrackerConfig`] (or of the core
//! [`TrackerPolicy`] it contains, when the pure transition rules use it), with
//! its default in that struct's `Default`. A configuration file reaches it
//! through one row of the key table in `settings` ([`TrackerConfig`] is
//! `Deserialize`), which also says what values the key accepts; the gateway's
//! `[tracker]` section is this struct, so nothing is copied field by field.

mod settings;

use std::time::Duration;

use mcptask_core::client::TrackerPolicy;

pub use settings::InvalidSetting;

/// Settings of a [`Tracker`](crate::Tracker).
///
/// ```
/// let config = mcptask_client::TrackerConfig::default();
/// assert!(config.lease_ms > config.call_timeout.as_millis() as i64);
/// ```
///
/// It also reads the keys of a configuration file's `[tracker]` table (every
/// key optional; the defaults apply to the rest):
///
/// ```
/// # use std::time::Duration;
/// # use mcptask_client::TrackerConfig;
/// let config: TrackerConfig = serde_json::from_value(serde_json::json!({
///     "poll_min_ms": 100,
///     "call_timeout_ms": 5_000,
/// }))?;
/// assert_eq!(config.policy.poll.min_ms, 100);
/// assert_eq!(config.call_timeout, Duration::from_secs(5));
/// assert_eq!(config.lease_ms, TrackerConfig::default().lease_ms);
/// config.validate()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct TrackerConfig {
    /// Scheduling, retry budgets and payload bounds.
    pub policy: TrackerPolicy,
    /// How long a claim lasts; must exceed `call_timeout` so a live claim never lapses mid-call.
    pub lease_ms: i64,
    /// Rows claimed per statement.
    pub batch_size: i64,
    /// Remote calls in flight per phase in this process.
    pub max_in_flight: usize,
    /// Results applied per transaction at most.
    pub apply_batch: usize,
    /// How long an idle phase waits before looking for due work again.
    pub idle_tick: Duration,
    /// Default bound on every remote call (servers may set their own).
    pub call_timeout: Duration,
    /// Default bound on connecting to a server.
    pub connect_timeout: Duration,
    /// Events per notification claim at most.
    pub notify_batch_events: i64,
    /// Settled tasks deleted per purge statement (the sweep repeats while
    /// batches come back full).
    pub purge_batch: i64,
    /// How often the purge sweep looks for settled tasks past their retention.
    pub purge_interval: Duration,
    /// Whether to run the workers (tests drive steps by hand).
    pub background: bool,
    /// Listen for task status notifications (`subscriptions/listen`) on the
    /// Streamable HTTP servers that serve them, and poll a task as soon as
    /// its server says it changed. Polling stays the truth: a server that
    /// does not serve them, or a lost stream, leaves tasks on their normal
    /// schedule. Needs the workers (`background`).
    pub push: bool,
}

impl Default for TrackerConfig {
    fn default() -> Self {
        Self {
            policy: TrackerPolicy {
                limits: mcptask_core::payload::PayloadLimits {
                    max_result_bytes: 1024 * 1024,
                    ..Default::default()
                },
                ..Default::default()
            },
            lease_ms: 60_000,
            batch_size: 64,
            max_in_flight: 64,
            apply_batch: 256,
            idle_tick: Duration::from_millis(200),
            call_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(30),
            notify_batch_events: 32,
            purge_batch: 1_000,
            purge_interval: Duration::from_secs(60),
            background: true,
            push: true,
        }
    }
}

impl TrackerConfig {
    /// Check the values a configuration file may set: counts and intervals
    /// must be positive, and a claim must outlive the call it covers.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        settings::check(self)?;
        if self.lease_ms <= self.call_timeout.as_millis() as i64 {
            return Err(InvalidSetting {
                key: "lease_ms",
                problem: "must exceed the call timeout",
                fix: "raise lease_ms (a claim must outlive the remote call it covers)",
            });
        }
        Ok(())
    }
}
