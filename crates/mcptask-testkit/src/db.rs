//! Test databases: temporary SQLite files and fresh PostgreSQL databases (on
//! the throwaway cluster of [`crate::pg`]), and [`on_both_backends!`](crate::on_both_backends),
//! which runs a store contract case on each.

use mcptask_sql::{PgStore, SqliteStore, Store};

use crate::pg;

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
pub async fn fresh_postgres() -> Option<(PgStore, String)> {
    let url = pg::fresh_database().await?;
    let store = PgStore::connect(&url)
        .await
        .expect("connect to test postgres");
    store.migrate().await.expect("migrate postgres");
    Some((store, url))
}

/// A database for one test: a SQLite file in a temporary directory, or a
/// fresh PostgreSQL database. Each `open` is an independent handle (its own
/// pools), as a separate process would have.
#[derive(Clone)]
pub struct TestDatabase {
    /// `"sqlite"` or `"postgres"`.
    pub backend: &'static str,
    /// The database URL (SQLite file or PostgreSQL database).
    pub url: String,
    _dir: Option<std::sync::Arc<tempfile::TempDir>>,
}

impl TestDatabase {
    /// A fresh SQLite file in a temporary directory (removed with the last clone).
    pub fn sqlite() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite:{}", dir.path().join("mcptask.db").display());
        TestDatabase {
            backend: "sqlite",
            url,
            _dir: Some(std::sync::Arc::new(dir)),
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
        mcptask_sql::open(&self.url)
            .await
            .expect("open the test database")
    }

    /// The server-task store of a new handle.
    pub async fn server_tasks(&self) -> std::sync::Arc<dyn mcptask_core::store::ServerTaskStore> {
        self.open().await.server_tasks()
    }

    /// The remote-task store of a new handle.
    pub async fn remote_tasks(&self) -> std::sync::Arc<dyn mcptask_core::store::RemoteTaskStore> {
        self.open().await.remote_tasks()
    }
}

/// What a test on both backends receives: the database itself, or one of
/// its stores, opened fresh and migrated.
pub trait Fixture: Sized {
    /// Open the fixture on `db`.
    fn open(db: &TestDatabase) -> impl std::future::Future<Output = Self> + Send;
}

impl Fixture for TestDatabase {
    async fn open(db: &TestDatabase) -> Self {
        db.clone()
    }
}

impl Fixture for std::sync::Arc<dyn mcptask_core::store::ServerTaskStore> {
    async fn open(db: &TestDatabase) -> Self {
        db.server_tasks().await
    }
}

impl Fixture for std::sync::Arc<dyn mcptask_core::store::RemoteTaskStore> {
    async fn open(db: &TestDatabase) -> Self {
        db.remote_tasks().await
    }
}

impl Fixture for std::sync::Arc<dyn mcptask_core::store::OAuthTokenStore> {
    async fn open(db: &TestDatabase) -> Self {
        db.open().await.oauth_tokens()
    }
}

impl Fixture for std::sync::Arc<dyn mcptask_core::audit::AuditStore> {
    async fn open(db: &TestDatabase) -> Self {
        db.open().await.audit()
    }
}

/// Run tests on SQLite and on PostgreSQL. Each
/// `async fn name(fixture: F) { … }` (F a [`Fixture`]: a [`TestDatabase`] or
/// one of its stores) becomes module `name` with two tests, `name::sqlite`
/// and `name::postgres`; the function itself is the case, so there is no list
/// of cases to keep. The PostgreSQL test returns early (loudly) when
/// PostgreSQL is unavailable outside CI; under `CI=true` it fails instead.
///
/// The older form `name => path;` runs an existing `async fn(TestDatabase)`.
#[macro_export]
macro_rules! on_both_backends {
    ($($(#[$meta:meta])* async fn $name:ident($arg:ident : $ty:ty) $body:block)+) => {
        $(
            $(#[$meta])*
            mod $name {
                #[allow(unused_imports)]
                use super::*;

                async fn case($arg: $ty) $body

                async fn run(db: $crate::db::TestDatabase) {
                    let fixture = <$ty as $crate::db::Fixture>::open(&db).await;
                    case(fixture).await;
                    drop(db);
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn sqlite() {
                    run($crate::db::TestDatabase::sqlite()).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn postgres() {
                    let Some(db) = $crate::db::TestDatabase::postgres().await else { return };
                    run(db).await;
                }
            }
        )+
    };
    ($($name:ident => $body:path;)*) => {
        mod sqlite_backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    $body($crate::db::TestDatabase::sqlite()).await;
                }
            )*
        }
        mod postgres_backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    let Some(db) = $crate::db::TestDatabase::postgres().await else { return };
                    $body(db).await;
                }
            )*
        }
    };
}
