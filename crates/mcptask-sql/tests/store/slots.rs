//! Adopting a process slot's earlier incarnations (`SqlStore::release_slot`):
//! only the leases and claims named after that slot lapse, on both backends.

use mcptask_core::client::Phase;
use mcptask_sql::Store;
use mcptask_testkit::TestDatabase;

use crate::remote::support as remote;
use crate::server::support as server;

async fn release(store: &Store, prefix: &str, now: i64) -> mcptask_sql::Released {
    match store {
        Store::Sqlite(s) => s.release_slot(prefix, now).await,
        Store::Postgres(s) => s.release_slot(prefix, now).await,
    }
    .expect("release the slot")
}

mcptask_testkit::on_both_backends! {
    async fn releasing_a_slot_lapses_its_leases_and_claims_only(db: TestDatabase) {
        let store = db.open().await;
        let (tasks, tracked) = (store.server_tasks(), store.remote_tasks());
        // Slot 1's dead incarnation and slot 10's live one (a prefix that
        // starts like slot 1's without being it).
        let dead = server::new_task("dead", "slot1.server-1-a", None);
        let live = server::new_task("live", "slot10.server-2-b", None);
        server::create(&*tasks, &dead).await;
        server::create(&*tasks, &live).await;
        for (id, remote_id) in [("r-dead", "x1"), ("r-live", "x2")] {
            remote::insert(&*tracked, &remote::new_task(id, remote_id)).await;
        }
        let due = remote::get(&*tracked, "r-dead").await.next_poll_at.unwrap()
            .max(remote::get(&*tracked, "r-live").await.next_poll_at.unwrap());
        remote::claim(&*tracked, Phase::Poll, "slot1.tracker-1-a", due, 1).await;
        remote::claim(&*tracked, Phase::Poll, "slot10.tracker-2-b", due, 1).await;

        let now = due + 1;
        let released = release(&store, "slot1.", now).await;
        assert_eq!((released.owners, released.claims), (1, 1), "{released:?}");

        // Recovery takes the dead incarnation's task at once, not the
        // other's (its lease runs on).
        let adopted = tasks.claim_orphans("slot1.server-3-c", now, 10).await.unwrap();
        let ids: Vec<_> = adopted.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(ids, ["dead"]);
        assert_ne!(adopted[0].claim_token.as_deref(), Some(dead.claim_token.as_str()), "a fresh fence");
        // The dead incarnation's tracked task is claimable again; the
        // other's claim holds.
        let claimed = remote::claim(&*tracked, Phase::Poll, "slot1.tracker-3-c", now, 10).await;
        assert_eq!(remote::ids(&claimed), ["r-dead"]);
        // Nothing is left to release.
        assert_eq!(release(&store, "slot1.", now).await.owners, 0);
    }
}
