//! `AuditStore`: the audit trail, once for every backend. Entries are
//! appended in batches (one transaction each), listed newest first through
//! the indexes of their filters, and purged oldest first.

use async_trait::async_trait;
use mcptask_core::StoreError;
use mcptask_core::audit::{AuditCursor, AuditEvent, AuditFilter, AuditRecord, AuditStore};
use mcptask_core::call::Face;
use mcptask_core::outcome::Outcome;

use super::backend::{Backend, args};
use super::{DynamicSql, SqlStore};
use crate::codec;
use crate::error::db_err;

fn record<B: Backend>(row: &B::Row) -> Result<AuditRecord, StoreError> {
    let face: String = B::column(row, "face")?;
    let outcome: String = B::column(row, "outcome")?;
    let principal: String = B::column(row, "principal")?;
    Ok(AuditRecord {
        seq: B::column(row, "seq")?,
        event: AuditEvent {
            at_ms: B::column(row, "at")?,
            call_id: B::column(row, "call_id")?,
            principal: (!principal.is_empty()).then_some(principal),
            face: Face::parse(&face)
                .ok_or_else(|| StoreError::Corrupt(format!("audit_events.face: {face:?}")))?,
            server: B::column(row, "server")?,
            tool: B::column(row, "tool")?,
            driver: B::column(row, "driver")?,
            outcome: Outcome::parse(&outcome)
                .ok_or_else(|| StoreError::Corrupt(format!("audit_events.outcome: {outcome:?}")))?,
            error_class: B::column(row, "error_class")?,
            duration_ms: B::column(row, "duration_ms")?,
            via: B::column(row, "via")?,
        },
    })
}

#[async_trait]
impl<B: Backend> AuditStore for SqlStore<B> {
    async fn append_audit(&self, events: &[AuditEvent]) -> Result<(), StoreError> {
        if events.is_empty() {
            return Ok(());
        }
        let mut tx = self.begin_write().await?;
        for e in events {
            B::execute(
                &mut tx,
                B::SQL.append_audit,
                args![
                    e.at_ms,
                    &e.call_id,
                    codec::principal_column(e.principal.as_deref()),
                    e.face.as_str(),
                    &e.server,
                    &e.tool,
                    &e.driver,
                    e.outcome.as_str(),
                    &e.error_class,
                    e.duration_ms,
                    &e.via,
                ],
            )
            .await?;
        }
        tx.commit().await.map_err(db_err)
    }

    async fn list_audit(
        &self,
        filter: &AuditFilter,
        after: Option<&AuditCursor>,
        limit: i64,
    ) -> Result<Vec<AuditRecord>, StoreError> {
        // Only the filters asked for appear, so the planner can walk the
        // matching (…, at, seq) index backwards.
        let mut q = DynamicSql::new(B::SQL.list_audit);
        if let Some(principal) = &filter.principal {
            q.push(" AND principal = ").push_arg(principal);
        }
        if let Some(server) = &filter.server {
            q.push(" AND server = ").push_arg(server);
        }
        if let Some(tool) = &filter.tool {
            q.push(" AND tool = ").push_arg(tool);
        }
        if let Some(outcome) = filter.outcome {
            q.push(" AND outcome = ").push_arg(outcome.as_str());
        }
        if let Some(since) = filter.since_ms {
            q.push(" AND at >= ").push_arg(since);
        }
        if let Some(until) = filter.until_ms {
            q.push(" AND at < ").push_arg(until);
        }
        if let Some(cursor) = after {
            q.push(" AND (at, seq) < (")
                .push_arg(cursor.at_ms)
                .push(", ")
                .push_arg(cursor.seq)
                .push(")");
        }
        q.push(" ORDER BY at DESC, seq DESC LIMIT ")
            .push_arg(limit.max(0));
        let (sql, params) = q.build();
        let mut conn = self.reader.acquire().await.map_err(db_err)?;
        let rows = B::fetch_all(&mut conn, sql, params).await?;
        rows.iter().map(record::<B>).collect()
    }

    async fn purge_audit(&self, before: i64, limit: i64) -> Result<u64, StoreError> {
        if limit <= 0 {
            return Ok(0);
        }
        let mut conn = self.write_conn().await?;
        B::execute(&mut conn, B::SQL.purge_audit, args![before, limit]).await
    }
}
