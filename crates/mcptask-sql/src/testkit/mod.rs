//! Test support: a throwaway PostgreSQL, temporary SQLite files and the store
//! contract suites. Enabled by the `testkit` feature; never used in production.

pub mod machine;
pub mod pg;
pub mod remote_contract;
pub mod server_contract;

use crate::{SqliteStore, Store};

/// A migrated SQLite store in a fresh temporary directory (kept alive by the
/// returned guard).
pub async fn fresh_sqlite() -> (SqliteStore, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite:{}", dir.path().join("test.db").display());
    let store = SqliteStore::connect(&url).await.expect("open sqlite");
    store.migrate().await.expect("migrate sqlite");
    (store, dir)
}

/// A migrated store on a fresh PostgreSQL database, or `None` when PostgreSQL
/// is unavailable outside CI (the harness has already said so loudly).
pub async fn fresh_postgres() -> Option<(crate::PgStore, String)> {
    let url = pg::fresh_database().await?;
    let store = crate::PgStore::connect(&url)
        .await
        .expect("connect to test postgres");
    store.migrate().await.expect("migrate postgres");
    Some((store, url))
}

/// Both backends as [`Store`]s, for tests that run the same body on each.
pub async fn each_backend() -> Vec<(Store, String, Option<tempfile::TempDir>)> {
    let mut out = Vec::new();
    let (sqlite, dir) = fresh_sqlite().await;
    let url = format!("sqlite:{}", dir.path().join("test.db").display());
    out.push((Store::Sqlite(sqlite), url, Some(dir)));
    if let Some((pg, url)) = fresh_postgres().await {
        out.push((Store::Postgres(pg), url, None));
    }
    out
}
