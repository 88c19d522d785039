//! The server-task store contract, run on SQLite and on a real PostgreSQL.
//!
//! Every backend must pass every case: each case takes a fresh, migrated,
//! empty store and runs on SQLite and on a real PostgreSQL (see
//! `mcptask_testkit::on_both_backends!`). Times are explicit, so every schedule is
//! exact. Cases are grouped by topic, one module each.

mod claims;
mod faults;
mod front;
mod inputs;
mod retention;
pub(crate) mod support;
mod tasks;

use mcptask_testkit::db::fresh_postgres;

/// A stalled process must not hold row locks (and so block every other
/// process's claims) indefinitely.
#[tokio::test]
async fn postgres_sessions_end_idle_transactions() {
    let Some((store, _url)) = fresh_postgres().await else {
        return;
    };
    let setting: String = sqlx::query_scalar("SHOW idle_in_transaction_session_timeout")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(setting, "30s");
}
