//! Injected time. Every component that reasons about leases, TTLs or backoff
//! reads time through a [`Clock`] so tests can move time explicitly instead of
//! sleeping.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

/// A source of wall-clock time in integer milliseconds since the Unix epoch (UTC).
///
/// ```
/// use mcptask_core::{Clock, SystemClock};
/// assert!(SystemClock.now_ms() > 1_700_000_000_000);
/// ```
pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
}

/// The real clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        chrono::Utc::now().timestamp_millis()
    }
}

/// A clock that only moves when told to; clones share the same time.
///
/// ```
/// use mcptask_core::{Clock, ManualClock};
/// let clock = ManualClock::new(10);
/// let other = clock.clone();
/// other.advance(5);
/// assert_eq!(clock.now_ms(), 15);
/// ```
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<AtomicI64>,
}

impl ManualClock {
    /// A clock frozen at `now_ms`.
    pub fn new(now_ms: i64) -> Self {
        Self {
            now: Arc::new(AtomicI64::new(now_ms)),
        }
    }

    /// Move time forward by `ms`.
    pub fn advance(&self, ms: i64) {
        self.now.fetch_add(ms, Ordering::SeqCst);
    }

    /// Jump to an absolute time.
    pub fn set(&self, now_ms: i64) {
        self.now.store(now_ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.now.load(Ordering::SeqCst)
    }
}

/// A shared, dynamically chosen clock.
pub type SharedClock = Arc<dyn Clock>;
