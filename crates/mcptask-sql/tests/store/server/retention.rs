//! TTL expiry, retention and purge.

use super::support::*;

mcptask_testkit::on_both_backends! {
    async fn ttl_expiry_then_retention_then_purge(store: Arc<dyn ServerTaskStore>) {
        let short = new_task("short", "A", Some(1_000));
        let long = new_task("long", "A", Some(100_000));
        let forever = new_task("forever", "A", None);
        for t in [&short, &long, &forever] {
            create(&*store, t).await;
        }
        store
            .request_inputs(
                &fence_of(&short),
                &[("q".into(), json!({"method": "roots/list"}))],
                T0 + 1,
            )
            .await
            .unwrap();
        assert!(
            store
                .expire_overdue(T0 + 999, 100, T0 + 999 + RETENTION)
                .await
                .unwrap()
                .is_empty()
        );
        let expired = store
            .expire_overdue(T0 + 1_000, 100, T0 + 1_000 + RETENTION)
            .await
            .unwrap();
        assert_eq!(expired.len(), 1);
        assert_eq!(expired[0].task_id, "short");
        assert_eq!(expired[0].owner.as_deref(), Some("A"));
        let r = store.get_task("short").await.unwrap().unwrap().record;
        assert_eq!(r.status, TaskStatus::Failed);
        assert_eq!(r.error, Some(mcptask_core::server::expired_error()));
        assert_eq!(r.purge_at, Some(T0 + 1_000 + RETENTION));
        assert!(
            !store
                .finish(
                    &fence_of(&short),
                    &Outcome::Completed { result: json!({}) },
                    T0 + 1_001,
                    Some(T0 + 1_001 + RETENTION)
                )
                .await
                .unwrap()
        );
        assert_eq!(store.signals_since("A", T0 + 1_000).await.unwrap().len(), 1);

        // Completed tasks with a TTL become purgeable after max(created + ttl, now) + retention.
        let done = Outcome::Completed {
            result: json!({"content": []}),
        };
        assert!(
            store
                .finish(
                    &fence_of(&long),
                    &done,
                    T0 + 2_000,
                    purge_at(&long, T0 + 2_000)
                )
                .await
                .unwrap()
        );
        assert_eq!(
            store
                .get_task("long")
                .await
                .unwrap()
                .unwrap()
                .record
                .purge_at,
            Some(T0 + 100_000 + RETENTION)
        );
        assert!(
            store
                .finish(
                    &fence_of(&forever),
                    &done,
                    T0 + 2_000,
                    purge_at(&forever, T0 + 2_000)
                )
                .await
                .unwrap()
        );
        assert_eq!(
            store
                .get_task("forever")
                .await
                .unwrap()
                .unwrap()
                .record
                .purge_at,
            None
        );

        assert_eq!(
            store.purge(T0 + 1_000 + RETENTION - 1, 100).await.unwrap(),
            0
        );
        assert_eq!(store.purge(T0 + 1_000 + RETENTION, 100).await.unwrap(), 1);
        assert!(store.get_task("short").await.unwrap().is_none());
        assert!(
            store
                .input_states("short", &["q".into()])
                .await
                .unwrap()
                .is_empty(),
            "inputs go with the task"
        );
        assert_eq!(store.purge(i64::MAX / 2, 100).await.unwrap(), 1);
        assert!(
            store.get_task("forever").await.unwrap().is_some(),
            "ttlMs null is never purged"
        );
    }

    async fn expiry_and_purge_are_batched(store: Arc<dyn ServerTaskStore>) {
        store.heartbeat("A", T0, LEASE).await.unwrap();
        let tasks: Vec<_> = (0..25)
            .map(|i| new_task(&format!("e{i:02}"), "A", Some(10 + i)))
            .collect();
        store.create_tasks(&tasks).await.unwrap();
        let first = store
            .expire_overdue(T0 + 1_000, 10, T0 + 1_000)
            .await
            .unwrap();
        assert_eq!(first.len(), 10);
        let mut ids: Vec<_> = first.iter().map(|e| e.task_id.clone()).collect();
        ids.sort();
        let earliest: Vec<_> = (0..10).map(|i| format!("e{i:02}")).collect();
        assert_eq!(ids, earliest, "earliest expiries go first");
        assert_eq!(
            store
                .expire_overdue(T0 + 1_000, 100, T0 + 1_000)
                .await
                .unwrap()
                .len(),
            15
        );
        assert_eq!(store.purge(T0 + 1_000, 10).await.unwrap(), 10);
        assert_eq!(store.purge(T0 + 1_000, 100).await.unwrap(), 15);
    }
}
