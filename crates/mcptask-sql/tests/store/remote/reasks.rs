//! Answers the server refuses or asks for again: the key is reopened (stored
//! answer cleared, request replaced), announced, and can be answered anew.

use super::support::*;

async fn answer(store: &dyn RemoteTaskStore, key: &str, v: i64, now: i64) -> Vec<String> {
    store
        .answer_inputs(
            "t1",
            &[(key.into(), json!({"action": "accept", "content": {"v": v}}))],
            now,
        )
        .await
        .unwrap()
        .unwrap()
        .applied
}

mcptask_testkit::on_both_backends! {
    async fn a_refused_answer_reopens_its_key(store: Arc<dyn RemoteTaskStore>) {
        input_required_task(&*store, "t1", &["a", "b"], T0 + 1_100).await;
        assert_eq!(answer(&*store, "a", 1, T0 + 2_000).await, ["a"]);
        let u = claim_one(&*store, Phase::Update, "w", T0 + 2_000).await;
        // `b` is answered while the refused update is in flight.
        assert_eq!(answer(&*store, "b", 2, T0 + 2_050).await, ["b"]);
        let refused = Observation::UpdateRejected {
            keys: vec!["a".into()],
            message: "v must be even".into(),
        };
        assert!(apply_one(&*store, applied(&u, Phase::Update, refused), T0 + 2_100).await);
        let r = get(&*store, "t1").await;
        assert_eq!(r.status, TaskStatus::InputRequired, "still tracked: {r:#?}");
        assert_eq!(r.next_poll_at, Some(T0 + 2_100), "the next poll is due now");
        assert_eq!(r.next_update_at, Some(T0 + 2_100), "b still has to be sent");
        let inputs = store.remote_inputs("t1").await.unwrap();
        assert_eq!(
            (&inputs[0].key, &inputs[0].response, inputs[0].answered_at, inputs[0].sent_at),
            (&"a".to_string(), &None, None, None)
        );
        assert!(inputs[1].response.is_some(), "b's answer is kept");
        let last = events(&*store, "t1").await.pop().unwrap();
        assert_eq!(last.kind, EventKind::InputRequired);
        assert_eq!(last.data["reopenedKeys"], json!(["a"]));
        assert!(last.data["reopenedReason"].as_str().unwrap().contains("v must be even"));
        // The key takes a new answer, and only b (not the refused a) is sent next.
        let u2 = claim_one(&*store, Phase::Update, "w", T0 + 2_200).await;
        assert_eq!(u2.answers.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(), ["b"]);
        let acked = Observation::UpdateAcked { keys: vec!["b".into()] };
        assert!(apply_one(&*store, applied(&u2, Phase::Update, acked), T0 + 2_300).await);
        assert_eq!(answer(&*store, "a", 4, T0 + 2_400).await, ["a"]);
        let u3 = claim_one(&*store, Phase::Update, "w", T0 + 2_400).await;
        assert_eq!(u3.answers, vec![("a".to_string(), json!({"action": "accept", "content": {"v": 4}}))]);
    }

    async fn a_key_asked_again_after_its_answer_was_accepted_is_reopened(store: Arc<dyn RemoteTaskStore>) {
        let p = policy();
        input_required_task(&*store, "t1", &["a"], T0 + 1_100).await;
        answer(&*store, "a", 1, T0 + 2_000).await;
        let u = claim_one(&*store, Phase::Update, "w", T0 + 2_000).await;
        let acked = Observation::UpdateAcked { keys: vec!["a".into()] };
        assert!(apply_one(&*store, applied(&u, Phase::Update, acked), T0 + 2_100).await);
        let version = get(&*store, "t1").await.event_version;

        // Right after the acknowledgement the server may still list the key.
        let c = claim_one(&*store, Phase::Poll, "w", T0 + 2_100).await;
        let obs = Observation::Snapshot(input_snapshot(&["a"]));
        assert!(apply_one(&*store, applied(&c, Phase::Poll, obs), T0 + 2_100).await);
        assert!(store.remote_inputs("t1").await.unwrap()[0].sent_at.is_some());
        assert_eq!(get(&*store, "t1").await.event_version, version);

        // Still listed (with a new request) a full input-required interval later.
        let later = T0 + 2_100 + p.poll.input_required_min_ms;
        let c = claim_one(&*store, Phase::Poll, "w", later).await;
        let mut again = input_snapshot(&["a"]);
        again.input_requests[0].1 = json!({"method": "elicitation/create", "params": {"message": "a, again?"}});
        assert!(apply_one(&*store, applied(&c, Phase::Poll, Observation::Snapshot(again.clone())), later).await);
        let input = store.remote_inputs("t1").await.unwrap().remove(0);
        assert_eq!((input.response, input.sent_at), (None, None));
        assert_eq!(input.request, again.input_requests[0].1, "the new question is stored");
        let last = events(&*store, "t1").await.pop().unwrap();
        assert_eq!((last.version, last.kind), (version + 1, EventKind::InputRequired));
        assert_eq!(answer(&*store, "a", 2, later + 1).await, ["a"], "answerable again");
    }
}
