//! Fencing, owner leases and recovery claims.

use super::support::*;

mcptask_testkit::on_both_backends! {
    async fn fenced_writes_need_the_current_claim(store: Arc<dyn ServerTaskStore>) {
        let t = new_task("t1", "A", None);
        create(&*store, &t).await;
        let good = fence_of(&t);
        let stale_token = Fence {
            token: "other".into(),
            ..good.clone()
        };
        let other_owner = Fence {
            owner: "B".into(),
            ..good.clone()
        };
        for bad in [&stale_token, &other_owner] {
            assert!(
                !store
                    .set_status_message(bad, Some("x"), T0 + 1)
                    .await
                    .unwrap()
            );
            assert!(
                store
                    .request_inputs(bad, &[("k".into(), json!({}))], T0 + 1)
                    .await
                    .unwrap()
                    .is_none()
            );
            assert!(store.begin_rerun(bad, T0 + 1, "rerun").await.unwrap().is_none());
            let done = Outcome::Completed {
                result: json!({"content": []}),
            };
            assert!(
                !store
                    .finish(bad, &done, T0 + 1, Some(T0 + 1 + RETENTION))
                    .await
                    .unwrap()
            );
        }
        let r = store.get_task("t1").await.unwrap().unwrap().record;
        assert_eq!(r.status, TaskStatus::Working);
        assert_eq!(r.status_message.as_deref(), Some("queued"));
        assert_eq!(r.attempt, 1);
        assert!(
            store
                .input_states("t1", &["k".into()])
                .await
                .unwrap()
                .is_empty()
        );

        assert!(
            store
                .set_status_message(&good, Some("step 2"), T0 + 2)
                .await
                .unwrap()
        );
        let r = store.get_task("t1").await.unwrap().unwrap().record;
        assert_eq!(r.status_message.as_deref(), Some("step 2"));
        assert_eq!(r.updated_at, T0 + 2);
    }

    async fn takeover_fences_out_the_old_owner(store: Arc<dyn ServerTaskStore>) {
        let t = new_task("t1", "A", None);
        create(&*store, &t).await;
        let old = fence_of(&t);
        store.heartbeat("B", T0, LEASE).await.unwrap();
        // A's lease is still valid: nothing to claim.
        assert!(
            store
                .claim_orphans("B", T0 + LEASE - 1, 10)
                .await
                .unwrap()
                .is_empty()
        );
        // A stops heartbeating; B takes over after the lease.
        let claimed = store.claim_orphans("B", T0 + LEASE + 1, 10).await.unwrap();
        assert_eq!(claimed.len(), 1);
        let new = claimed[0].fence().unwrap();
        assert_eq!(new.owner, "B");
        assert_ne!(new.token, old.token);
        assert_eq!(claimed[0].attempt, 1);

        // Every write by the old claim is dropped.
        assert!(
            !store
                .set_status_message(&old, Some("stale"), T0 + LEASE + 2)
                .await
                .unwrap()
        );
        assert!(
            store
                .request_inputs(&old, &[("k".into(), json!({}))], T0 + LEASE + 2)
                .await
                .unwrap()
                .is_none()
        );
        let stale_done = Outcome::Completed {
            result: json!({"content": [{"type": "text", "text": "stale"}]}),
        };
        assert!(
            !store
                .finish(
                    &old,
                    &stale_done,
                    T0 + LEASE + 2,
                    Some(T0 + LEASE + 2 + RETENTION)
                )
                .await
                .unwrap()
        );
        assert_eq!(status(&*store, "t1").await, TaskStatus::Working);

        // A second claim generation by the same owner also fences the first.
        store.release_owner("B", T0 + LEASE + 3).await.unwrap();
        store.heartbeat("C", T0 + LEASE + 3, LEASE).await.unwrap();
        let again = store.claim_orphans("C", T0 + LEASE + 4, 10).await.unwrap();
        assert_eq!(again.len(), 1);
        assert!(
            !store
                .finish(
                    &new,
                    &stale_done,
                    T0 + LEASE + 5,
                    Some(T0 + LEASE + 5 + RETENTION)
                )
                .await
                .unwrap()
        );
        let current = again[0].fence().unwrap();
        let done = Outcome::Completed {
            result: json!({"content": []}),
        };
        assert!(
            store
                .finish(
                    &current,
                    &done,
                    T0 + LEASE + 6,
                    Some(T0 + LEASE + 6 + RETENTION)
                )
                .await
                .unwrap()
        );
        assert_eq!(status(&*store, "t1").await, TaskStatus::Completed);
    }

    async fn claims_skip_live_owners_terminal_tasks_and_respect_limits(store: Arc<dyn ServerTaskStore>) {
        store.heartbeat("dead", T0, LEASE).await.unwrap();
        store.heartbeat("alive", T0, 10 * LEASE).await.unwrap();
        let dead: Vec<_> = (0..5)
            .map(|i| new_task(&format!("d{i}"), "dead", None))
            .collect();
        let alive: Vec<_> = (0..3)
            .map(|i| new_task(&format!("a{i}"), "alive", None))
            .collect();
        store.create_tasks(&dead).await.unwrap();
        store.create_tasks(&alive).await.unwrap();
        let done = Outcome::Completed {
            result: json!({"content": []}),
        };
        assert!(
            store
                .finish(&fence_of(&dead[0]), &done, T0 + 1, Some(T0 + 1 + RETENTION))
                .await
                .unwrap()
        );

        let now = T0 + LEASE + 1;
        store.heartbeat("me", now, LEASE).await.unwrap();
        let first = store.claim_orphans("me", now, 2).await.unwrap();
        assert_eq!(first.len(), 2);
        let second = store.claim_orphans("me", now, 10).await.unwrap();
        assert_eq!(
            second.len(),
            2,
            "only the 4 live tasks of the dead owner are orphans"
        );
        let mut ids: Vec<_> = first.iter().chain(&second).map(|r| r.id.clone()).collect();
        ids.sort();
        assert_eq!(ids, ["d1", "d2", "d3", "d4"]);
        assert!(store.claim_orphans("me", now, 10).await.unwrap().is_empty());
        // The dead owner now owns no live task and can be pruned; the live one stays.
        assert_eq!(store.prune_owners(now).await.unwrap(), 1);
        assert!(store.claim_orphans("me", now, 10).await.unwrap().is_empty());
    }

    async fn concurrent_claimers_never_share_a_task(store: Arc<dyn ServerTaskStore>) {
        store.heartbeat("dead", T0, LEASE).await.unwrap();
        let tasks: Vec<_> = (0..60)
            .map(|i| new_task(&format!("c{i:02}"), "dead", None))
            .collect();
        store.create_tasks(&tasks).await.unwrap();
        let now = T0 + LEASE + 1;
        let mut handles = Vec::new();
        for w in 0..6 {
            let store = store.clone();
            handles.push(tokio::spawn(async move {
                let me = format!("w{w}");
                store.heartbeat(&me, now, LEASE).await.unwrap();
                let mut mine = Vec::new();
                loop {
                    let got = store.claim_orphans(&me, now, 7).await.unwrap();
                    if got.is_empty() {
                        break;
                    }
                    mine.extend(got.into_iter().map(|r| r.id));
                }
                mine
            }));
        }
        let mut all = Vec::new();
        for h in handles {
            all.extend(h.await.unwrap());
        }
        all.sort();
        let before = all.len();
        all.dedup();
        assert_eq!(before, all.len(), "a task was claimed twice");
        assert_eq!(all.len(), 60);
    }

    async fn rerun_increments_attempt_and_keeps_answers(store: Arc<dyn ServerTaskStore>) {
        let t = new_task("t1", "A", None);
        create(&*store, &t).await;
        let f = fence_of(&t);
        store
            .request_inputs(
                &f,
                &[
                    ("name".into(), json!({"m": 1})),
                    ("later".into(), json!({"m": 2})),
                ],
                T0 + 1,
            )
            .await
            .unwrap();
        store
            .answer_inputs(
                "t1",
                &[("name".into(), json!({"action": "accept"}))],
                T0 + 2,
            )
            .await
            .unwrap();
        store.heartbeat("B", T0 + LEASE + 1, LEASE).await.unwrap();
        let claimed = store.claim_orphans("B", T0 + LEASE + 1, 10).await.unwrap();
        let nf = claimed[0].fence().unwrap();
        assert_eq!(
            store
                .begin_rerun(&nf, T0 + LEASE + 2, "rerun as attempt 2")
                .await
                .unwrap(),
            Some(2)
        );
        assert_eq!(
            store
                .begin_rerun(&f, T0 + LEASE + 2, "stale")
                .await
                .unwrap(),
            None,
            "old claim cannot rerun"
        );
        let states = store
            .request_inputs(&nf, &[("name".into(), json!({"m": 1}))], T0 + LEASE + 3)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            states,
            vec![(
                "name".into(),
                InputState::Answered(json!({"action": "accept"}))
            )]
        );
        let view = store.get_task("t1").await.unwrap().unwrap();
        assert_eq!(view.record.attempt, 2);
        assert_eq!(
            view.record.status_message.as_deref(),
            Some("rerun as attempt 2"),
            "the rerun says why its progress starts again"
        );
        let state = store.get_task_state("t1").await.unwrap().unwrap();
        assert_eq!(state.attempt, 2);
        assert_eq!(
            view.record.status,
            TaskStatus::InputRequired,
            "the unanswered key stays outstanding"
        );
        assert_eq!(view.input_requests.len(), 1);
    }
}
