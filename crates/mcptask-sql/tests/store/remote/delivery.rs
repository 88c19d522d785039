//! Per-target delivery: lag rows, dead letters and redrive.

use mcptask_core::client::delivery::{
    DeadLetter, DeadLetterFilter, LagClaim, LagResult, TargetLag,
};

use super::support::*;

fn targets(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

async fn claim_lag(
    store: &dyn RemoteTaskStore,
    owner: &str,
    now: i64,
    names: &[&str],
) -> Vec<LagClaim> {
    store
        .claim_redeliveries(owner, now, LEASE, 100, 100, &targets(names))
        .await
        .unwrap()
}

fn lag_result(c: &LagClaim, next_version: i64, failure: Option<(&str, i64)>) -> LagResult {
    LagResult {
        fence: c.fence.clone(),
        target: c.target.clone(),
        next_version,
        dead: Vec::new(),
        failure: failure.map(|(e, at)| (e.to_string(), at)),
        released: false,
    }
}

fn dead(task: &str, target: &str, version: i64, at: i64) -> DeadLetter {
    DeadLetter {
        task_id: task.into(),
        version,
        target: target.into(),
        error: "webhook answered 410 Gone".into(),
        dead_at: at,
    }
}

async fn finish_lag(store: &dyn RemoteTaskStore, r: LagResult, now: i64) -> bool {
    store.finish_redeliveries(&[r], now).await.unwrap()[0]
}

/// `t1` with event v1 delivered to every target but `bad`, which falls
/// behind from v1 and is due again at `T0 + 2_000`.
async fn lagging_task(store: &dyn RemoteTaskStore) {
    insert(store, &new_task("t1", "r-1")).await;
    let n = claim_notify(store, "n", T0 + 1_000).await;
    assert_eq!(versions(&n[0].events), [1]);
    assert!(n[0].lagging.is_empty());
    let result = NotifyResult {
        lagged: vec![TargetLag {
            target: "bad".into(),
            from_version: 1,
            error: Some("webhook answered 503".into()),
            retry_at: T0 + 2_000,
        }],
        ..delivered(&n[0], 1)
    };
    assert!(finish_one(store, result, T0 + 1_000).await);
}

mcptask_testkit::on_both_backends! {
    async fn a_failing_target_falls_behind_without_holding_the_outbox(store: Arc<dyn RemoteTaskStore>) {
        lagging_task(&*store).await;
        let r = get(&*store, "t1").await;
        assert_eq!(
            (r.delivered_version, r.next_notify_at),
            (1, None),
            "the outbox moved on for the other targets"
        );
        assert!(claim_lag(&*store, "w", T0 + 1_999, &["bad"]).await.is_empty(), "not due yet");
        assert!(claim_lag(&*store, "w", T0 + 2_000, &["good"]).await.is_empty(), "only the named targets");

        // A new event: the outbox skips the lagging target, which keeps its order.
        store.request_cancel("t1", T0 + 1_500).await.unwrap();
        let n = claim_notify(&*store, "n", T0 + 1_500).await;
        assert_eq!((versions(&n[0].events), n[0].lagging.clone()), (vec![2], targets(&["bad"])));
        let result = NotifyResult {
            lagged: vec![TargetLag { target: "bad".into(), from_version: 2, error: None, retry_at: T0 + 1_500 }],
            ..delivered(&n[0], 2)
        };
        assert!(finish_one(&*store, result, T0 + 1_500).await);

        let c = claim_lag(&*store, "w", T0 + 2_000, &["bad", "good"]).await;
        assert_eq!(c.len(), 1);
        assert_eq!(
            (c[0].target.as_str(), c[0].next_version, c[0].attempts, versions(&c[0].events)),
            ("bad", 1, 1, vec![1, 2]),
            "the existing lag row kept covering v1: nothing skipped"
        );
        assert!(claim_lag(&*store, "x", T0 + 2_000, &["bad"]).await.is_empty(), "the lag claim is leased");

        // v1 delivered, v2 failed: due again later, with the head's attempts restarted.
        assert!(finish_lag(&*store, lag_result(&c[0], 2, Some(("timeout", T0 + 5_000))), T0 + 2_000).await);
        assert!(!finish_lag(&*store, lag_result(&c[0], 3, None), T0 + 2_001).await, "a spent claim is stale");
        let c = claim_lag(&*store, "w", T0 + 5_000, &["bad"]).await;
        assert_eq!((c[0].next_version, c[0].attempts, versions(&c[0].events)), (2, 1, vec![2]));

        // v2 given up on: the row has caught up and goes; the dead letter stays.
        let result = LagResult { dead: vec![dead("t1", "bad", 2, T0 + 5_000)], ..lag_result(&c[0], 3, None) };
        assert!(finish_lag(&*store, result, T0 + 5_000).await);
        assert!(claim_lag(&*store, "w", T0 + 100 * LEASE, &["bad"]).await.is_empty());
        assert_eq!(store.dead_letter_count().await.unwrap(), 1);
        assert_eq!(get(&*store, "t1").await.dead_letters, 1);
        let listed = store.dead_letters(&DeadLetterFilter::default(), 10).await.unwrap();
        assert_eq!(listed, vec![dead("t1", "bad", 2, T0 + 5_000)]);
    }

    async fn dead_letters_are_redriven_with_a_fresh_budget(store: Arc<dyn RemoteTaskStore>) {
        insert(&*store, &new_task("t1", "r-1")).await;
        store.request_cancel("t1", T0 + 100).await.unwrap();
        insert(&*store, &new_task("t2", "r-2")).await;
        let n = claim_notify(&*store, "n", T0 + 1_000).await;
        assert_eq!(n.len(), 2);
        for claim in &n {
            let id = claim.fence.task_id.as_str();
            let through = claim.events.last().unwrap().version;
            let dead: Vec<DeadLetter> = claim.events.iter().map(|e| dead(id, "hook", e.version, T0 + 1_000)).collect();
            let result = NotifyResult {
                dead_lettered: dead.iter().map(|d| d.version).collect(),
                dead,
                ..delivered(claim, through)
            };
            assert!(finish_one(&*store, result, T0 + 1_000).await);
        }
        assert_eq!(store.dead_letter_count().await.unwrap(), 3);
        let only_t1 = DeadLetterFilter { task_id: Some("t1".into()), ..Default::default() };
        assert_eq!(store.dead_letters(&only_t1, 10).await.unwrap().len(), 2);
        let other = DeadLetterFilter { target: Some("other".into()), ..Default::default() };
        assert_eq!(store.redrive_dead_letters(&other, T0 + 9_000, 100).await.unwrap(), 0);

        assert_eq!(store.redrive_dead_letters(&only_t1, T0 + 9_000, 100).await.unwrap(), 2);
        assert_eq!(store.dead_letter_count().await.unwrap(), 1, "t2's dead letter stays");
        let c = claim_lag(&*store, "w", T0 + 9_000, &["hook"]).await;
        assert_eq!(c.len(), 1);
        assert_eq!(
            (c[0].fence.task_id.as_str(), c[0].next_version, c[0].attempts, c[0].budget_from, versions(&c[0].events)),
            ("t1", 1, 0, T0 + 9_000, vec![1, 2])
        );
        // Redriving another task's dead letters leaves this claim alone.
        assert_eq!(store.redrive_dead_letters(&DeadLetterFilter::default(), T0 + 9_500, 100).await.unwrap(), 1);
        assert!(finish_lag(&*store, lag_result(&c[0], 3, None), T0 + 9_600).await,
            "t1's claim is untouched by t2's redrive");
        let c = claim_lag(&*store, "w", T0 + 9_600, &["hook"]).await;
        assert_eq!((c[0].fence.task_id.as_str(), c[0].budget_from), ("t2", T0 + 9_500));
        assert_eq!(store.dead_letter_count().await.unwrap(), 0);
    }

    async fn a_redrive_makes_an_inflight_lag_claim_stale(store: Arc<dyn RemoteTaskStore>) {
        lagging_task(&*store).await;
        let c = claim_lag(&*store, "w", T0 + 2_000, &["bad"]).await;
        let mut result = lag_result(&c[0], 2, None);
        result.dead = vec![dead("t1", "bad", 1, T0 + 2_000)];
        assert!(finish_lag(&*store, result, T0 + 2_000).await);
        assert_eq!(store.dead_letter_count().await.unwrap(), 1);
        // Dead letter from v1; a new lag row is started by a new failure at v2.
        store.request_cancel("t1", T0 + 2_100).await.unwrap();
        let n = claim_notify(&*store, "n", T0 + 2_100).await;
        let result = NotifyResult {
            lagged: vec![TargetLag { target: "bad".into(), from_version: 2, error: Some("503".into()), retry_at: T0 + 2_100 }],
            ..delivered(&n[0], 2)
        };
        assert!(finish_one(&*store, result, T0 + 2_100).await);
        let c = claim_lag(&*store, "w", T0 + 2_200, &["bad"]).await;
        assert_eq!(c[0].next_version, 2);
        assert_eq!(store.redrive_dead_letters(&DeadLetterFilter::default(), T0 + 2_300, 10).await.unwrap(), 1);
        assert!(!finish_lag(&*store, lag_result(&c[0], 3, None), T0 + 2_400).await,
            "the redrive took the row over");
        let c = claim_lag(&*store, "w", T0 + 2_400, &["bad"]).await;
        assert_eq!((c[0].next_version, versions(&c[0].events)), (1, vec![1, 2]), "from the oldest dead letter on");
    }
}
