//! `AdminConfigStore`: the configuration set through the admin API, once
//! for every backend. A write is one statement, then a wake-up on the
//! backend's change feed (PostgreSQL `NOTIFY` to every replica; in-process
//! on SQLite); a listener re-reads every entry, so a lost wake-up costs
//! only the time until its periodic re-read.

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;
use mcptask_core::StoreError;
use mcptask_core::admin::{AdminConfigStore, AdminEntry};

use super::SqlStore;
use super::backend::{Backend, Feed, args};
use crate::error::db_err;

fn entry<B: Backend>(row: &B::Row) -> Result<AdminEntry, StoreError> {
    Ok(AdminEntry {
        kind: B::column(row, "kind")?,
        name: B::column(row, "name")?,
        body: B::column(row, "body")?,
        changed_by: B::column(row, "changed_by")?,
        changed_at_ms: B::column(row, "changed_at")?,
    })
}

impl<B: Backend> SqlStore<B> {
    /// Wake the listeners of every replica: which entry changed is not
    /// said, each re-reads them all.
    async fn admin_changed(&self, name: &str) -> Result<(), StoreError> {
        B::publish_changes(&self.writer, Feed::AdminConfig, vec![name.to_string()]).await
    }
}

#[async_trait]
impl<B: Backend> AdminConfigStore for SqlStore<B> {
    async fn list_admin_entries(&self) -> Result<Vec<AdminEntry>, StoreError> {
        let mut conn = self.reader.acquire().await.map_err(db_err)?;
        let rows = B::fetch_all(&mut conn, B::SQL.list_admin_entries, args![]).await?;
        rows.iter().map(entry::<B>).collect()
    }

    async fn put_admin_entry(&self, e: &AdminEntry) -> Result<(), StoreError> {
        {
            let mut conn = self.write_conn().await?;
            B::execute(
                &mut conn,
                B::SQL.put_admin_entry,
                args![&e.kind, &e.name, &e.body, &e.changed_by, e.changed_at_ms],
            )
            .await?;
        }
        self.admin_changed(&e.name).await
    }

    async fn delete_admin_entry(&self, kind: &str, name: &str) -> Result<bool, StoreError> {
        let deleted = {
            let mut conn = self.write_conn().await?;
            B::execute(&mut conn, B::SQL.delete_admin_entry, args![kind, name]).await?
        };
        self.admin_changed(name).await?;
        Ok(deleted > 0)
    }

    async fn listen_admin_changes(&self) -> Result<Option<BoxStream<'static, ()>>, StoreError> {
        let batches = B::listen_changes(&self.reader, Feed::AdminConfig).await?;
        Ok(batches.map(|b| b.map(|_| ()).boxed()))
    }
}
