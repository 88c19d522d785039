//! Live calls upgrade in place: a database written by an earlier commit's
//! gateway while calls of every driver and state were live migrates, and
//! every one of those calls settles, on SQLite and on PostgreSQL.
//!
//! Each fixture directory under `tests/fixtures/` (`main-<sha>-live`, made
//! by `scripts/fixtures/make-live-calls-db` with the binary of commit
//! `<sha>`) holds, per store, the gateway's database (`sqlite/mcptask.db`,
//! or `postgres/mcptask.sql`, a plain `pg_dump`), the state of the upstreams
//! it was calling (`demo.db`, the SEP-2663 demo server's own task store;
//! `toolset.json`, the toolset server's jobs) and `calls.json`: the servers
//! as configured, and each call with its id, face, driver, the state it was
//! left in and how it must end. The calls, all live at the stop: SEP-2663
//! `countdown` working (front and REST), waiting for an answer (front),
//! with an answer stored but not yet relayed, with a cancel requested but
//! not yet carried out; a toolset job working; a 2025-11-25 task waiting
//! for an answer; a synchronous call kept with `interrupt = "rerun"` and
//! one with `"fail"`.
//!
//! The test restores the database (moving its timestamps as if it was
//! written a moment ago, so no TTL runs out), starts today's gateway on it
//! with the same servers in the same working directory (every upstream is a
//! stdio server named by `mcptask`/`node` on PATH and relative arguments, so
//! each keeps its endpoint identity), and drives every call to its end: the
//! demo server reruns `countdown` (it asks go/no-go again; the test answers
//! "no" where the fixture did not, the stored answer is relayed where it
//! did), the toolset job completes two polls later, the cancel goes out;
//! the 2025-11-25 task fails (its upstream session ended with the old
//! gateway), the synchronous calls rerun or fail as interrupted. Each end
//! is read through REST and, for front calls, the front's `tasks/get`
//! under the id it handed out.
//!
//! A later commit that changes how calls are stored adds its own fixture
//! (run the script with the binary of the commit before the change, into
//! `tests/fixtures/main-<that sha>-live`) and names it in [`FIXTURES`];
//! older fixtures stay: each is a database some release wrote.

use std::path::{Path, PathBuf};
use std::time::Duration;

use mcptask_testkit::mcp::{Lifecycle, TestClient};
use mcptask_testkit::*;
use serde_json::{Value, json};

use crate::upgrade::{now_ms, shift_sqlite_timestamps, sqlite_written_at};

/// The live-calls fixtures, oldest first.
const FIXTURES: &[&str] = &["main-129432f-live"];

/// The answer the test gives `countdown`'s go/no-go question: "no", so the
/// rerun ends at once ("Launch scrubbed by the user").
fn no_go() -> Value {
    json!({"go_no_go": {"action": "accept", "content": {"go": false}}})
}

fn fixture_dir(name: &str, store: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
        .join(store)
}

/// The working directory of the upgraded gateway: the upstreams' state as
/// the fixture left it, `mcptask` (the binary under test) and the
/// everything server where the servers' relative commands find them.
fn working_dir(fixture: &Path, ev: &Everything) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::copy(fixture.join("demo.db"), dir.path().join("demo.db")).expect("copy demo.db");
    // The toolset job has been polled some times; it completes two polls
    // after the upgrade (the proof that it is still followed).
    let mut jobs: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture.join("toolset.json")).expect("toolset.json"),
    )
    .expect("JSON");
    for job in jobs["jobs"].as_object_mut().expect("jobs").values_mut() {
        if job["status"] == "running" {
            let polled = job["polls"].as_array().map_or(0, Vec::len);
            job["polls_needed"] = json!(polled + 2);
        }
    }
    std::fs::write(dir.path().join("toolset.json"), jobs.to_string()).expect("write toolset.json");
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).expect("bin dir");
    std::os::unix::fs::symlink(mcptask_testkit::bin(), bin.join("mcptask")).expect("link mcptask");
    let package = ev
        .entry
        .parent()
        .and_then(Path::parent)
        .expect("the everything package");
    std::os::unix::fs::symlink(package, dir.path().join("everything")).expect("link everything");
    dir
}

/// Restore the fixture's PostgreSQL dump into a fresh database; its URL.
async fn restore_postgres(fixture: &Path) -> Option<String> {
    use sqlx::Connection as _;
    let url = TestDatabase::postgres().await?.url;
    let dump = std::fs::read_to_string(fixture.join("mcptask.sql")).expect("the dump");
    let mut conn = sqlx::PgConnection::connect(&url)
        .await
        .expect("connect to the fresh database");
    sqlx::raw_sql(sqlx::AssertSqlSafe(dump))
        .execute(&mut conn)
        .await
        .expect("restore the dump");
    conn.close().await.expect("close");
    Some(url)
}

/// PostgreSQL's twin of `shift_sqlite_timestamps`, and when the database was
/// written: every `bigint` `*_at` column moves by the time since then.
async fn postgres_as_if_written_just_now(url: &str) -> i64 {
    use sqlx::Row;
    let pool = sqlx::PgPool::connect(url).await.expect("open the restore");
    let written: i64 = sqlx::query_scalar(
        "SELECT GREATEST((SELECT MAX(updated_at) FROM server_tasks),
                         (SELECT MAX(updated_at) FROM remote_tasks))",
    )
    .fetch_one(&pool)
    .await
    .expect("when the fixture was written");
    let by = now_ms() - written;
    let columns = sqlx::query(
        "SELECT table_name::text AS t, column_name::text AS c FROM information_schema.columns
         WHERE table_schema = current_schema() AND data_type = 'bigint' AND column_name LIKE '%\\_at'",
    )
    .fetch_all(&pool)
    .await
    .expect("columns");
    for row in columns {
        let (table, column): (String, String) = (row.get("t"), row.get("c"));
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE \"{table}\" SET \"{column}\" = \"{column}\" + $1 WHERE \"{column}\" IS NOT NULL"
        )))
        .bind(by)
        .execute(&pool)
        .await
        .expect("move a timestamp");
    }
    pool.close().await;
    by
}

fn text_of(row: &Value) -> String {
    row["result"].to_string()
}

/// Every call of fixture `name`'s `store` database settles as its
/// manifest says, after today's gateway migrated it.
async fn live_calls_settle(test: &str, name: &str, store: &str) {
    let Some(ev) = Everything::or_skip(test) else {
        return;
    };
    let fixture = fixture_dir(name, store);
    let made: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture.join("calls.json")).expect("calls.json"),
    )
    .expect("JSON");
    let calls = made["calls"].as_array().expect("calls");
    let dir = working_dir(&fixture, &ev);
    let db_url = if store == "postgres" {
        let Some(url) = restore_postgres(&fixture).await else {
            return;
        };
        url
    } else {
        let db = dir.path().join("mcptask.db");
        std::fs::copy(fixture.join("mcptask.db"), &db).expect("copy the fixture");
        format!("sqlite:{}", db.display())
    };
    let by = if store == "postgres" {
        postgres_as_if_written_just_now(&db_url).await
    } else {
        let by = now_ms() - sqlite_written_at(&db_url).await;
        shift_sqlite_timestamps(&db_url, by).await;
        by
    };
    // The upstream's own store moves with it (its owner leases, its tasks).
    let demo_url = format!("sqlite:{}", dir.path().join("demo.db").display());
    shift_sqlite_timestamps(&demo_url, by).await;

    let q = |s: &str| serde_json::to_string(s).expect("a TOML string");
    let toml = format!(
        "[database]\nurl = {}\n\n[api]\nlisten = \"127.0.0.1:0\"\n{}\n{}",
        q(&db_url),
        made["settings"].as_str().expect("settings"),
        made["servers"].as_str().expect("servers"),
    );
    let node_dir = ev.node.parent().expect("node's directory");
    let path = std::env::join_paths(
        [dir.path().join("bin"), node_dir.to_path_buf()]
            .into_iter()
            .chain(std::env::split_paths(
                &std::env::var_os("PATH").unwrap_or_default(),
            )),
    )
    .expect("PATH");
    let path = path.to_str().expect("a UTF-8 PATH").to_string();
    let gateway =
        GatewayProcess::start_toml_in(&format!("upgraded {store}"), &toml, &[("PATH", &path)], dir)
            .await;
    let token = made["token"].as_str().expect("token");
    let api = gateway.client(Some(token));

    with_deadline(Duration::from_secs(240), async {
        let mcp = TestClient::http(
            &format!("{}/mcp", gateway.base),
            Some(token),
            Lifecycle::Modern { tasks: true },
        )
        .await
        .expect("connect to the front");
        for call in calls {
            let id = call["id"].as_str().expect("id");
            let what = &call["name"];
            let row = api.task(id).await;
            assert_eq!(
                (&row["driver"], &row["face"], &row["server"], &row["tool"]),
                (
                    &call["driver"],
                    &call["face"],
                    &call["server"],
                    &call["tool"]
                ),
                "{what}: the call as it was made\n{row:#}"
            );
            // A `countdown` the fixture left without an answer asks again
            // once its upstream reruns it: answered here, at its face.
            let asks_again = call["server"] == "durable"
                && call["expect"] == "completed"
                && call.get("answer").is_none();
            if asks_again {
                if call["face"] == "mcp" {
                    wait_status(&mcp, id, "input_required", WAIT).await;
                    mcp.update(id, no_go())
                        .await
                        .unwrap_or_else(|e| panic!("{what}: tasks/update: {e}"));
                } else {
                    api.wait_status(id, "input_required").await;
                    api.post(
                        &format!("/api/v1/tasks/{id}/answers"),
                        &json!({"answers": no_go()}),
                    )
                    .await
                    .assert_status(200);
                }
            }
        }
        for call in calls {
            let id = call["id"].as_str().expect("id");
            let what = &call["name"];
            let expect = call["expect"].as_str().expect("expect");
            let row = api
                .wait_task(id, "settled", |t| {
                    matches!(
                        t["status"].as_str(),
                        Some("completed" | "failed" | "cancelled")
                    )
                })
                .await;
            eprintln!("{what}: {} {}", row["status"], row["error"]);
            assert_eq!(row["status"], expect, "{what}\n{row:#}\n{}", gateway.log());
            match (expect, call["server"].as_str().expect("server")) {
                ("completed", "durable") => assert!(
                    text_of(&row).contains("Launch scrubbed by the user"),
                    "{what}: the rerun countdown, answered no\n{row:#}"
                ),
                ("completed", "jobs") => assert!(
                    text_of(&row).contains("42"),
                    "{what}: the job's result\n{row:#}"
                ),
                ("completed", "evr") => assert!(
                    text_of(&row).contains("Long running operation completed"),
                    "{what}: the rerun synchronous call\n{row:#}"
                ),
                // Honest failures, each saying why: a synchronous call
                // that may not run twice was interrupted; a 2025-11-25
                // task lived in the old gateway's upstream session.
                ("failed", _) => {
                    let reason = match call["driver"].as_str() {
                        Some("sync") => "interrupted",
                        Some("sep1686") => "the upstream lost task",
                        other => panic!("{what}: no failure expected of driver {other:?}"),
                    };
                    assert!(
                        row["error"]["message"]
                            .as_str()
                            .is_some_and(|m| m.contains(reason)),
                        "{what}: failed saying {reason:?}\n{row:#}"
                    );
                }
                ("cancelled", _) => {}
                other => panic!("{what}: no expectation for {other:?}"),
            }
            if call["face"] == "mcp" {
                // The front's record of the call follows the tracker's a
                // moment later (today's two records of one front call).
                let wire = wait_terminal(&mcp, id, WAIT).await;
                assert_eq!(status(&wire), expect, "{what}\n{wire:#}");
                if expect == "completed" {
                    assert_eq!(
                        wire["result"]["content"], row["result"]["content"],
                        "{what}: the front and REST give one result"
                    );
                }
            }
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_calls_of_every_driver_in_a_sqlite_database_upgrade_and_settle() {
    for name in FIXTURES {
        live_calls_settle(
            "live_calls_of_every_driver_in_a_sqlite_database_upgrade_and_settle",
            name,
            "sqlite",
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_calls_of_every_driver_in_a_postgres_database_upgrade_and_settle() {
    for name in FIXTURES {
        live_calls_settle(
            "live_calls_of_every_driver_in_a_postgres_database_upgrade_and_settle",
            name,
            "postgres",
        )
        .await;
    }
}
