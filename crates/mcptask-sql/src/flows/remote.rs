//! `RemoteTaskStore`: the client side's store flows, once for every backend.
//!
//! Every state change is computed by `mcptask_core::client::transition`; a
//! flow locks the rows it changes (PostgreSQL: `FOR UPDATE`, batches always in
//! id order so they cannot deadlock each other; SQLite: the write lock its
//! transaction holds from the start), calls the transition, and writes the
//! result back — claim-owned writes fenced in the statement itself.

use std::collections::{BTreeSet, HashMap};

use async_trait::async_trait;
use futures::stream::BoxStream;
use mcptask_core::call::Driver;
use mcptask_core::client::delivery::{DeadLetter, DeadLetterFilter, LagClaim, LagResult};
use mcptask_core::client::transition::{self, Change};
use mcptask_core::client::{
    AnswerResult, Applied, ClaimedTask, Cursor, Fence, InsertOutcome, ListFilter, NewRemoteTask,
    NotifyClaim, NotifyResult, Observation, Phase, RemoteInput, RemoteTaskRecord, TaskEvent,
    TrackerPolicy,
};
use mcptask_core::store::RemoteTaskStore;
use mcptask_core::{StoreError, TaskStatus};
use serde_json::Value;

use super::backend::{Arg, Backend, Feed, args};
use super::{DynamicSql, SqlStore};
use crate::codec::{self, to_json_text};
use crate::error::db_err;

/// `$1 … $28`: the id and the mutable columns, in `remote_mutable_columns!` order.
fn mutable_args(r: &RemoteTaskRecord) -> Vec<Arg<'_>> {
    args![
        &r.id,
        r.status.as_str(),
        &r.status_message,
        codec::input_requests_text(&r.input_requests),
        r.result.as_ref().map(to_json_text),
        r.result_truncated,
        r.error.as_ref().map(to_json_text),
        r.remote_created_at,
        r.ttl_ms,
        r.poll_interval_ms,
        r.updated_at,
        r.completed_at,
        r.next_poll_at,
        r.last_polled_at,
        r.poll_count,
        r.consecutive_errors,
        &r.last_error,
        r.cancel_requested_at,
        r.cancel_sent_at,
        r.next_cancel_at,
        r.cancel_attempts,
        r.next_update_at,
        r.event_version,
        r.delivered_version,
        r.next_notify_at,
        r.notify_attempts,
        &r.last_notify_error,
        r.dead_letters,
        r.attempt,
    ]
}

/// `$1` owner, `$2` token, `$3` now, `$4` lease end, `$5` limit: the
/// parameters of every claim statement.
fn claim_args<'a>(
    owner: &'a str,
    token: &'a str,
    now: i64,
    lease_ms: i64,
    limit: i64,
) -> Vec<Arg<'a>> {
    args![owner, token, now, now.saturating_add(lease_ms), limit]
}

/// A result whose claim held when its row was locked, and the change it makes.
struct Planned {
    /// Its index in the apply batch.
    entry: usize,
    fence: Fence,
    change: Change,
}

/// One row of the set-based fenced write: the fields `remote_fenced_rows!`
/// names, the same values `write_fenced` binds.
fn fenced_row(r: &RemoteTaskRecord, fence: &Fence) -> Value {
    serde_json::json!({
        "id": r.id,
        "status": r.status.as_str(),
        "status_message": r.status_message,
        "input_requests": codec::input_requests_text(&r.input_requests),
        "result": r.result.as_ref().map(to_json_text),
        "result_truncated": r.result_truncated,
        "error": r.error.as_ref().map(to_json_text),
        "remote_created_at": r.remote_created_at,
        "ttl_ms": r.ttl_ms,
        "poll_interval_ms": r.poll_interval_ms,
        "updated_at": r.updated_at,
        "completed_at": r.completed_at,
        "next_poll_at": r.next_poll_at,
        "last_polled_at": r.last_polled_at,
        "poll_count": r.poll_count,
        "consecutive_errors": r.consecutive_errors,
        "last_error": r.last_error,
        "cancel_requested_at": r.cancel_requested_at,
        "cancel_sent_at": r.cancel_sent_at,
        "next_cancel_at": r.next_cancel_at,
        "cancel_attempts": r.cancel_attempts,
        "next_update_at": r.next_update_at,
        "event_version": r.event_version,
        "delivered_version": r.delivered_version,
        "next_notify_at": r.next_notify_at,
        "notify_attempts": r.notify_attempts,
        "last_notify_error": r.last_notify_error,
        "dead_letters": r.dead_letters,
        "attempt": r.attempt,
        "claim_owner": r.claim_owner,
        "claim_token": r.claim_token,
        "claim_expires_at": r.claim_expires_at,
        "fence_owner": fence.owner,
        "fence_token": fence.token,
    })
}

impl<B: Backend> SqlStore<B> {
    /// Read and lock one task row until commit.
    async fn lock_record(
        conn: &mut B::Connection,
        id: &str,
    ) -> Result<Option<RemoteTaskRecord>, StoreError> {
        let row = B::fetch_optional(conn, B::SQL.lock_remote, args![id]).await?;
        row.as_ref().map(codec::remote_task::<B>).transpose()
    }

    /// Write a change's record fenced on `fence`; false when the fence failed.
    async fn write_fenced(
        conn: &mut B::Connection,
        r: &RemoteTaskRecord,
        fence: &Fence,
    ) -> Result<bool, StoreError> {
        let mut params = mutable_args(r);
        params.extend(args![
            &r.claim_owner,
            &r.claim_token,
            r.claim_expires_at,
            &fence.owner,
            &fence.token,
        ]);
        let changed = B::execute(conn, B::SQL.update_remote_fenced, params).await?;
        Ok(changed == 1)
    }

    async fn write_unclaimed(
        conn: &mut B::Connection,
        r: &RemoteTaskRecord,
    ) -> Result<(), StoreError> {
        B::execute(conn, B::SQL.update_remote_unclaimed, mutable_args(r)).await?;
        Ok(())
    }

    /// Insert a new row (`transition::new_record`'s change) with its inputs
    /// and first events; false (nothing written) when a live row already
    /// holds its handle.
    pub(super) async fn insert_change(
        conn: &mut B::Connection,
        change: &Change,
    ) -> Result<bool, StoreError> {
        let r = &change.record;
        let mut params = mutable_args(r);
        params.extend(args![
            &r.server,
            &r.server_hash,
            &r.remote_task_id,
            codec::principal_column(r.principal.as_deref()),
            &r.conversation,
            &r.call_id,
            r.correlation.as_ref().map(to_json_text),
            &r.tool,
            r.arguments.as_ref().map(to_json_text),
            r.created_at,
            r.driver.as_str(),
            r.driver.data().as_ref().map(to_json_text),
            r.face.map(|f| f.as_str()),
            r.trace.as_ref().map(|t| t.traceparent.as_str()),
            r.trace.as_ref().and_then(|t| t.tracestate.as_deref()),
        ]);
        let inserted = B::fetch_optional(conn, B::SQL.insert_remote, params).await?;
        if inserted.is_none() {
            return Ok(false);
        }
        Self::write_inputs_and_events(conn, change, r.created_at).await?;
        Ok(true)
    }

    /// Insert what accompanies a change: new input keys (first request wins)
    /// and the numbered events.
    async fn write_inputs_and_events(
        conn: &mut B::Connection,
        change: &Change,
        now: i64,
    ) -> Result<(), StoreError> {
        let id = &change.record.id;
        for (key, request) in &change.new_inputs {
            B::execute(
                conn,
                B::SQL.insert_remote_input,
                args![id, key, to_json_text(request), now],
            )
            .await?;
        }
        for (key, request) in &change.reopened {
            let request = (!request.is_null()).then(|| to_json_text(request));
            B::execute(conn, B::SQL.reopen_input, args![id, key, request]).await?;
        }
        for (version, kind, data) in &change.events {
            B::execute(
                conn,
                B::SQL.insert_event,
                args![
                    id,
                    *version,
                    kind.as_str(),
                    codec::event_status(data, change.record.status),
                    now,
                    to_json_text(data),
                ],
            )
            .await?;
        }
        Ok(())
    }

    /// Answers the server acknowledged, when the observation is a poll that
    /// still lists some of their keys (the transition decides if they are asked again).
    async fn acked_listed(
        conn: &mut B::Connection,
        task_id: &str,
        observation: &Observation,
    ) -> Result<Vec<(String, i64)>, StoreError> {
        let Observation::Snapshot(s) = observation else {
            return Ok(Vec::new());
        };
        if s.input_requests.is_empty() {
            return Ok(Vec::new());
        }
        let rows = B::fetch_all(conn, B::SQL.acked_inputs, args![task_id]).await?;
        let mut acked = Vec::new();
        for row in &rows {
            let key: String = B::column(row, "key")?;
            let sent_at: i64 = B::column(row, "sent_at")?;
            if s.input_requests.iter().any(|(k, _)| *k == key) {
                acked.push((key, sent_at));
            }
        }
        Ok(acked)
    }

    /// Answers stored but not yet acknowledged once `acked` are marked sent:
    /// the transition keeps the update phase due for them.
    async fn unsent_after(
        conn: &mut B::Connection,
        task_id: &str,
        observation: &Observation,
    ) -> Result<usize, StoreError> {
        let (Observation::UpdateAcked { keys } | Observation::UpdateRejected { keys, .. }) =
            observation
        else {
            return Ok(0);
        };
        let acked: Vec<&str> = keys.iter().map(String::as_str).collect();
        let row = B::fetch_optional(
            conn,
            B::SQL.count_unsent_except,
            vec![task_id.into(), Arg::TextList(acked)],
        )
        .await?;
        let n: i64 = match row {
            Some(row) => B::column(&row, "n")?,
            None => 0,
        };
        Ok(n.max(0) as usize)
    }

    /// Mark acknowledged answers as sent.
    async fn write_sent(
        conn: &mut B::Connection,
        change: &Change,
        now: i64,
    ) -> Result<(), StoreError> {
        if change.sent_keys.is_empty() {
            return Ok(());
        }
        let keys: Vec<&str> = change.sent_keys.iter().map(String::as_str).collect();
        B::execute(
            conn,
            B::SQL.mark_sent,
            vec![
                change.record.id.as_str().into(),
                now.into(),
                Arg::TextList(keys),
            ],
        )
        .await?;
        Ok(())
    }

    /// The answers each claimed update task still has to send.
    async fn attach_unsent_answers(
        conn: &mut B::Connection,
        claimed: &mut [ClaimedTask],
    ) -> Result<(), StoreError> {
        if claimed.is_empty() {
            return Ok(());
        }
        let ids: Vec<&str> = claimed.iter().map(|c| c.record.id.as_str()).collect();
        let rows = B::fetch_all(conn, B::SQL.unsent_answers, vec![Arg::TextList(ids)]).await?;
        let mut answers: HashMap<String, Vec<(String, Value)>> = HashMap::new();
        for row in &rows {
            let (task_id, pair) = codec::answer_pair::<B>(row)?;
            answers.entry(task_id).or_default().push(pair);
        }
        for task in claimed {
            task.answers = answers.remove(&task.record.id).unwrap_or_default();
        }
        Ok(())
    }

    /// The undelivered events of each claim, at most `max_events` each.
    async fn attach_events(
        conn: &mut B::Connection,
        claims: &mut [NotifyClaim],
        max_events: i64,
    ) -> Result<(), StoreError> {
        if claims.is_empty() {
            return Ok(());
        }
        let ids: Vec<&str> = claims.iter().map(|c| c.fence.task_id.as_str()).collect();
        let rows = B::fetch_all(
            conn,
            B::SQL.claimed_events,
            vec![Arg::TextList(ids), max_events.max(1).into()],
        )
        .await?;
        let mut events: HashMap<String, Vec<TaskEvent>> = HashMap::new();
        for row in &rows {
            let event = codec::task_event::<B>(row)?;
            events.entry(event.task_id.clone()).or_default().push(event);
        }
        for claim in claims {
            claim.events = events.remove(&claim.fence.task_id).unwrap_or_default();
        }
        Ok(())
    }

    /// Settle one notify claim; false when the claim was lost.
    async fn finish_notification(
        conn: &mut B::Connection,
        entry: &NotifyResult,
        now: i64,
    ) -> Result<bool, StoreError> {
        let f = &entry.fence;
        if entry.released {
            let changed = B::execute(
                conn,
                B::SQL.release_notify,
                args![&f.task_id, &f.owner, &f.token],
            )
            .await?;
            return Ok(changed == 1);
        }
        let dead: Vec<i64> = entry
            .dead_lettered
            .iter()
            .copied()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let (error, retry_at) = match &entry.failure {
            Some((error, at)) => (Some(error.as_str()), Some(*at)),
            None => (None, None),
        };
        let changed = B::execute(
            conn,
            B::SQL.finish_notify,
            args![
                &f.task_id,
                &f.owner,
                &f.token,
                entry.delivered_through,
                dead.len() as i64,
                error,
                retry_at,
                now,
            ],
        )
        .await?;
        if changed != 1 {
            return Ok(false);
        }
        Self::write_lags_and_dead(conn, &f.task_id, &entry.lagged, &entry.dead).await?;
        B::execute(
            conn,
            B::SQL.mark_events_delivered,
            vec![
                f.task_id.as_str().into(),
                entry.delivered_through.into(),
                now.into(),
                Arg::IntList(dead),
            ],
        )
        .await?;
        Ok(true)
    }

    /// Lock every row of an apply batch in one statement, in id order, and
    /// read them. A corrupt row is left out (its result cannot be applied).
    async fn lock_batch(
        conn: &mut B::Connection,
        results: &[Applied],
    ) -> Result<HashMap<String, RemoteTaskRecord>, StoreError> {
        let mut ids: Vec<&str> = results.iter().map(|a| a.fence.task_id.as_str()).collect();
        ids.sort_unstable();
        ids.dedup();
        let rows = B::fetch_all(conn, B::SQL.lock_remotes, vec![Arg::TextList(ids)]).await?;
        let mut current = HashMap::with_capacity(rows.len());
        for row in &rows {
            match codec::remote_task::<B>(row) {
                Ok(record) => {
                    current.insert(record.id.clone(), record);
                }
                Err(e) => {
                    let id: Option<String> = B::column(row, "id").ok();
                    tracing::error!(task = ?id, "cannot apply to a corrupt remote task: {e}");
                }
            }
        }
        Ok(current)
    }

    /// The change each result makes to its locked row, for the results whose
    /// claim still holds. Every change releases the claim, so of two results
    /// for one task at most the first can hold; a second is never planned.
    async fn plan_changes(
        conn: &mut B::Connection,
        results: &[Applied],
        current: &HashMap<String, RemoteTaskRecord>,
        policy: &TrackerPolicy,
        now: i64,
    ) -> Result<Vec<Planned>, StoreError> {
        let mut planned: Vec<Planned> = Vec::with_capacity(results.len());
        let mut seen: BTreeSet<&str> = BTreeSet::new();
        for (i, entry) in results.iter().enumerate() {
            let id = entry.fence.task_id.as_str();
            let Some(record) = current.get(id) else {
                continue;
            };
            if !entry
                .fence
                .holds(record.claim_owner.as_deref(), record.claim_token.as_deref())
                || !seen.insert(id)
            {
                continue;
            }
            let unsent = Self::unsent_after(conn, id, &entry.observation).await?;
            let mut change = transition::observe(
                record,
                entry.phase,
                &entry.observation,
                now,
                policy,
                entry.jitter,
                unsent,
            );
            let acked = Self::acked_listed(conn, id, &entry.observation).await?;
            transition::reopen_reasked(&mut change, &acked, now, policy);
            planned.push(Planned {
                entry: i,
                fence: entry.fence.clone(),
                change,
            });
        }
        Ok(planned)
    }

    /// Write the planned records, each fenced on its claim: one statement
    /// for the batch where the backend has one, else one per row. Says which
    /// were written.
    async fn write_fenced_batch(
        conn: &mut B::Connection,
        planned: &[Planned],
    ) -> Result<Vec<bool>, StoreError> {
        match B::SQL.update_remotes_fenced {
            Some(sql) if planned.len() > 1 => {
                let rows: Vec<Value> = planned
                    .iter()
                    .map(|p| fenced_row(&p.change.record, &p.fence))
                    .collect();
                let json = Value::Array(rows).to_string();
                let written = B::fetch_all(conn, sql, args![json]).await?;
                let ids: BTreeSet<String> = written
                    .iter()
                    .map(|row| B::column::<String>(row, "id"))
                    .collect::<Result<_, _>>()?;
                Ok(planned
                    .iter()
                    .map(|p| ids.contains(&p.change.record.id))
                    .collect())
            }
            _ => {
                let mut written = Vec::with_capacity(planned.len());
                for p in planned {
                    written.push(Self::write_fenced(conn, &p.change.record, &p.fence).await?);
                }
                Ok(written)
            }
        }
    }
}

#[async_trait]
impl<B: Backend> RemoteTaskStore for SqlStore<B> {
    async fn publish_remote_changes(&self, task_ids: &[String]) -> Result<(), StoreError> {
        B::publish_changes(&self.writer, Feed::RemoteTasks, task_ids.to_vec()).await
    }

    async fn listen_remote_changes(
        &self,
    ) -> Result<Option<BoxStream<'static, Vec<String>>>, StoreError> {
        B::listen_changes(&self.reader, Feed::RemoteTasks).await
    }

    async fn insert_remote(
        &self,
        task: &NewRemoteTask,
        policy: &TrackerPolicy,
    ) -> Result<InsertOutcome, StoreError> {
        let change = transition::new_record(task, policy, mcptask_core::ids::random_unit());
        let r = &change.record;
        let mut tx = self.begin_urgent().await?;
        // The handle is unique among live tasks only (a server may reuse the
        // id of a task it forgot), so a handle recorded already settled
        // cannot conflict: look for the live one it duplicates first.
        if r.is_terminal()
            && let Some(existing) = B::fetch_optional(
                &mut tx,
                B::SQL.find_handle,
                args![
                    &task.server,
                    codec::principal_column(task.principal.as_deref()),
                    &task.remote_task_id,
                ],
            )
            .await?
        {
            let existing = codec::remote_task::<B>(&existing)?;
            tx.rollback().await.map_err(db_err)?;
            return Ok(InsertOutcome::AlreadyTracked(Box::new(existing)));
        }
        // Only a conflict on the handle is "already tracked"; a duplicate
        // local id still fails as an error. A concurrent insert of the same
        // handle makes this wait for it, then skip.
        let inserted = Self::insert_change(&mut tx, &change).await?;
        if !inserted {
            tx.rollback().await.map_err(db_err)?;
            let mut conn = self.reader.acquire().await.map_err(db_err)?;
            let row = B::fetch_optional(
                &mut conn,
                B::SQL.find_handle,
                args![
                    &task.server,
                    codec::principal_column(task.principal.as_deref()),
                    &task.remote_task_id,
                ],
            )
            .await?;
            let existing = row.ok_or_else(|| {
                StoreError::Database("the conflicting remote task vanished; retry".into())
            })?;
            return Ok(InsertOutcome::AlreadyTracked(Box::new(
                codec::remote_task::<B>(&existing)?,
            )));
        }
        tx.commit().await.map_err(db_err)?;
        Ok(InsertOutcome::Inserted(Box::new(change.record)))
    }

    async fn get_remote(&self, id: &str) -> Result<Option<RemoteTaskRecord>, StoreError> {
        let mut conn = self.reader.acquire().await.map_err(db_err)?;
        let row = B::fetch_optional(&mut conn, B::SQL.get_remote, args![id]).await?;
        row.as_ref().map(codec::remote_task::<B>).transpose()
    }

    async fn expedite_poll(&self, id: &str, now: i64) -> Result<bool, StoreError> {
        let mut conn = self.write_conn().await?;
        let changed = B::execute(&mut conn, B::SQL.expedite_poll, args![id, now]).await?;
        Ok(changed == 1)
    }

    async fn expedite_local_poll(&self, id: &str, now: i64) -> Result<bool, StoreError> {
        // The drivers whose work runs in the call runtime, as stored.
        let [a, b] = [Driver::Sep1686, Driver::Sync].map(Driver::as_str);
        debug_assert!(Driver::ALL.iter().filter(|d| !d.is_tracked()).count() == 2);
        let mut conn = self.write_conn().await?;
        let changed =
            B::execute(&mut conn, B::SQL.expedite_local_poll, args![id, now, a, b]).await?;
        Ok(changed == 1)
    }

    async fn remote_inputs(&self, id: &str) -> Result<Vec<RemoteInput>, StoreError> {
        let mut conn = self.reader.acquire().await.map_err(db_err)?;
        let rows = B::fetch_all(&mut conn, B::SQL.remote_inputs, args![id]).await?;
        rows.iter().map(codec::remote_input::<B>).collect()
    }

    async fn remote_events(
        &self,
        id: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<TaskEvent>, StoreError> {
        let mut conn = self.reader.acquire().await.map_err(db_err)?;
        let rows = B::fetch_all(
            &mut conn,
            B::SQL.remote_events,
            args![id, after, limit.max(0)],
        )
        .await?;
        rows.iter().map(codec::task_event::<B>).collect()
    }

    async fn list_remote(
        &self,
        filter: &ListFilter,
        after: Option<&Cursor>,
        limit: i64,
    ) -> Result<Vec<RemoteTaskRecord>, StoreError> {
        // Only the filters asked for appear in the statement, so the planner
        // can pick the matching (…, created_at, id) index and walk it backwards.
        let only_live = filter.active_only
            && filter.status.is_none()
            && filter.outcome.is_none()
            && filter.server.is_none()
            && filter.principal.is_none()
            && filter.conversation.is_none()
            && filter.tool.is_none()
            && filter.created_since.is_none()
            && filter.created_before.is_none();
        let mut q = DynamicSql::new(if only_live {
            B::SQL.list_live_remote
        } else {
            B::SQL.list_remote
        });
        if let Some(status) = filter.status {
            q.push(" AND status = ").push_arg(status.as_str());
        }
        // The outcome (`mcptask_core::outcome`): a completed call is a tool
        // error or not by its result; the others are their status. Refused
        // calls are never kept: none is listed.
        if let Some(outcome) = filter.outcome {
            use mcptask_core::outcome::Outcome;
            let (status, tool_error) = match outcome {
                Outcome::Completed => (Some(TaskStatus::Completed), Some(false)),
                Outcome::ToolError => (Some(TaskStatus::Completed), Some(true)),
                Outcome::Failed => (Some(TaskStatus::Failed), None),
                Outcome::Cancelled => (Some(TaskStatus::Cancelled), None),
                Outcome::RefusedPolicy | Outcome::RefusedLimit => (None, None),
            };
            match status {
                Some(status) => q.push(" AND status = ").push_arg(status.as_str()),
                None => q.push(" AND FALSE"),
            };
            match tool_error {
                Some(true) => q.push(" AND ").push(B::SQL.tool_error),
                Some(false) => q.push(" AND NOT ").push(B::SQL.tool_error),
                None => &mut q,
            };
        }
        if filter.active_only {
            q.push(" AND ").push(super::sql::live!("status"));
        }
        if let Some(server) = &filter.server {
            q.push(" AND server = ").push_arg(server);
        }
        if let Some(principal) = &filter.principal {
            q.push(" AND principal = ").push_arg(principal);
        }
        if let Some(conversation) = &filter.conversation {
            q.push(" AND conversation = ").push_arg(conversation);
        }
        if let Some(tool) = &filter.tool {
            q.push(" AND tool = ").push_arg(tool);
        }
        // A time window bounds the walk of whichever (…, created_at, id)
        // index the other filters chose.
        if let Some(since) = filter.created_since {
            q.push(" AND created_at >= ").push_arg(since);
        }
        if let Some(before) = filter.created_before {
            q.push(" AND created_at < ").push_arg(before);
        }
        if let Some(cursor) = after {
            q.push(" AND (created_at, id) < (")
                .push_arg(cursor.created_at)
                .push(", ")
                .push_arg(&cursor.id)
                .push(")");
        }
        q.push(" ORDER BY created_at DESC, id DESC LIMIT ")
            .push_arg(limit.max(0));
        let (sql, params) = q.build();
        let mut conn = self.reader.acquire().await.map_err(db_err)?;
        let rows = B::fetch_all(&mut conn, sql, params).await?;
        rows.iter().map(codec::remote_task::<B>).collect()
    }

    async fn request_cancel(
        &self,
        id: &str,
        now: i64,
    ) -> Result<Option<RemoteTaskRecord>, StoreError> {
        let mut tx = self.begin_write().await?;
        let Some(current) = Self::lock_record(&mut tx, id).await? else {
            return Ok(None);
        };
        let Some(change) = transition::request_cancel(&current, now) else {
            return Ok(Some(current));
        };
        Self::write_unclaimed(&mut tx, &change.record).await?;
        Self::write_inputs_and_events(&mut tx, &change, now).await?;
        tx.commit().await.map_err(db_err)?;
        Ok(Some(change.record))
    }

    async fn answer_inputs(
        &self,
        id: &str,
        answers: &[(String, Value)],
        now: i64,
    ) -> Result<Option<AnswerResult>, StoreError> {
        let mut tx = self.begin_write().await?;
        // The row lock serialises answers to one task: the set of answered
        // keys read below cannot change before commit.
        let Some(current) = Self::lock_record(&mut tx, id).await? else {
            return Ok(None);
        };
        let rows = B::fetch_all(&mut tx, B::SQL.answered_keys, args![id]).await?;
        let answered: BTreeSet<String> = rows
            .iter()
            .map(|r| B::column::<String>(r, "key"))
            .collect::<Result<_, _>>()?;
        let (change, proposed) = transition::answer_inputs(&current, &answered, answers, now);
        let Some(change) = change else {
            return Ok(Some(proposed));
        };
        let mut result = AnswerResult {
            applied: Vec::new(),
            ignored: proposed.ignored,
        };
        for key in proposed.applied {
            let Some((_, response)) = answers.iter().find(|(k, _)| *k == key) else {
                result.ignored.push(key);
                continue;
            };
            let changed = B::execute(
                &mut tx,
                B::SQL.store_answer,
                args![id, key.as_str(), to_json_text(response), now],
            )
            .await?;
            if changed == 1 {
                result.applied.push(key);
            } else {
                result.ignored.push(key);
            }
        }
        if result.applied.is_empty() {
            return Ok(Some(result));
        }
        Self::write_unclaimed(&mut tx, &change.record).await?;
        Self::write_inputs_and_events(&mut tx, &change, now).await?;
        tx.commit().await.map_err(db_err)?;
        Ok(Some(result))
    }

    async fn next_due(&self, phase: Phase, now: i64) -> Result<Option<i64>, StoreError> {
        let sql = match phase {
            Phase::Poll => B::SQL.next_poll_due,
            Phase::Cancel => B::SQL.next_cancel_due,
            Phase::Update => B::SQL.next_update_due,
        };
        let mut conn = self.reader.acquire().await.map_err(db_err)?;
        match B::fetch_optional(&mut conn, sql, args![now]).await? {
            Some(row) => B::column(&row, "due"),
            None => Ok(None),
        }
    }

    async fn claim_remote(
        &self,
        phase: Phase,
        owner: &str,
        now: i64,
        lease_ms: i64,
        limit: i64,
    ) -> Result<Vec<ClaimedTask>, StoreError> {
        if limit <= 0 {
            return Ok(Vec::new());
        }
        let sql = match phase {
            Phase::Poll => B::SQL.claim_poll,
            Phase::Cancel => B::SQL.claim_cancel,
            Phase::Update => B::SQL.claim_update,
        };
        let token = mcptask_core::lease::mint_token();
        let mut tx = self.begin_write().await?;
        let rows = B::fetch_all(
            &mut tx,
            sql,
            claim_args(owner, &token, now, lease_ms, limit),
        )
        .await?;
        let mut claimed = codec::claimed_records(phase, rows.iter().map(codec::remote_task::<B>));
        if phase == Phase::Update {
            Self::attach_unsent_answers(&mut tx, &mut claimed).await?;
        }
        tx.commit().await.map_err(db_err)?;
        Ok(claimed)
    }

    async fn apply_remote(
        &self,
        results: &[Applied],
        policy: &TrackerPolicy,
        now: i64,
    ) -> Result<Vec<bool>, StoreError> {
        let mut applied = vec![false; results.len()];
        if results.is_empty() {
            return Ok(applied);
        }
        let mut tx = self.begin_write().await?;
        let current = Self::lock_batch(&mut tx, results).await?;
        let planned = Self::plan_changes(&mut tx, results, &current, policy, now).await?;
        let written = Self::write_fenced_batch(&mut tx, &planned).await?;
        for (planned, ok) in planned.iter().zip(written) {
            if !ok {
                continue;
            }
            Self::write_inputs_and_events(&mut tx, &planned.change, now).await?;
            Self::write_sent(&mut tx, &planned.change, now).await?;
            applied[planned.entry] = true;
        }
        tx.commit().await.map_err(db_err)?;
        Ok(applied)
    }

    async fn claim_notifications(
        &self,
        owner: &str,
        now: i64,
        lease_ms: i64,
        limit: i64,
        max_events: i64,
    ) -> Result<Vec<NotifyClaim>, StoreError> {
        if limit <= 0 {
            return Ok(Vec::new());
        }
        let token = mcptask_core::lease::mint_token();
        let mut tx = self.begin_write().await?;
        let rows = B::fetch_all(
            &mut tx,
            B::SQL.claim_notify,
            claim_args(owner, &token, now, lease_ms, limit),
        )
        .await?;
        let mut claims = notify_heads::<B>(&rows)?;
        Self::attach_events(&mut tx, &mut claims, max_events).await?;
        Self::attach_lagging(&mut tx, &mut claims).await?;
        tx.commit().await.map_err(db_err)?;
        Ok(claims)
    }

    async fn finish_notifications(
        &self,
        results: &[NotifyResult],
        now: i64,
    ) -> Result<Vec<bool>, StoreError> {
        let mut done = vec![false; results.len()];
        if results.is_empty() {
            return Ok(done);
        }
        let mut tx = self.begin_write().await?;
        // Each UPDATE locks its row; take them in id order (see module docs).
        let mut order: Vec<usize> = (0..results.len()).collect();
        order.sort_by(|a, b| results[*a].fence.task_id.cmp(&results[*b].fence.task_id));
        for i in order {
            done[i] = Self::finish_notification(&mut tx, &results[i], now).await?;
        }
        tx.commit().await.map_err(db_err)?;
        Ok(done)
    }

    async fn remote_counts(&self) -> Result<Vec<(TaskStatus, i64)>, StoreError> {
        let mut conn = self.reader.acquire().await.map_err(db_err)?;
        let rows = B::fetch_all(&mut conn, B::SQL.remote_counts, Vec::new()).await?;
        codec::status_counts(
            rows.iter()
                .map(|r| Ok((B::column::<String>(r, "status")?, B::column::<i64>(r, "n")?))),
        )
    }

    async fn notification_backlog(&self) -> Result<i64, StoreError> {
        let mut conn = self.reader.acquire().await.map_err(db_err)?;
        let row = B::fetch_optional(&mut conn, B::SQL.notification_backlog, Vec::new()).await?;
        match row {
            Some(row) => B::column(&row, "n"),
            None => Ok(0),
        }
    }

    async fn claim_redeliveries(
        &self,
        owner: &str,
        now: i64,
        lease_ms: i64,
        limit: i64,
        max_events: i64,
        targets: &[String],
    ) -> Result<Vec<LagClaim>, StoreError> {
        self.claim_lags(owner, now, lease_ms, limit, max_events, targets)
            .await
    }

    async fn finish_redeliveries(
        &self,
        results: &[LagResult],
        now: i64,
    ) -> Result<Vec<bool>, StoreError> {
        self.finish_lags(results, now).await
    }

    async fn dead_letters(
        &self,
        filter: &DeadLetterFilter,
        limit: i64,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        self.list_dead(filter, limit).await
    }

    async fn dead_letter_count(&self) -> Result<i64, StoreError> {
        self.count_dead().await
    }

    async fn redrive_dead_letters(
        &self,
        filter: &DeadLetterFilter,
        now: i64,
        limit: i64,
    ) -> Result<i64, StoreError> {
        self.redrive(filter, now, limit).await
    }

    async fn purge_remote(&self, settled_before: i64, limit: i64) -> Result<u64, StoreError> {
        self.purge_settled(settled_before, limit).await
    }
}

/// Notify claims (without events yet) in due order.
fn notify_heads<B: Backend>(rows: &[B::Row]) -> Result<Vec<NotifyClaim>, StoreError> {
    let mut heads = Vec::with_capacity(rows.len());
    for r in rows {
        let due: Option<i64> = B::column(r, "next_notify_at")?;
        let claim = NotifyClaim {
            fence: Fence::new(
                B::column::<String>(r, "id")?,
                B::column::<String>(r, "notify_owner")?,
                B::column::<String>(r, "notify_token")?,
            ),
            attempts: B::column(r, "notify_attempts")?,
            events: Vec::new(),
            lagging: Vec::new(),
        };
        heads.push((due, claim));
    }
    heads.sort_by(|a, b| (a.0, &a.1.fence.task_id).cmp(&(b.0, &b.1.fence.task_id)));
    Ok(heads.into_iter().map(|(_, c)| c).collect())
}
