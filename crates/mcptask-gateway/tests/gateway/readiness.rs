//! `/readyz`: ready only while the store answers with every migration
//! applied; `/healthz` stays up either way.

use mcptask_gateway::{Config, Gateway};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_fails_while_a_migration_is_pending_and_healthz_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("gw.db");
    let config = Config::parse(
        "(test)",
        &format!(
            "[database]\nurl = \"sqlite:{}\"\n[api]\nauth = \"none\"\n",
            db.display()
        ),
    )
    .unwrap();
    let gateway = Gateway::start(config).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let serving = gateway.clone();
    tokio::spawn(async move { serving.serve(listener, None).await.unwrap() });
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();
    let status = |path: &'static str| {
        let (http, base) = (http.clone(), base.clone());
        async move { http.get(format!("{base}{path}")).send().await.unwrap() }
    };
    assert_eq!(status("/readyz").await.status(), 200);

    // Another process forgets the newest migration (as a database written
    // by an older build would be): not ready, and it says why.
    let other = mcptask_sql::open_without_migrating(&format!("sqlite:{}", db.display()))
        .await
        .unwrap();
    let mcptask_sql::Store::Sqlite(sqlite) = &other else {
        panic!("a SQLite store");
    };
    let pool = sqlite.writer_pool();
    for statement in [
        "CREATE TABLE forgotten AS SELECT * FROM _sqlx_migrations WHERE version = (SELECT max(version) FROM _sqlx_migrations)",
        "DELETE FROM _sqlx_migrations WHERE version IN (SELECT version FROM forgotten)",
    ] {
        sqlx::query(statement).execute(pool).await.unwrap();
    }
    let not_ready = status("/readyz").await;
    assert_eq!(not_ready.status(), 503);
    let body: serde_json::Value = not_ready.json().await.unwrap();
    assert_eq!(body["error"]["code"], "not_ready");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("1 of"),
        "{body}"
    );
    assert_eq!(status("/healthz").await.status(), 200);

    // Recorded again: ready.
    sqlx::query("INSERT INTO _sqlx_migrations SELECT * FROM forgotten")
        .execute(pool)
        .await
        .unwrap();
    assert_eq!(status("/readyz").await.status(), 200);
}
