//! Process slots: an identity on a store that only one live process holds at
//! a time, so a process restarted on the same store can adopt its previous
//! incarnation's work at once instead of waiting for its leases to lapse.
//!
//! A slot is a number guarded by a lock that the operating system or the
//! database releases when its holder dies:
//!
//! - SQLite: an exclusive `flock` on `<database>-slot<N>.lock`, beside the
//!   file. The file is this host's, and the kernel drops the lock with the
//!   process (`kill -9` included).
//! - PostgreSQL: a session-level advisory lock held on a connection of its
//!   own for the process's life; the server drops it when the session ends.
//!
//! A process takes the lowest free slot. Taking slot N proves that no live
//! process holds N, so every owner lease and claim named after N
//! ([`HeldSlot::owner_id`]) belongs to a process that is gone (or, on
//! PostgreSQL, one whose session ended: see [`Slot::lost`]); the new
//! holder lets them lapse ([`crate::SqlStore::release_slot`]) and recovery
//! claims the work with fresh tokens. The fence stays the guard: a former
//! holder that was only cut off writes nothing once its claims were taken.

use std::path::{Path, PathBuf};
use std::time::Duration;

use mcptask_core::StoreError;
use mcptask_core::slot::HeldSlot;
use tokio::sync::watch;

use crate::error::db_err;

/// Slots a process tries before it runs without one (its work is then
/// recovered by lease expiry only, as before slots existed).
pub const MAX_SLOTS: u32 = 64;

/// The advisory-lock class of mcptask's slots (PostgreSQL's two-key form:
/// this class, then the slot number), "mcps" in ASCII.
const PG_SLOT_CLASS: i32 = 0x6d63_7073;

/// How often the holder of a PostgreSQL slot checks that its lock session
/// is still there (and takes the lock again after the session was cut).
const PG_CHECK_EVERY: Duration = Duration::from_secs(1);

/// A slot held by this process, released when dropped (or when the process
/// dies).
pub struct Slot {
    number: u32,
    lost: watch::Receiver<bool>,
    _hold: Hold,
}

/// What keeps the lock.
enum Hold {
    /// The locked file: the lock lives as long as the descriptor.
    File(#[allow(dead_code)] std::fs::File),
    /// The task that holds the PostgreSQL session (aborted on drop, which
    /// closes the connection and so releases the lock).
    Session(tokio::task::JoinHandle<()>),
}

impl Drop for Hold {
    fn drop(&mut self) {
        if let Hold::Session(task) = self {
            task.abort();
        }
    }
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot")
            .field("number", &self.number)
            .finish()
    }
}

impl Slot {
    /// The slot's number (0 for the first process on a store).
    pub fn number(&self) -> u32 {
        self.number
    }

    /// What every owner id of this slot starts with: the key by which a
    /// later holder finds this incarnation's leases and claims.
    pub fn prefix(&self) -> String {
        prefix_of(self.number)
    }

    /// Resolves when the slot was lost: its PostgreSQL session ended and,
    /// when it could be opened again, another process held the slot. That
    /// process may adopt this one's work at once; this one's fenced writes
    /// are refused from then on, and it should stop. Never resolves on
    /// SQLite (a lock held by the process itself cannot be cut).
    pub async fn lost(&self) {
        let mut lost = self.lost.clone();
        if lost.wait_for(|lost| *lost).await.is_err() {
            // No one can tell any more (a lock the process holds itself).
            std::future::pending::<()>().await;
        }
    }
}

/// How the runtimes hold a slot: its owner ids are
/// [`HeldSlot::owner_id`]'s, the slot's prefix before a fresh id, so each
/// incarnation still has an id of its own.
impl HeldSlot for Slot {
    fn number(&self) -> u32 {
        Slot::number(self)
    }

    fn prefix(&self) -> String {
        Slot::prefix(self)
    }

    fn lost(&self) -> futures::future::BoxFuture<'_, ()> {
        Box::pin(Slot::lost(self))
    }
}

/// The owner-id prefix of slot `number`.
fn prefix_of(number: u32) -> String {
    format!("slot{number}.")
}

/// The lock file of slot `number` of the SQLite database at `db`.
fn lock_path(db: &Path, number: u32) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(format!("-slot{number}.lock"));
    PathBuf::from(name)
}

/// Take the lowest free slot of the SQLite database at `db`. `None`: all
/// [`MAX_SLOTS`] are held.
pub(crate) fn take_sqlite(db: &Path) -> Result<Option<Slot>, StoreError> {
    for number in 0..MAX_SLOTS {
        let path = lock_path(db, number);
        let mut options = std::fs::OpenOptions::new();
        options.read(true).write(true).create(true).truncate(false);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let file = options.open(&path).map_err(|e| {
            StoreError::Database(
                format!("cannot open the slot lock {}: {e}", path.display()).into(),
            )
        })?;
        match file.try_lock() {
            Ok(()) => {
                return Ok(Some(Slot {
                    number,
                    lost: watch::channel(false).1,
                    _hold: Hold::File(file),
                }));
            }
            Err(std::fs::TryLockError::WouldBlock) => continue,
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(StoreError::Database(
                    format!("cannot lock {}: {e}", path.display()).into(),
                ));
            }
        }
    }
    Ok(None)
}

/// Take the lowest free slot of the PostgreSQL database `pool` connects to,
/// on a connection of its own. `None`: all [`MAX_SLOTS`] are held.
///
/// On a host list (`primary`), the lock follows the pool to a new primary:
/// the session holding it dies with the old one.
pub(crate) async fn take_postgres(
    pool: sqlx::PgPool,
    primary: Option<std::sync::Arc<crate::postgres::failover::Primary>>,
) -> Result<Option<Slot>, StoreError> {
    use sqlx::Connection;
    let generation = primary.as_ref().map_or(0, |p| p.generation());
    let mut conn = sqlx::PgConnection::connect_with(&pool.connect_options())
        .await
        .map_err(db_err)?;
    for number in 0..MAX_SLOTS {
        if try_pg_lock(&mut conn, number).await? {
            let (tell, lost) = watch::channel(false);
            let session = LockSession {
                conn,
                generation,
                pool,
                primary,
            };
            let task = tokio::spawn(hold_pg(session, number, tell));
            return Ok(Some(Slot {
                number,
                lost,
                _hold: Hold::Session(task),
            }));
        }
    }
    Ok(None)
}

async fn try_pg_lock(conn: &mut sqlx::PgConnection, number: u32) -> Result<bool, StoreError> {
    sqlx::query_scalar("SELECT pg_try_advisory_lock($1, $2)")
        .bind(PG_SLOT_CLASS)
        .bind(number as i32)
        .fetch_one(conn)
        .await
        .map_err(db_err)
}

/// The session holding a slot's lock, and where a new one would go.
struct LockSession {
    conn: sqlx::PgConnection,
    /// The host list's generation the session was opened in.
    generation: u64,
    /// Its connect options are the current primary's.
    pool: sqlx::PgPool,
    primary: Option<std::sync::Arc<crate::postgres::failover::Primary>>,
}

impl LockSession {
    /// Whether the session still holds the lock where the store writes: it
    /// answers, and the pool has not moved to another host since it opened.
    async fn holds(&mut self) -> bool {
        use sqlx::Connection;
        let moved = self
            .primary
            .as_ref()
            .is_some_and(|p| p.generation() != self.generation);
        !moved && self.conn.ping().await.is_ok()
    }

    /// Close the held session (ending its lock) if it still answers.
    async fn release_old(&mut self) {
        use sqlx::Connection;
        if self.conn.ping().await.is_ok() {
            let _ = sqlx::query("SELECT pg_advisory_unlock_all()")
                .execute(&mut self.conn)
                .await;
        }
    }

    /// A session on the store's current host, and the generation it is of.
    async fn reopen(&self) -> Result<(sqlx::PgConnection, u64), sqlx::Error> {
        use sqlx::Connection;
        let generation = self.primary.as_ref().map_or(0, |p| p.generation());
        let conn = sqlx::PgConnection::connect_with(&self.pool.connect_options()).await?;
        Ok((conn, generation))
    }
}

/// Keep slot `number`'s session: check it every [`PG_CHECK_EVERY`]; when
/// it was cut (a database restart, a failover) or the store moved to
/// another primary, connect again and take the lock again. If another
/// process took it meanwhile, say so through `tell` and stop.
async fn hold_pg(mut session: LockSession, number: u32, tell: watch::Sender<bool>) {
    loop {
        tokio::time::sleep(PG_CHECK_EVERY).await;
        if session.holds().await {
            continue;
        }
        tracing::warn!(
            slot = number,
            "the session holding this process's slot ended (or the primary moved); taking the slot again"
        );
        loop {
            // A connect or query error: the database is still away (or
            // still a standby); try again on the next round.
            if let Ok((mut fresh, generation)) = session.reopen().await {
                // A session that still answers holds the lock where the
                // store no longer writes, possibly on the same server (a
                // `-rw` address): let it go first, or the new session would
                // find the slot taken by this very process.
                session.release_old().await;
                match try_pg_lock(&mut fresh, number).await {
                    Ok(true) => {
                        tracing::info!(slot = number, "slot taken again");
                        // The old session (if it still answers, on a host
                        // the store left) goes, and its lock with it.
                        session.conn = fresh;
                        session.generation = generation;
                        break;
                    }
                    Ok(false) => {
                        tracing::error!(
                            slot = number,
                            "another process took this process's slot while its session was down: it may adopt this process's work, whose fenced writes are refused from now on"
                        );
                        let _ = tell.send(true);
                        return;
                    }
                    Err(_) => {}
                }
            }
            tokio::time::sleep(PG_CHECK_EVERY).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_sqlite_slot_is_skipped_and_freed_on_drop() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let db = dir.path().join("mcptask.db");
        let first = take_sqlite(&db).expect("lock").expect("a slot");
        let second = take_sqlite(&db).expect("lock").expect("a slot");
        assert_eq!((first.number(), second.number()), (0, 1));
        assert!(second.owner_id("server").starts_with("slot1.server-"));
        drop(first);
        let again = take_sqlite(&db).expect("lock").expect("a slot");
        assert_eq!(again.number(), 0, "a released slot is free again");
    }
}
