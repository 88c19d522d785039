//! `mcptask migrate` applies the schema once and is idempotent; bad URLs get a clear error.

use std::process::Command;

fn migrate(url: &str) -> std::process::Output {
    Command::new(mcptask_testkit::bin())
        .args(["migrate", "--database-url", url])
        .env("MCPTASK_LOG", "warn")
        .output()
        .expect("run mcptask migrate")
}

/// "N migration(s) applied" for a fresh database of `backend`: every file in
/// the backend's migrations directory.
fn all_applied(backend: &str) -> String {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../mcptask-sql/migrations")
        .join(backend);
    let n = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "sql"))
        })
        .count();
    assert!(n >= 3, "expected the migrations in {}", dir.display());
    format!("{n} migration(s) applied")
}

#[test]
fn migrate_is_idempotent_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("m.db").display());
    let first = migrate(&url);
    assert!(first.status.success(), "{first:?}");
    let out = String::from_utf8_lossy(&first.stdout);
    assert!(out.contains(&all_applied("sqlite")), "{out}");
    let second = migrate(&url);
    assert!(second.status.success());
    assert!(String::from_utf8_lossy(&second.stdout).contains("0 migration(s) applied"));
}

#[tokio::test]
async fn migrate_is_idempotent_on_postgres() {
    let Some(url) = mcptask_testkit::pg::fresh_database().await else {
        return;
    };
    let (first, second) = tokio::task::spawn_blocking(move || (migrate(&url), migrate(&url)))
        .await
        .unwrap();
    assert!(first.status.success(), "{first:?}");
    let out = String::from_utf8_lossy(&first.stdout);
    assert!(out.contains(&all_applied("postgres")), "{out}");
    assert!(String::from_utf8_lossy(&second.stdout).contains("0 migration(s) applied"));
}

#[test]
fn unsupported_urls_are_refused_clearly() {
    let out = migrate("mysql://x/y");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unsupported database URL") && err.contains("sqlite:"),
        "{err}"
    );
}
