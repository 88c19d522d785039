//! Configuration changed through the admin API: each entry is one object of
//! the configuration (a `[[servers]]` table today) kept in the store, so
//! that it survives restarts and every replica applies it. The gateway
//! merges the entries with the configuration file and checks the result as
//! it checks the file; the store only keeps them and says when they change.

use async_trait::async_trait;
use futures::stream::BoxStream;

use crate::StoreError;

/// One object of the configuration set through the admin API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminEntry {
    /// The configuration's array it belongs to (`servers`).
    pub kind: String,
    /// Its name, unique within its kind.
    pub name: String,
    /// The object as the file would hold it: one TOML table, checked.
    pub body: String,
    /// Who set it (the principal, or the operator token's print).
    pub changed_by: String,
    /// When (epoch ms).
    pub changed_at_ms: i64,
}

/// The stored admin entries, and the signal that they changed.
#[async_trait]
pub trait AdminConfigStore: Send + Sync {
    /// Every entry, by kind and name.
    async fn list_admin_entries(&self) -> Result<Vec<AdminEntry>, StoreError>;

    /// Insert or replace the entry of `entry.kind` and `entry.name`, and
    /// tell every replica ([`AdminConfigStore::listen_admin_changes`]).
    async fn put_admin_entry(&self, entry: &AdminEntry) -> Result<(), StoreError>;

    /// Delete an entry (and tell every replica); `false` when there was none.
    async fn delete_admin_entry(&self, kind: &str, name: &str) -> Result<bool, StoreError>;

    /// A wake-up each time some replica changed the entries (hints: the
    /// listener re-reads them all; it also re-reads now and then, since a
    /// reconnecting channel loses what was sent meanwhile). `None`: the
    /// backend has no channel.
    async fn listen_admin_changes(&self) -> Result<Option<BoxStream<'static, ()>>, StoreError>;
}
