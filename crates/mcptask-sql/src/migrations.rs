//! The migrations, embedded in the library.
//!
//! sqlx's `migrate!` macro would embed them for us, but it lives in
//! `sqlx-macros`, which builds sqlx's SQLite and PostgreSQL drivers (and the C
//! SQLite library) a second time for the compiler's host: a large part of a
//! cold build. We use no other sqlx macro, so the list is written here and
//! resolved the way sqlx resolves a directory: the version and description
//! come from the file name, the checksum from the text. Databases migrated by
//! either way agree (the test below compares against sqlx's own resolver).

use std::borrow::Cow;
use std::sync::LazyLock;

use sqlx::migrate::{Migration, MigrationType, Migrator};

/// One migration file: its name in `migrations/<engine>/` and its text.
type File = (&'static str, &'static str);

/// Every migration has one file per engine under the same name, so one list
/// makes both: `SQLITE` from `migrations/sqlite/`, `POSTGRES` from
/// `migrations/postgres/`.
macro_rules! files {
    ($($name:literal),* $(,)?) => {
        const SQLITE: &[File] =
            &[$(($name, include_str!(concat!("../migrations/sqlite/", $name)))),*];
        const POSTGRES: &[File] =
            &[$(($name, include_str!(concat!("../migrations/postgres/", $name)))),*];
    };
}

files!(
    "0001_server_tasks.sql",
    "0002_remote_tasks.sql",
    "0003_drop_claim_phase.sql",
    "0004_delivery_and_retention.sql",
    "0005_front.sql",
    "0006_remote_driver.sql",
    "0007_poll_hint.sql",
    "0008_calls.sql",
    "0009_oauth_tokens.sql",
    "0010_trace_context.sql",
    "0011_attempt.sql",
    "0012_audit.sql",
    "0013_calls_by_tool.sql",
    "0014_admin_config.sql",
    "0015_audit_via.sql",
);

/// The SQLite migrations.
pub(crate) fn sqlite() -> &'static Migrator {
    static MIGRATOR: LazyLock<Migrator> = LazyLock::new(|| migrator(SQLITE));
    &MIGRATOR
}

/// The PostgreSQL migrations.
pub(crate) fn postgres() -> &'static Migrator {
    static MIGRATOR: LazyLock<Migrator> = LazyLock::new(|| migrator(POSTGRES));
    &MIGRATOR
}

fn migrator(files: &'static [File]) -> Migrator {
    let mut migrations: Vec<Migration> = files
        .iter()
        .map(|&(name, sql)| migration(name, sql))
        .collect();
    migrations.sort();
    Migrator {
        migrations: Cow::Owned(migrations),
        ..Migrator::DEFAULT
    }
}

/// `0007_poll_hint.sql` → version 7, description "poll hint" (as sqlx names it).
fn migration(name: &'static str, sql: &'static str) -> Migration {
    let (version, rest) = name
        .split_once('_')
        .expect("a migration file is named <version>_<description>.sql");
    let version = version
        .parse()
        .expect("a migration file name starts with its version");
    let migration_type = MigrationType::from_filename(rest);
    let description = rest
        .trim_end_matches(migration_type.suffix())
        .replace('_', " ");
    Migration::new(
        version,
        Cow::Owned(description),
        migration_type,
        sqlx::SqlStr::from_static(sql),
        sql.starts_with("-- no-transaction"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The embedded list is the directory, file for file, and each migration
    /// is what sqlx's own resolver makes of it (same checksum, so databases
    /// migrated before the list replaced `migrate!` still validate).
    async fn same_as_sqlx(engine: &str, embedded: &Migrator) {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("migrations")
            .join(engine);
        let resolved = Migrator::new(dir.as_path())
            .await
            .expect("sqlx resolves the directory");
        let names = |m: &Migrator| {
            m.iter()
                .map(|m| {
                    (
                        m.version,
                        m.description.to_string(),
                        m.migration_type,
                        m.checksum.to_vec(),
                        m.no_tx,
                    )
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names(embedded),
            names(&resolved),
            "crates/mcptask-sql/src/migrations.rs must list every file of migrations/{engine}"
        );
        for (ours, theirs) in embedded.iter().zip(resolved.iter()) {
            assert_eq!(ours.sql.as_str(), theirs.sql.as_str());
        }
    }

    #[tokio::test]
    async fn the_embedded_sqlite_migrations_are_the_directory() {
        same_as_sqlx("sqlite", sqlite()).await;
    }

    #[tokio::test]
    async fn the_embedded_postgres_migrations_are_the_directory() {
        same_as_sqlx("postgres", postgres()).await;
    }
}
