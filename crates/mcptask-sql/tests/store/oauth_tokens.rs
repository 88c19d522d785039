//! The OAuth token store contract (`OAuthTokenStore`), on SQLite and on a
//! real PostgreSQL: sealed rows round-trip, saves bump the version and
//! release the refresh lease, and the lease is exclusive until it runs out.

use std::sync::Arc;

use mcptask_core::oauth::{NewToken, REFRESH_LEASE_MS};
use mcptask_core::store::OAuthTokenStore;

const T0: i64 = 1_700_000_000_000;

fn token(server: &str, sealed: &[u8]) -> NewToken {
    NewToken {
        server: server.into(),
        endpoint: "endpoint-hash".into(),
        sealed: sealed.to_vec(),
        expires_at_ms: Some(T0 + 3_600_000),
        refreshable: true,
        issuer: Some("https://as.example".into()),
        scopes: "read write".into(),
    }
}

mcptask_testkit::on_both_backends! {
    async fn a_saved_token_round_trips_and_each_save_bumps_its_version(store: Arc<dyn OAuthTokenStore>) {
        assert!(store.load_token("s").await.unwrap().is_none());
        // Any bytes: the blob is opaque to the store.
        let blob: Vec<u8> = (0..=255u8).chain([0, 0, 255]).collect();
        assert_eq!(store.save_token(&token("s", &blob), T0).await.unwrap(), 1);
        let row = store.load_token("s").await.unwrap().unwrap();
        assert_eq!(row.sealed, blob);
        assert_eq!(row.endpoint, "endpoint-hash");
        assert_eq!(row.expires_at_ms, Some(T0 + 3_600_000));
        assert!(row.refreshable);
        assert_eq!(row.issuer.as_deref(), Some("https://as.example"));
        assert_eq!(row.scopes, "read write");
        assert_eq!(row.updated_at_ms, T0);
        assert_eq!(row.version, 1);
        assert_eq!(row.lease_owner, None);

        let mut next = token("s", b"second");
        next.expires_at_ms = None;
        next.refreshable = false;
        next.issuer = None;
        assert_eq!(store.save_token(&next, T0 + 10).await.unwrap(), 2);
        let row = store.load_token("s").await.unwrap().unwrap();
        assert_eq!((row.sealed.as_slice(), row.version), (&b"second"[..], 2));
        assert_eq!((row.expires_at_ms, row.refreshable, row.issuer), (None, false, None));
        assert_eq!(row.updated_at_ms, T0 + 10);

        // Rows are per server.
        store.save_token(&token("other", b"x"), T0).await.unwrap();
        assert!(store.delete_token("s").await.unwrap());
        assert!(!store.delete_token("s").await.unwrap());
        assert!(store.load_token("s").await.unwrap().is_none());
        assert!(store.load_token("other").await.unwrap().is_some());
    }

    async fn the_refresh_lease_is_exclusive_until_it_runs_out_and_a_save_releases_it(store: Arc<dyn OAuthTokenStore>) {
        // No row, no lease: there is nothing to refresh.
        assert!(!store.try_lease_refresh("s", "a", T0, T0 + REFRESH_LEASE_MS).await.unwrap());
        store.save_token(&token("s", b"t1"), T0).await.unwrap();
        let until = T0 + REFRESH_LEASE_MS;
        assert!(store.try_lease_refresh("s", "a", T0, until).await.unwrap());
        assert!(!store.try_lease_refresh("s", "b", T0 + 1, T0 + 1 + REFRESH_LEASE_MS).await.unwrap());
        // The holder may renew it.
        assert!(store.try_lease_refresh("s", "a", T0 + 2, until).await.unwrap());
        let row = store.load_token("s").await.unwrap().unwrap();
        assert_eq!((row.lease_owner.as_deref(), row.lease_until_ms), (Some("a"), Some(until)));
        // Once it ran out, another replica takes it over.
        assert!(store.try_lease_refresh("s", "b", until, until + REFRESH_LEASE_MS).await.unwrap());
        assert!(!store.try_lease_refresh("s", "a", until + 1, until + 1 + REFRESH_LEASE_MS).await.unwrap());
        // The holder's save releases it.
        store.save_token(&token("s", b"t2"), until + 5).await.unwrap();
        let row = store.load_token("s").await.unwrap().unwrap();
        assert_eq!((row.lease_owner, row.lease_until_ms), (None, None));
        assert!(store.try_lease_refresh("s", "a", until + 6, until + 6 + REFRESH_LEASE_MS).await.unwrap());
    }

    async fn a_failed_refresh_is_recorded_and_releases_only_its_own_lease(store: Arc<dyn OAuthTokenStore>) {
        store.save_token(&token("s", b"t1"), T0).await.unwrap();
        assert!(store.try_lease_refresh("s", "a", T0, T0 + REFRESH_LEASE_MS).await.unwrap());
        // Another replica's failure does not free a's lease.
        store.fail_refresh("s", "b", "b failed", T0 + 1).await.unwrap();
        let row = store.load_token("s").await.unwrap().unwrap();
        assert_eq!(row.lease_owner.as_deref(), Some("a"));
        assert_eq!(row.last_error.as_deref(), Some("b failed"));
        let long = "invalid_grant ".repeat(100);
        store.fail_refresh("s", "a", &long, T0 + 2).await.unwrap();
        let row = store.load_token("s").await.unwrap().unwrap();
        assert_eq!(row.lease_owner, None);
        assert_eq!(row.last_error_at_ms, Some(T0 + 2));
        let kept = row.last_error.unwrap();
        assert!(kept.chars().count() <= mcptask_core::oauth::MAX_ERROR_CHARS, "bounded");
        assert_eq!(row.sealed, b"t1", "the token is kept");
        // The next save clears the error.
        store.save_token(&token("s", b"t2"), T0 + 3).await.unwrap();
        let row = store.load_token("s").await.unwrap().unwrap();
        assert_eq!((row.last_error, row.last_error_at_ms), (None, None));
    }

    async fn of_replicas_racing_for_the_lease_exactly_one_wins(store: Arc<dyn OAuthTokenStore>) {
        store.save_token(&token("s", b"t1"), T0).await.unwrap();
        let racers = (0..8).map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .try_lease_refresh("s", &format!("replica-{i}"), T0, T0 + REFRESH_LEASE_MS)
                    .await
                    .unwrap()
            })
        });
        let mut winners = 0;
        for racer in racers.collect::<Vec<_>>() {
            winners += usize::from(racer.await.unwrap());
        }
        assert_eq!(winners, 1);
    }
}
