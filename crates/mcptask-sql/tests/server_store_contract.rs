//! The server-task store contract, run on SQLite and on a real PostgreSQL.

use std::sync::Arc;

use mcptask_core::store::ServerTaskStore;
use mcptask_sql::server_contract_cases;
use mcptask_sql::testkit::{fresh_postgres, fresh_sqlite, server_contract};

macro_rules! sqlite_cases {
    ($($case:ident),* $(,)?) => {
        mod sqlite {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    let (store, _dir) = fresh_sqlite().await;
                    let store: Arc<dyn ServerTaskStore> = Arc::new(store);
                    server_contract::$case(store).await;
                }
            )*
        }
    };
}

macro_rules! postgres_cases {
    ($($case:ident),* $(,)?) => {
        mod postgres {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    let Some((store, _url)) = fresh_postgres().await else { return };
                    let store: Arc<dyn ServerTaskStore> = Arc::new(store);
                    server_contract::$case(store).await;
                }
            )*
        }
    };
}

server_contract_cases!(sqlite_cases);
server_contract_cases!(postgres_cases);

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
