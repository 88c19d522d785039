//! Runtime settings with production defaults.

use mcptask_core::payload::PayloadLimits;

/// Settings of a [`TaskRuntime`](crate::TaskRuntime).
///
/// ```
/// let config = mcptask_server::RuntimeConfig { lease_ms: 5_000, ..Default::default() };
/// assert!(config.heartbeat_every_ms() < config.lease_ms);
/// ```
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// How long this process's owner lease lasts without a heartbeat. Other
    /// replicas recover its tasks once it lapses.
    pub lease_ms: i64,
    /// How often to look for tasks whose owner's lease lapsed.
    pub recovery_every_ms: i64,
    /// How often to fail tasks past their TTL and purge expired rows.
    pub sweep_every_ms: i64,
    /// How often to re-check the store for answers and cancellations this
    /// process may have missed (signals are hints; this is the backstop).
    pub backstop_every_ms: i64,
    /// How far back each backstop re-check looks (covers slow commits and clock skew).
    pub backstop_window_ms: i64,
    /// How often an open `subscriptions/listen` stream re-reads the tasks it
    /// watches without being told of a change: the backstop for a change
    /// notice lost between replicas (a notice is a hint; the store is the
    /// truth).
    pub listen_recheck_every_ms: i64,
    /// How long a settled or expired task stays readable after its TTL.
    pub retention_ms: i64,
    /// TTL given to tasks whose tool does not set one; `None` = unlimited.
    pub default_ttl_ms: Option<i64>,
    /// `pollIntervalMs` suggested to clients when the tool does not set one.
    pub default_poll_interval_ms: i64,
    /// Rows claimed, expired or purged per statement.
    pub batch_size: i64,
    /// Creates committed together at most (group commit).
    pub max_create_batch: usize,
    /// Concurrent create transactions, each a group commit. `None` (the
    /// default): the store's own choice
    /// ([`ServerTaskStore::create_writers`](mcptask_core::store::ServerTaskStore::create_writers)),
    /// 1 on SQLite's single writer and 4 on PostgreSQL, where a single writer
    /// cannot outrun PostgreSQL's own group commit (docs/BENCHMARKS.md,
    /// "Server against the raw limit").
    pub create_writers: Option<usize>,
    /// Creates waiting for their commit, at most. A create beyond it is
    /// refused at once with a "server busy" error ([`crate::SERVER_BUSY`])
    /// rather than queued without bound. Default 4096.
    pub max_create_queue: usize,
    /// Live tasks this process runs at once (created here or recovered from
    /// a dead replica); `None` = no cap. A create beyond it is refused with
    /// [`crate::SERVER_BUSY`]; recovery is never refused. Default 10 000.
    pub max_live_tasks: Option<usize>,
    /// Live tasks of one authenticated principal this process runs at once;
    /// `None` = no cap. Anonymous callers are bound by `max_live_tasks` only.
    /// Default 1 000.
    pub max_live_tasks_per_principal: Option<usize>,
    /// Payload bounds.
    pub limits: PayloadLimits,
    /// Whether to run the maintenance loops (tests drive them by hand).
    pub background: bool,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            lease_ms: 30_000,
            recovery_every_ms: 5_000,
            sweep_every_ms: 1_000,
            backstop_every_ms: 2_000,
            backstop_window_ms: 60_000,
            listen_recheck_every_ms: 30_000,
            retention_ms: 3_600_000,
            default_ttl_ms: Some(3_600_000),
            default_poll_interval_ms: 1_000,
            batch_size: 200,
            max_create_batch: 256,
            create_writers: None,
            max_create_queue: 4_096,
            max_live_tasks: Some(10_000),
            max_live_tasks_per_principal: Some(1_000),
            limits: PayloadLimits::default(),
            background: true,
        }
    }
}

impl RuntimeConfig {
    /// Heartbeats come three times per lease, so one lost write never lapses it.
    pub fn heartbeat_every_ms(&self) -> i64 {
        (self.lease_ms / 3).max(1)
    }
}
