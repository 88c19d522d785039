//! Input requests, answers and cancel intents.

use super::support::*;

mcptask_testkit::on_both_backends! {
    async fn input_keys_are_deduplicated_across_snapshots(store: Arc<dyn RemoteTaskStore>) {
        let t1 = T0 + 1_100;
        let r = input_required_task(&*store, "t1", &["b", "a"], t1).await;
        assert_eq!(r.next_poll_at, Some(t1 + 5_000));
        assert_eq!(versions(&events(&*store, "t1").await), [1, 2]);
        let inputs = store.remote_inputs("t1").await.unwrap();
        assert_eq!(
            inputs.iter().map(|i| i.key.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert!(inputs.iter().all(|i| i.first_seen_at == t1));

        // The same keys again (one with a different request): nothing new is
        // stored, the first request wins, nothing to announce.
        let t2 = t1 + 5_000;
        let c = claim_one(&*store, Phase::Poll, "w", t2).await;
        let mut same = input_snapshot(&["b", "a"]);
        same.input_requests[1].1 =
            json!({"method": "elicitation/create", "params": {"message": "changed"}});
        assert!(
            apply_one(
                &*store,
                applied(&c, Phase::Poll, Observation::Snapshot(same)),
                t2
            )
            .await
        );
        assert_eq!(store.remote_inputs("t1").await.unwrap(), inputs);
        assert_eq!(get(&*store, "t1").await.event_version, 2);

        // A new key joins: stored once, announced once.
        let t3 = t2 + 5_000;
        let c = claim_one(&*store, Phase::Poll, "w", t3).await;
        let more = Observation::Snapshot(input_snapshot(&["a", "b", "c"]));
        assert!(apply_one(&*store, applied(&c, Phase::Poll, more), t3).await);
        let inputs = store.remote_inputs("t1").await.unwrap();
        assert_eq!(
            inputs.iter().map(|i| i.key.as_str()).collect::<Vec<_>>(),
            ["a", "b", "c"]
        );
        assert_eq!(inputs[0].request, request_for("a"));
        assert_eq!(inputs[2].first_seen_at, t3);
        let evs = store.remote_events("t1", 2, 10).await.unwrap();
        assert_eq!(evs.len(), 1);
        assert_eq!((evs[0].version, evs[0].kind), (3, EventKind::InputRequired));
        assert_eq!(get(&*store, "t1").await.input_requests.len(), 3);
    }

    async fn answers_are_stored_once_for_outstanding_keys(store: Arc<dyn RemoteTaskStore>) {
        input_required_task(&*store, "t1", &["a", "b"], T0 + 1_100).await;
        let now = T0 + 2_000;
        let accept = json!({"action": "accept", "content": {"x": 1}});
        let res = store
            .answer_inputs(
                "t1",
                &[
                    ("a".into(), accept.clone()),
                    ("zzz".into(), json!({})),
                    ("a".into(), json!({"action": "decline"})),
                ],
                now,
            )
            .await
            .unwrap()
            .unwrap();
        assert_eq!(res.applied, ["a"]);
        assert_eq!(res.ignored, ["zzz", "a"]);
        let inputs = store.remote_inputs("t1").await.unwrap();
        assert_eq!(
            (
                &inputs[0].key,
                &inputs[0].response,
                inputs[0].answered_at,
                inputs[0].sent_at
            ),
            (&"a".to_string(), &Some(accept.clone()), Some(now), None)
        );
        assert_eq!(inputs[1].response, None);
        let r = get(&*store, "t1").await;
        assert_eq!(
            (r.next_update_at, r.updated_at, r.event_version),
            (Some(now), now, 3)
        );
        let evs = store.remote_events("t1", 2, 10).await.unwrap();
        assert_eq!(
            (evs[0].kind, evs[0].occurred_at),
            (EventKind::Answered, now)
        );

        // A second answer to `a` is ignored and does not overwrite the first.
        let res = store
            .answer_inputs(
                "t1",
                &[
                    ("a".into(), json!({"action": "decline"})),
                    ("b".into(), json!({"action": "accept"})),
                ],
                now + 1,
            )
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (res.applied, res.ignored),
            (vec!["b".to_string()], vec!["a".to_string()])
        );
        assert_eq!(
            store.remote_inputs("t1").await.unwrap()[0].response,
            Some(accept)
        );
        // Nothing new to store: nothing changes.
        let before = get(&*store, "t1").await;
        let res = store
            .answer_inputs("t1", &[("b".into(), json!({}))], now + 2)
            .await
            .unwrap()
            .unwrap();
        assert!(res.applied.is_empty());
        assert_eq!(get(&*store, "t1").await, before);
        assert!(
            store
                .answer_inputs("nope", &[("a".into(), json!({}))], now)
                .await
                .unwrap()
                .is_none()
        );

        // A terminal task takes no answers.
        input_required_task(&*store, "t2", &["k"], T0 + 1_100).await;
        let due = claim(&*store, Phase::Poll, "w", T0 + 6_100, 10).await;
        let c = due.iter().find(|c| c.record.id == "t2").unwrap();
        let obs = Observation::Snapshot(completed_snapshot());
        assert!(apply_one(&*store, applied(c, Phase::Poll, obs), T0 + 6_100).await);
        let res = store
            .answer_inputs("t2", &[("k".into(), json!({}))], T0 + 6_200)
            .await
            .unwrap()
            .unwrap();
        assert_eq!((res.applied.len(), res.ignored.len()), (0, 1));
        assert_eq!(store.remote_inputs("t2").await.unwrap()[0].response, None);
    }

    async fn racing_answers_are_stored_exactly_once(store: Arc<dyn RemoteTaskStore>) {
        let keys: Vec<String> = (0..8).map(|i| format!("k{i}")).collect();
        let key_refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        input_required_task(&*store, "t1", &key_refs, T0 + 1_100).await;
        // Many "replicas" answer the same key and different keys at once.
        let mut handles = Vec::new();
        for r in 0..16i64 {
            let store = store.clone();
            handles.push(tokio::spawn(async move {
                let key = format!("k{}", r % 8);
                store
                    .answer_inputs("t1", &[(key, json!({"replica": r}))], T0 + 2_000 + r)
                    .await
                    .unwrap()
                    .unwrap()
                    .applied
                    .len()
            }));
        }
        let mut stored = 0;
        for h in handles {
            stored += h.await.unwrap();
        }
        assert_eq!(stored, 8, "each key is stored exactly once across replicas");
        for (i, input) in store.remote_inputs("t1").await.unwrap().iter().enumerate() {
            let replica = input.response.as_ref().unwrap()["replica"]
                .as_i64()
                .unwrap();
            assert_eq!(
                replica % 8,
                i as i64,
                "key {} has another key's answer",
                input.key
            );
        }
        let answered = events(&*store, "t1")
            .await
            .iter()
            .filter(|e| e.kind == EventKind::Answered)
            .count();
        assert_eq!(answered, 8);
        assert_eq!(get(&*store, "t1").await.event_version, 10);
    }

    async fn update_claims_carry_unsent_answers_until_acked(store: Arc<dyn RemoteTaskStore>) {
        input_required_task(&*store, "t1", &["a", "b", "c"], T0 + 1_100).await;
        let ans = |k: &str| json!({"action": "accept", "content": {"key": k}});
        store
            .answer_inputs("t1", &[("a".into(), ans("a"))], T0 + 2_000)
            .await
            .unwrap();
        let u = claim_one(&*store, Phase::Update, "w", T0 + 2_000).await;
        assert_eq!(u.answers, vec![("a".to_string(), ans("a"))]);
        assert_eq!(u.record.poll_count, 1, "only poll claims count polls");

        // `b` is answered while the update is in flight: the claim stays valid.
        let res = store
            .answer_inputs("t1", &[("b".into(), ans("b"))], T0 + 2_100)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(res.applied, ["b"]);
        assert_eq!(
            get(&*store, "t1").await.claim_token,
            Some(u.fence.token.clone())
        );

        let acked = Observation::UpdateAcked {
            keys: vec!["a".into()],
        };
        assert!(apply_one(&*store, applied(&u, Phase::Update, acked), T0 + 2_200).await);
        let inputs = store.remote_inputs("t1").await.unwrap();
        assert_eq!(
            (inputs[0].sent_at, inputs[1].sent_at),
            (Some(T0 + 2_200), None)
        );
        let r = get(&*store, "t1").await;
        assert_eq!(
            r.next_poll_at,
            Some(T0 + 2_200),
            "poll right after an update"
        );
        assert!(r.next_update_at.is_some(), "b still has to be sent");

        let u2 = claim_one(&*store, Phase::Update, "w", T0 + 2_300).await;
        assert_eq!(
            u2.answers,
            vec![("b".to_string(), ans("b"))],
            "a is not sent twice"
        );
        let acked = Observation::UpdateAcked {
            keys: vec!["b".into()],
        };
        assert!(apply_one(&*store, applied(&u2, Phase::Update, acked), T0 + 2_400).await);
        let r = get(&*store, "t1").await;
        assert_eq!(r.next_update_at, None);
        assert!(
            claim(&*store, Phase::Update, "w", T0 + 100 * LEASE, 10)
                .await
                .is_empty()
        );
        let inputs = store.remote_inputs("t1").await.unwrap();
        assert_eq!(inputs[1].sent_at, Some(T0 + 2_400));
        assert_eq!(
            (inputs[2].response.as_ref(), inputs[2].sent_at),
            (None, None)
        );
    }

    async fn cancel_intent_is_idempotent_and_keeps_claims(store: Arc<dyn RemoteTaskStore>) {
        insert(&*store, &new_task("t1", "r-1")).await;
        assert!(
            store
                .request_cancel("nope", T0)
                .await
                .unwrap()
                .is_none()
        );
        let p = claim_one(&*store, Phase::Poll, "w", T0 + 1_000).await;
        let r = store
            .request_cancel("t1", T0 + 1_100)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (r.cancel_requested_at, r.next_cancel_at),
            (Some(T0 + 1_100), Some(T0 + 1_100))
        );
        assert_eq!(
            r.status,
            TaskStatus::Working,
            "the server decides how the task ends"
        );
        assert_eq!(
            (&r.claim_owner, &r.claim_token, r.claim_expires_at),
            (
                &p.record.claim_owner,
                &p.record.claim_token,
                p.record.claim_expires_at
            ),
            "an active claim is not disturbed"
        );
        assert_eq!(get(&*store, "t1").await, r);
        let evs = store.remote_events("t1", 1, 10).await.unwrap();
        assert_eq!(
            (evs[0].version, evs[0].kind),
            (2, EventKind::CancelRequested)
        );

        // A repeat changes nothing.
        assert_eq!(
            store.request_cancel("t1", T0 + 1_200).await.unwrap(),
            Some(r.clone())
        );
        assert_eq!(get(&*store, "t1").await, r);
        assert_eq!(versions(&events(&*store, "t1").await), [1, 2]);

        // The cancel phase waits for the poll claim, which is still valid.
        assert!(
            claim(&*store, Phase::Cancel, "c", T0 + 1_300, 10)
                .await
                .is_empty()
        );
        let obs = Observation::Snapshot(snapshot(TaskStatus::Working));
        assert!(apply_one(&*store, applied(&p, Phase::Poll, obs), T0 + 1_400).await);
        assert_eq!(
            get(&*store, "t1").await.next_cancel_at,
            Some(T0 + 1_100),
            "the intent survives a poll"
        );

        let c = claim_one(&*store, Phase::Cancel, "c", T0 + 1_500).await;
        assert_eq!(c.record.poll_count, 1);
        assert!(
            apply_one(
                &*store,
                applied(&c, Phase::Cancel, Observation::CancelAcked),
                T0 + 1_600
            )
            .await
        );
        let r = get(&*store, "t1").await;
        assert_eq!(
            (
                r.cancel_sent_at,
                r.next_cancel_at,
                r.cancel_attempts,
                r.next_poll_at
            ),
            (Some(T0 + 1_600), None, 1, Some(T0 + 1_600))
        );
        assert_eq!(r.status, TaskStatus::Working);
        assert!(
            claim(&*store, Phase::Cancel, "c", T0 + 100 * LEASE, 10)
                .await
                .is_empty()
        );

        // The server reports the outcome on the next poll.
        let p = claim_one(&*store, Phase::Poll, "w", T0 + 1_600).await;
        let obs = Observation::Snapshot(snapshot(TaskStatus::Cancelled));
        assert!(apply_one(&*store, applied(&p, Phase::Poll, obs), T0 + 1_700).await);
        let settled = get(&*store, "t1").await;
        assert_eq!(settled.status, TaskStatus::Cancelled);
        assert_eq!(
            store.request_cancel("t1", T0 + 1_800).await.unwrap(),
            Some(settled)
        );
    }
}
