//! Tracker settings for tests: schedules under which a tracker settles a
//! task in well under a second per step.

use std::time::Duration;

use mcptask_core::client::TrackerPolicy;
use mcptask_core::policy::{Backoff, PollPolicy};

use mcptask_client::TrackerConfig;

/// Settings under which an end-to-end test settles in well under a second per
/// step: polls every 20–300 ms (50 ms when the server suggests nothing),
/// transient errors retried after 50–400 ms and never exhausting the error
/// budget, idle workers looking for work every 20 ms, and short leases and
/// remote-call bounds (2 s) for servers in the test process.
///
/// A test whose servers are separate processes keeps the schedules and
/// lengthens the bounds with struct update syntax:
///
/// ```
/// # use std::time::Duration;
/// let config = mcptask_client::TrackerConfig {
///     connect_timeout: Duration::from_secs(15),
///     ..mcptask_testkit::tracker::fast_config()
/// };
/// # assert_eq!(config.connect_timeout, Duration::from_secs(15));
/// ```
pub fn fast_config() -> TrackerConfig {
    TrackerConfig {
        policy: TrackerPolicy {
            poll: PollPolicy {
                default_ms: 50,
                min_ms: 20,
                max_ms: 300,
                input_required_min_ms: 50,
                jitter_permille: 100,
            },
            backoff: Backoff {
                base_ms: 50,
                max_ms: 400,
            },
            error_budget_ms: 3_600_000,
            ..Default::default()
        },
        lease_ms: 5_000,
        idle_tick: Duration::from_millis(20),
        call_timeout: Duration::from_secs(2),
        connect_timeout: Duration::from_secs(2),
        ..Default::default()
    }
}
