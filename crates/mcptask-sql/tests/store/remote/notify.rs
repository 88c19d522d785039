//! The notification outbox: claims, delivery order, retries, dead letters.

use super::support::*;

mcptask_testkit::on_both_backends! {
    async fn notifications_are_delivered_in_version_order(store: Arc<dyn RemoteTaskStore>) {
        input_required_task(&*store, "t1", &["k"], T0 + 1_100).await;
        store.request_cancel("t1", T0 + 1_200).await.unwrap();
        assert_eq!(store.notification_backlog().await.unwrap(), 3);
        let now = T0 + 2_000;
        let claims = store
            .claim_notifications("n", now, LEASE, 10, 2)
            .await
            .unwrap();
        assert_eq!(claims.len(), 1);
        let n = &claims[0];
        assert_eq!(
            (n.fence.task_id.as_str(), n.fence.owner.as_str()),
            ("t1", "n")
        );
        assert!(!n.fence.token.is_empty());
        assert_eq!(n.attempts, 0);
        assert_eq!(
            versions(&n.events),
            [1, 2],
            "oldest first, at most max_events"
        );
        assert_eq!(
            (n.events[0].kind, n.events[1].kind, n.events[1].status),
            (
                EventKind::Created,
                EventKind::Status,
                TaskStatus::InputRequired
            )
        );
        assert!(
            claim_notify(&*store, "m", now).await.is_empty(),
            "the notify lease is held"
        );

        assert!(finish_one(&*store, delivered(n, 2), now + 10).await);
        let r = get(&*store, "t1").await;
        assert_eq!(
            (r.delivered_version, r.next_notify_at, r.notify_attempts),
            (2, Some(now + 10), 0),
            "more events pending: due again now"
        );
        assert_eq!(store.notification_backlog().await.unwrap(), 1);
        let claims = claim_notify(&*store, "m", now + 10).await;
        assert_eq!(versions(&claims[0].events), [3]);
        assert_eq!(claims[0].events[0].kind, EventKind::CancelRequested);
        assert!(finish_one(&*store, delivered(&claims[0], 3), now + 20).await);
        let r = get(&*store, "t1").await;
        assert_eq!((r.delivered_version, r.next_notify_at), (3, None));
        assert_eq!(store.notification_backlog().await.unwrap(), 0);
        assert!(
            claim_notify(&*store, "m", now + 100 * LEASE)
                .await
                .is_empty()
        );
        assert!(
            store
                .finish_notifications(&[], now)
                .await
                .unwrap()
                .is_empty()
        );
    }

    async fn failed_notifications_back_off_then_dead_letter(store: Arc<dyn RemoteTaskStore>) {
        insert(&*store, &new_task("t1", "r-1")).await;
        store.request_cancel("t1", T0 + 100).await.unwrap();
        let fail = |n: &NotifyClaim, through: i64, error: &str, retry_at: i64| NotifyResult {
            failure: Some((error.to_string(), retry_at)),
            ..delivered(n, through)
        };
        let n = claim_notify(&*store, "n", T0 + 1_000).await;
        assert_eq!((n[0].attempts, versions(&n[0].events)), (0, vec![1, 2]));
        assert!(
            finish_one(
                &*store,
                fail(&n[0], 0, "webhook 503", T0 + 6_000),
                T0 + 1_000
            )
            .await
        );
        let r = get(&*store, "t1").await;
        assert_eq!(
            (
                r.notify_attempts,
                r.last_notify_error.as_deref(),
                r.next_notify_at,
                r.delivered_version
            ),
            (1, Some("webhook 503"), Some(T0 + 6_000), 0)
        );
        assert!(
            claim_notify(&*store, "n", T0 + 5_999).await.is_empty(),
            "backing off"
        );
        let n = claim_notify(&*store, "n", T0 + 6_000).await;
        assert_eq!((n[0].attempts, versions(&n[0].events)), (1, vec![1, 2]));
        assert!(
            finish_one(
                &*store,
                fail(&n[0], 0, "webhook 503", T0 + 16_000),
                T0 + 6_000
            )
            .await
        );
        assert_eq!(get(&*store, "t1").await.notify_attempts, 2);

        // v1 is given up on; v2 then fails for the first time.
        let n = claim_notify(&*store, "n", T0 + 16_000).await;
        assert_eq!(n[0].attempts, 2);
        let result = NotifyResult {
            dead_lettered: vec![1],
            ..fail(&n[0], 1, "timeout", T0 + 20_000)
        };
        assert!(finish_one(&*store, result, T0 + 16_000).await);
        let r = get(&*store, "t1").await;
        assert_eq!(
            (
                r.delivered_version,
                r.dead_letters,
                r.notify_attempts,
                r.next_notify_at
            ),
            (1, 1, 1, Some(T0 + 20_000)),
            "attempts count per event: the new head has failed once"
        );
        assert_eq!(r.last_notify_error.as_deref(), Some("timeout"));
        let n = claim_notify(&*store, "n", T0 + 20_000).await;
        assert_eq!(
            (n[0].attempts, versions(&n[0].events)),
            (1, vec![2]),
            "dead letters are skipped"
        );
        assert!(finish_one(&*store, delivered(&n[0], 2), T0 + 20_000).await);
        let r = get(&*store, "t1").await;
        assert_eq!(
            (
                r.delivered_version,
                r.dead_letters,
                r.notify_attempts,
                &r.last_notify_error,
                r.next_notify_at
            ),
            (2, 1, 0, &None, None)
        );
        assert_eq!(store.notification_backlog().await.unwrap(), 0);
        assert_eq!(
            versions(&events(&*store, "t1").await),
            [1, 2],
            "the timeline keeps every event"
        );
    }

    async fn stale_notify_fences_cannot_finish(store: Arc<dyn RemoteTaskStore>) {
        insert(&*store, &new_task("t1", "r-1")).await;
        // The notify lease is independent of the work claim.
        let p = claim_one(&*store, Phase::Poll, "w", T0 + 1_000).await;
        let n1 = claim_notify(&*store, "n1", T0 + 1_000).await.remove(0);
        assert!(
            claim_notify(&*store, "n2", T0 + 1_000 + LEASE)
                .await
                .is_empty(),
            "lease holds"
        );
        let n2 = claim_notify(&*store, "n2", T0 + 1_000 + LEASE + 1)
            .await
            .remove(0);
        assert_ne!(n2.fence.token, n1.fence.token);
        assert_eq!(n2.attempts, 0, "an expired notify lease is no failure");
        let before = get(&*store, "t1").await;
        let now = T0 + 1_000 + LEASE + 2;
        let stale_results = |n: &NotifyClaim| {
            vec![
                delivered(n, 1),
                NotifyResult {
                    failure: Some(("x".into(), now + 5)),
                    ..delivered(n, 0)
                },
                NotifyResult {
                    released: true,
                    lagged: Vec::new(),
                    dead: Vec::new(),
                    ..delivered(n, 0)
                },
            ]
        };
        let done = store
            .finish_notifications(&stale_results(&n1), now)
            .await
            .unwrap();
        assert_eq!(done, [false, false, false]);
        assert_eq!(get(&*store, "t1").await, before);

        // Same owner, new token: the old token is stale too.
        let n2b = claim_notify(&*store, "n2", T0 + 1_000 + 2 * LEASE + 2)
            .await
            .remove(0);
        assert_eq!(n2b.fence.owner, "n2");
        assert_ne!(n2b.fence.token, n2.fence.token);
        let done = store
            .finish_notifications(&stale_results(&n2), now)
            .await
            .unwrap();
        assert_eq!(done, [false, false, false]);
        assert_eq!(get(&*store, "t1").await, before);

        let batch = vec![delivered(&n1, 1), delivered(&n2b, 1), delivered(&n2, 1)];
        let done = store.finish_notifications(&batch, now).await.unwrap();
        assert_eq!(done, [false, true, false]);
        assert_eq!(get(&*store, "t1").await.delivered_version, 1);
        let obs = Observation::Snapshot(snapshot(TaskStatus::Working));
        assert!(
            apply_one(&*store, applied(&p, Phase::Poll, obs), now).await,
            "notify claims leave the work claim alone"
        );
    }

    async fn events_recorded_during_a_notify_claim_stay_pending(store: Arc<dyn RemoteTaskStore>) {
        insert(&*store, &new_task("t1", "r-1")).await;
        insert(&*store, &new_task("t2", "r-2")).await;
        let claims = claim_notify(&*store, "n", T0 + 1_000).await;
        assert_eq!(claims.len(), 2);
        // New events while both deliveries are in flight.
        store.request_cancel("t1", T0 + 1_100).await.unwrap();
        store.request_cancel("t2", T0 + 1_100).await.unwrap();
        let fail = NotifyResult {
            failure: Some(("refused".into(), T0 + 9_000)),
            ..delivered(&claims[1], 0)
        };
        let done = store
            .finish_notifications(&[delivered(&claims[0], 1), fail], T0 + 1_200)
            .await
            .unwrap();
        assert_eq!(done, [true, true]);
        let r1 = get(&*store, "t1").await;
        assert_eq!(
            (r1.delivered_version, r1.event_version, r1.next_notify_at),
            (1, 2, Some(T0 + 1_200)),
            "the newer event is due now"
        );
        let r2 = get(&*store, "t2").await;
        assert_eq!(
            (r2.delivered_version, r2.next_notify_at),
            (0, Some(T0 + 9_000))
        );
        let claims = claim_notify(&*store, "n", T0 + 1_200).await;
        assert_eq!(claims.len(), 1);
        assert_eq!(
            (
                claims[0].fence.task_id.as_str(),
                versions(&claims[0].events)
            ),
            ("t1", vec![2])
        );
        // Reporting more than was recorded cannot skip events that do not exist yet.
        assert!(finish_one(&*store, delivered(&claims[0], 99), T0 + 1_300).await);
        let r1 = get(&*store, "t1").await;
        assert_eq!((r1.delivered_version, r1.next_notify_at), (2, None));
        assert_eq!(
            store.notification_backlog().await.unwrap(),
            2,
            "t1 has none pending, t2 two"
        );
    }
}
