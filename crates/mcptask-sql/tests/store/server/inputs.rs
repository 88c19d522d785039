//! Input requests, answers, cancellation and signals.

use super::support::*;

mcptask_testkit::on_both_backends! {
    async fn input_keys_are_answered_once_and_never_reissued(store: Arc<dyn ServerTaskStore>) {
        let t = new_task("t1", "A", None);
        create(&*store, &t).await;
        let f = fence_of(&t);
        let ra = json!({"method": "elicitation/create", "params": {"message": "a?"}});
        let rb = json!({"method": "elicitation/create", "params": {"message": "b?"}});
        let states = store
            .request_inputs(
                &f,
                &[("a".into(), ra.clone()), ("b".into(), rb.clone())],
                T0 + 1,
            )
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            states,
            vec![
                ("a".into(), InputState::Pending),
                ("b".into(), InputState::Pending)
            ]
        );
        let view = store.get_task("t1").await.unwrap().unwrap();
        assert_eq!(view.record.status, TaskStatus::InputRequired);
        assert_eq!(
            view.input_requests,
            vec![("a".into(), ra.clone()), ("b".into(), rb.clone())]
        );

        // Partial answer: stays input_required with only b outstanding; unknown keys ignored.
        let out = store
            .answer_inputs(
                "t1",
                &[
                    ("a".into(), json!({"action": "accept", "content": {"x": 1}})),
                    ("zzz".into(), json!({})),
                ],
                T0 + 2,
            )
            .await
            .unwrap();
        assert_eq!(out.applied, ["a"]);
        assert_eq!(out.ignored, ["zzz"]);
        assert_eq!(out.owner.as_deref(), Some("A"));
        let view = store.get_task("t1").await.unwrap().unwrap();
        assert_eq!(view.record.status, TaskStatus::InputRequired);
        assert_eq!(view.input_requests, vec![("b".into(), rb.clone())]);

        // A second answer to a is ignored and does not overwrite the first.
        let out = store
            .answer_inputs("t1", &[("a".into(), json!({"action": "decline"}))], T0 + 3)
            .await
            .unwrap();
        assert_eq!(out.ignored, ["a"]);
        let out = store
            .answer_inputs("t1", &[("b".into(), json!({"action": "accept"}))], T0 + 4)
            .await
            .unwrap();
        assert_eq!(out.applied, ["b"]);
        assert_eq!(status(&*store, "t1").await, TaskStatus::Working);

        // Asking for an answered key again replays the stored answer and does not reissue it.
        let states = store
            .request_inputs(&f, &[("a".into(), ra.clone())], T0 + 5)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            states,
            vec![(
                "a".into(),
                InputState::Answered(json!({"action": "accept", "content": {"x": 1}}))
            )]
        );
        let view = store.get_task("t1").await.unwrap().unwrap();
        assert_eq!(view.record.status, TaskStatus::Working);
        assert!(view.input_requests.is_empty());
        assert_eq!(
            store
                .input_states("t1", &["b".into(), "never".into()])
                .await
                .unwrap(),
            vec![(
                "b".into(),
                InputState::Answered(json!({"action": "accept"}))
            )]
        );
        // Answers to unknown tasks report not found.
        assert!(
            !store
                .answer_inputs("nope", &[("a".into(), json!({}))], T0)
                .await
                .unwrap()
                .found
        );
    }

    async fn racing_answers_apply_exactly_once(store: Arc<dyn ServerTaskStore>) {
        let t = new_task("t1", "A", None);
        create(&*store, &t).await;
        let f = fence_of(&t);
        let keys: Vec<(String, serde_json::Value)> =
            (0..8).map(|i| (format!("k{i}"), json!({"i": i}))).collect();
        store
            .request_inputs(&f, &keys, T0 + 1)
            .await
            .unwrap()
            .unwrap();
        // Many "replicas" answer the same key and different keys at once.
        let mut handles = Vec::new();
        for r in 0..16 {
            let store = store.clone();
            handles.push(tokio::spawn(async move {
                let key = format!("k{}", r % 8);
                store
                    .answer_inputs("t1", &[(key, json!({"replica": r}))], T0 + 2 + r)
                    .await
                    .unwrap()
                    .applied
                    .len()
            }));
        }
        let mut applied = 0;
        for h in handles {
            applied += h.await.unwrap();
        }
        assert_eq!(
            applied, 8,
            "each key is applied exactly once across replicas"
        );
        let view = store.get_task("t1").await.unwrap().unwrap();
        assert_eq!(
            view.record.status,
            TaskStatus::Working,
            "no key is outstanding any more"
        );
        assert!(view.input_requests.is_empty());
    }

    async fn cancel_sets_a_durable_flag_and_signals(store: Arc<dyn ServerTaskStore>) {
        let t = new_task("t1", "A", None);
        create(&*store, &t).await;
        assert_eq!(
            store.request_cancel("nope", T0).await.unwrap(),
            CancelOutcome::NotFound
        );
        assert!(store.signals_since("A", T0 + 5).await.unwrap().is_empty());
        assert_eq!(
            store.request_cancel("t1", T0 + 5).await.unwrap(),
            CancelOutcome::Requested {
                owner: Some("A".into())
            }
        );
        let r = store.get_task("t1").await.unwrap().unwrap().record;
        assert!(r.cancel_requested);
        assert_eq!(r.status, TaskStatus::Working, "cancellation is cooperative");
        let signals = store.signals_since("A", T0 + 5).await.unwrap();
        assert_eq!(signals.len(), 1);
        assert!(signals[0].cancel_requested);
        assert_eq!(signals[0].task_id, "t1");
        assert!(store.signals_since("A", T0 + 6).await.unwrap().is_empty());
        assert!(store.signals_since("B", 0).await.unwrap().is_empty());
        // Idempotent while live.
        assert!(matches!(
            store.request_cancel("t1", T0 + 7).await.unwrap(),
            CancelOutcome::Requested { .. }
        ));
        let f = fence_of(&t);
        assert!(
            store
                .finish(
                    &f,
                    &Outcome::Cancelled {
                        message: Some("stopped".into())
                    },
                    T0 + 8,
                    Some(T0 + 8 + RETENTION)
                )
                .await
                .unwrap()
        );
        assert_eq!(status(&*store, "t1").await, TaskStatus::Cancelled);
        // The owner settling its own task is not a signal to itself: the backstop
        // re-check stays proportional to real signals, not to throughput.
        assert!(store.signals_since("A", T0 + 8).await.unwrap().is_empty());
    }

    /// PostgreSQL pushes signals (`LISTEN/NOTIFY`): a cancel reaches a
    /// listener. SQLite has no push: the periodic backstop is its only path,
    /// and it says so rather than offering a stream that never speaks.
    async fn signals_reach_listeners_on_postgres(db: mcptask_testkit::TestDatabase) {
        use futures::StreamExt;
        let store = db.server_tasks().await;
        let stream = store.listen_signals().await.unwrap();
        let mut stream = match db.backend {
            "postgres" => stream.expect("PostgreSQL pushes signals (LISTEN/NOTIFY)"),
            _ => {
                assert!(stream.is_none(), "{} offers no push", db.backend);
                return;
            }
        };
        let t = new_task("t1", "A", None);
        create(&*store, &t).await;
        store.request_cancel("t1", T0 + 1).await.unwrap();
        let got = tokio::time::timeout(std::time::Duration::from_secs(10), stream.next())
            .await
            .expect("a NOTIFY must arrive")
            .expect("stream open");
        assert_eq!(got, "t1");
    }
}

mcptask_testkit::on_both_backends! {
    async fn the_state_read_is_the_whole_view_narrowed(store: Arc<dyn ServerTaskStore>) {
        use mcptask_core::server::ServerTaskState;
        let same = |id: &'static str| {
            let store = store.clone();
            async move {
                let view = store.get_task(id).await.unwrap().expect("stored");
                let state = store.get_task_state(id).await.unwrap().expect("stored");
                assert_eq!(state, ServerTaskState::of(&view), "task {id}");
                state
            }
        };
        let working = new_task("working", "A", Some(60_000));
        create(&*store, &working).await;
        same("working").await;

        // Keys asked out of order read back ordered, without the answered one.
        let waiting = new_task("waiting", "A", None);
        create(&*store, &waiting).await;
        let ask = |m: &str| json!({"method": "elicitation/create", "params": {"message": m}});
        store
            .request_inputs(
                &fence_of(&waiting),
                &[("b".into(), ask("b?")), ("c".into(), ask("c?")), ("a".into(), ask("a?"))],
                T0 + 1,
            )
            .await
            .unwrap()
            .unwrap();
        store
            .answer_inputs("waiting", &[("c".into(), json!({"action": "decline"}))], T0 + 2)
            .await
            .unwrap();
        let state = same("waiting").await;
        assert_eq!(state.status, TaskStatus::InputRequired);
        assert_eq!(
            state.input_requests,
            vec![("a".into(), ask("a?")), ("b".into(), ask("b?"))]
        );

        for (id, outcome) in [
            ("completed", Outcome::Completed { result: json!({"content": [{"type": "text", "text": "ok"}]}) }),
            ("failed", Outcome::Failed { error: json!({"code": -32603, "message": "no"}), message: "no".into() }),
            ("cancelled", Outcome::Cancelled { message: Some("stopped".into()) }),
        ] {
            let t = new_task(id, "A", Some(60_000));
            create(&*store, &t).await;
            let purge = purge_at(&t, T0 + 3);
            assert!(store.finish(&fence_of(&t), &outcome, T0 + 3, purge).await.unwrap());
            let state = same(id).await;
            assert_eq!((state.purge_at, state.updated_at), (purge, T0 + 3));
        }
        assert_eq!(store.get_task_state("no-such-task").await.unwrap(), None);
    }
}
