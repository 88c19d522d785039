//! Test support: a throwaway PostgreSQL, temporary SQLite files and the store
//! contract suites. Enabled by the `testkit` feature; never used in production.

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

/// A database for one test: a SQLite file in a temporary directory, or a
/// fresh PostgreSQL database. Each `open` is an independent handle (its own
/// pools), as a separate process would have.
pub struct TestDatabase {
    /// `"sqlite"` or `"postgres"`.
    pub backend: &'static str,
    pub url: String,
    _dir: Option<tempfile::TempDir>,
}

impl TestDatabase {
    pub fn sqlite() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite:{}", dir.path().join("mcptask.db").display());
        TestDatabase {
            backend: "sqlite",
            url,
            _dir: Some(dir),
        }
    }

    /// A fresh PostgreSQL database, or `None` (after a loud SKIPPED line) when
    /// PostgreSQL is unavailable outside CI. Under `CI=true` this panics instead.
    pub async fn postgres() -> Option<Self> {
        let url = pg::fresh_database().await?;
        Some(TestDatabase {
            backend: "postgres",
            url,
            _dir: None,
        })
    }

    /// A new, migrated handle to this database.
    pub async fn open(&self) -> Store {
        crate::open(&self.url)
            .await
            .expect("open the test database")
    }

    pub async fn server_tasks(&self) -> std::sync::Arc<dyn mcptask_core::store::ServerTaskStore> {
        self.open().await.server_tasks()
    }

    pub async fn remote_tasks(&self) -> std::sync::Arc<dyn mcptask_core::store::RemoteTaskStore> {
        self.open().await.remote_tasks()
    }
}

/// Define each `name => body;` pair as two tests, `sqlite_backend::name` and
/// `postgres_backend::name`, each calling `body(TestDatabase)`. The PostgreSQL
/// one returns early (loudly) when PostgreSQL is unavailable outside CI.
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident => $body:path;)*) => {
        mod sqlite_backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    $body($crate::testkit::TestDatabase::sqlite()).await;
                }
            )*
        }
        mod postgres_backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    let Some(db) = $crate::testkit::TestDatabase::postgres().await else { return };
                    $body(db).await;
                }
            )*
        }
    };
}
