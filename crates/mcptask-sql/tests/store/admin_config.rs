//! The admin configuration store contract (`AdminConfigStore`), on SQLite
//! and on a real PostgreSQL: entries round-trip, a put replaces by kind and
//! name, a delete says whether there was one, and a change made through one
//! store wakes a listener on another store of the same database (another
//! replica on PostgreSQL; the same process on SQLite).

use std::time::Duration;

use futures::StreamExt;
use mcptask_core::admin::AdminEntry;
use mcptask_testkit::TestDatabase;

fn entry(name: &str, body: &str, at: i64) -> AdminEntry {
    AdminEntry {
        kind: "servers".into(),
        name: name.into(),
        body: body.into(),
        changed_by: "operator token 0a1b2c".into(),
        changed_at_ms: at,
    }
}

async fn round_trip_and_wake(db: TestDatabase) {
    let (one, other) = (
        db.open().await.admin_config(),
        db.open().await.admin_config(),
    );
    let mut heard = other
        .listen_admin_changes()
        .await
        .unwrap()
        .expect("both backends have a change channel");
    assert!(one.list_admin_entries().await.unwrap().is_empty());

    one.put_admin_entry(&entry("b", "[[servers]]\nname = \"b\"\n", 1))
        .await
        .unwrap();
    one.put_admin_entry(&entry("a", "[[servers]]\nname = \"a\"\n", 2))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(5), heard.next())
        .await
        .expect("the other store hears of the change")
        .expect("the channel is open");
    let listed = other.list_admin_entries().await.unwrap();
    assert_eq!(
        listed.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(),
        ["a", "b"]
    );
    assert_eq!(listed[0], entry("a", "[[servers]]\nname = \"a\"\n", 2));

    // A put replaces by kind and name.
    one.put_admin_entry(&entry("a", "replaced", 3))
        .await
        .unwrap();
    let listed = other.list_admin_entries().await.unwrap();
    assert_eq!(
        (
            listed.len(),
            listed[0].body.as_str(),
            listed[0].changed_at_ms
        ),
        (2, "replaced", 3)
    );

    assert!(one.delete_admin_entry("servers", "a").await.unwrap());
    assert!(!one.delete_admin_entry("servers", "a").await.unwrap());
    assert!(!one.delete_admin_entry("policy", "b").await.unwrap());
    let listed = other.list_admin_entries().await.unwrap();
    assert_eq!(
        listed.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(),
        ["b"]
    );
}

mcptask_testkit::on_both_backends! {
    entries_round_trip_and_every_store_hears_of_a_change => super::round_trip_and_wake;
}
