//! `ServerTaskStore`: the server side's store flows, once for every backend.
//!
//! Fenced writes carry their fence in the statement itself
//! ([`super::sql::server_fence!`]); a write that changes no row lost its claim
//! and reports `false`/`None`. Answers, cancels and expiries also signal the
//! owner through the backend's push channel where it has one (in the same
//! transaction, so the signal is sent only if the change commits).

use std::collections::HashMap;

use async_trait::async_trait;
use futures::stream::BoxStream;
use mcptask_core::server::{
    AnswerOutcome, CancelOutcome, ExpiredTask, Fence, InputState, NewServerTask, Outcome,
    ServerTaskRecord, ServerTaskState, ServerTaskView, TaskCursor, TaskPage, TaskSignal,
    expired_error, input_conflict, reading,
};
use mcptask_core::store::ServerTaskStore;
use mcptask_core::{StoreError, TaskStatus};
use serde_json::Value;

use super::SqlStore;
use super::backend::{Backend, Feed, args};
use super::sql;
use crate::codec::{self, OutcomeColumns, parse_json, parse_status, to_json_text};
use crate::error::db_err;

/// The outstanding input requests carried by a task read's joined rows.
fn input_requests<B: Backend>(rows: &[B::Row]) -> Result<Vec<(String, Value)>, StoreError> {
    let mut input_requests = Vec::new();
    for row in rows {
        let key: Option<String> = B::column(row, "input_key")?;
        let request: Option<String> = B::column(row, "input_request")?;
        if let (Some(key), Some(request)) = (key, request) {
            input_requests.push((key, parse_json("request", &request)?));
        }
    }
    Ok(input_requests)
}

impl<B: Backend> SqlStore<B> {
    /// A write transaction that starts by touching the fenced task: `None`
    /// (and nothing written) when the claim was lost.
    async fn begin_fenced(
        &self,
        fence: &Fence,
        now: i64,
    ) -> Result<Option<super::WriteTx<B>>, StoreError> {
        let mut tx = self.begin_write().await?;
        let fenced = B::execute(
            &mut tx,
            B::SQL.touch_fenced,
            args![&fence.task_id, &fence.owner, &fence.token, now],
        )
        .await?;
        Ok((fenced == 1).then_some(tx))
    }

    /// Wake the owner of `task_id` in other processes, if the backend can.
    async fn signal(conn: &mut B::Connection, task_id: &str) -> Result<(), StoreError> {
        if let Some(sql) = B::SQL.signal {
            B::fetch_all(conn, sql, args![task_id]).await?;
        }
        Ok(())
    }

    /// The stored state of each of `keys` that exists, in the order asked.
    async fn input_states_on(
        conn: &mut B::Connection,
        task_id: &str,
        keys: &[String],
    ) -> Result<Vec<(String, InputState)>, StoreError> {
        let rows = Self::input_rows_on(conn, task_id, keys).await?;
        Ok(rows.into_iter().map(|(k, _, s)| (k, s)).collect())
    }

    /// Each of `keys` that exists, with its stored request and state, in the
    /// order asked.
    async fn input_rows_on(
        conn: &mut B::Connection,
        task_id: &str,
        keys: &[String],
    ) -> Result<Vec<(String, Value, InputState)>, StoreError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let list: Vec<&str> = keys.iter().map(String::as_str).collect();
        let rows = B::fetch_all(
            conn,
            B::SQL.input_states,
            vec![task_id.into(), super::Arg::TextList(list)],
        )
        .await?;
        let mut found = HashMap::with_capacity(rows.len());
        for row in &rows {
            let key: String = B::column(row, "key")?;
            let request = parse_json("request", &B::column::<String>(row, "request")?)?;
            let state = match B::column::<Option<String>>(row, "response")? {
                Some(text) => InputState::Answered(parse_json("response", &text)?),
                None => InputState::Pending,
            };
            found.insert(key, (request, state));
        }
        Ok(keys
            .iter()
            .filter_map(|k| found.remove(k).map(|(r, s)| (k.clone(), r, s)))
            .collect())
    }
}

#[async_trait]
impl<B: Backend> ServerTaskStore for SqlStore<B> {
    async fn take_slot(&self) -> Result<Option<Box<dyn mcptask_core::slot::HeldSlot>>, StoreError> {
        Ok(B::take_slot(self)
            .await?
            .map(|slot| Box::new(slot) as Box<dyn mcptask_core::slot::HeldSlot>))
    }

    async fn release_slot(
        &self,
        prefix: &str,
        now: i64,
    ) -> Result<mcptask_core::slot::Released, StoreError> {
        SqlStore::release_slot(self, prefix, now).await
    }

    async fn create_tasks(&self, tasks: &[NewServerTask]) -> Result<(), StoreError> {
        if tasks.is_empty() {
            return Ok(());
        }
        // The caller waits for this commit: ahead of background writes.
        let mut tx = self.begin_urgent().await?;
        // A few multi-row statements per batch instead of a round trip per
        // row: chunks of a power of two rows, largest first.
        let mut rest = tasks;
        while !rest.is_empty() {
            let rows = 1usize << rest.len().min(sql::MAX_INSERT_ROWS).ilog2();
            let (chunk, tail) = rest.split_at(rows);
            let mut params = Vec::with_capacity(rows * sql::INSERT_TASK_PARAMS);
            for t in chunk {
                params.extend(args![
                    &t.id,
                    &t.principal,
                    &t.tool,
                    to_json_text(&t.arguments),
                    t.call_inputs.as_ref().map(to_json_text),
                    &t.status_message,
                    t.created_at,
                    t.ttl_ms,
                    t.ttl_ms.map(|ttl| t.created_at.saturating_add(ttl)),
                    t.poll_interval_ms,
                    &t.owner,
                    &t.claim_token,
                    &t.driver,
                    t.driver_state.as_ref().map(to_json_text),
                ]);
            }
            B::execute(&mut tx, sql::insert_tasks(rows), params).await?;
            rest = tail;
        }
        // A gateway's call: the tracker's row of the call commits with its
        // task, so neither exists without the other.
        for change in tasks.iter().filter_map(|t| t.call_row.as_deref()) {
            if !Self::insert_change(&mut tx, change).await? {
                return Err(StoreError::AlreadyTracked(change.record.id.clone()));
            }
        }
        tx.commit().await.map_err(db_err)
    }

    fn create_writers(&self) -> usize {
        B::CREATE_WRITERS
    }

    async fn get_task(&self, task_id: &str) -> Result<Option<ServerTaskView>, StoreError> {
        let mut conn = self.reader.acquire().await.map_err(db_err)?;
        let rows = B::fetch_all(&mut conn, B::SQL.get_task, args![task_id]).await?;
        let Some(first) = rows.first() else {
            return Ok(None);
        };
        Ok(Some(ServerTaskView {
            record: codec::server_task::<B>(first)?,
            input_requests: input_requests::<B>(&rows)?,
        }))
    }

    async fn get_task_state(&self, task_id: &str) -> Result<Option<ServerTaskState>, StoreError> {
        let mut conn = self.reader.acquire().await.map_err(db_err)?;
        let Some(row) = B::fetch_optional(&mut conn, B::SQL.get_task_state, args![task_id]).await?
        else {
            return Ok(None);
        };
        let mut state = codec::server_task_state::<B>(task_id, &row)?;
        if state.status == TaskStatus::InputRequired {
            let rows = B::fetch_all(&mut conn, B::SQL.pending_inputs, args![task_id]).await?;
            state.input_requests = input_requests::<B>(&rows)?;
            // Every question was answered between the two reads: the task
            // is working again (the answer's commit moved it back).
            if state.input_requests.is_empty() {
                state.status = TaskStatus::Working;
            }
        }
        Ok(Some(state))
    }

    async fn set_status_message(
        &self,
        fence: &Fence,
        message: Option<&str>,
        now: i64,
    ) -> Result<bool, StoreError> {
        let mut conn = self.write_conn().await?;
        let changed = B::execute(
            &mut conn,
            B::SQL.set_status_message,
            args![&fence.task_id, &fence.owner, &fence.token, message, now],
        )
        .await?;
        Ok(changed == 1)
    }

    async fn request_inputs(
        &self,
        fence: &Fence,
        requests: &[(String, Value)],
        now: i64,
    ) -> Result<Option<Vec<(String, InputState)>>, StoreError> {
        let Some(mut tx) = self.begin_fenced(fence, now).await? else {
            return Ok(None);
        };
        for (key, request) in requests {
            B::execute(
                &mut tx,
                B::SQL.insert_input_request,
                args![&fence.task_id, key, to_json_text(request), now],
            )
            .await?;
        }
        let keys: Vec<String> = requests.iter().map(|(k, _)| k.clone()).collect();
        let rows = Self::input_rows_on(&mut tx, &fence.task_id, &keys).await?;
        // A key asked before keeps its first request (the insert above did
        // nothing): asking it with another one is the tool's error, and
        // nothing of this call is kept (the transaction is dropped).
        for ((key, asked), (_, stored, _)) in requests.iter().zip(&rows) {
            if let Some(why) = input_conflict(key, stored, asked) {
                return Err(StoreError::Invalid(why));
            }
        }
        let states: Vec<(String, InputState)> = rows.into_iter().map(|(k, _, s)| (k, s)).collect();
        if states.iter().any(|(_, s)| *s == InputState::Pending) {
            B::execute(
                &mut tx,
                B::SQL.mark_input_required,
                args![&fence.task_id, now],
            )
            .await?;
        }
        tx.commit().await.map_err(db_err)?;
        Ok(Some(states))
    }

    async fn input_states(
        &self,
        task_id: &str,
        keys: &[String],
    ) -> Result<Vec<(String, InputState)>, StoreError> {
        let mut conn = self.reader.acquire().await.map_err(db_err)?;
        Self::input_states_on(&mut conn, task_id, keys).await
    }

    async fn answer_inputs(
        &self,
        task_id: &str,
        responses: &[(String, Value)],
        now: i64,
    ) -> Result<AnswerOutcome, StoreError> {
        let mut tx = self.begin_write().await?;
        // The row lock serialises answers to one task, so the "anything still
        // outstanding?" check below cannot race another answer.
        let row = B::fetch_optional(&mut tx, B::SQL.lock_task_status, args![task_id]).await?;
        let Some(row) = row else {
            return Ok(AnswerOutcome::default());
        };
        let status = parse_status(&B::column::<String>(&row, "status")?)?;
        let mut outcome = AnswerOutcome {
            found: true,
            owner: B::column(&row, "owner")?,
            ..Default::default()
        };
        if status.is_terminal() {
            outcome.ignored = responses.iter().map(|(k, _)| k.clone()).collect();
            return Ok(outcome);
        }
        for (key, response) in responses {
            let changed = B::execute(
                &mut tx,
                B::SQL.answer_input,
                args![task_id, key, to_json_text(response), now],
            )
            .await?;
            if changed == 1 {
                outcome.applied.push(key.clone());
            } else {
                outcome.ignored.push(key.clone());
            }
        }
        if !outcome.applied.is_empty() {
            B::execute(&mut tx, B::SQL.resume_after_answers, args![task_id, now]).await?;
            Self::signal(&mut tx, task_id).await?;
        }
        tx.commit().await.map_err(db_err)?;
        Ok(outcome)
    }

    async fn request_cancel(&self, task_id: &str, now: i64) -> Result<CancelOutcome, StoreError> {
        // The client's `tasks/cancel` waits for this commit: ahead of
        // background writes (queued behind a task's status messages it timed
        // out under load, and the task ran on).
        let mut tx = self.begin_urgent().await?;
        let requested =
            B::fetch_optional(&mut tx, B::SQL.request_cancel, args![task_id, now]).await?;
        let outcome = match requested {
            Some(row) => {
                let owner = B::column(&row, "owner")?;
                Self::signal(&mut tx, task_id).await?;
                CancelOutcome::Requested { owner }
            }
            None => match B::fetch_optional(&mut tx, B::SQL.task_exists, args![task_id]).await? {
                Some(_) => CancelOutcome::AlreadyTerminal,
                None => CancelOutcome::NotFound,
            },
        };
        tx.commit().await.map_err(db_err)?;
        Ok(outcome)
    }

    async fn finish(
        &self,
        fence: &Fence,
        outcome: &Outcome,
        now: i64,
        purge_at: Option<i64>,
    ) -> Result<bool, StoreError> {
        let mut tx = self.begin_write().await?;
        let Some(row) = B::fetch_optional(
            &mut tx,
            B::SQL.lock_fenced,
            args![&fence.task_id, &fence.owner, &fence.token],
        )
        .await?
        else {
            return Ok(false);
        };
        // Past its TTL the task already reads `failed`: it settles so, whatever
        // the work came back with.
        let outcome = reading::settles_as(B::column(&row, "expires_at")?, outcome.clone(), now);
        let cols = OutcomeColumns::of(&outcome);
        let changed = B::execute(
            &mut tx,
            B::SQL.finish,
            args![
                &fence.task_id,
                &fence.owner,
                &fence.token,
                cols.status,
                cols.result,
                cols.error,
                cols.message,
                now,
                purge_at,
            ],
        )
        .await?;
        tx.commit().await.map_err(db_err)?;
        Ok(changed == 1)
    }

    async fn begin_rerun(
        &self,
        fence: &Fence,
        now: i64,
        message: &str,
    ) -> Result<Option<i64>, StoreError> {
        let mut conn = self.write_conn().await?;
        let row = B::fetch_optional(
            &mut conn,
            B::SQL.begin_rerun,
            args![&fence.task_id, &fence.owner, &fence.token, now, message],
        )
        .await?;
        row.map(|r| B::column(&r, "attempt")).transpose()
    }

    async fn heartbeat(&self, owner: &str, now: i64, lease_ms: i64) -> Result<(), StoreError> {
        let mut conn = self.write_conn().await?;
        B::execute(
            &mut conn,
            B::SQL.heartbeat,
            args![owner, now, now.saturating_add(lease_ms)],
        )
        .await?;
        Ok(())
    }

    async fn release_owner(&self, owner: &str, now: i64) -> Result<(), StoreError> {
        let mut conn = self.write_conn().await?;
        B::execute(&mut conn, B::SQL.release_owner, args![owner, now - 1]).await?;
        // After the lease lapsed (autocommit): a peer woken by it finds
        // the work claimable.
        Self::signal(&mut conn, mcptask_core::store::OWNER_RELEASED).await?;
        Ok(())
    }

    async fn claim_orphans(
        &self,
        owner: &str,
        now: i64,
        limit: i64,
    ) -> Result<Vec<ServerTaskRecord>, StoreError> {
        let token = mcptask_core::lease::mint_token();
        let mut conn = self.write_conn().await?;
        let rows = B::fetch_all(
            &mut conn,
            B::SQL.claim_orphans,
            args![owner, token.as_str(), now, limit],
        )
        .await?;
        rows.iter().map(codec::server_task::<B>).collect()
    }

    async fn prune_owners(&self, before: i64) -> Result<u64, StoreError> {
        let mut conn = self.write_conn().await?;
        B::execute(&mut conn, B::SQL.prune_owners, args![before]).await
    }

    async fn expire_overdue(
        &self,
        now: i64,
        limit: i64,
        purge_at: i64,
    ) -> Result<Vec<ExpiredTask>, StoreError> {
        let mut tx = self.begin_write().await?;
        let rows = B::fetch_all(
            &mut tx,
            B::SQL.expire_overdue,
            args![
                to_json_text(&expired_error()),
                mcptask_core::server::EXPIRED_MESSAGE,
                now,
                purge_at,
                limit,
            ],
        )
        .await?;
        let mut expired = Vec::with_capacity(rows.len());
        for row in &rows {
            let task = ExpiredTask {
                task_id: B::column(row, "id")?,
                owner: B::column(row, "owner")?,
            };
            Self::signal(&mut tx, &task.task_id).await?;
            expired.push(task);
        }
        tx.commit().await.map_err(db_err)?;
        Ok(expired)
    }

    async fn purge(&self, now: i64, limit: i64) -> Result<u64, StoreError> {
        let mut conn = self.write_conn().await?;
        B::execute(&mut conn, B::SQL.purge, args![now, limit]).await
    }

    async fn signals_since(&self, owner: &str, since: i64) -> Result<Vec<TaskSignal>, StoreError> {
        let mut conn = self.reader.acquire().await.map_err(db_err)?;
        let rows = B::fetch_all(&mut conn, B::SQL.signals_since, args![owner, since]).await?;
        rows.iter()
            .map(|r| {
                Ok(TaskSignal {
                    task_id: B::column(r, "id")?,
                    status: parse_status(&B::column::<String>(r, "status")?)?,
                    cancel_requested: B::column(r, "cancel_requested")?,
                    signaled_at: B::column(r, "signaled_at")?,
                })
            })
            .collect()
    }

    async fn listen_signals(&self) -> Result<Option<BoxStream<'static, String>>, StoreError> {
        B::listen_signals(&self.reader).await
    }

    async fn publish_changes(&self, task_ids: &[String]) -> Result<(), StoreError> {
        B::publish_changes(&self.writer, Feed::ServerTasks, task_ids.to_vec()).await
    }

    async fn listen_changes(&self) -> Result<Option<BoxStream<'static, Vec<String>>>, StoreError> {
        B::listen_changes(&self.reader, Feed::ServerTasks).await
    }

    async fn save_state(&self, fence: &Fence, state: &Value, now: i64) -> Result<bool, StoreError> {
        let mut conn = self.write_conn().await?;
        let changed = B::execute(
            &mut conn,
            B::SQL.save_state,
            args![
                &fence.task_id,
                &fence.owner,
                &fence.token,
                to_json_text(state),
                now
            ],
        )
        .await?;
        Ok(changed == 1)
    }

    async fn withdraw_inputs(
        &self,
        fence: &Fence,
        keys: &[String],
        now: i64,
    ) -> Result<bool, StoreError> {
        let Some(mut tx) = self.begin_fenced(fence, now).await? else {
            return Ok(false);
        };
        if !keys.is_empty() {
            let list: Vec<&str> = keys.iter().map(String::as_str).collect();
            B::execute(
                &mut tx,
                B::SQL.withdraw_inputs,
                vec![fence.task_id.as_str().into(), super::Arg::TextList(list)],
            )
            .await?;
        }
        B::execute(
            &mut tx,
            B::SQL.settle_input_status,
            args![&fence.task_id, now],
        )
        .await?;
        tx.commit().await.map_err(db_err)?;
        Ok(true)
    }

    async fn list_tasks(
        &self,
        principal: Option<&str>,
        live_only: bool,
        cursor: Option<&TaskCursor>,
        limit: i64,
        now: i64,
    ) -> Result<TaskPage, StoreError> {
        let limit = limit.max(1);
        let mut conn = self.reader.acquire().await.map_err(db_err)?;
        // One more than asked: whether a next page exists is known exactly.
        let sql = match principal {
            Some(_) => B::SQL.list_tasks,
            None => B::SQL.list_anonymous_tasks,
        };
        let rows = B::fetch_all(
            &mut conn,
            sql,
            args![
                principal,
                live_only,
                now,
                cursor.map(|c| c.created_at),
                cursor.map(|c| c.id.as_str()),
                limit.saturating_add(1),
            ],
        )
        .await?;
        let mut tasks = rows
            .iter()
            .map(codec::server_task::<B>)
            .collect::<Result<Vec<_>, _>>()?;
        let next = if tasks.len() as i64 > limit {
            tasks.truncate(limit as usize);
            tasks.last().map(TaskCursor::after)
        } else {
            None
        };
        Ok(TaskPage { tasks, next })
    }
}
