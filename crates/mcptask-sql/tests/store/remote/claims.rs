//! Phase claims, fencing, and applying worker results.

use super::support::*;

mcptask_testkit::on_both_backends! {
    async fn next_due_is_the_earliest_time_no_lease_holds(store: Arc<dyn RemoteTaskStore>) {
        for (i, interval) in [1_000, 3_000].into_iter().enumerate() {
            let mut t = new_task(&format!("p{i}"), &format!("r-{i}"));
            t.snapshot.poll_interval_ms = Some(interval);
            insert(&*store, &t).await;
        }
        let a = get(&*store, "p0").await.next_poll_at.expect("p0 scheduled");
        let b = get(&*store, "p1").await.next_poll_at.expect("p1 scheduled");
        assert!(a < b, "{a} < {b}");
        let due = |phase, now| {
            let store = store.clone();
            async move { store.next_due(phase, now).await.expect("next_due") }
        };
        assert_eq!(due(Phase::Poll, a - 1).await, Some(a));
        assert_eq!(due(Phase::Poll, a).await, Some(a), "due now and not taken");
        assert_eq!(
            due(Phase::Poll, b + 1).await,
            Some(a),
            "still due, and nothing claimed it"
        );
        let claimed = claim(&*store, Phase::Poll, "w1", a, 1).await;
        assert_eq!(ids(&claimed), ["p0"]);
        assert_eq!(due(Phase::Poll, a).await, Some(b), "a claimed task is not due");
        claim(&*store, Phase::Poll, "w1", b, 1).await;
        assert_eq!(due(Phase::Poll, b).await, None, "every task is claimed");
        assert_eq!(due(Phase::Cancel, 0).await, None, "no cancel is scheduled");
        assert_eq!(due(Phase::Update, 0).await, None, "no answer is waiting");
    }

    async fn claims_respect_due_times_leases_terminal_rows_and_limits(store: Arc<dyn RemoteTaskStore>) {
        for (i, interval) in [1_000, 2_000, 3_000, 4_000].into_iter().enumerate() {
            let mut t = new_task(&format!("p{i}"), &format!("r-{i}"));
            t.snapshot.poll_interval_ms = Some(interval);
            insert(&*store, &t).await;
        }
        let mut done = new_task("done", "r-done");
        done.snapshot = completed_snapshot();
        insert(&*store, &done).await;

        assert!(
            claim(&*store, Phase::Poll, "w1", T0 + 999, 10)
                .await
                .is_empty(),
            "nothing due yet"
        );
        let now = T0 + 2_500;
        let first = claim(&*store, Phase::Poll, "w1", now, 1).await;
        assert_eq!(ids(&first), ["p0"], "earliest due first, limit respected");
        let c = &first[0];
        assert_eq!(
            c.fence,
            Fence {
                task_id: "p0".into(),
                owner: "w1".into(),
                token: c.record.claim_token.clone().unwrap()
            }
        );
        assert_eq!(c.fence.token.len(), 32);
        assert!(c.fence.token.chars().all(|ch| ch.is_ascii_hexdigit()));
        assert_eq!(c.record.claim_owner.as_deref(), Some("w1"));
        assert_eq!(c.record.claim_expires_at, Some(now + LEASE));
        assert_eq!(c.record.poll_count, 1, "a poll claim counts a poll");
        assert!(c.answers.is_empty());
        assert_eq!(
            get(&*store, "p0").await,
            c.record,
            "the claim is what is stored"
        );

        let second = claim(&*store, Phase::Poll, "w2", now, 10).await;
        assert_eq!(ids(&second), ["p1"], "p0 is leased; p2 and p3 are not due");
        assert_ne!(second[0].fence.token, c.fence.token);
        // No phase but poll has anything due.
        assert!(
            claim(&*store, Phase::Cancel, "w2", T0 + 10_000, 10)
                .await
                .is_empty()
        );
        assert!(
            claim(&*store, Phase::Update, "w2", T0 + 10_000, 10)
                .await
                .is_empty()
        );

        // Leases hold up to and including their expiry.
        let edge = claim(&*store, Phase::Poll, "w3", now + LEASE, 10).await;
        assert_eq!(ids(&edge), ["p2", "p3"], "in due order");
        let after = claim(&*store, Phase::Poll, "w3", now + LEASE + 1, 10).await;
        assert_eq!(ids(&after), ["p0", "p1"], "expired leases are reclaimed");
        assert_ne!(
            after[0].fence.token, c.fence.token,
            "a reclaim gets a new token"
        );
        assert_ne!(after[1].fence.token, second[0].fence.token);
        assert_eq!(after[0].record.poll_count, 2);
        assert!(
            claim(&*store, Phase::Poll, "w4", now + 10 * LEASE, 100)
                .await
                .iter()
                .all(|t| t.record.id != "done"),
            "terminal tasks are never claimed"
        );
        assert!(
            claim(&*store, Phase::Poll, "w4", now + 10 * LEASE, 0)
                .await
                .is_empty()
        );
    }

    async fn concurrent_claimers_never_share_a_task(store: Arc<dyn RemoteTaskStore>) {
        for i in 0..60 {
            insert(&*store, &new_task(&format!("c{i:02}"), &format!("r-{i}"))).await;
        }
        let now = T0 + 1_000;
        let mut handles = Vec::new();
        for w in 0..6 {
            let store = store.clone();
            handles.push(tokio::spawn(async move {
                let me = format!("w{w}");
                let mut mine = Vec::new();
                loop {
                    let got = store
                        .claim_remote(Phase::Poll, &me, now, LEASE, 7)
                        .await
                        .unwrap();
                    if got.is_empty() {
                        break;
                    }
                    for t in got {
                        assert_eq!(t.fence.owner, me);
                        mine.push(t.record.id);
                    }
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

    async fn stale_fences_change_nothing_after_a_reclaim(store: Arc<dyn RemoteTaskStore>) {
        insert(&*store, &new_task("t1", "r-1")).await;
        let a = claim_one(&*store, Phase::Poll, "A", T0 + 1_000).await;
        // A's lease lapses; B reclaims with a new token.
        let b = claim_one(&*store, Phase::Poll, "B", T0 + 1_000 + LEASE + 1).await;
        assert_ne!(a.fence.token, b.fence.token);
        let now = T0 + 1_000 + LEASE + 2;
        let stale_observations = || {
            vec![
                (Phase::Poll, Observation::Snapshot(completed_snapshot())),
                (Phase::Poll, Observation::Snapshot(input_snapshot(&["k"]))),
                (Phase::Poll, Observation::Transient("timeout".into())),
                (
                    Phase::Poll,
                    Observation::Permanent {
                        kind: FailureKind::NotFound,
                        message: "gone".into(),
                    },
                ),
                (Phase::Poll, Observation::Released),
                (Phase::Cancel, Observation::CancelAcked),
                (
                    Phase::Update,
                    Observation::UpdateAcked {
                        keys: vec!["k".into()],
                    },
                ),
            ]
        };
        let assert_untouched = |store: Arc<dyn RemoteTaskStore>, stale: ClaimedTask| async move {
            let before = get(&*store, "t1").await;
            let inputs = store.remote_inputs("t1").await.unwrap();
            let evs = events(&*store, "t1").await;
            for (phase, obs) in stale_observations() {
                assert!(
                    !apply_one(&*store, applied(&stale, phase, obs.clone()), now).await,
                    "a stale fence applied {obs:?}"
                );
            }
            assert_eq!(
                get(&*store, "t1").await,
                before,
                "the whole row is unchanged"
            );
            assert_eq!(store.remote_inputs("t1").await.unwrap(), inputs);
            assert_eq!(events(&*store, "t1").await, evs);
        };
        assert_untouched(store.clone(), a.clone()).await;

        // The same owner claiming again (new token) fences out its own old claim.
        let b2 = claim_one(&*store, Phase::Poll, "B", T0 + 1_000 + 2 * LEASE + 2).await;
        assert_eq!(b2.fence.owner, "B");
        assert_ne!(b2.fence.token, b.fence.token);
        assert_untouched(store.clone(), b.clone()).await;
        assert_untouched(store.clone(), a).await;

        let at = T0 + 1_000 + 2 * LEASE + 3;
        let obs = Observation::Snapshot(snapshot(TaskStatus::Working));
        assert!(apply_one(&*store, applied(&b2, Phase::Poll, obs.clone()), at).await);
        let r = get(&*store, "t1").await;
        assert_eq!(
            (r.claim_owner, r.claim_token, r.claim_expires_at),
            (None, None, None)
        );
        assert_eq!(
            (r.poll_count, r.last_polled_at, r.next_poll_at),
            (3, Some(at), Some(at + 1_000))
        );
        assert!(
            !apply_one(&*store, applied(&b2, Phase::Poll, obs), at + 1).await,
            "a fence is spent once applied"
        );
    }

    // The fence is the claim's owner and token, not its lease expiry: a
    // lapsed claim that nobody reclaimed still applies its late result (no
    // newer observation exists; rejecting it would only repeat the remote
    // call). Once anyone reclaims, the old claim is fenced out (the test
    // above). docs/DEERFLOW-PARITY.md rows 25–26 rely on exactly this.
    async fn a_lapsed_claim_nobody_reclaimed_still_applies(store: Arc<dyn RemoteTaskStore>) {
        insert(&*store, &new_task("t1", "r-1")).await;
        let a = claim_one(&*store, Phase::Poll, "A", T0 + 1_000).await;
        let late = T0 + 1_000 + 10 * LEASE;
        let obs = Observation::Snapshot(completed_snapshot());
        assert!(
            apply_one(&*store, applied(&a, Phase::Poll, obs.clone()), late).await,
            "an unreclaimed claim applies after its lease lapsed"
        );
        let r = get(&*store, "t1").await;
        assert_eq!(r.status, TaskStatus::Completed);
        assert_eq!(
            (r.claim_owner, r.claim_token, r.claim_expires_at),
            (None, None, None)
        );
        assert!(
            !apply_one(&*store, applied(&a, Phase::Poll, obs), late + 1).await,
            "and is spent by it"
        );
    }

    async fn terminal_snapshot_settles_the_task(store: Arc<dyn RemoteTaskStore>) {
        insert(&*store, &new_task("t1", "r-1")).await;
        let c = claim_one(&*store, Phase::Poll, "w", T0 + 1_000).await;
        let now = T0 + 1_500;
        let obs = Observation::Snapshot(completed_snapshot());
        assert!(apply_one(&*store, applied(&c, Phase::Poll, obs), now).await);
        let r = get(&*store, "t1").await;
        assert_eq!(r.status, TaskStatus::Completed);
        assert_eq!(r.result, Some(done_result()));
        assert_eq!(r.status_message.as_deref(), Some("all done"));
        assert_eq!(
            (r.completed_at, r.updated_at, r.last_polled_at),
            (Some(now), now, Some(now))
        );
        assert_eq!(
            (r.next_poll_at, r.next_cancel_at, r.next_update_at),
            (None, None, None)
        );
        assert_eq!(
            (&r.claim_owner, &r.claim_token, r.claim_expires_at),
            (&None, &None, None)
        );
        assert_eq!(r.event_version, 2);
        let evs = store.remote_events("t1", 1, 10).await.unwrap();
        assert_eq!(evs.len(), 1);
        assert_eq!(
            (
                evs[0].version,
                evs[0].kind,
                evs[0].status,
                evs[0].occurred_at
            ),
            (2, EventKind::Status, TaskStatus::Completed, now)
        );
        assert_eq!(evs[0].data["result"], done_result());
        for phase in [Phase::Poll, Phase::Cancel, Phase::Update] {
            assert!(
                claim(&*store, phase, "w", now + 100 * LEASE, 10)
                    .await
                    .is_empty()
            );
        }
        // Terminal is absorbing: a cancel intent changes nothing.
        assert_eq!(
            store.request_cancel("t1", now + 1).await.unwrap(),
            Some(r.clone())
        );
        assert_eq!(get(&*store, "t1").await, r);
    }

    async fn apply_batches_apply_exactly_the_good_entries(store: Arc<dyn RemoteTaskStore>) {
        for i in 0..4 {
            insert(&*store, &new_task(&format!("b{i}"), &format!("r-{i}"))).await;
        }
        let claims = claim(&*store, Phase::Poll, "w", T0 + 1_000, 10).await;
        assert_eq!(ids(&claims), ["b0", "b1", "b2", "b3"]);
        let now = T0 + 1_200;
        let completed = Observation::Snapshot(completed_snapshot());
        let stale_token = Applied {
            fence: Fence {
                token: "not-the-token".into(),
                ..claims[1].fence.clone()
            },
            ..applied(&claims[1], Phase::Poll, completed.clone())
        };
        let wrong_owner = Applied {
            fence: Fence {
                owner: "intruder".into(),
                ..claims[2].fence.clone()
            },
            ..applied(&claims[2], Phase::Poll, completed.clone())
        };
        let unknown = Applied {
            fence: Fence {
                task_id: "nope".into(),
                ..claims[0].fence.clone()
            },
            ..applied(&claims[0], Phase::Poll, completed.clone())
        };
        let batch = vec![
            applied(&claims[0], Phase::Poll, completed.clone()),
            stale_token,
            applied(
                &claims[3],
                Phase::Poll,
                Observation::Snapshot(input_snapshot(&["k"])),
            ),
            unknown,
            wrong_owner,
            // The first entry spent this fence.
            applied(
                &claims[0],
                Phase::Poll,
                Observation::Transient("late".into()),
            ),
        ];
        let done = store.apply_remote(&batch, &policy(), now).await.unwrap();
        assert_eq!(done, [true, false, true, false, false, false]);
        let b0 = get(&*store, "b0").await;
        assert_eq!(
            (b0.status, b0.consecutive_errors),
            (TaskStatus::Completed, 0)
        );
        let b3 = get(&*store, "b3").await;
        assert_eq!(b3.status, TaskStatus::InputRequired);
        assert_eq!(store.remote_inputs("b3").await.unwrap().len(), 1);
        assert_eq!(
            get(&*store, "b1").await,
            claims[1].record,
            "stale entry changed nothing"
        );
        assert_eq!(
            get(&*store, "b2").await,
            claims[2].record,
            "foreign entry changed nothing"
        );
        assert!(events(&*store, "nope").await.is_empty());
        // The real fences still work.
        let retry = vec![
            applied(&claims[1], Phase::Poll, completed.clone()),
            applied(&claims[2], Phase::Poll, Observation::Released),
        ];
        assert_eq!(
            store.apply_remote(&retry, &policy(), now).await.unwrap(),
            [true, true]
        );
        assert!(
            store
                .apply_remote(&[], &policy(), now)
                .await
                .unwrap()
                .is_empty()
        );
    }

    /// A batch may be written in one set-based statement (PostgreSQL) and a
    /// single entry one row at a time: both must write every column alike.
    async fn batch_applies_write_what_single_applies_write(store: Arc<dyn RemoteTaskStore>) {
        let observations = [
            Observation::Snapshot(completed_snapshot()),
            Observation::Snapshot(RemoteSnapshot {
                error: Some(json!({"code": -32000, "message": "boom \"quoted\" ü"})),
                ..snapshot(TaskStatus::Failed)
            }),
            Observation::Snapshot(input_snapshot(&["k1", "k2"])),
            Observation::Snapshot(RemoteSnapshot {
                status_message: Some("half way".into()),
                remote_created_at: Some(T0 - 5),
                ttl_ms: Some(i64::MAX / 4),
                poll_interval_ms: Some(5_000),
                ..snapshot(TaskStatus::Working)
            }),
            Observation::Transient("connection reset".into()),
            Observation::Released,
        ];
        for i in 0..observations.len() {
            insert(&*store, &new_task(&format!("a{i}"), &format!("ra-{i}"))).await;
            insert(&*store, &new_task(&format!("s{i}"), &format!("rs-{i}"))).await;
        }
        let claims = claim(&*store, Phase::Poll, "w", T0 + 1_000, 100).await;
        let claimed = |id: String| claims.iter().find(|c| c.record.id == id).unwrap();
        let now = T0 + 1_200;
        let batch: Vec<Applied> = observations
            .iter()
            .enumerate()
            .map(|(i, o)| applied(claimed(format!("a{i}")), Phase::Poll, o.clone()))
            .collect();
        let done = store.apply_remote(&batch, &policy(), now).await.unwrap();
        assert!(done.iter().all(|ok| *ok), "every fence held: {done:?}");
        for (i, o) in observations.iter().enumerate() {
            let single = applied(claimed(format!("s{i}")), Phase::Poll, o.clone());
            assert!(apply_one(&*store, single, now).await);
        }
        for i in 0..observations.len() {
            let (a, s) = (format!("a{i}"), format!("s{i}"));
            let mut batched = get(&*store, &a).await;
            let single = get(&*store, &s).await;
            batched.id = single.id.clone();
            batched.remote_task_id = single.remote_task_id.clone();
            assert_eq!(batched, single, "observation {i}");
            let strip = |events: Vec<TaskEvent>| -> Vec<TaskEvent> {
                events
                    .into_iter()
                    .map(|mut e| {
                        e.task_id.clear();
                        if let Some(data) = e.data.as_object_mut() {
                            data.remove("taskId");
                        }
                        e
                    })
                    .collect()
            };
            assert_eq!(
                strip(events(&*store, &a).await),
                strip(events(&*store, &s).await),
                "events of observation {i}"
            );
            let keys = |inputs: Vec<mcptask_core::client::RemoteInput>| -> Vec<String> {
                inputs.into_iter().map(|r| r.key).collect()
            };
            assert_eq!(
                keys(store.remote_inputs(&a).await.unwrap()),
                keys(store.remote_inputs(&s).await.unwrap()),
                "inputs of observation {i}"
            );
        }
    }

    async fn transient_errors_back_off_and_degrade(store: Arc<dyn RemoteTaskStore>) {
        insert(&*store, &new_task("t1", "r-1")).await;
        let mut now = T0 + 1_000;
        let mut delays = Vec::new();
        for _ in 0..3 {
            let c = claim_one(&*store, Phase::Poll, "w", now).await;
            let obs = Observation::Transient("connection refused".into());
            assert!(apply_one(&*store, applied(&c, Phase::Poll, obs), now).await);
            let r = get(&*store, "t1").await;
            let next = r.next_poll_at.unwrap();
            delays.push(next - now);
            now = next;
        }
        assert_eq!(delays, [1_000, 2_000, 4_000]);
        let r = get(&*store, "t1").await;
        assert_eq!(
            (r.consecutive_errors, r.last_error.as_deref()),
            (3, Some("connection refused"))
        );
        let evs = store.remote_events("t1", 1, 10).await.unwrap();
        assert_eq!(evs.len(), 1);
        assert_eq!(
            (evs[0].kind, evs[0].data["consecutiveErrors"].as_i64()),
            (EventKind::Degraded, Some(3))
        );
        assert!(
            claim(&*store, Phase::Poll, "w", now - 1, 10)
                .await
                .is_empty(),
            "backing off"
        );
        let c = claim_one(&*store, Phase::Poll, "w", now).await;
        let obs = Observation::Snapshot(snapshot(TaskStatus::Working));
        assert!(apply_one(&*store, applied(&c, Phase::Poll, obs), now).await);
        let r = get(&*store, "t1").await;
        assert_eq!(
            (r.consecutive_errors, r.last_error),
            (0, None),
            "a snapshot resets the errors"
        );
    }

    async fn released_claims_count_nothing(store: Arc<dyn RemoteTaskStore>) {
        insert(&*store, &new_task("t1", "r-1")).await;
        // Work claim: handed back untouched, claimable again at once.
        let c = claim_one(&*store, Phase::Poll, "w", T0 + 1_000).await;
        assert!(
            apply_one(
                &*store,
                applied(&c, Phase::Poll, Observation::Released),
                T0 + 1_200
            )
            .await
        );
        let r = get(&*store, "t1").await;
        assert_eq!(
            (r.claim_owner, r.claim_token, r.claim_expires_at),
            (None, None, None)
        );
        assert_eq!(
            (
                r.next_poll_at,
                r.consecutive_errors,
                r.poll_count,
                r.event_version
            ),
            (c.record.next_poll_at, 0, 1, 1)
        );
        claim_one(&*store, Phase::Poll, "w2", T0 + 1_200).await;

        // Notify claim: released without counting an attempt.
        let n = claim_notify(&*store, "n", T0 + 1_000).await;
        assert_eq!(n.len(), 1);
        let release = NotifyResult {
            released: true,
            lagged: Vec::new(),
            dead: Vec::new(),
            ..delivered(&n[0], 1)
        };
        assert!(finish_one(&*store, release, T0 + 1_100).await);
        let r = get(&*store, "t1").await;
        assert_eq!(
            (
                r.notify_attempts,
                &r.last_notify_error,
                r.delivered_version,
                r.next_notify_at
            ),
            (0, &None, 0, Some(T0))
        );
        let again = claim_notify(&*store, "m", T0 + 1_100).await;
        assert_eq!(again.len(), 1);
        assert_eq!(
            (again[0].attempts, versions(&again[0].events)),
            (0, vec![1])
        );
    }
}
