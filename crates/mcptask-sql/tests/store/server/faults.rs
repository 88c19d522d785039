//! Fault-matrix cells of the server store: the TTL rule is absorbing, a key
//! asked twice with different requests is refused, permanent database errors
//! are told apart from transient ones.

use super::support::*;
use mcptask_core::StoreError;
use mcptask_core::server::{EXPIRED_MESSAGE, expired_error};

mcptask_testkit::on_both_backends! {
    /// A finish at or after the deadline (before any sweep) stores the expiry
    /// the task already reads as, not the late result.
    async fn ttl_late_finish_stays_failed(store: Arc<dyn ServerTaskStore>) {
        let late = new_task("late", "A", Some(1_000));
        let early = new_task("early", "A", Some(1_000));
        create(&*store, &late).await;
        create(&*store, &early).await;
        let done = Outcome::Completed { result: json!({"content": []}) };
        assert!(store.finish(&fence_of(&early), &done, T0 + 999, purge_at(&early, T0 + 999)).await.unwrap());
        assert_eq!(status(&*store, "early").await, TaskStatus::Completed);

        assert!(store.finish(&fence_of(&late), &done, T0 + 1_000, purge_at(&late, T0 + 1_000)).await.unwrap());
        let r = store.get_task("late").await.unwrap().unwrap().record;
        assert_eq!(r.status, TaskStatus::Failed);
        assert_eq!(r.error, Some(expired_error()));
        assert_eq!(r.status_message.as_deref(), Some(EXPIRED_MESSAGE));
        assert_eq!(r.result, None);
        // And it is terminal: nothing moves it any more.
        assert!(!store.finish(&fence_of(&late), &done, T0 + 1_001, None).await.unwrap());
        assert_eq!(status(&*store, "late").await, TaskStatus::Failed);
    }

    /// The same key with the same request is the rerun case (stored state
    /// back); with another request it is refused and nothing changes.
    async fn input_key_reasked_differently_is_refused(store: Arc<dyn ServerTaskStore>) {
        let t = new_task("t1", "A", None);
        create(&*store, &t).await;
        let f = fence_of(&t);
        let first = vec![("q".to_string(), json!({"method": "elicitation/create", "params": {"message": "colour?"}}))];
        let states = store.request_inputs(&f, &first, T0 + 1).await.unwrap().unwrap();
        assert_eq!(states, vec![("q".to_string(), InputState::Pending)]);
        assert_eq!(store.request_inputs(&f, &first, T0 + 2).await.unwrap().unwrap(), states);

        let other = vec![
            ("fresh".to_string(), json!({"method": "elicitation/create", "params": {"message": "size?"}})),
            ("q".to_string(), json!({"method": "elicitation/create", "params": {"message": "shape?"}})),
        ];
        match store.request_inputs(&f, &other, T0 + 3).await {
            Err(e @ StoreError::Invalid(_)) => {
                assert!(!e.is_transient());
                assert!(e.to_string().contains("\"q\""), "{e}");
                assert!(e.to_string().contains("different request"), "{e}");
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        // Nothing of the refused call was kept: "fresh" was never registered.
        assert!(store.input_states("t1", &["fresh".to_string()]).await.unwrap().is_empty());
        let view = store.get_task("t1").await.unwrap().unwrap();
        assert_eq!(view.input_requests, first);
    }

    /// A constraint violation is permanent; the store says so, so retry loops
    /// stop. (A duplicate task id is the constraint every backend has.)
    async fn constraint_violation_is_permanent(store: Arc<dyn ServerTaskStore>) {
        let t = new_task("dup", "A", None);
        create(&*store, &t).await;
        let e = store.create_tasks(std::slice::from_ref(&t)).await.unwrap_err();
        assert!(matches!(e, StoreError::Rejected(_)), "{e:?}");
        assert!(!e.is_transient(), "{e}");
    }
}
