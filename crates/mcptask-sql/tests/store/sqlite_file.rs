//! The SQLite file a store creates holds every call's arguments and
//! results and the sealed OAuth tokens: it is its owner's alone, and so
//! are the -wal and -shm files SQLite makes beside it.

use std::os::unix::fs::PermissionsExt;

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[tokio::test]
async fn a_new_database_file_is_readable_by_its_owner_only() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("mcptask.db");
    let store = mcptask_sql::open(&format!("sqlite:{}", db.display()))
        .await
        .unwrap();
    store
        .readiness(std::time::Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(mode(&db), 0o600, "the database file");
    let wal = dir.path().join("mcptask.db-wal");
    if wal.exists() {
        assert_eq!(mode(&wal), 0o600, "its WAL");
    }
    store.close().await;

    // A file its owner made readable to others keeps that mode: the
    // owner's choice.
    let shared = dir.path().join("shared.db");
    std::fs::write(&shared, b"").unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o640)).unwrap();
    let store = mcptask_sql::open(&format!("sqlite:{}", shared.display()))
        .await
        .unwrap();
    assert_eq!(mode(&shared), 0o640);
    store.close().await;
}
