//! The audit trail's writer: every call's end and every refusal, as
//! [`crate::metrics::call_ended`] sees it, goes to the store without ever
//! slowing the call.
//!
//! [`record`] puts the entry in a bounded channel and returns at once; one
//! background writer per gateway takes what the channel holds and appends it
//! in batches (one transaction each). When the channel is full (the store
//! is slower than the calls for a while) the entry is dropped and counted in
//! `mcptask_audit_dropped_total{reason="full"}`; a batch the store refuses
//! is counted with `reason="store"`. Both are logged once per writer. So the
//! trail is complete while the store keeps up, and says how much it lost
//! when it did not; it is not a ledger written in the call's transaction.
//!
//! The same writer runs the retention sweep (`[audit] retention_days`, the
//! rule is [`mcptask_core::audit::purge_before`]) every purge interval of
//! the tracker (`[tracker] purge_interval_ms`).
//!
//! Like the metrics recorder, the channel is process-wide: one gateway per
//! process records (the last one started).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use mcptask_core::Clock;
use mcptask_core::audit::{AuditEvent, AuditStore, purge_before};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Entries waiting for the writer, at most.
const QUEUE: usize = 8_192;

/// Entries appended per transaction, at most.
const BATCH: usize = 256;

/// Entries deleted per purge statement.
const PURGE_BATCH: i64 = 1_000;

/// How long a shutdown waits for the writer to append what is queued.
const FLUSH: Duration = Duration::from_secs(5);

/// The channel of the gateway that records now.
static SINK: RwLock<Option<mpsc::Sender<AuditEvent>>> = RwLock::new(None);

/// Whether a full channel was logged already (once per process).
static TOLD_FULL: AtomicBool = AtomicBool::new(false);

/// Hand `event` to the writer; never waits. Nothing happens when no
/// writer runs (a library user that started none, or `[audit] enabled =
/// false`).
pub fn record(event: AuditEvent) {
    let sink = SINK.read().unwrap_or_else(|e| e.into_inner());
    let Some(sender) = sink.as_ref() else {
        return;
    };
    if let Err(mpsc::error::TrySendError::Full(_)) = sender.try_send(event) {
        dropped("full", 1);
        if !TOLD_FULL.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                queue = QUEUE,
                "the audit trail's queue is full (the store does not keep up): entries are dropped and counted in mcptask_audit_dropped_total"
            );
        }
    }
}

fn dropped(reason: &'static str, n: u64) {
    metrics::counter!("mcptask_audit_dropped_total", "reason" => reason).increment(n);
}

/// Settings of the writer.
#[derive(Debug, Clone, Copy)]
pub struct AuditSettings {
    /// How long an entry is kept (ms).
    pub retention_ms: i64,
    /// How often the retention sweep runs.
    pub sweep_every: Duration,
}

/// A running writer; [`Audit::finish`] appends what is queued and stops it.
pub struct Audit {
    sender: mpsc::Sender<AuditEvent>,
    writer: JoinHandle<()>,
}

impl Audit {
    /// Start the writer on `store`, and make it the one [`record`] feeds.
    pub fn start(
        store: Arc<dyn AuditStore>,
        clock: Arc<dyn Clock>,
        settings: AuditSettings,
    ) -> Audit {
        let (sender, receiver) = mpsc::channel(QUEUE);
        *SINK.write().unwrap_or_else(|e| e.into_inner()) = Some(sender.clone());
        let writer = tokio::spawn(write(store, clock, settings, receiver));
        Audit { sender, writer }
    }

    /// Stop taking entries, append those queued (for a while at most), and
    /// stop the writer.
    pub async fn finish(self) {
        {
            let mut sink = SINK.write().unwrap_or_else(|e| e.into_inner());
            if sink.as_ref().is_some_and(|s| s.same_channel(&self.sender)) {
                *sink = None;
            }
        }
        // The writer drains the channel and ends once no sender is left.
        drop(self.sender);
        let mut writer = self.writer;
        if tokio::time::timeout(FLUSH, &mut writer).await.is_err() {
            tracing::warn!(
                "the audit trail's writer did not finish in time; queued entries are lost"
            );
            writer.abort();
        }
    }
}

/// The writer: batches appended as they come, the sweep on its tick.
async fn write(
    store: Arc<dyn AuditStore>,
    clock: Arc<dyn Clock>,
    settings: AuditSettings,
    mut receiver: mpsc::Receiver<AuditEvent>,
) {
    let mut sweep = tokio::time::interval(settings.sweep_every.max(Duration::from_millis(1)));
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut told = false;
    let mut batch = Vec::with_capacity(BATCH);
    loop {
        tokio::select! {
            got = receiver.recv_many(&mut batch, BATCH) => {
                if got == 0 {
                    return;
                }
                match store.append_audit(&batch).await {
                    Ok(()) => metrics::counter!("mcptask_audit_events_total").increment(batch.len() as u64),
                    Err(e) => {
                        dropped("store", batch.len() as u64);
                        if !told {
                            told = true;
                            tracing::warn!(error = %e, "the store refused audit entries: they are dropped and counted in mcptask_audit_dropped_total");
                        }
                    }
                }
                batch.clear();
            }
            _ = sweep.tick() => {
                let before = purge_before(clock.now_ms(), settings.retention_ms);
                if let Err(e) = purge(store.as_ref(), before).await {
                    tracing::warn!(error = %e, "purge of the audit trail failed; retrying later");
                }
            }
        }
    }
}

/// Delete entries recorded before `before`, a batch per statement, until a
/// batch comes back short.
async fn purge(store: &dyn AuditStore, before: i64) -> Result<(), mcptask_core::StoreError> {
    loop {
        let n = store.purge_audit(before, PURGE_BATCH).await?;
        metrics::counter!("mcptask_audit_purged_total").increment(n);
        if (n as i64) < PURGE_BATCH {
            return Ok(());
        }
    }
}

/// The `# HELP` of the trail's own series, registered at zero (with the
/// recorder, [`crate::metrics::install`]).
pub(crate) fn describe() {
    metrics::describe_counter!(
        "mcptask_audit_events_total",
        "Audit trail entries written to the store."
    );
    metrics::describe_counter!(
        "mcptask_audit_dropped_total",
        "Audit trail entries lost: the queue was full (reason=full) or the store refused them (reason=store)."
    );
    metrics::describe_counter!(
        "mcptask_audit_purged_total",
        "Audit trail entries deleted after [audit] retention_days."
    );
    metrics::counter!("mcptask_audit_events_total").absolute(0);
    metrics::counter!("mcptask_audit_purged_total").absolute(0);
    for reason in ["full", "store"] {
        metrics::counter!("mcptask_audit_dropped_total", "reason" => reason).absolute(0);
    }
}
