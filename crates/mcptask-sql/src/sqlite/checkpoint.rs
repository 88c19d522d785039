//! WAL checkpoints off the request path.
//!
//! SQLite's automatic checkpoint runs inside the COMMIT of whichever write
//! pushes the WAL past its threshold: that request then copies the WAL's
//! pages into the database file and fsyncs it. On a large store those pages
//! are scattered, and such commits were the whole p99 of `tasks/update` and
//! `tasks/cancel` at a million tasks (docs/BENCHMARKS.md, "Scale"). Here a
//! background task checkpoints often (`PASSIVE`: it never waits for, nor
//! blocks, the writer or the readers), and the writer's own automatic
//! checkpoint stays only as a backstop at a much larger WAL, for when this
//! task cannot keep up or is not running.

use std::time::Duration;

use sqlx::SqlitePool;
use tokio::sync::oneshot;

/// How often the background task checkpoints.
pub(crate) const CHECKPOINT_EVERY: Duration = Duration::from_millis(200);

/// The writer's own automatic checkpoint, in WAL pages (`PRAGMA
/// wal_autocheckpoint`; SQLite's default is 1,000): about 40 MiB of WAL at
/// 4 KiB pages before a request runs a checkpoint itself.
pub(crate) const BACKSTOP_PAGES: &str = "10000";

/// Stops the checkpoint task when the last handle of its store is dropped.
#[derive(Debug)]
pub(crate) struct Checkpointer {
    _stop: oneshot::Sender<()>,
}

impl Checkpointer {
    /// Checkpoint `pool`'s database every [`CHECKPOINT_EVERY`] until the
    /// returned handle is dropped or the pool is closed.
    pub(crate) fn start(pool: SqlitePool) -> Self {
        let (stop, mut stopped) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(CHECKPOINT_EVERY);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = &mut stopped => return,
                    _ = every.tick() => {}
                }
                if pool.is_closed() {
                    return;
                }
                if let Err(e) = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
                    .execute(&pool)
                    .await
                {
                    // The writer's backstop still bounds the WAL.
                    tracing::debug!(error = %e, "background WAL checkpoint failed");
                }
            }
        });
        Checkpointer { _stop: stop }
    }
}
