//! Per-target delivery, dead letters, redrive and retention of tracked
//! tasks: the flows behind the delivery and purge parts of
//! `RemoteTaskStore` (the rules are in `mcptask_core::client::delivery`).

use std::collections::{BTreeMap, HashMap};

use mcptask_core::StoreError;
use mcptask_core::client::delivery::{
    DeadLetter, DeadLetterFilter, LagClaim, LagResult, TargetLag,
};
use mcptask_core::client::{Fence, NotifyClaim};

use super::backend::{Arg, Backend, args};
use super::{DynamicSql, SqlStore};
use crate::codec;
use crate::error::db_err;

impl<B: Backend> SqlStore<B> {
    /// The targets behind each claimed task's outbox.
    pub(super) async fn attach_lagging(
        conn: &mut B::Connection,
        claims: &mut [NotifyClaim],
    ) -> Result<(), StoreError> {
        if claims.is_empty() {
            return Ok(());
        }
        let ids: Vec<&str> = claims.iter().map(|c| c.fence.task_id.as_str()).collect();
        let rows = B::fetch_all(conn, B::SQL.lagging_targets, vec![Arg::TextList(ids)]).await?;
        let mut lagging: HashMap<String, Vec<String>> = HashMap::new();
        for row in &rows {
            lagging
                .entry(B::column(row, "task_id")?)
                .or_default()
                .push(B::column(row, "target")?);
        }
        for claim in claims {
            let mut targets = lagging.remove(&claim.fence.task_id).unwrap_or_default();
            targets.sort();
            claim.lagging = targets;
        }
        Ok(())
    }

    /// Write what a notify (or lag) result handed on: lag rows for the
    /// targets that fell behind, and dead letters.
    pub(super) async fn write_lags_and_dead(
        conn: &mut B::Connection,
        task_id: &str,
        lagged: &[TargetLag],
        dead: &[DeadLetter],
    ) -> Result<(), StoreError> {
        for lag in lagged {
            B::execute(
                conn,
                B::SQL.insert_lag,
                args![
                    task_id,
                    &lag.target,
                    lag.from_version,
                    i64::from(lag.error.is_some()),
                    lag.retry_at,
                    &lag.error,
                ],
            )
            .await?;
        }
        let mut written = 0;
        for d in dead {
            written += B::execute(
                conn,
                B::SQL.insert_dead_letter,
                args![task_id, &d.target, d.version, &d.error, d.dead_at],
            )
            .await?;
        }
        if written > 0 {
            B::execute(
                conn,
                B::SQL.add_dead_letters,
                args![task_id, written as i64],
            )
            .await?;
        }
        Ok(())
    }

    pub(super) async fn claim_lags(
        &self,
        owner: &str,
        now: i64,
        lease_ms: i64,
        limit: i64,
        max_events: i64,
        targets: &[String],
    ) -> Result<Vec<LagClaim>, StoreError> {
        if limit <= 0 || targets.is_empty() {
            return Ok(Vec::new());
        }
        let token = mcptask_core::lease::mint_token();
        let names: Vec<&str> = targets.iter().map(String::as_str).collect();
        let mut tx = self.begin_write().await?;
        let mut params = args![owner, &token, now, now.saturating_add(lease_ms), limit];
        params.push(Arg::TextList(names));
        let rows = B::fetch_all(&mut tx, B::SQL.claim_lag, params).await?;
        let mut claims = Vec::with_capacity(rows.len());
        for r in &rows {
            let due: i64 = B::column(r, "next_attempt_at")?;
            claims.push((
                due,
                LagClaim {
                    fence: Fence::new(
                        B::column::<String>(r, "task_id")?,
                        B::column::<String>(r, "owner")?,
                        B::column::<String>(r, "token")?,
                    ),
                    target: B::column(r, "target")?,
                    next_version: B::column(r, "next_version")?,
                    attempts: B::column(r, "attempts")?,
                    budget_from: B::column(r, "budget_from")?,
                    events: Vec::new(),
                },
            ));
        }
        claims.sort_by(|a, b| {
            (a.0, &a.1.fence.task_id, &a.1.target).cmp(&(b.0, &b.1.fence.task_id, &b.1.target))
        });
        let mut claims: Vec<LagClaim> = claims.into_iter().map(|(_, c)| c).collect();
        if !claims.is_empty() {
            let rows = B::fetch_all(
                &mut tx,
                B::SQL.lag_events,
                args![owner, &token, max_events.max(1)],
            )
            .await?;
            let mut events: HashMap<(String, String), Vec<_>> = HashMap::new();
            for row in &rows {
                let event = codec::task_event::<B>(row)?;
                let target: String = B::column(row, "lag_target")?;
                events
                    .entry((event.task_id.clone(), target))
                    .or_default()
                    .push(event);
            }
            for c in &mut claims {
                c.events = events
                    .remove(&(c.fence.task_id.clone(), c.target.clone()))
                    .unwrap_or_default();
            }
        }
        tx.commit().await.map_err(db_err)?;
        Ok(claims)
    }

    pub(super) async fn finish_lags(
        &self,
        results: &[LagResult],
        now: i64,
    ) -> Result<Vec<bool>, StoreError> {
        let mut done = vec![false; results.len()];
        if results.is_empty() {
            return Ok(done);
        }
        let mut tx = self.begin_write().await?;
        // Rows locked in (task, target) order, so two batches cannot deadlock.
        let mut order: Vec<usize> = (0..results.len()).collect();
        order.sort_by(|a, b| {
            let (a, b) = (&results[*a], &results[*b]);
            (&a.fence.task_id, &a.target).cmp(&(&b.fence.task_id, &b.target))
        });
        for i in order {
            let r = &results[i];
            let f = &r.fence;
            if r.released {
                let n = B::execute(
                    &mut tx,
                    B::SQL.release_lag,
                    args![&f.task_id, &f.owner, &f.token, &r.target],
                )
                .await?;
                done[i] = n == 1;
                continue;
            }
            let (error, retry_at) = match &r.failure {
                Some((error, at)) => (Some(error.as_str()), Some(*at)),
                None => (None, None),
            };
            let n = B::execute(
                &mut tx,
                B::SQL.finish_lag,
                args![
                    &f.task_id,
                    &f.owner,
                    &f.token,
                    &r.target,
                    r.next_version,
                    error,
                    retry_at,
                    now,
                ],
            )
            .await?;
            if n != 1 {
                continue;
            }
            Self::write_lags_and_dead(&mut tx, &f.task_id, &[], &r.dead).await?;
            if r.failure.is_none() {
                B::execute(
                    &mut tx,
                    B::SQL.drop_caught_up_lag,
                    args![&f.task_id, &r.target],
                )
                .await?;
            }
            done[i] = true;
        }
        tx.commit().await.map_err(db_err)?;
        Ok(done)
    }

    pub(super) async fn list_dead(
        &self,
        filter: &DeadLetterFilter,
        limit: i64,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        let mut q = DynamicSql::new(B::SQL.list_dead_letters);
        push_dead_filter(&mut q, filter);
        q.push(" ORDER BY dead_at DESC, task_id, target, version LIMIT ")
            .push_arg(limit.max(0));
        let (sql, params) = q.build();
        let mut conn = self.reader.acquire().await.map_err(db_err)?;
        let rows = B::fetch_all(&mut conn, sql, params).await?;
        rows.iter()
            .map(|r| {
                Ok(DeadLetter {
                    task_id: B::column(r, "task_id")?,
                    version: B::column(r, "version")?,
                    target: B::column(r, "target")?,
                    error: B::column(r, "error")?,
                    dead_at: B::column(r, "dead_at")?,
                })
            })
            .collect()
    }

    pub(super) async fn count_dead(&self) -> Result<i64, StoreError> {
        let mut conn = self.reader.acquire().await.map_err(db_err)?;
        let row = B::fetch_optional(&mut conn, B::SQL.count_dead_letters, Vec::new()).await?;
        match row {
            Some(row) => B::column(&row, "n"),
            None => Ok(0),
        }
    }

    pub(super) async fn redrive(
        &self,
        filter: &DeadLetterFilter,
        now: i64,
        limit: i64,
    ) -> Result<i64, StoreError> {
        if limit <= 0 {
            return Ok(0);
        }
        let mut q = DynamicSql::new(B::SQL.dead_letter_groups);
        push_dead_filter(&mut q, filter);
        q.push(" GROUP BY task_id, target ORDER BY task_id, target LIMIT ")
            .push_arg(limit);
        let (sql, params) = q.build();
        let mut tx = self.begin_write().await?;
        let rows = B::fetch_all(&mut tx, sql, params).await?;
        let mut groups = BTreeMap::new();
        for r in &rows {
            let key: (String, String) = (B::column(r, "task_id")?, B::column(r, "target")?);
            let first: i64 = B::column(r, "first_version")?;
            let n: i64 = B::column(r, "n")?;
            groups.insert(key, (first, n));
        }
        let mut redriven = 0;
        for ((task_id, target), (first, n)) in &groups {
            B::execute(
                &mut tx,
                B::SQL.redrive_lag,
                args![task_id, target, *first, now],
            )
            .await?;
            B::execute(&mut tx, B::SQL.delete_dead_letters, args![task_id, target]).await?;
            redriven += n;
        }
        tx.commit().await.map_err(db_err)?;
        Ok(redriven)
    }

    pub(super) async fn purge_settled(
        &self,
        settled_before: i64,
        limit: i64,
    ) -> Result<u64, StoreError> {
        if limit <= 0 {
            return Ok(0);
        }
        let mut tx = self.begin_write().await?;
        let n = B::execute(&mut tx, B::SQL.purge_remote, args![settled_before, limit]).await?;
        tx.commit().await.map_err(db_err)?;
        Ok(n)
    }
}

fn push_dead_filter(q: &mut DynamicSql<'_>, filter: &DeadLetterFilter) {
    if let Some(task_id) = &filter.task_id {
        q.push(" AND task_id = ").push_arg(task_id.clone());
    }
    if let Some(target) = &filter.target {
        q.push(" AND target = ").push_arg(target.clone());
    }
}
