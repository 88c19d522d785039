//! `OAuthTokenStore`: upstream servers' sealed OAuth credentials, once for
//! every backend. One row per server; refreshes are coordinated by a lease
//! on the row taken in one conditional statement (the rule is
//! `mcptask_core::oauth::lease_available`), and a save bumps the row's
//! version and releases the lease.

use async_trait::async_trait;
use base64::Engine as _;
use mcptask_core::StoreError;
use mcptask_core::oauth::{NewToken, StoredToken, bounded_error};
use mcptask_core::store::OAuthTokenStore;

use super::SqlStore;
use super::backend::{Backend, args};
use crate::error::db_err;

/// The sealed blob travels as base64 text (every backend stores text).
fn encode(sealed: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(sealed)
}

fn token<B: Backend>(row: &B::Row) -> Result<StoredToken, StoreError> {
    let sealed: String = B::column(row, "sealed")?;
    Ok(StoredToken {
        server: B::column(row, "server")?,
        endpoint: B::column(row, "endpoint")?,
        sealed: base64::engine::general_purpose::STANDARD
            .decode(sealed)
            .map_err(|e| StoreError::Corrupt(format!("oauth_tokens.sealed: {e}")))?,
        expires_at_ms: B::column(row, "expires_at")?,
        refreshable: B::column(row, "refreshable")?,
        issuer: B::column(row, "issuer")?,
        scopes: B::column(row, "scopes")?,
        updated_at_ms: B::column(row, "updated_at")?,
        version: B::column(row, "version")?,
        lease_owner: B::column(row, "lease_owner")?,
        lease_until_ms: B::column(row, "lease_until")?,
        last_error: B::column(row, "last_error")?,
        last_error_at_ms: B::column(row, "last_error_at")?,
    })
}

#[async_trait]
impl<B: Backend> OAuthTokenStore for SqlStore<B> {
    async fn load_token(&self, server: &str) -> Result<Option<StoredToken>, StoreError> {
        let mut conn = self.reader.acquire().await.map_err(db_err)?;
        let row = B::fetch_optional(&mut conn, B::SQL.load_token, args![server]).await?;
        row.as_ref().map(token::<B>).transpose()
    }

    async fn save_token(&self, t: &NewToken, now: i64) -> Result<i64, StoreError> {
        let mut conn = self.write_conn().await?;
        let row = B::fetch_optional(
            &mut conn,
            B::SQL.save_token,
            args![
                &t.server,
                &t.endpoint,
                encode(&t.sealed),
                t.expires_at_ms,
                t.refreshable,
                &t.issuer,
                &t.scopes,
                now,
            ],
        )
        .await?
        .ok_or_else(|| StoreError::Database("saving a token returned no row".into()))?;
        B::column(&row, "version")
    }

    async fn delete_token(&self, server: &str) -> Result<bool, StoreError> {
        let mut conn = self.write_conn().await?;
        Ok(B::execute(&mut conn, B::SQL.delete_token, args![server]).await? == 1)
    }

    async fn try_lease_refresh(
        &self,
        server: &str,
        holder: &str,
        now: i64,
        until: i64,
    ) -> Result<bool, StoreError> {
        let mut conn = self.write_conn().await?;
        let changed = B::execute(
            &mut conn,
            B::SQL.lease_token,
            args![server, holder, now, until],
        )
        .await?;
        Ok(changed == 1)
    }

    async fn release_refresh(&self, server: &str, holder: &str) -> Result<(), StoreError> {
        let mut conn = self.write_conn().await?;
        B::execute(&mut conn, B::SQL.release_token_lease, args![server, holder]).await?;
        Ok(())
    }

    async fn fail_refresh(
        &self,
        server: &str,
        holder: &str,
        error: &str,
        now: i64,
    ) -> Result<(), StoreError> {
        let mut conn = self.write_conn().await?;
        B::execute(
            &mut conn,
            B::SQL.fail_token_refresh,
            args![server, holder, bounded_error(error), now],
        )
        .await?;
        Ok(())
    }
}
