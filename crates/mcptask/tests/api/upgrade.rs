//! An existing database upgrades in place: `tests/fixtures/main-31653fe.db`
//! was written by the release before one call path (REST calls kept as
//! tracked tasks, front calls kept twice: a front task and the tracked task
//! it followed; see `scripts/fixtures/make-upgrade-db`, which also wrote the
//! `.json` beside it naming every call it made). Today's gateway opens a copy,
//! migrates it, and every call is there once (a front call of that release
//! under the id of the task its front followed), with its tool and outcome;
//! the front still answers `tasks/get` for the ids it handed out.

use std::path::Path;

use mcptask_testkit::mcp::{Lifecycle, TestClient};
use mcptask_testkit::*;
use serde_json::{Value, json};

/// Moves every timestamp of the copied fixture by the time since it was
/// written, as if the old release stopped a moment ago: the fixture's tasks
/// have TTLs of an hour, and a test that read them as written would start
/// failing an hour after the fixture was made (their TTLs run out and the
/// front forgets them, as it should). Only integer `*_at` columns move
/// (milliseconds since the epoch); the rows are otherwise as written.
async fn as_if_written_just_now(db_url: &str) {
    let by = now_ms() - sqlite_written_at(db_url).await;
    shift_sqlite_timestamps(db_url, by).await;
}

/// Milliseconds since the epoch, as the stores write them.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64
}

/// When a gateway last wrote the SQLite database at `db_url`: its newest
/// task update.
pub(crate) async fn sqlite_written_at(db_url: &str) -> i64 {
    let pool = sqlx::SqlitePool::connect(db_url)
        .await
        .expect("open the copy");
    let written: i64 = sqlx::query_scalar(
        "SELECT MAX(m) FROM (SELECT MAX(updated_at) AS m FROM server_tasks
                             UNION ALL SELECT MAX(updated_at) FROM remote_tasks)",
    )
    .fetch_one(&pool)
    .await
    .expect("when the fixture was written");
    pool.close().await;
    written
}

/// Adds `by` milliseconds to every integer `*_at` column of the SQLite
/// database at `db_url`.
pub(crate) async fn shift_sqlite_timestamps(db_url: &str, by: i64) {
    use sqlx::Row;
    let pool = sqlx::SqlitePool::connect(db_url)
        .await
        .expect("open the copy");
    let tables = sqlx::query(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '\\_%' ESCAPE '\\'",
    )
    .fetch_all(&pool)
    .await
    .expect("tables");
    for table in tables {
        let table: String = table.get("name");
        let columns = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT name FROM pragma_table_info('{table}')"
        )))
        .fetch_all(&pool)
        .await
        .expect("columns");
        for column in columns {
            let column: String = column.get("name");
            if column.ends_with("_at") {
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "UPDATE \"{table}\" SET \"{column}\" = \"{column}\" + ? WHERE typeof(\"{column}\") = 'integer'"
                )))
                .bind(by)
                .execute(&pool)
                .await
                .expect("move a timestamp");
            }
        }
    }
    pool.close().await;
}

fn fixture(ext: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/main-31653fe.{ext}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_of_the_previous_release_upgrades_with_every_call_once() {
    let made: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("json")).expect("the fixture's description"),
    )
    .expect("JSON");
    let calls = made["calls"].as_array().expect("calls");
    assert!(calls.len() >= 7, "{made:#}");

    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("mcptask.db");
    std::fs::copy(fixture("db"), &db).expect("copy the fixture");
    let db_url = format!("sqlite:{}", db.display());
    as_if_written_just_now(&db_url).await;
    // A demo server that never saw the old calls: the live ones cannot be
    // followed any more and must end honestly, never vanish.
    let server_db = TestDatabase::sqlite();
    let server = DemoServer::start(&server_db.url, &[]).await;
    let toml = GatewaySpec::with_tokens(&db_url, &[("demo", &server.url)]).toml()
        + "\n[proxy]\nenabled = true\n";
    let gateway = GatewayProcess::start_toml("upgraded", &toml, &[]).await;
    let api = gateway.client(Some(OPERATOR));

    with_deadline(std::time::Duration::from_secs(120), async {
        let rows = api.list_all("limit=100").await;
        let listed: Vec<&str> = rows.iter().filter_map(|t| t["id"].as_str()).collect();
        // A front call of that release has one row under the id of the task
        // its front followed (the release gave the caller another id, still
        // answered at the front); every other call under its own id.
        let row_id = |call: &Value| -> String {
            call.get("trackedTask")
                .and_then(Value::as_str)
                .or(call["id"].as_str())
                .expect("id")
                .to_string()
        };
        for call in calls {
            let id = row_id(call);
            assert_eq!(
                listed.iter().filter(|l| **l == id).count(),
                1,
                "call {call} is listed once: {listed:?}"
            );
        }
        assert_eq!(
            listed.len(),
            calls.len(),
            "one row per call, no other: {rows:#?}"
        );

        let mcp = TestClient::http(
            &format!("{}/mcp", gateway.base),
            Some(OPERATOR),
            Lifecycle::Modern { tasks: true },
        )
        .await
        .expect("connect to the front");
        for call in calls {
            let id = call["id"].as_str().unwrap();
            let row = api.task(&row_id(call)).await;
            assert_eq!(
                (&row["tool"], &row["server"]),
                (&call["tool"], &json!("demo")),
                "{row:#}"
            );
            match call["kind"].as_str().unwrap() {
                "completed" => {
                    assert_eq!(row["status"], "completed", "{row:#}");
                    assert!(row["result"]["content"].is_array(), "{row:#}");
                }
                "failed" => {
                    assert_eq!(row["status"], "failed", "{row:#}");
                    assert!(!row["error"].is_null(), "{row:#}");
                }
                // Live when the old gateway stopped: still followed, or
                // ended with a reason once the (new) server disowns it.
                _ => {
                    let status = row["status"].as_str().unwrap();
                    assert!(
                        ["working", "input_required"].contains(&status)
                            || (status == "failed" && !row["error"].is_null()),
                        "{row:#}"
                    );
                }
            }
            if call["face"] == "mcp" {
                // Driver and face were not recorded then; the driver is
                // known from the row (it follows an upstream task).
                assert_eq!(row["driver"], "sep2663", "{row:#}");
                assert!(row["remoteTaskId"].is_string(), "{row:#}");
                let got = mcp.get(id).await.unwrap_or_else(|e| {
                    panic!("the front no longer knows {id} after the upgrade: {e}")
                });
                let wire = mcptask_testkit::mcp::wire(&got);
                if call["kind"] == "completed" {
                    assert_eq!(status(&wire), "completed", "{wire:#}");
                }
            }
        }
    })
    .await;
}
