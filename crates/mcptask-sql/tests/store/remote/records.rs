//! Recording handles, reading them back, listing and counting.

use super::support::*;
use mcptask_core::outcome::Outcome;

mcptask_testkit::on_both_backends! {
    async fn insert_then_get_round_trips(store: Arc<dyn RemoteTaskStore>) {
        let mut t = new_task("rt_1", "r-1");
        t.conversation = Some("conv-1".into());
        t.call_id = Some("call-1".into());
        t.correlation = Some(json!({"app": "x", "n": 1, "s": "é"}));
        t.arguments = Some(json!({"q": "weather", "nested": [1, 2]}));
        t.trace = Some(mcptask_core::trace::TraceContext {
            traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
            tracestate: Some("vendor=1".into()),
        });
        t.snapshot = RemoteSnapshot {
            status: Some(TaskStatus::Working),
            status_message: Some("queued".into()),
            remote_created_at: Some(T0 - 5),
            ttl_ms: Some(600_000),
            poll_interval_ms: Some(2_000),
            ..Default::default()
        };
        let inserted = insert(&*store, &t).await;
        let r = get(&*store, "rt_1").await;
        assert_eq!(r, inserted, "insert returns exactly what is stored");
        assert_eq!(
            (
                r.server.as_str(),
                r.server_hash.as_str(),
                r.remote_task_id.as_str()
            ),
            ("srv", "h1", "r-1")
        );
        assert_eq!(r.principal, None, "anonymous round-trips as None");
        assert_eq!(r.conversation.as_deref(), Some("conv-1"));
        assert_eq!(r.call_id.as_deref(), Some("call-1"));
        assert_eq!(r.correlation, t.correlation);
        assert_eq!(r.tool, "slow");
        assert_eq!(r.arguments, t.arguments);
        assert_eq!(r.trace, t.trace, "the call's trace context is kept");
        assert_eq!(r.status, TaskStatus::Working);
        assert_eq!(r.status_message.as_deref(), Some("queued"));
        assert_eq!(
            (r.remote_created_at, r.ttl_ms, r.poll_interval_ms),
            (Some(T0 - 5), Some(600_000), Some(2_000))
        );
        assert_eq!((r.created_at, r.updated_at, r.completed_at), (T0, T0, None));
        assert_eq!(
            r.next_poll_at,
            Some(T0 + 2_000),
            "the server's interval, no jitter"
        );
        assert_eq!((r.next_cancel_at, r.next_update_at), (None, None));
        assert_eq!(
            (r.poll_count, r.consecutive_errors, r.cancel_attempts),
            (0, 0, 0)
        );
        assert_eq!(
            (&r.claim_owner, &r.claim_token, r.claim_expires_at),
            (&None, &None, None)
        );
        assert_eq!(
            (r.event_version, r.delivered_version, r.next_notify_at),
            (1, 0, Some(T0))
        );
        assert_eq!((r.notify_attempts, r.dead_letters), (0, 0));
        assert!(r.input_requests.is_empty() && r.result.is_none() && !r.result_truncated);

        let evs = events(&*store, "rt_1").await;
        assert_eq!(evs.len(), 1);
        let e = &evs[0];
        assert_eq!(
            (
                e.task_id.as_str(),
                e.version,
                e.kind,
                e.status,
                e.occurred_at
            ),
            ("rt_1", 1, EventKind::Created, TaskStatus::Working, T0)
        );
        assert_eq!(e.idempotency_key(), "rt_1:1");
        assert_eq!(e.data["taskId"], "rt_1");
        assert_eq!(e.data["kind"], "created");
        assert_eq!(e.data["correlation"], t.correlation.clone().unwrap());
        assert!(store.remote_events("rt_1", 1, 10).await.unwrap().is_empty());
        assert!(store.remote_events("rt_1", 0, 0).await.unwrap().is_empty());
        assert!(store.remote_inputs("rt_1").await.unwrap().is_empty());
        assert!(store.get_remote("nope").await.unwrap().is_none());
        assert!(store.remote_events("nope", 0, 10).await.unwrap().is_empty());

        // A handle that starts in input_required records its keys at once.
        let mut t2 = new_task("rt_2", "r-2");
        t2.principal = Some("alice".into());
        t2.snapshot = input_snapshot(&["b", "a"]);
        let r2 = insert(&*store, &t2).await;
        assert_eq!(get(&*store, "rt_2").await, r2);
        assert_eq!(r2.principal.as_deref(), Some("alice"));
        assert_eq!(r2.status, TaskStatus::InputRequired);
        assert_eq!(
            r2.input_requests, t2.snapshot.input_requests,
            "reported order kept"
        );
        assert_eq!(
            r2.next_poll_at,
            Some(T0 + 5_000),
            "input_required polls no faster than its floor"
        );
        let inputs = store.remote_inputs("rt_2").await.unwrap();
        let keys: Vec<_> = inputs.iter().map(|i| i.key.as_str()).collect();
        assert_eq!(keys, ["a", "b"], "ordered by first_seen_at, then key");
        assert_eq!(inputs[0].request, request_for("a"));
        assert_eq!(inputs[0].first_seen_at, T0);
        assert_eq!(
            (
                &inputs[0].response,
                inputs[0].answered_at,
                inputs[0].sent_at
            ),
            (&None, None, None)
        );

        // A handle that is already terminal is settled and never polled.
        let mut t3 = new_task("rt_3", "r-3");
        t3.snapshot = completed_snapshot();
        let r3 = insert(&*store, &t3).await;
        assert_eq!(get(&*store, "rt_3").await, r3);
        assert_eq!(r3.status, TaskStatus::Completed);
        assert_eq!(r3.result, Some(done_result()));
        assert_eq!((r3.completed_at, r3.next_poll_at), (Some(T0), None));
        assert_eq!(r3.event_version, 1);
        assert_eq!(
            events(&*store, "rt_3").await[0].status,
            TaskStatus::Completed
        );
    }

    /// A toolset task keeps its driver through insert, read, claim, list and
    /// a fenced write; a default task stays SEP-2663.
    async fn driver_round_trips_through_insert_and_claim(store: Arc<dyn RemoteTaskStore>) {
        let triplet = RemoteDriver::Toolset {
            status_tool: "job_status".into(),
            cancel_tool: "cancel_job".into(),
        };
        let mut t = new_task("rt_t", "job-1");
        t.driver = triplet.clone();
        let inserted = insert(&*store, &t).await;
        assert_eq!(inserted.driver, triplet);
        assert_eq!(get(&*store, "rt_t").await, inserted);
        let plain = insert(&*store, &new_task("rt_s", "r-1")).await;
        assert_eq!(plain.driver, RemoteDriver::Sep2663);

        let claimed = claim(&*store, Phase::Poll, "w1", T0 + 60_000, 10).await;
        let drivers: Vec<(&str, &RemoteDriver)> = claimed
            .iter()
            .map(|c| (c.record.id.as_str(), &c.record.driver))
            .collect();
        assert!(drivers.contains(&("rt_t", &triplet)), "{drivers:?}");
        assert!(drivers.contains(&("rt_s", &RemoteDriver::Sep2663)), "{drivers:?}");

        let task = claimed.iter().find(|c| c.record.id == "rt_t").unwrap();
        let obs = Observation::Snapshot(snapshot(TaskStatus::Working));
        assert!(apply_one(&*store, applied(task, Phase::Poll, obs), T0 + 61_000).await);
        assert_eq!(get(&*store, "rt_t").await.driver, triplet, "a write keeps the driver");
        let listed = store.list_remote(&ListFilter::default(), None, 10).await.unwrap();
        assert!(listed.iter().any(|r| r.id == "rt_t" && r.driver == triplet));
    }

    async fn duplicate_handles_keep_the_tracked_row(store: Arc<dyn RemoteTaskStore>) {
        let first = insert(&*store, &new_task("rt_1", "r-1")).await;
        let mut dup = new_task("rt_2", "r-1");
        dup.tool = "other".into();
        dup.snapshot = completed_snapshot();
        dup.created_at = T0 + 10;
        match store.insert_remote(&dup, &policy()).await.unwrap() {
            InsertOutcome::AlreadyTracked(r) => assert_eq!(*r, first),
            other => panic!("a duplicate handle must keep the tracked row: {other:?}"),
        }
        assert_eq!(
            get(&*store, "rt_1").await,
            first,
            "the tracked row is untouched"
        );
        assert!(store.get_remote("rt_2").await.unwrap().is_none());
        assert_eq!(versions(&events(&*store, "rt_1").await), [1]);
        assert!(events(&*store, "rt_2").await.is_empty());

        // The same remote id for another principal or another server is another task.
        let mut bob = new_task("rt_3", "r-1");
        bob.principal = Some("bob".into());
        insert(&*store, &bob).await;
        let mut elsewhere = new_task("rt_4", "r-1");
        elsewhere.server = "srv2".into();
        insert(&*store, &elsewhere).await;
        let mut bob_again = new_task("rt_5", "r-1");
        bob_again.principal = Some("bob".into());
        let outcome = store.insert_remote(&bob_again, &policy()).await.unwrap();
        assert!(matches!(outcome, InsertOutcome::AlreadyTracked(_)));
        assert_eq!(outcome.record().id, "rt_3");

        // A duplicate local id for a new handle is an error and writes nothing.
        assert!(
            store
                .insert_remote(&new_task("rt_1", "r-9"), &policy())
                .await
                .is_err()
        );
        assert_eq!(get(&*store, "rt_1").await, first);
        assert_eq!(versions(&events(&*store, "rt_1").await), [1]);
        insert(&*store, &new_task("rt_6", "r-9")).await;
    }

    async fn list_filters_and_keyset_pagination(store: Arc<dyn RemoteTaskStore>) {
        let mut tasks = Vec::new();
        for i in 0..25i64 {
            let mut t = new_task(&format!("rt_{i:02}"), &format!("r-{i}"));
            // 20 share one created_at (ties are broken by id), 5 are newer.
            t.created_at = if i < 20 { T0 } else { T0 + i };
            t.server = if i % 2 == 0 { "even" } else { "odd" }.into();
            t.principal = (i % 3 == 0).then(|| "alice".to_string());
            t.conversation = (i % 5 == 0).then(|| "c5".to_string());
            t.tool = if i % 3 == 1 { "report" } else { "slow" }.into();
            if i % 4 == 0 {
                t.snapshot = completed_snapshot();
            }
            // Completed, the tool saying it failed: listed as a tool error.
            if i % 8 == 0 {
                t.snapshot.result = Some(serde_json::json!({"content": [], "isError": true}));
            }
            insert(&*store, &t).await;
            tasks.push(t);
        }
        let tool_error = |t: &NewRemoteTask| {
            t.snapshot
                .result
                .as_ref()
                .is_some_and(mcptask_core::outcome::is_tool_error)
        };
        let expect = |keep: &dyn Fn(&NewRemoteTask) -> bool| -> Vec<String> {
            let mut v: Vec<&NewRemoteTask> = tasks.iter().filter(|t| keep(t)).collect();
            v.sort_by(|a, b| (b.created_at, &b.id).cmp(&(a.created_at, &a.id)));
            v.into_iter().map(|t| t.id.clone()).collect()
        };
        let completed = |t: &NewRemoteTask| t.snapshot.status == Some(TaskStatus::Completed);
        let cases: Vec<(ListFilter, Vec<String>)> = vec![
            (ListFilter::default(), expect(&|_| true)),
            (
                ListFilter {
                    status: Some(TaskStatus::Completed),
                    ..Default::default()
                },
                expect(&completed),
            ),
            (
                ListFilter {
                    active_only: true,
                    ..Default::default()
                },
                expect(&|t| !completed(t)),
            ),
            (
                ListFilter {
                    server: Some("odd".into()),
                    ..Default::default()
                },
                expect(&|t| t.server == "odd"),
            ),
            (
                ListFilter {
                    principal: Some("alice".into()),
                    ..Default::default()
                },
                expect(&|t| t.principal.as_deref() == Some("alice")),
            ),
            (
                ListFilter {
                    conversation: Some("c5".into()),
                    ..Default::default()
                },
                expect(&|t| t.conversation.as_deref() == Some("c5")),
            ),
            (
                ListFilter {
                    server: Some("even".into()),
                    active_only: true,
                    ..Default::default()
                },
                expect(&|t| t.server == "even" && !completed(t)),
            ),
            (
                ListFilter {
                    status: Some(TaskStatus::Failed),
                    ..Default::default()
                },
                Vec::new(),
            ),
            (
                ListFilter {
                    outcome: Some(Outcome::ToolError),
                    ..Default::default()
                },
                expect(&|t| completed(t) && tool_error(t)),
            ),
            (
                ListFilter {
                    outcome: Some(Outcome::Completed),
                    server: Some("even".into()),
                    ..Default::default()
                },
                expect(&|t| completed(t) && !tool_error(t) && t.server == "even"),
            ),
            (
                ListFilter {
                    outcome: Some(Outcome::RefusedPolicy),
                    ..Default::default()
                },
                Vec::new(),
            ),
            (
                ListFilter {
                    tool: Some("report".into()),
                    ..Default::default()
                },
                expect(&|t| t.tool == "report"),
            ),
            (
                ListFilter {
                    tool: Some("report".into()),
                    server: Some("odd".into()),
                    ..Default::default()
                },
                expect(&|t| t.tool == "report" && t.server == "odd"),
            ),
            // A time window: [since, before) on when the call was made.
            (
                ListFilter {
                    created_since: Some(T0 + 21),
                    ..Default::default()
                },
                expect(&|t| t.created_at >= T0 + 21),
            ),
            (
                ListFilter {
                    created_since: Some(T0),
                    created_before: Some(T0 + 22),
                    tool: Some("slow".into()),
                    ..Default::default()
                },
                expect(&|t| t.created_at < T0 + 22 && t.tool == "slow"),
            ),
            (
                ListFilter {
                    created_before: Some(T0),
                    ..Default::default()
                },
                Vec::new(),
            ),
        ];
        for (filter, expected) in cases {
            for page in [1, 4, 7, 100] {
                let mut seen: Vec<String> = Vec::new();
                let mut cursor: Option<Cursor> = None;
                loop {
                    let got = store
                        .list_remote(&filter, cursor.as_ref(), page)
                        .await
                        .unwrap();
                    assert!(got.len() as i64 <= page);
                    let Some(last) = got.last() else { break };
                    // Through the opaque text form, as an API would.
                    let next = Cursor {
                        created_at: last.created_at,
                        id: last.id.clone(),
                    };
                    cursor = Cursor::decode(&next.encode());
                    assert_eq!(cursor.as_ref(), Some(&next));
                    seen.extend(got.into_iter().map(|r| r.id));
                }
                assert_eq!(seen, expected, "filter {filter:?}, page size {page}");
            }
        }
        let all = store
            .list_remote(&ListFilter::default(), None, 100)
            .await
            .unwrap();
        assert_eq!(all[0], get(&*store, "rt_24").await, "rows decode fully");
        assert!(
            store
                .list_remote(&ListFilter::default(), None, 0)
                .await
                .unwrap()
                .is_empty()
        );
    }

    async fn counts_and_backlog(store: Arc<dyn RemoteTaskStore>) {
        let zero: Vec<(TaskStatus, i64)> = TaskStatus::ALL.iter().map(|s| (*s, 0)).collect();
        assert_eq!(store.remote_counts().await.unwrap(), zero);
        assert_eq!(store.notification_backlog().await.unwrap(), 0);
        insert(&*store, &new_task("w1", "r-w1")).await;
        insert(&*store, &new_task("w2", "r-w2")).await;
        let mut i1 = new_task("i1", "r-i1");
        i1.snapshot = input_snapshot(&["k"]);
        insert(&*store, &i1).await;
        let mut c1 = new_task("c1", "r-c1");
        c1.snapshot = completed_snapshot();
        insert(&*store, &c1).await;
        let mut f1 = new_task("f1", "r-f1");
        f1.snapshot = RemoteSnapshot {
            error: Some(json!({"code": -1, "message": "x"})),
            ..snapshot(TaskStatus::Failed)
        };
        insert(&*store, &f1).await;
        store.request_cancel("w1", T0 + 1).await.unwrap();
        assert_eq!(
            store.remote_counts().await.unwrap(),
            vec![
                (TaskStatus::Working, 2),
                (TaskStatus::InputRequired, 1),
                (TaskStatus::Completed, 1),
                (TaskStatus::Failed, 1),
                (TaskStatus::Cancelled, 0),
            ]
        );
        assert_eq!(store.notification_backlog().await.unwrap(), 6);
        let claims = claim_notify(&*store, "n", T0 + 10).await;
        let c1_claim = claims.iter().find(|c| c.fence.task_id == "c1").unwrap();
        assert!(finish_one(&*store, delivered(c1_claim, 1), T0 + 20).await);
        assert_eq!(store.notification_backlog().await.unwrap(), 5);
    }
}
