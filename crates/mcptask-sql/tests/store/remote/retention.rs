//! Retention of settled tasks and reuse of remote task ids.

use mcptask_core::client::delivery::{DeadLetter, DeadLetterFilter};

use super::support::*;

/// Poll `id` at `now` and settle it `completed`.
async fn complete(store: &dyn RemoteTaskStore, id: &str, now: i64) {
    let due = get(store, id).await.next_poll_at.unwrap_or(now).max(now);
    let c = store
        .claim_remote(Phase::Poll, "setup", due, LEASE, 100)
        .await
        .unwrap()
        .into_iter()
        .find(|c| c.record.id == id)
        .unwrap_or_else(|| panic!("{id} is due at {now}"));
    let obs = Observation::Snapshot(completed_snapshot());
    assert!(apply_one(store, applied(&c, Phase::Poll, obs), now).await);
    assert_eq!(get(store, id).await.completed_at, Some(now));
}

mcptask_testkit::on_both_backends! {
    async fn settled_tasks_are_purged_after_retention_with_everything_they_own(store: Arc<dyn RemoteTaskStore>) {
        input_required_task(&*store, "t1", &["k"], T0 + 1_100).await;
        complete(&*store, "t1", T0 + 3_000).await;
        input_required_task(&*store, "live", &["k"], T0 + 1_100).await;
        let n = claim_notify(&*store, "n", T0 + 3_000).await;
        let t1 = n.iter().find(|c| c.fence.task_id == "t1").unwrap();
        let result = NotifyResult {
            dead: vec![DeadLetter {
                task_id: "t1".into(),
                version: 1,
                target: "hook".into(),
                error: "410".into(),
                dead_at: T0 + 3_000,
            }],
            ..delivered(t1, 1)
        };
        assert!(finish_one(&*store, result, T0 + 3_000).await);
        assert!(!store.remote_inputs("t1").await.unwrap().is_empty());

        assert_eq!(store.purge_remote(T0 + 2_999, 100).await.unwrap(), 0, "settled after the cut-off");
        assert_eq!(store.purge_remote(T0 + 3_000, 100).await.unwrap(), 1);
        assert!(store.get_remote("t1").await.unwrap().is_none());
        assert!(events(&*store, "t1").await.is_empty());
        assert!(store.remote_inputs("t1").await.unwrap().is_empty());
        assert_eq!(store.dead_letter_count().await.unwrap(), 0);
        assert!(store.dead_letters(&DeadLetterFilter::default(), 10).await.unwrap().is_empty());
        assert_eq!(get(&*store, "live").await.status, TaskStatus::InputRequired, "live tasks are never purged");
        assert_eq!(store.purge_remote(T0 + 100 * LEASE, 100).await.unwrap(), 0);
    }

    async fn the_purge_takes_bounded_batches_oldest_first(store: Arc<dyn RemoteTaskStore>) {
        for i in 0..5 {
            insert(&*store, &new_task(&format!("t{i}"), &format!("r-{i}"))).await;
        }
        let claimed = claim(&*store, Phase::Poll, "setup", T0 + 2_000, 100).await;
        assert_eq!(claimed.len(), 5);
        // Settled newest id first, so "oldest first" is by settle time, not by id.
        for c in claimed.iter().rev() {
            let i: i64 = c.record.id[1..].parse().unwrap();
            let obs = Observation::Snapshot(completed_snapshot());
            assert!(apply_one(&*store, applied(c, Phase::Poll, obs), T0 + 2_000 + i * 100).await);
        }
        assert_eq!(store.purge_remote(T0 + 10_000, 2).await.unwrap(), 2);
        assert!(store.get_remote("t0").await.unwrap().is_none());
        assert!(store.get_remote("t1").await.unwrap().is_none());
        assert!(store.get_remote("t2").await.unwrap().is_some());
        assert_eq!(store.purge_remote(T0 + 10_000, 2).await.unwrap(), 2);
        assert_eq!(store.purge_remote(T0 + 10_000, 2).await.unwrap(), 1);
        assert_eq!(store.purge_remote(T0 + 10_000, 2).await.unwrap(), 0);
        assert_eq!(store.purge_remote(T0 + 10_000, 0).await.unwrap(), 0);
    }

    async fn a_reused_remote_id_is_tracked_as_a_new_task(store: Arc<dyn RemoteTaskStore>) {
        insert(&*store, &new_task("old", "r-1")).await;
        complete(&*store, "old", T0 + 2_000).await;
        // The server restarted, forgot its tasks and hands out "r-1" again.
        let mut again = new_task("new", "r-1");
        again.created_at = T0 + 5_000;
        let fresh = insert(&*store, &again).await;
        assert_eq!((fresh.id.as_str(), fresh.status, &fresh.result), ("new", TaskStatus::Working, &None));
        let old = get(&*store, "old").await;
        assert_eq!((old.status, old.result.clone()), (TaskStatus::Completed, Some(done_result())));
        let due = store.claim_remote(Phase::Poll, "w", T0 + 6_000, LEASE, 10).await.unwrap();
        assert_eq!(ids(&due), ["new"], "only the live task is polled");

        // While "new" is live, the handle is tracked once.
        let mut dup = new_task("dup", "r-1");
        dup.created_at = T0 + 7_000;
        match store.insert_remote(&dup, &policy()).await.unwrap() {
            InsertOutcome::AlreadyTracked(r) => assert_eq!(r.id, "new"),
            InsertOutcome::Inserted(r) => panic!("{} tracked twice", r.id),
        }
    }
}
