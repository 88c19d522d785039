//! What the proxy's drivers need: driver state saved under the claim,
//! withdrawn input requests, and a principal's tasks listed page by page.

use mcptask_core::server::TaskCursor;

use super::support::*;

fn stale(f: &Fence) -> Fence {
    Fence {
        token: "not-the-token".into(),
        ..f.clone()
    }
}

mcptask_testkit::on_both_backends! {
    async fn driver_state_round_trips_and_is_saved_only_under_the_claim(store: Arc<dyn ServerTaskStore>) {
        let t = NewServerTask {
            driver: Some("sep2663".into()),
            driver_state: Some(json!({"route": {"server": "s", "tool": "t"}, "bindings": 0})),
            ..new_task("t1", "A", None)
        };
        create(&*store, &t).await;
        let f = fence_of(&t);
        let r = store.get_task("t1").await.unwrap().unwrap().record;
        assert_eq!(r.driver.as_deref(), Some("sep2663"));
        assert_eq!(r.driver_state, t.driver_state);

        // A native task has neither.
        let native = new_task("t2", "A", None);
        create(&*store, &native).await;
        let r = store.get_task("t2").await.unwrap().unwrap().record;
        assert_eq!((r.driver, r.driver_state), (None, None));

        let bound = json!({"route": {"server": "s", "tool": "t"}, "binding": {"remote": "t1.1"}, "bindings": 1});
        assert!(store.save_state(&f, &bound, T0 + 1).await.unwrap());
        let r = store.get_task("t1").await.unwrap().unwrap().record;
        assert_eq!(r.driver_state.as_ref(), Some(&bound));
        assert_eq!(r.updated_at, T0 + 1);

        // A stale token changes nothing.
        assert!(!store.save_state(&stale(&f), &json!({"lost": true}), T0 + 2).await.unwrap());
        let r = store.get_task("t1").await.unwrap().unwrap().record;
        assert_eq!(r.driver_state.as_ref(), Some(&bound));
        assert_eq!(r.updated_at, T0 + 1);

        // Recovery hands the state to the new claim; the old one is fenced out.
        let claimed = store.claim_orphans("B", T0 + LEASE + 1, 10).await.unwrap();
        let again = claimed.iter().find(|r| r.id == "t1").expect("t1 claimed");
        assert_eq!(again.driver_state.as_ref(), Some(&bound));
        assert_eq!(again.driver.as_deref(), Some("sep2663"));
        assert!(!store.save_state(&f, &json!({"lost": true}), T0 + LEASE + 2).await.unwrap());
        let fb = again.fence().unwrap();
        assert!(store.save_state(&fb, &json!({"bindings": 2}), T0 + LEASE + 2).await.unwrap());

        // A settled task's state is frozen.
        assert!(store
            .finish(&fb, &Outcome::Completed { result: json!({"content": []}) }, T0 + LEASE + 3, None)
            .await
            .unwrap());
        assert!(!store.save_state(&fb, &json!({"bindings": 3}), T0 + LEASE + 4).await.unwrap());
        let r = store.get_task("t1").await.unwrap().unwrap().record;
        assert_eq!(r.driver_state, Some(json!({"bindings": 2})));
    }

    async fn withdrawn_inputs_leave_answered_keys_and_resume_work(store: Arc<dyn ServerTaskStore>) {
        let t = new_task("t1", "A", None);
        create(&*store, &t).await;
        let f = fence_of(&t);
        let ask = |m: &str| json!({"method": "elicitation/create", "params": {"message": m}});
        store
            .request_inputs(
                &f,
                &[("a".into(), ask("a?")), ("b".into(), ask("b?")), ("c".into(), ask("c?"))],
                T0 + 1,
            )
            .await
            .unwrap()
            .unwrap();
        let answer = json!({"action": "accept", "content": {"x": 1}});
        store.answer_inputs("t1", &[("a".into(), answer.clone())], T0 + 2).await.unwrap();
        let keys = |ks: &[&str]| ks.iter().map(|k| k.to_string()).collect::<Vec<_>>();

        // A stale claim withdraws nothing.
        assert!(!store.withdraw_inputs(&stale(&f), &keys(&["b", "c"]), T0 + 3).await.unwrap());
        assert_eq!(
            store.input_states("t1", &keys(&["a", "b", "c"])).await.unwrap().len(),
            3
        );

        // "a" was answered: it stays. "b" goes; "c" still waits: input_required.
        assert!(store.withdraw_inputs(&f, &keys(&["a", "b"]), T0 + 4).await.unwrap());
        assert_eq!(
            store.input_states("t1", &keys(&["a", "b", "c"])).await.unwrap(),
            vec![("a".into(), InputState::Answered(answer.clone())), ("c".into(), InputState::Pending)]
        );
        let view = store.get_task("t1").await.unwrap().unwrap();
        assert_eq!(view.record.status, TaskStatus::InputRequired);
        assert_eq!(view.input_requests, vec![("c".into(), ask("c?"))]);

        // Nothing left unanswered: working again.
        assert!(store.withdraw_inputs(&f, &keys(&["c"]), T0 + 5).await.unwrap());
        let view = store.get_task("t1").await.unwrap().unwrap();
        assert_eq!(view.record.status, TaskStatus::Working);
        assert!(view.input_requests.is_empty());
        assert_eq!(
            store.input_states("t1", &keys(&["a", "b", "c"])).await.unwrap(),
            vec![("a".into(), InputState::Answered(answer))]
        );

        // A settled task is not touched.
        assert!(store.finish(&f, &Outcome::Cancelled { message: None }, T0 + 6, None).await.unwrap());
        assert!(!store.withdraw_inputs(&f, &keys(&["a"]), T0 + 7).await.unwrap());
        assert_eq!(status(&*store, "t1").await, TaskStatus::Cancelled);
    }

    async fn tasks_are_listed_per_principal_newest_first_by_keyset(store: Arc<dyn ServerTaskStore>) {
        let task = |id: &str, principal: Option<&str>, at: i64| NewServerTask {
            principal: principal.map(str::to_string),
            created_at: T0 + at,
            ..new_task(id, "A", None)
        };
        // alice: five tasks, two created in the same millisecond (ties by id).
        let all = [
            task("a1", Some("alice"), 1),
            task("a2", Some("alice"), 2),
            task("a3", Some("alice"), 3),
            task("a4", Some("alice"), 3),
            task("a5", Some("alice"), 5),
            task("b1", Some("bob"), 4),
            task("n1", None, 1),
            task("n2", None, 6),
        ];
        for t in &all {
            create(&*store, t).await;
        }
        let ids = |tasks: &[mcptask_core::server::ServerTaskRecord]| {
            tasks.iter().map(|r| r.id.clone()).collect::<Vec<_>>()
        };
        let now = T0 + 10;

        // Pages of two: newest first, ties by id descending, nothing skipped or repeated.
        let mut seen = Vec::new();
        let mut cursor: Option<TaskCursor> = None;
        let mut pages = 0;
        loop {
            let page = store.list_tasks(Some("alice"), false, cursor.as_ref(), 2, now).await.unwrap();
            assert!(page.tasks.len() <= 2);
            seen.extend(ids(&page.tasks));
            pages += 1;
            match page.next {
                Some(next) => {
                    assert_eq!(Some(&next), page.tasks.last().map(TaskCursor::after).as_ref());
                    cursor = Some(next);
                }
                None => break,
            }
        }
        assert_eq!(seen, ["a5", "a4", "a3", "a2", "a1"]);
        assert_eq!(pages, 3, "the last page knows it is the last");
        let exact = store.list_tasks(Some("alice"), false, None, 5, now).await.unwrap();
        assert_eq!(exact.tasks.len(), 5);
        assert_eq!(exact.next, None);

        // Principals are kept apart; NULL lists the anonymous tasks only.
        let bob = store.list_tasks(Some("bob"), false, None, 10, now).await.unwrap();
        assert_eq!(ids(&bob.tasks), ["b1"]);
        let anonymous = store.list_tasks(None, false, None, 10, now).await.unwrap();
        assert_eq!(ids(&anonymous.tasks), ["n2", "n1"]);
        let nobody = store.list_tasks(Some("carol"), false, None, 10, now).await.unwrap();
        assert!(nobody.tasks.is_empty() && nobody.next.is_none());

        // live_only leaves settled tasks out; retention ends listing.
        let a3 = &all[2];
        assert!(store
            .finish(&fence_of(a3), &Outcome::Cancelled { message: None }, now, Some(now + RETENTION))
            .await
            .unwrap());
        let live = store.list_tasks(Some("alice"), true, None, 10, now + 1).await.unwrap();
        assert_eq!(ids(&live.tasks), ["a5", "a4", "a2", "a1"]);
        let every = store.list_tasks(Some("alice"), false, None, 10, now + 1).await.unwrap();
        assert_eq!(ids(&every.tasks), ["a5", "a4", "a3", "a2", "a1"]);
        let later = store
            .list_tasks(Some("alice"), false, None, 10, now + RETENTION)
            .await
            .unwrap();
        assert_eq!(ids(&later.tasks), ["a5", "a4", "a2", "a1"]);
        // A cursor from a live-only page walks on in live-only mode.
        let first = store.list_tasks(Some("alice"), true, None, 2, now + 1).await.unwrap();
        assert_eq!(ids(&first.tasks), ["a5", "a4"]);
        let second = store
            .list_tasks(Some("alice"), true, first.next.as_ref(), 2, now + 1)
            .await
            .unwrap();
        assert_eq!(ids(&second.tasks), ["a2", "a1"]);
        assert_eq!(second.next, None);
    }
}

/// A row written under the schema of migration 0004, then the database
/// migrated: the row reads back with no driver and is listed, and its driver
/// state can be saved under its claim.
async fn old_row_survives_migration_0005(url: &str) {
    let store = mcptask_sql::open(url)
        .await
        .expect("migrate to the latest schema");
    let tasks = store.server_tasks();
    let r = tasks
        .get_task("old")
        .await
        .unwrap()
        .expect("old row kept")
        .record;
    assert_eq!(
        (r.tool.as_str(), &r.driver, &r.driver_state),
        ("slow", &None, &None)
    );
    let page = tasks
        .list_tasks(Some("alice"), true, None, 10, T0)
        .await
        .unwrap();
    assert_eq!(page.tasks.len(), 1);
    assert!(
        tasks
            .save_state(&r.fence().unwrap(), &json!({"bindings": 0}), T0 + 1)
            .await
            .unwrap()
    );
}

const OLD_ROW: &str = "INSERT INTO server_tasks (id, principal, tool, arguments, status,
        created_at, updated_at, owner, claim_token)
     VALUES ('old', 'alice', 'slow', '{}', 'working', 1, 1, 'A', 'k')";

/// The migrations as sqlx reads them from the directory at run time.
async fn migrations(engine: &str) -> sqlx::migrate::Migrator {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("migrations")
        .join(engine);
    sqlx::migrate::Migrator::new(dir.as_path()).await.unwrap()
}

#[tokio::test]
async fn migration_0005_keeps_a_populated_sqlite_database() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("old.db").display());
    {
        let options = url
            .parse::<sqlx::sqlite::SqliteConnectOptions>()
            .unwrap()
            .create_if_missing(true);
        let pool = sqlx::SqlitePool::connect_with(options).await.unwrap();
        migrations("sqlite").await.run_to(4, &pool).await.unwrap();
        sqlx::query(OLD_ROW).execute(&pool).await.unwrap();
        pool.close().await;
    }
    old_row_survives_migration_0005(&url).await;
}

#[tokio::test]
async fn migration_0005_keeps_a_populated_postgres_database() {
    let Some(url) = mcptask_testkit::pg::fresh_database().await else {
        return;
    };
    {
        let pool = sqlx::PgPool::connect(&url).await.unwrap();
        migrations("postgres").await.run_to(4, &pool).await.unwrap();
        sqlx::query(OLD_ROW).execute(&pool).await.unwrap();
        pool.close().await;
    }
    old_row_survives_migration_0005(&url).await;
}

mcptask_testkit::on_both_backends! {
    /// A gateway's call commits its tracker row with its call task; a row
    /// for a remote task the tracker already follows refuses the whole
    /// create, typed (the gateway tells the upstream's duplicate id from a
    /// store failure by the variant, not by its text), and writes nothing.
    async fn a_call_whose_remote_task_is_already_tracked_is_refused_whole(store: Arc<dyn ServerTaskStore>) {
        use crate::remote::support::{new_task as remote_task, policy};
        use mcptask_core::client::transition::new_record;
        let call = |id: &str| NewServerTask {
            call_row: Some(Box::new(new_record(&remote_task(id, "up-1"), &policy(), 0.0))),
            ..new_task(id, "A", None)
        };
        create(&*store, &call("c1")).await;
        match store.create_tasks(&[call("c2")]).await {
            Err(mcptask_core::StoreError::AlreadyTracked(id)) => assert_eq!(id, "c2"),
            other => panic!("expected AlreadyTracked, got {other:?}"),
        }
        assert!(store.get_task("c2").await.unwrap().is_none(), "nothing of c2 was written");
        assert!(store.get_task("c1").await.unwrap().is_some());
    }
}
