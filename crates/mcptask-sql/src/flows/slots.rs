//! Adopting a slot's earlier incarnations (`crate::slot`): their owner
//! leases and claims lapse at once, so this process's recovery and claims
//! take their work now rather than when the leases would have run out.

use mcptask_core::StoreError;
pub use mcptask_core::slot::Released;

use super::SqlStore;
use super::backend::{Backend, args};

impl<B: Backend> SqlStore<B> {
    /// Let every owner lease and claim whose owner id starts with `prefix`
    /// (a slot's, [`crate::slot::Slot::prefix`]) lapse at `now`, in one
    /// transaction. Call it only while holding that slot and before
    /// registering this incarnation's own ids under it: holding the slot
    /// proves their holder is gone. The claims keep their owners and
    /// tokens, so whoever claims the work next mints a new token and a
    /// former holder's fenced writes are refused.
    pub async fn release_slot(&self, prefix: &str, now: i64) -> Result<Released, StoreError> {
        let lapsed = now - 1;
        let mut tx = self.begin_write().await?;
        let owners = B::execute(&mut tx, B::SQL.release_slot_owners, args![prefix, lapsed]).await?;
        let claims = B::execute(&mut tx, B::SQL.release_slot_claims, args![prefix, lapsed]).await?;
        let notify_claims = B::execute(
            &mut tx,
            B::SQL.release_slot_notify_claims,
            args![prefix, lapsed],
        )
        .await?;
        tx.commit().await.map_err(crate::error::db_err)?;
        Ok(Released {
            owners,
            claims,
            notify_claims,
        })
    }
}
