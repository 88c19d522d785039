//! `ServerTaskStore` on SQLite.

use async_trait::async_trait;
use futures::stream::BoxStream;
use mcptask_core::StoreError;
use mcptask_core::server::{
    AnswerOutcome, CancelOutcome, ExpiredTask, Fence, InputState, NewServerTask, Outcome,
    ServerTaskRecord, ServerTaskView, TaskSignal, expired_error,
};
use mcptask_core::store::ServerTaskStore;
use serde_json::Value;
use sqlx::{Row, Sqlite, Transaction};

use super::SqliteStore;
use crate::codec::{self, OutcomeColumns, parse_json, parse_status, to_json_text};
use crate::db_err;

impl SqliteStore {
    async fn write_tx(&self) -> Result<Transaction<'static, Sqlite>, StoreError> {
        // IMMEDIATE takes the write lock up front, so a transaction never has
        // to upgrade a read lock (the cause of SQLITE_BUSY deadlocks between processes).
        self.writer
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(db_err)
    }
}

/// Lock-and-check the fence inside a write transaction. SQLite holds the
/// database write lock for the whole transaction, so the check stays true
/// until commit.
async fn check_fence(
    tx: &mut Transaction<'static, Sqlite>,
    fence: &Fence,
    now: i64,
) -> Result<bool, StoreError> {
    let changed = sqlx::query(
        "UPDATE server_tasks SET updated_at = max(updated_at, ?)
         WHERE id = ? AND owner = ? AND claim_token = ? AND status IN ('working', 'input_required')",
    )
    .bind(now)
    .bind(&fence.task_id)
    .bind(&fence.owner)
    .bind(&fence.token)
    .execute(&mut **tx)
    .await
    .map_err(db_err)?
    .rows_affected();
    Ok(changed == 1)
}

async fn states_of(
    tx: &mut sqlx::SqliteConnection,
    task_id: &str,
    keys: &[String],
) -> Result<Vec<(String, InputState)>, StoreError> {
    let mut out = Vec::with_capacity(keys.len());
    for key in keys {
        let row =
            sqlx::query("SELECT response FROM server_task_inputs WHERE task_id = ? AND key = ?")
                .bind(task_id)
                .bind(key)
                .fetch_optional(&mut *tx)
                .await
                .map_err(db_err)?;
        let state = match row {
            Some(row) => match row
                .try_get::<Option<String>, _>("response")
                .map_err(db_err)?
            {
                Some(text) => InputState::Answered(parse_json("response", &text)?),
                None => InputState::Pending,
            },
            None => continue,
        };
        out.push((key.clone(), state));
    }
    Ok(out)
}

#[async_trait]
impl ServerTaskStore for SqliteStore {
    async fn create_tasks(&self, tasks: &[NewServerTask]) -> Result<(), StoreError> {
        if tasks.is_empty() {
            return Ok(());
        }
        let mut tx = self.write_tx().await?;
        for t in tasks {
            sqlx::query(
                "INSERT INTO server_tasks (id, principal, tool, arguments, call_inputs, status,
                    status_message, created_at, updated_at, ttl_ms, expires_at, poll_interval_ms,
                    owner, claim_token)
                 VALUES (?, ?, ?, ?, ?, 'working', ?, ?, ?, ?, ?, ?, ?, ?)",
            )
            .bind(&t.id)
            .bind(&t.principal)
            .bind(&t.tool)
            .bind(to_json_text(&t.arguments))
            .bind(t.call_inputs.as_ref().map(to_json_text))
            .bind(&t.status_message)
            .bind(t.created_at)
            .bind(t.created_at)
            .bind(t.ttl_ms)
            .bind(t.ttl_ms.map(|ttl| t.created_at.saturating_add(ttl)))
            .bind(t.poll_interval_ms)
            .bind(&t.owner)
            .bind(&t.claim_token)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        }
        tx.commit().await.map_err(db_err)
    }

    async fn get_task(&self, task_id: &str) -> Result<Option<ServerTaskView>, StoreError> {
        // One statement, one snapshot: the status and the outstanding inputs
        // always agree.
        let rows = sqlx::query(
            "SELECT t.*, i.key AS input_key, i.request AS input_request
             FROM server_tasks t
             LEFT JOIN server_task_inputs i
               ON i.task_id = t.id AND i.response IS NULL AND t.status = 'input_required'
             WHERE t.id = ?
             ORDER BY i.key",
        )
        .bind(task_id)
        .fetch_all(&self.reader)
        .await
        .map_err(db_err)?;
        let Some(first) = rows.first() else {
            return Ok(None);
        };
        let record = codec::server_task(first)?;
        let mut input_requests = Vec::new();
        for row in &rows {
            let key: Option<String> = row.try_get("input_key").map_err(db_err)?;
            let request: Option<String> = row.try_get("input_request").map_err(db_err)?;
            if let (Some(key), Some(request)) = (key, request) {
                input_requests.push((key, parse_json("request", &request)?));
            }
        }
        Ok(Some(ServerTaskView {
            record,
            input_requests,
        }))
    }

    async fn set_status_message(
        &self,
        fence: &Fence,
        message: Option<&str>,
        now: i64,
    ) -> Result<bool, StoreError> {
        let changed = sqlx::query(
            "UPDATE server_tasks SET status_message = ?, updated_at = ?
             WHERE id = ? AND owner = ? AND claim_token = ? AND status IN ('working', 'input_required')",
        )
        .bind(message)
        .bind(now)
        .bind(&fence.task_id)
        .bind(&fence.owner)
        .bind(&fence.token)
        .execute(&self.writer)
        .await
        .map_err(db_err)?
        .rows_affected();
        Ok(changed == 1)
    }

    async fn request_inputs(
        &self,
        fence: &Fence,
        requests: &[(String, Value)],
        now: i64,
    ) -> Result<Option<Vec<(String, InputState)>>, StoreError> {
        let mut tx = self.write_tx().await?;
        if !check_fence(&mut tx, fence, now).await? {
            return Ok(None);
        }
        for (key, request) in requests {
            sqlx::query(
                "INSERT INTO server_task_inputs (task_id, key, request, requested_at)
                 VALUES (?, ?, ?, ?) ON CONFLICT (task_id, key) DO NOTHING",
            )
            .bind(&fence.task_id)
            .bind(key)
            .bind(to_json_text(request))
            .bind(now)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        }
        let keys: Vec<String> = requests.iter().map(|(k, _)| k.clone()).collect();
        let states = states_of(&mut tx, &fence.task_id, &keys).await?;
        if states.iter().any(|(_, s)| *s == InputState::Pending) {
            sqlx::query(
                "UPDATE server_tasks SET status = 'input_required', updated_at = ? WHERE id = ?",
            )
            .bind(now)
            .bind(&fence.task_id)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
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
        states_of(&mut conn, task_id, keys).await
    }

    async fn answer_inputs(
        &self,
        task_id: &str,
        responses: &[(String, Value)],
        now: i64,
    ) -> Result<AnswerOutcome, StoreError> {
        let mut tx = self.write_tx().await?;
        let row = sqlx::query("SELECT status, owner FROM server_tasks WHERE id = ?")
            .bind(task_id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(db_err)?;
        let Some(row) = row else {
            return Ok(AnswerOutcome::default());
        };
        let status = parse_status(&row.try_get::<String, _>("status").map_err(db_err)?)?;
        let owner: Option<String> = row.try_get("owner").map_err(db_err)?;
        let mut outcome = AnswerOutcome {
            found: true,
            owner,
            ..Default::default()
        };
        if status.is_terminal() {
            outcome.ignored = responses.iter().map(|(k, _)| k.clone()).collect();
            return Ok(outcome);
        }
        for (key, response) in responses {
            let changed = sqlx::query(
                "UPDATE server_task_inputs SET response = ?, answered_at = ?
                 WHERE task_id = ? AND key = ? AND response IS NULL",
            )
            .bind(to_json_text(response))
            .bind(now)
            .bind(task_id)
            .bind(key)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?
            .rows_affected();
            if changed == 1 {
                outcome.applied.push(key.clone());
            } else {
                outcome.ignored.push(key.clone());
            }
        }
        if !outcome.applied.is_empty() {
            sqlx::query(
                "UPDATE server_tasks SET
                    status = CASE WHEN EXISTS (SELECT 1 FROM server_task_inputs
                                               WHERE task_id = ?1 AND response IS NULL)
                                  THEN 'input_required' ELSE 'working' END,
                    updated_at = ?2, signaled_at = ?2
                 WHERE id = ?1 AND status IN ('working', 'input_required')",
            )
            .bind(task_id)
            .bind(now)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        }
        tx.commit().await.map_err(db_err)?;
        Ok(outcome)
    }

    async fn request_cancel(&self, task_id: &str, now: i64) -> Result<CancelOutcome, StoreError> {
        let row = sqlx::query(
            "UPDATE server_tasks SET cancel_requested = 1, signaled_at = ?1, updated_at = ?1
             WHERE id = ?2 AND status IN ('working', 'input_required')
             RETURNING owner",
        )
        .bind(now)
        .bind(task_id)
        .fetch_optional(&self.writer)
        .await
        .map_err(db_err)?;
        if let Some(row) = row {
            return Ok(CancelOutcome::Requested {
                owner: row.try_get("owner").map_err(db_err)?,
            });
        }
        let exists = sqlx::query("SELECT 1 FROM server_tasks WHERE id = ?")
            .bind(task_id)
            .fetch_optional(&self.writer)
            .await
            .map_err(db_err)?
            .is_some();
        Ok(if exists {
            CancelOutcome::AlreadyTerminal
        } else {
            CancelOutcome::NotFound
        })
    }

    async fn finish(
        &self,
        fence: &Fence,
        outcome: &Outcome,
        now: i64,
        purge_at: Option<i64>,
    ) -> Result<bool, StoreError> {
        let cols = OutcomeColumns::of(outcome);
        let changed = sqlx::query(
            "UPDATE server_tasks SET status = ?1, result = ?2, error = ?3, status_message = ?4,
                updated_at = ?5,
                purge_at = ?6
             WHERE id = ?7 AND owner = ?8 AND claim_token = ?9
               AND status IN ('working', 'input_required')",
        )
        .bind(cols.status)
        .bind(cols.result)
        .bind(cols.error)
        .bind(cols.message)
        .bind(now)
        .bind(purge_at)
        .bind(&fence.task_id)
        .bind(&fence.owner)
        .bind(&fence.token)
        .execute(&self.writer)
        .await
        .map_err(db_err)?
        .rows_affected();
        Ok(changed == 1)
    }

    async fn begin_rerun(&self, fence: &Fence, now: i64) -> Result<Option<i64>, StoreError> {
        let row = sqlx::query(
            "UPDATE server_tasks SET attempt = attempt + 1, updated_at = ?
             WHERE id = ? AND owner = ? AND claim_token = ? AND status IN ('working', 'input_required')
             RETURNING attempt",
        )
        .bind(now)
        .bind(&fence.task_id)
        .bind(&fence.owner)
        .bind(&fence.token)
        .fetch_optional(&self.writer)
        .await
        .map_err(db_err)?;
        row.map(|r| r.try_get::<i64, _>("attempt").map_err(db_err))
            .transpose()
    }

    async fn heartbeat(&self, owner: &str, now: i64, lease_ms: i64) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO server_owners (owner_id, started_at, heartbeat_at, lease_expires_at)
             VALUES (?1, ?2, ?2, ?3)
             ON CONFLICT (owner_id) DO UPDATE SET heartbeat_at = ?2, lease_expires_at = ?3",
        )
        .bind(owner)
        .bind(now)
        .bind(now.saturating_add(lease_ms))
        .execute(&self.writer)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn release_owner(&self, owner: &str, now: i64) -> Result<(), StoreError> {
        sqlx::query("UPDATE server_owners SET lease_expires_at = ? WHERE owner_id = ?")
            .bind(now - 1)
            .bind(owner)
            .execute(&self.writer)
            .await
            .map_err(db_err)?;
        Ok(())
    }

    async fn claim_orphans(
        &self,
        owner: &str,
        now: i64,
        limit: i64,
    ) -> Result<Vec<ServerTaskRecord>, StoreError> {
        // Walk the (few) expired owners, then their live tasks via the partial
        // owner index: never a scan of all tasks.
        let rows = sqlx::query(
            "UPDATE server_tasks
             SET owner = ?1, claim_token = lower(hex(randomblob(16))), updated_at = ?2
             WHERE id IN (
                 SELECT t.id FROM server_owners o
                 JOIN server_tasks t ON t.owner = o.owner_id
                 WHERE o.lease_expires_at < ?2 AND o.owner_id <> ?1
                   AND t.status IN ('working', 'input_required')
                 LIMIT ?3)
             RETURNING *",
        )
        .bind(owner)
        .bind(now)
        .bind(limit)
        .fetch_all(&self.writer)
        .await
        .map_err(db_err)?;
        rows.iter().map(codec::server_task).collect()
    }

    async fn prune_owners(&self, before: i64) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "DELETE FROM server_owners
             WHERE lease_expires_at < ?
               AND NOT EXISTS (SELECT 1 FROM server_tasks t
                               WHERE t.owner = server_owners.owner_id
                                 AND t.status IN ('working', 'input_required'))",
        )
        .bind(before)
        .execute(&self.writer)
        .await
        .map_err(db_err)?;
        Ok(done.rows_affected())
    }

    async fn expire_overdue(
        &self,
        now: i64,
        limit: i64,
        purge_at: i64,
    ) -> Result<Vec<ExpiredTask>, StoreError> {
        let rows = sqlx::query(
            "UPDATE server_tasks
             SET status = 'failed', error = ?1, status_message = ?2,
                 updated_at = ?3, signaled_at = ?3, purge_at = ?4
             WHERE id IN (
                 SELECT id FROM server_tasks
                 WHERE expires_at <= ?3 AND expires_at IS NOT NULL
                   AND status IN ('working', 'input_required')
                 ORDER BY expires_at LIMIT ?5)
             RETURNING id, owner",
        )
        .bind(to_json_text(&expired_error()))
        .bind(mcptask_core::server::EXPIRED_MESSAGE)
        .bind(now)
        .bind(purge_at)
        .bind(limit)
        .fetch_all(&self.writer)
        .await
        .map_err(db_err)?;
        rows.iter()
            .map(|r| {
                Ok(ExpiredTask {
                    task_id: r.try_get("id").map_err(db_err)?,
                    owner: r.try_get("owner").map_err(db_err)?,
                })
            })
            .collect()
    }

    async fn purge(&self, now: i64, limit: i64) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "DELETE FROM server_tasks WHERE id IN (
                 SELECT id FROM server_tasks WHERE purge_at <= ? AND purge_at IS NOT NULL
                 ORDER BY purge_at LIMIT ?)",
        )
        .bind(now)
        .bind(limit)
        .execute(&self.writer)
        .await
        .map_err(db_err)?;
        Ok(done.rows_affected())
    }

    async fn signals_since(&self, owner: &str, since: i64) -> Result<Vec<TaskSignal>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, status, cancel_requested, signaled_at FROM server_tasks
             WHERE owner = ? AND signaled_at >= ?",
        )
        .bind(owner)
        .bind(since)
        .fetch_all(&self.reader)
        .await
        .map_err(db_err)?;
        rows.iter()
            .map(|r| {
                Ok(TaskSignal {
                    task_id: r.try_get("id").map_err(db_err)?,
                    status: parse_status(&r.try_get::<String, _>("status").map_err(db_err)?)?,
                    cancel_requested: r.try_get("cancel_requested").map_err(db_err)?,
                    signaled_at: r.try_get("signaled_at").map_err(db_err)?,
                })
            })
            .collect()
    }

    async fn listen_signals(&self) -> Result<Option<BoxStream<'static, String>>, StoreError> {
        Ok(None)
    }
}
