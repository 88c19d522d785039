//! Process slots, as the runtimes see them: an identity on a store that only
//! one live process holds at a time.
//!
//! The store keeps the lock behind a slot (`mcptask_sql::slot`: a file lock
//! on SQLite, an advisory lock on PostgreSQL) and drops it when its holder
//! dies. So a process that takes a slot knows every owner lease and claim
//! named after it ([`HeldSlot::owner_id`]) was left by a process that is
//! gone, and may let them lapse at once
//! ([`ServerTaskStore::release_slot`](crate::store::ServerTaskStore::release_slot))
//! instead of waiting for them to run out.

use futures::future::BoxFuture;

/// A process slot this process holds; the store's lock on it lives as long
/// as this value (or the process).
pub trait HeldSlot: Send + Sync + 'static {
    /// The slot's number (0 for the first process on a store).
    fn number(&self) -> u32;

    /// What every owner id of this slot starts with: the key by which a
    /// later holder finds this incarnation's leases and claims.
    fn prefix(&self) -> String;

    /// A fresh owner id for `role` (`server`, `tracker`) in this slot: the
    /// slot's [`prefix`](Self::prefix), then an id of this incarnation's own.
    fn owner_id(&self, role: &str) -> String {
        format!("{}{}", self.prefix(), crate::ids::new_owner_id(role))
    }

    /// Resolves when the slot was lost to another process (the lock's
    /// session was cut and someone else took the slot meanwhile): that
    /// process may adopt this one's work, whose fenced writes are refused
    /// from then on. Never resolves where a lock cannot be cut.
    fn lost(&self) -> BoxFuture<'_, ()>;
}

/// What adopting a slot's earlier incarnations let lapse
/// ([`ServerTaskStore::release_slot`](crate::store::ServerTaskStore::release_slot)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Released {
    /// Owner leases of a task runtime (their live tasks are recovered by
    /// the next recovery pass, per each tool's interrupt policy).
    pub owners: u64,
    /// Work claims (poll, cancel, update) on live tracked tasks.
    pub claims: u64,
    /// Notify claims on tasks with undelivered events.
    pub notify_claims: u64,
}
