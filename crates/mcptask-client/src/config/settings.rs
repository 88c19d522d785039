//! The keys of a configuration file's `[tracker]` table.
//!
//! Each row of the table below is one key: its type in the file, the
//! [`TrackerConfig`] field it sets (with a conversion where the units differ)
//! and the check its value must pass. From the table come the file's shape
//! (every key optional, unknown keys refused with their position), the
//! overlay on the defaults, and [`TrackerConfig::validate`]'s per-key checks.
//! Exposing a setting in the file is adding its row.

use std::time::Duration;

use serde::{Deserialize, Deserializer};

use super::TrackerConfig;

/// A setting with a value the tracker cannot run with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key} {problem}")]
#[non_exhaustive]
pub struct InvalidSetting {
    /// The file key (under `[tracker]`).
    pub key: &'static str,
    /// What is wrong with its value.
    pub problem: &'static str,
    /// How to fix it.
    pub fix: &'static str,
}

macro_rules! settings {
    (@convert $value:ident) => { $value };
    (@convert $value:ident, $convert:expr) => { ($convert)($value) };
    ($(
        $(#[doc = $doc:literal])*
        $key:ident: $ty:ty => $($field:ident).+ $(as $convert:expr)?, $check:ident;
    )*) => {
        /// The `[tracker]` table as written: every key optional.
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Keys {
            $( $(#[doc = $doc])* #[serde(default)] $key: Option<$ty>, )*
        }

        impl Keys {
            /// Overlay the keys present on `config`.
            fn apply(self, config: &mut TrackerConfig) {
                $(
                    if let Some(value) = self.$key {
                        config.$($field).+ = settings!(@convert value $(, $convert)?);
                    }
                )*
            }
        }

        /// Every key's check, in table order.
        pub(super) fn check(config: &TrackerConfig) -> Result<(), InvalidSetting> {
            $( $check(stringify!($key), &config.$($field).+)?; )*
            Ok(())
        }
    };
}

settings! {
    /// Claim lease; must exceed `call_timeout_ms`.
    lease_ms: i64 => lease_ms, positive;
    /// Rows claimed per statement.
    batch_size: i64 => batch_size, positive;
    /// Remote calls in flight per phase (at least 1).
    max_in_flight: usize => max_in_flight as at_least_one, any_value;
    /// Poll interval when the server suggests none.
    poll_default_ms: i64 => policy.poll.default_ms, positive;
    /// Fastest poll, whatever the server suggests.
    poll_min_ms: i64 => policy.poll.min_ms, positive;
    /// Slowest poll.
    poll_max_ms: i64 => policy.poll.max_ms, positive;
    /// Poll floor while a task waits for input.
    input_required_poll_ms: i64 => policy.poll.input_required_min_ms, any_value;
    /// First backoff after a transient error.
    backoff_base_ms: i64 => policy.backoff.base_ms, positive;
    /// Backoff cap.
    backoff_max_ms: i64 => policy.backoff.max_ms, positive;
    /// How long a task may fail transiently (no good answer since the last
    /// one) before it is failed locally, with a best-effort `tasks/cancel`.
    error_budget_ms: i64 => policy.error_budget_ms, positive;
    /// `tasks/cancel` attempts before cancelling is given up (the task is then
    /// followed to its end; see `TrackerPolicy::max_cancel_attempts`).
    max_cancel_attempts: i64 => policy.max_cancel_attempts, positive;
    /// How long each notify target retries an event before dead-lettering it.
    notify_budget_ms: i64 => policy.notify_budget_ms, positive;
    /// How long a settled task is kept before it is purged.
    retention_ms: i64 => policy.retention_ms, not_negative;
    /// Settled tasks deleted per purge statement.
    purge_batch: i64 => purge_batch, positive;
    /// How often the purge sweep runs (at least 1).
    purge_interval_ms: u64 => purge_interval as millis_at_least_one, any_value;
    /// Slack past `createdAt + ttlMs` before the TTL backstop fails a task.
    ttl_grace_ms: i64 => policy.ttl_grace_ms, any_value;
    /// Default bound on each remote call.
    call_timeout_ms: u64 => call_timeout as Duration::from_millis, any_value;
    /// Default bound on connecting to a server.
    connect_timeout_ms: u64 => connect_timeout as Duration::from_millis, any_value;
    /// Largest result stored as is (larger ones are stored truncated).
    max_result_bytes: usize => policy.limits.max_result_bytes, any_value;
    /// Largest accepted tool arguments.
    max_arguments_bytes: usize => policy.limits.max_arguments_bytes, any_value;
    /// How long an idle worker waits before looking for due work again (at least 1).
    idle_tick_ms: u64 => idle_tick as millis_at_least_one, any_value;
    /// Listen for task status notifications on servers that serve them.
    push: bool => push, any_value;
}

impl<'de> Deserialize<'de> for TrackerConfig {
    /// The defaults, overridden by the `[tracker]` keys present.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let keys = Keys::deserialize(deserializer)?;
        let mut config = TrackerConfig::default();
        keys.apply(&mut config);
        Ok(config)
    }
}

fn positive(key: &'static str, value: &i64) -> Result<(), InvalidSetting> {
    if *value <= 0 {
        return Err(InvalidSetting {
            key,
            problem: "must be positive",
            fix: "use a value greater than 0, or remove the key for the default",
        });
    }
    Ok(())
}

fn not_negative(key: &'static str, value: &i64) -> Result<(), InvalidSetting> {
    if *value < 0 {
        return Err(InvalidSetting {
            key,
            problem: "must not be negative",
            fix: "use 0 or more, or remove the key for the default",
        });
    }
    Ok(())
}

fn any_value<T>(_key: &'static str, _value: &T) -> Result<(), InvalidSetting> {
    Ok(())
}

fn at_least_one(value: usize) -> usize {
    value.max(1)
}

fn millis_at_least_one(value: u64) -> Duration {
    Duration::from_millis(value.max(1))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn read(keys: serde_json::Value) -> Result<TrackerConfig, serde_json::Error> {
        serde_json::from_value(keys)
    }

    #[test]
    fn absent_keys_keep_the_defaults() {
        let config = read(json!({})).unwrap();
        let defaults = TrackerConfig::default();
        assert_eq!(config.policy, defaults.policy);
        assert_eq!(config.lease_ms, defaults.lease_ms);
        assert_eq!(config.idle_tick, defaults.idle_tick);
    }

    #[test]
    fn keys_reach_their_fields() {
        let config = read(json!({
            "lease_ms": 9_000,
            "max_in_flight": 0,
            "poll_default_ms": 7,
            "input_required_poll_ms": 11,
            "backoff_max_ms": 13,
            "ttl_grace_ms": 0,
            "connect_timeout_ms": 1_500,
            "max_arguments_bytes": 17,
            "idle_tick_ms": 0,
        }))
        .unwrap();
        assert_eq!(config.lease_ms, 9_000);
        assert_eq!(config.max_in_flight, 1, "at least one call in flight");
        assert_eq!(config.policy.poll.default_ms, 7);
        assert_eq!(config.policy.poll.input_required_min_ms, 11);
        assert_eq!(config.policy.backoff.max_ms, 13);
        assert_eq!(config.policy.ttl_grace_ms, 0);
        assert_eq!(config.connect_timeout, Duration::from_millis(1_500));
        assert_eq!(config.policy.limits.max_arguments_bytes, 17);
        assert_eq!(
            config.idle_tick,
            Duration::from_millis(1),
            "never a busy loop"
        );
    }

    #[test]
    fn delivery_and_retention_keys_reach_their_fields() {
        let config = read(json!({
            "notify_budget_ms": 1_500,
            "retention_ms": 0,
            "purge_batch": 10,
            "purge_interval_ms": 0,
        }))
        .unwrap();
        assert_eq!(config.policy.notify_budget_ms, 1_500);
        assert_eq!(config.policy.retention_ms, 0, "purge as soon as settled");
        assert_eq!(config.purge_batch, 10);
        assert_eq!(config.purge_interval, Duration::from_millis(1));
        config.validate().unwrap();
        let e = read(json!({"retention_ms": -1}))
            .unwrap()
            .validate()
            .unwrap_err();
        assert_eq!(e.key, "retention_ms");
        let e = read(json!({"max_notify_attempts": 8}))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unknown field"),
            "replaced by notify_budget_ms: {e}"
        );
    }

    #[test]
    fn unknown_keys_are_refused() {
        let e = read(json!({"lease": 1})).unwrap_err().to_string();
        assert!(e.contains("unknown field `lease`"), "{e}");
    }

    #[test]
    fn checks_name_the_key() {
        let e = read(json!({"backoff_base_ms": 0}))
            .unwrap()
            .validate()
            .unwrap_err();
        assert_eq!(e.key, "backoff_base_ms");
        assert_eq!(e.to_string(), "backoff_base_ms must be positive");
        let e = read(json!({"lease_ms": 1_000, "call_timeout_ms": 1_000}))
            .unwrap()
            .validate()
            .unwrap_err();
        assert_eq!(e.key, "lease_ms");
        assert!(
            read(json!({"ttl_grace_ms": -5}))
                .unwrap()
                .validate()
                .is_ok()
        );
    }
}
