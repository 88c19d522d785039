//! Creating and reading tasks; terminal states.

use super::support::*;

mcptask_testkit::on_both_backends! {
    async fn create_then_get_round_trips(store: Arc<dyn ServerTaskStore>) {
        let t = new_task("t1", "A", Some(30_000));
        create(&*store, &t).await;
        let view = store
            .get_task("t1")
            .await
            .unwrap()
            .expect("created task must resolve");
        let r = view.record.clone();
        assert_eq!(r.id, "t1");
        assert_eq!(r.principal.as_deref(), Some("alice"));
        assert_eq!(r.tool, "slow");
        assert_eq!(r.arguments, t.arguments);
        assert_eq!(r.call_inputs, t.call_inputs);
        assert_eq!(r.status, TaskStatus::Working);
        assert_eq!(r.status_message.as_deref(), Some("queued"));
        assert_eq!((r.created_at, r.updated_at), (T0, T0));
        assert_eq!(r.ttl_ms, Some(30_000));
        assert_eq!(r.expires_at(), Some(T0 + 30_000));
        assert_eq!(r.poll_interval_ms, Some(500));
        assert_eq!(r.attempt, 1);
        assert!(!r.cancel_requested);
        assert_eq!(r.fence(), Some(fence_of(&t)));
        assert_eq!((r.result, r.error, r.purge_at), (None, None, None));
        assert!(view.input_requests.is_empty());
        assert_eq!(
            view.record,
            t.clone().into_record(),
            "the store reads back what the runtime assumes"
        );
        assert!(store.get_task("nope").await.unwrap().is_none());
    }

    async fn batch_create_is_one_unit(store: Arc<dyn ServerTaskStore>) {
        store.heartbeat("A", T0, LEASE).await.unwrap();
        let batch: Vec<_> = (0..50)
            .map(|i| new_task(&format!("b{i}"), "A", None))
            .collect();
        store.create_tasks(&batch).await.unwrap();
        for t in &batch {
            assert!(store.get_task(&t.id).await.unwrap().is_some());
        }
        // A duplicate id fails the whole batch and leaves no partial rows.
        let dup = vec![new_task("fresh", "A", None), new_task("b0", "A", None)];
        assert!(store.create_tasks(&dup).await.is_err());
        assert!(store.get_task("fresh").await.unwrap().is_none());
    }

    async fn terminal_states_are_absorbing(store: Arc<dyn ServerTaskStore>) {
        let t = new_task("t1", "A", Some(1_000));
        create(&*store, &t).await;
        let f = fence_of(&t);
        store
            .request_inputs(
                &f,
                &[("k".into(), json!({"method": "elicitation/create"}))],
                T0 + 1,
            )
            .await
            .unwrap();
        let failed = Outcome::failed(-32603, "boom");
        assert!(
            store
                .finish(&f, &failed, T0 + 2, Some(T0 + 2 + RETENTION))
                .await
                .unwrap()
        );
        let again = Outcome::Completed {
            result: json!({"content": []}),
        };
        assert!(
            !store
                .finish(&f, &again, T0 + 3, Some(T0 + 3 + RETENTION))
                .await
                .unwrap()
        );
        assert!(
            !store
                .finish(
                    &f,
                    &Outcome::Cancelled { message: None },
                    T0 + 3,
                    Some(T0 + 3 + RETENTION)
                )
                .await
                .unwrap()
        );
        assert_eq!(
            store.request_cancel("t1", T0 + 4).await.unwrap(),
            CancelOutcome::AlreadyTerminal
        );
        let answer = store
            .answer_inputs("t1", &[("k".into(), json!({"action": "accept"}))], T0 + 5)
            .await
            .unwrap();
        assert!(answer.found && answer.applied.is_empty());
        assert_eq!(answer.ignored, ["k"]);
        assert!(
            store
                .expire_overdue(T0 + 10_000, 100, T0 + 10_000 + RETENTION)
                .await
                .unwrap()
                .is_empty()
        );
        assert!(
            !store
                .set_status_message(&f, Some("late"), T0 + 6)
                .await
                .unwrap()
        );
        let view = store.get_task("t1").await.unwrap().unwrap();
        assert_eq!(view.record.status, TaskStatus::Failed);
        assert_eq!(
            view.record.error,
            Some(json!({"code": -32603, "message": "boom"}))
        );
        assert_eq!(view.record.status_message.as_deref(), Some("boom"));
        assert!(
            view.input_requests.is_empty(),
            "a terminal task has no outstanding inputs"
        );
    }
}
