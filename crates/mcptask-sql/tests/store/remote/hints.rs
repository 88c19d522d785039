//! Push hints (`expedite_poll`): with no claim in flight the poll moves to
//! now; during a claim the hint waits for that claim's apply, which must not
//! push the next poll a whole interval past it.

use super::support::*;

/// The poll interval of every task here: long enough that "polled at the
/// hint" and "polled an interval after the apply" cannot be confused.
const MINUTE: i64 = 60_000;

fn working() -> Observation {
    Observation::Snapshot(RemoteSnapshot {
        poll_interval_ms: Some(MINUTE),
        ..snapshot(TaskStatus::Working)
    })
}

/// Track `id`, polled once a minute: its first poll falls due at `T0 + MINUTE`.
async fn slow_task(store: &dyn RemoteTaskStore, id: &str) -> RemoteTaskRecord {
    let mut task = new_task(id, &format!("r-{id}"));
    task.snapshot.poll_interval_ms = Some(MINUTE);
    let r = insert(store, &task).await;
    assert_eq!(r.next_poll_at, Some(T0 + MINUTE));
    r
}

async fn next_poll(store: &dyn RemoteTaskStore, id: &str) -> Option<i64> {
    get(store, id).await.next_poll_at
}

mcptask_testkit::on_both_backends! {
    async fn without_a_claim_a_hint_makes_the_poll_due_at_once(store: Arc<dyn RemoteTaskStore>) {
        slow_task(&*store, "t1").await;
        assert!(store.expedite_poll("t1", T0 + 100).await.unwrap());
        assert_eq!(next_poll(&*store, "t1").await, Some(T0 + 100));
        assert!(
            !store.expedite_poll("t1", T0 + 200).await.unwrap(),
            "a poll due sooner keeps its time"
        );
        assert_eq!(next_poll(&*store, "t1").await, Some(T0 + 100));

        let c = claim_one(&*store, Phase::Poll, "w", T0 + 200).await;
        assert!(apply_one(&*store, applied(&c, Phase::Poll, working()), T0 + 300).await);
        assert_eq!(
            next_poll(&*store, "t1").await,
            Some(T0 + 300 + MINUTE),
            "no hint was pending: the apply schedules as usual"
        );

        assert!(!store.expedite_poll("nope", T0 + 400).await.unwrap(), "unknown task");
        let mut done = new_task("done", "r-done");
        done.snapshot = completed_snapshot();
        insert(&*store, &done).await;
        assert!(!store.expedite_poll("done", T0 + 400).await.unwrap(), "settled task");
        assert_eq!(next_poll(&*store, "done").await, None);
    }

    async fn a_hint_during_a_poll_makes_the_next_poll_due_at_the_hint(store: Arc<dyn RemoteTaskStore>) {
        slow_task(&*store, "t1").await;
        let claimed_at = T0 + MINUTE;
        let c = claim_one(&*store, Phase::Poll, "w", claimed_at).await;
        // The call has read `working`; the server now pushes a change.
        let hint = claimed_at + 100;
        assert!(
            store.expedite_poll("t1", hint).await.unwrap(),
            "a hint is recorded while the poll is in flight"
        );
        assert!(
            !store.expedite_poll("t1", hint + 100).await.unwrap(),
            "the earliest hint is kept"
        );
        let r = get(&*store, "t1").await;
        assert_eq!(
            (r.next_poll_at, r.claim_token.as_deref()),
            (Some(claimed_at), Some(c.fence.token.as_str())),
            "the claim is untouched"
        );
        // An application write meanwhile (a cancel intent) keeps the hint.
        store.request_cancel("t1", hint + 150).await.unwrap();

        assert!(apply_one(&*store, applied(&c, Phase::Poll, working()), hint + 200).await);
        assert_eq!(
            next_poll(&*store, "t1").await,
            Some(hint),
            "due at the hint, not a poll interval after the apply"
        );

        // The hint is spent: the next poll schedules as usual.
        let again = claim_one(&*store, Phase::Poll, "w", hint + 300).await;
        assert!(apply_one(&*store, applied(&again, Phase::Poll, working()), hint + 400).await);
        assert_eq!(next_poll(&*store, "t1").await, Some(hint + 400 + MINUTE));
    }

    async fn a_hint_before_a_poll_claim_is_covered_by_that_poll(store: Arc<dyn RemoteTaskStore>) {
        slow_task(&*store, "t1").await;
        let lost = claim_one(&*store, Phase::Poll, "gone", T0 + MINUTE).await;
        let hint = T0 + MINUTE + 100;
        assert!(store.expedite_poll("t1", hint).await.unwrap());
        // Its worker never applies; once the lease lapses another polls.
        let later = T0 + MINUTE + LEASE + 1;
        let c = claim_one(&*store, Phase::Poll, "w", later).await;
        assert!(
            !apply_one(&*store, applied(&lost, Phase::Poll, working()), later).await,
            "the lost claim is fenced out"
        );
        assert!(apply_one(&*store, applied(&c, Phase::Poll, working()), later + 100).await);
        assert_eq!(
            next_poll(&*store, "t1").await,
            Some(later + 100 + MINUTE),
            "the poll claimed after the hint covered it"
        );
    }

    // A lapsed claim nobody reclaimed still applies its late result (see
    // claims.rs): a hint given meanwhile must survive that apply too.
    async fn a_late_apply_of_a_lapsed_claim_honours_a_hint(store: Arc<dyn RemoteTaskStore>) {
        slow_task(&*store, "t1").await;
        let c = claim_one(&*store, Phase::Poll, "slow", T0 + MINUTE).await;
        let lapsed = T0 + MINUTE + LEASE + 1;
        assert!(store.expedite_poll("t1", lapsed).await.unwrap());
        assert!(apply_one(&*store, applied(&c, Phase::Poll, working()), lapsed + 100).await);
        assert_eq!(next_poll(&*store, "t1").await, Some(lapsed));
    }

    async fn every_apply_of_a_hinted_claim_honours_the_hint(store: Arc<dyn RemoteTaskStore>) {
        // One batch, so PostgreSQL writes it in its one set-based statement.
        for id in ["hinted", "settles", "plain", "released"] {
            slow_task(&*store, id).await;
        }
        let now = T0 + MINUTE;
        let claims = claim(&*store, Phase::Poll, "w", now, 10).await;
        assert_eq!(claims.len(), 4);
        let of = |id: &str| claims.iter().find(|c| c.record.id == id).unwrap();
        for id in ["hinted", "settles", "released"] {
            assert!(store.expedite_poll(id, now + 100).await.unwrap());
        }
        let batch = [
            applied(of("hinted"), Phase::Poll, working()),
            applied(of("settles"), Phase::Poll, Observation::Snapshot(completed_snapshot())),
            applied(of("plain"), Phase::Poll, working()),
            applied(of("released"), Phase::Poll, Observation::Released),
        ];
        let done = store.apply_remote(&batch, &policy(), now + 200).await.unwrap();
        assert_eq!(done, [true; 4]);
        assert_eq!(next_poll(&*store, "hinted").await, Some(now + 100));
        assert_eq!(next_poll(&*store, "settles").await, None, "a settled task stays unscheduled");
        assert_eq!(next_poll(&*store, "plain").await, Some(now + 200 + MINUTE));
        assert_eq!(
            next_poll(&*store, "released").await,
            Some(now),
            "a released claim keeps its due time (sooner than the hint)"
        );

        // A cancel call in flight: its apply keeps the poll schedule, but
        // not past a hint.
        let mut task = new_task("cancelling", "r-cancelling");
        task.created_at = now;
        task.snapshot.poll_interval_ms = Some(MINUTE);
        insert(&*store, &task).await;
        store.request_cancel("cancelling", now).await.unwrap();
        let c = claim_one(&*store, Phase::Cancel, "w", now).await;
        assert!(store.expedite_poll("cancelling", now + 100).await.unwrap());
        let failed = Observation::Transient("connection reset".into());
        assert!(apply_one(&*store, applied(&c, Phase::Cancel, failed), now + 200).await);
        let r = get(&*store, "cancelling").await;
        assert!(r.next_cancel_at.is_some(), "the cancel is retried");
        assert_eq!(r.next_poll_at, Some(now + 100), "polled at the hint, not at {}", now + MINUTE);
    }
}
