//! The audit trail's store contract (`AuditStore`), on SQLite and on a real
//! PostgreSQL: entries round-trip, listings filter and page newest first
//! without gaps or repeats, and the purge deletes only what is older than
//! its time.

use std::sync::Arc;

use mcptask_core::audit::{AuditEvent, AuditFilter, AuditStore};
use mcptask_core::call::Face;
use mcptask_core::outcome::Outcome;

const T0: i64 = 1_700_000_000_000;

fn event(at_ms: i64, principal: Option<&str>, tool: &str, outcome: Outcome) -> AuditEvent {
    AuditEvent {
        at_ms,
        call_id: None,
        principal: principal.map(str::to_string),
        face: Face::Mcp,
        server: "demo".into(),
        tool: tool.into(),
        driver: "pass_through".into(),
        outcome,
        error_class: None,
        duration_ms: 12,
        // Some through a virtual server, some not: both round trip.
        via: principal.map(|_| "team".to_string()),
    }
}

mcptask_testkit::on_both_backends! {
    async fn entries_round_trip_and_list_newest_first_by_filter_and_page(store: Arc<dyn AuditStore>) {
        let mut full = event(T0, Some("alice"), "greet", Outcome::Failed);
        full.call_id = Some("rt_1".into());
        full.face = Face::Api;
        full.driver = "sync".into();
        full.error_class = Some("remote_error".into());
        full.duration_ms = 1_234;
        let mut events = vec![full.clone()];
        // Ten more, two at each time (the same `at`: the page order is
        // still total).
        for i in 0..10 {
            let who = if i % 2 == 0 { Some("bob") } else { None };
            let outcome = if i % 3 == 0 { Outcome::RefusedPolicy } else { Outcome::Completed };
            events.push(event(T0 + 1 + i / 2, who, "echo", outcome));
        }
        store.append_audit(&events[..4]).await.unwrap();
        store.append_audit(&events[4..]).await.unwrap();
        store.append_audit(&[]).await.unwrap();

        let all = store.list_audit(&AuditFilter::default(), None, 100).await.unwrap();
        assert_eq!(all.len(), 11);
        assert_eq!(all.last().unwrap().event, full, "every field round-trips");
        assert!(all.windows(2).all(|w| (w[0].event.at_ms, w[0].seq) > (w[1].event.at_ms, w[1].seq)), "newest first");

        // Pages of 3 walk the same entries, none twice, none missed.
        let mut walked = Vec::new();
        let mut cursor = None;
        loop {
            let page = store.list_audit(&AuditFilter::default(), cursor.as_ref(), 3).await.unwrap();
            walked.extend(page.iter().map(|r| r.seq));
            if page.len() < 3 {
                break;
            }
            cursor = page.last().map(|r| r.cursor());
        }
        assert_eq!(walked, all.iter().map(|r| r.seq).collect::<Vec<_>>());

        let only = |filter: AuditFilter| {
            let store = store.clone();
            async move { store.list_audit(&filter, None, 100).await.unwrap() }
        };
        let alice = only(AuditFilter { principal: Some("alice".into()), ..Default::default() }).await;
        assert_eq!(alice.len(), 1);
        let bob = only(AuditFilter { principal: Some("bob".into()), ..Default::default() }).await;
        assert_eq!(bob.len(), 5);
        assert!(bob.iter().all(|r| r.event.principal.as_deref() == Some("bob")));
        let anonymous = all.iter().filter(|r| r.event.principal.is_none()).count();
        assert_eq!(anonymous, 5, "no principal reads back as none");
        let refused = only(AuditFilter { outcome: Some(Outcome::RefusedPolicy), ..Default::default() }).await;
        assert_eq!(refused.len(), 4);
        let greet = only(AuditFilter { server: Some("demo".into()), tool: Some("greet".into()), ..Default::default() }).await;
        assert_eq!(greet.len(), 1);
        let window = only(AuditFilter { since_ms: Some(T0 + 1), until_ms: Some(T0 + 3), ..Default::default() }).await;
        assert_eq!(window.len(), 4, "since is inclusive, until exclusive");
        assert!(window.iter().all(|r| (T0 + 1..T0 + 3).contains(&r.event.at_ms)));
    }

    async fn the_purge_deletes_only_older_entries_in_batches(store: Arc<dyn AuditStore>) {
        let events: Vec<_> = (0..7)
            .map(|i| event(T0 + i, Some("alice"), "greet", Outcome::Completed))
            .collect();
        store.append_audit(&events).await.unwrap();
        assert_eq!(store.purge_audit(T0 + 5, 2).await.unwrap(), 2, "a bounded batch");
        assert_eq!(store.purge_audit(T0 + 5, 100).await.unwrap(), 3);
        assert_eq!(store.purge_audit(T0 + 5, 100).await.unwrap(), 0);
        let left = store.list_audit(&AuditFilter::default(), None, 100).await.unwrap();
        let times: Vec<i64> = left.iter().map(|r| r.event.at_ms).collect();
        assert_eq!(times, vec![T0 + 6, T0 + 5], "entries at or after the time are kept");
    }
}
