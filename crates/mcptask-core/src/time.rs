//! Conversions between stored integer milliseconds and RFC 3339 wire strings.

use chrono::{DateTime, SecondsFormat, Utc};

/// Render epoch milliseconds as an RFC 3339 UTC timestamp with millisecond precision.
///
/// ```
/// assert_eq!(mcptask_core::time::to_rfc3339(0), "1970-01-01T00:00:00.000Z");
/// ```
pub fn to_rfc3339(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .unwrap_or(DateTime::<Utc>::UNIX_EPOCH)
        .to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Parse an ISO 8601 / RFC 3339 timestamp into epoch milliseconds.
///
/// ```
/// assert_eq!(mcptask_core::time::parse_rfc3339("1970-01-01T00:00:01Z"), Some(1000));
/// assert_eq!(mcptask_core::time::parse_rfc3339("yesterday"), None);
/// ```
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.timestamp_millis())
}
