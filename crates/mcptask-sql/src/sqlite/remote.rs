//! `RemoteTaskStore` on SQLite.
//!
//! Every write runs in a `BEGIN IMMEDIATE` transaction on the one-connection
//! writer pool: the database write lock is held from the first read to the
//! commit, which is SQLite's row lock. State changes are computed by
//! [`transition`]; this module only reads, fences and writes.

use std::collections::BTreeSet;

use async_trait::async_trait;
use mcptask_core::client::transition::{self, Change};
use mcptask_core::client::{
    AnswerResult, Applied, ClaimedTask, Cursor, Fence, InsertOutcome, ListFilter, NewRemoteTask,
    NotifyClaim, NotifyResult, Observation, Phase, RemoteInput, RemoteTaskRecord, TaskEvent,
    TrackerPolicy,
};
use mcptask_core::store::RemoteTaskStore;
use mcptask_core::{StoreError, TaskStatus};
use serde_json::Value;
use sqlx::sqlite::SqliteArguments;
use sqlx::{QueryBuilder, Row, Sqlite, SqliteConnection, Transaction};

use super::SqliteStore;
use crate::codec::{self, to_json_text};
use crate::db_err;

async fn write_tx(store: &SqliteStore) -> Result<Transaction<'static, Sqlite>, StoreError> {
    store
        .writer
        .begin_with("BEGIN IMMEDIATE")
        .await
        .map_err(db_err)
}

/// The columns a state change may write, as `?2 … ?28` (`?1` is the id).
macro_rules! mutable_columns {
    () => {
        "status = ?2, status_message = ?3, input_requests = ?4, result = ?5,
         result_truncated = ?6, error = ?7, remote_created_at = ?8, ttl_ms = ?9,
         poll_interval_ms = ?10, updated_at = ?11, completed_at = ?12, next_poll_at = ?13,
         last_polled_at = ?14, poll_count = ?15, consecutive_errors = ?16, last_error = ?17,
         cancel_requested_at = ?18, cancel_sent_at = ?19, next_cancel_at = ?20,
         cancel_attempts = ?21, next_update_at = ?22, event_version = ?23,
         delivered_version = ?24, next_notify_at = ?25, notify_attempts = ?26,
         last_notify_error = ?27, dead_letters = ?28"
    };
}

/// A claim-owned write: all mutable columns including the claim, fenced in
/// the statement itself.
const UPDATE_FENCED: &str = concat!(
    "UPDATE remote_tasks SET ",
    mutable_columns!(),
    ", claim_owner = ?29, claim_token = ?30, claim_expires_at = ?31, claim_phase = ?32
     WHERE id = ?1 AND claim_owner = ?33 AND claim_token = ?34"
);

/// An application write (cancel intent, answers): leaves the claim columns
/// alone so a worker's claim in flight stays valid.
const UPDATE_UNCLAIMED: &str = concat!(
    "UPDATE remote_tasks SET ",
    mutable_columns!(),
    " WHERE id = ?1"
);

const INSERT: &str = "INSERT INTO remote_tasks (id, status, status_message, input_requests,
        result, result_truncated, error, remote_created_at, ttl_ms, poll_interval_ms,
        updated_at, completed_at, next_poll_at, last_polled_at, poll_count,
        consecutive_errors, last_error, cancel_requested_at, cancel_sent_at, next_cancel_at,
        cancel_attempts, next_update_at, event_version, delivered_version, next_notify_at,
        notify_attempts, last_notify_error, dead_letters,
        server, server_hash, remote_task_id, principal, conversation, call_id, correlation,
        tool, arguments, created_at)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,
        ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28,
        ?29, ?30, ?31, ?32, ?33, ?34, ?35, ?36, ?37, ?38)
     ON CONFLICT (server, principal, remote_task_id) DO NOTHING
     RETURNING id";

type Query<'q> = sqlx::query::Query<'q, Sqlite, SqliteArguments>;

/// Bind `?1 … ?28`: the id and the mutable columns, in [`mutable_columns`] order.
fn bind_mutable<'q>(q: Query<'q>, r: &RemoteTaskRecord) -> Query<'q> {
    q.bind(&r.id)
        .bind(r.status.as_str())
        .bind(&r.status_message)
        .bind(codec::input_requests_text(&r.input_requests))
        .bind(r.result.as_ref().map(to_json_text))
        .bind(r.result_truncated)
        .bind(r.error.as_ref().map(to_json_text))
        .bind(r.remote_created_at)
        .bind(r.ttl_ms)
        .bind(r.poll_interval_ms)
        .bind(r.updated_at)
        .bind(r.completed_at)
        .bind(r.next_poll_at)
        .bind(r.last_polled_at)
        .bind(r.poll_count)
        .bind(r.consecutive_errors)
        .bind(&r.last_error)
        .bind(r.cancel_requested_at)
        .bind(r.cancel_sent_at)
        .bind(r.next_cancel_at)
        .bind(r.cancel_attempts)
        .bind(r.next_update_at)
        .bind(r.event_version)
        .bind(r.delivered_version)
        .bind(r.next_notify_at)
        .bind(r.notify_attempts)
        .bind(&r.last_notify_error)
        .bind(r.dead_letters)
}

async fn fetch_record(
    conn: &mut SqliteConnection,
    id: &str,
) -> Result<Option<RemoteTaskRecord>, StoreError> {
    let row = sqlx::query("SELECT * FROM remote_tasks WHERE id = ?")
        .bind(id)
        .fetch_optional(&mut *conn)
        .await
        .map_err(db_err)?;
    row.as_ref().map(codec::remote_task).transpose()
}

/// Write a change's record fenced on `fence`; false when the fence failed.
async fn write_fenced(
    conn: &mut SqliteConnection,
    r: &RemoteTaskRecord,
    fence: &Fence,
) -> Result<bool, StoreError> {
    let changed = bind_mutable(sqlx::query(UPDATE_FENCED), r)
        .bind(&r.claim_owner)
        .bind(&r.claim_token)
        .bind(r.claim_expires_at)
        .bind(&r.claim_phase)
        .bind(&fence.owner)
        .bind(&fence.token)
        .execute(&mut *conn)
        .await
        .map_err(db_err)?
        .rows_affected();
    Ok(changed == 1)
}

async fn write_unclaimed(
    conn: &mut SqliteConnection,
    r: &RemoteTaskRecord,
) -> Result<(), StoreError> {
    bind_mutable(sqlx::query(UPDATE_UNCLAIMED), r)
        .execute(&mut *conn)
        .await
        .map_err(db_err)?;
    Ok(())
}

/// Insert what accompanies a change: new input keys (first request wins) and
/// the numbered events.
async fn write_inputs_and_events(
    conn: &mut SqliteConnection,
    change: &Change,
    now: i64,
) -> Result<(), StoreError> {
    let id = &change.record.id;
    for (key, request) in &change.new_inputs {
        sqlx::query(
            "INSERT INTO remote_task_inputs (task_id, key, request, first_seen_at)
             VALUES (?, ?, ?, ?) ON CONFLICT (task_id, key) DO NOTHING",
        )
        .bind(id)
        .bind(key)
        .bind(to_json_text(request))
        .bind(now)
        .execute(&mut *conn)
        .await
        .map_err(db_err)?;
    }
    for (version, kind, data) in &change.events {
        sqlx::query(
            "INSERT INTO remote_task_events (task_id, version, kind, status, occurred_at, data)
             VALUES (?, ?, ?, ?, ?, ?)",
        )
        .bind(id)
        .bind(version)
        .bind(kind.as_str())
        .bind(codec::event_status(data, change.record.status))
        .bind(now)
        .bind(to_json_text(data))
        .execute(&mut *conn)
        .await
        .map_err(db_err)?;
    }
    Ok(())
}

/// Answers stored but not yet acknowledged once `acked` are marked sent: the
/// transition keeps the update phase due for them.
async fn unsent_after(
    conn: &mut SqliteConnection,
    task_id: &str,
    observation: &Observation,
) -> Result<usize, StoreError> {
    let Observation::UpdateAcked { keys } = observation else {
        return Ok(0);
    };
    let n: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM remote_task_inputs
             WHERE task_id = ? AND response IS NOT NULL AND sent_at IS NULL
               AND key NOT IN (SELECT value FROM json_each(?))",
    )
    .bind(task_id)
    .bind(to_json_text(&serde_json::json!(keys)))
    .fetch_one(&mut *conn)
    .await
    .map_err(db_err)?;
    Ok(n.max(0) as usize)
}

/// Mark acknowledged answers as sent.
async fn write_sent(
    conn: &mut SqliteConnection,
    change: &Change,
    now: i64,
) -> Result<(), StoreError> {
    let id = &change.record.id;
    for key in &change.sent_keys {
        sqlx::query(
            "UPDATE remote_task_inputs SET sent_at = ?
             WHERE task_id = ? AND key = ? AND response IS NOT NULL AND sent_at IS NULL",
        )
        .bind(now)
        .bind(id)
        .bind(key)
        .execute(&mut *conn)
        .await
        .map_err(db_err)?;
    }
    Ok(())
}

/// Claim statements, one per phase (the due column differs; Poll counts polls).
/// `+status` keeps SQLite's planner (which has no statistics) off the status
/// index: the claim must walk the partial due-time index in due order.
macro_rules! claim_sql {
    ($due:literal, $extra:literal) => {
        concat!(
            "UPDATE remote_tasks
             SET claim_owner = ?1, claim_token = lower(hex(randomblob(16))),
                 claim_expires_at = ?3, claim_phase = ?4",
            $extra,
            " WHERE id IN (
                 SELECT id FROM remote_tasks
                 WHERE ",
            $due,
            " <= ?2 AND ",
            $due,
            " IS NOT NULL
                   AND +status IN ('working', 'input_required')
                   AND (claim_expires_at IS NULL OR claim_expires_at < ?2)
                 ORDER BY ",
            $due,
            " LIMIT ?5)
             RETURNING *"
        )
    };
}

const CLAIM_POLL: &str = claim_sql!("next_poll_at", ", poll_count = poll_count + 1");
const CLAIM_CANCEL: &str = claim_sql!("next_cancel_at", "");
const CLAIM_UPDATE: &str = claim_sql!("next_update_at", "");

#[async_trait]
impl RemoteTaskStore for SqliteStore {
    async fn insert_remote(
        &self,
        task: &NewRemoteTask,
        policy: &TrackerPolicy,
    ) -> Result<InsertOutcome, StoreError> {
        let change = transition::new_record(task, policy, mcptask_core::ids::random_unit());
        let r = &change.record;
        let mut tx = write_tx(self).await?;
        // Only a conflict on the handle is "already tracked"; a duplicate
        // local id still fails as an error.
        let inserted = bind_mutable(sqlx::query(INSERT), r)
            .bind(&r.server)
            .bind(&r.server_hash)
            .bind(&r.remote_task_id)
            .bind(codec::principal_column(r.principal.as_deref()))
            .bind(&r.conversation)
            .bind(&r.call_id)
            .bind(r.correlation.as_ref().map(to_json_text))
            .bind(&r.tool)
            .bind(r.arguments.as_ref().map(to_json_text))
            .bind(r.created_at)
            .fetch_optional(&mut *tx)
            .await
            .map_err(db_err)?;
        if inserted.is_none() {
            let row = sqlx::query(
                "SELECT * FROM remote_tasks
                 WHERE server = ? AND principal = ? AND remote_task_id = ?",
            )
            .bind(&task.server)
            .bind(codec::principal_column(task.principal.as_deref()))
            .bind(&task.remote_task_id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(db_err)?;
            tx.rollback().await.map_err(db_err)?;
            let existing = row.ok_or_else(|| {
                StoreError::Database("the conflicting remote task vanished; retry".into())
            })?;
            return Ok(InsertOutcome::AlreadyTracked(Box::new(codec::remote_task(
                &existing,
            )?)));
        }
        write_inputs_and_events(&mut tx, &change, r.created_at).await?;
        tx.commit().await.map_err(db_err)?;
        Ok(InsertOutcome::Inserted(Box::new(change.record)))
    }

    async fn get_remote(&self, id: &str) -> Result<Option<RemoteTaskRecord>, StoreError> {
        let mut conn = self.reader.acquire().await.map_err(db_err)?;
        fetch_record(&mut conn, id).await
    }

    async fn remote_inputs(&self, id: &str) -> Result<Vec<RemoteInput>, StoreError> {
        let rows = sqlx::query(
            "SELECT * FROM remote_task_inputs WHERE task_id = ? ORDER BY first_seen_at, key",
        )
        .bind(id)
        .fetch_all(&self.reader)
        .await
        .map_err(db_err)?;
        rows.iter().map(codec::remote_input).collect()
    }

    async fn remote_events(
        &self,
        id: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<TaskEvent>, StoreError> {
        let rows = sqlx::query(
            "SELECT * FROM remote_task_events WHERE task_id = ? AND version > ?
             ORDER BY version LIMIT ?",
        )
        .bind(id)
        .bind(after)
        .bind(limit.max(0))
        .fetch_all(&self.reader)
        .await
        .map_err(db_err)?;
        rows.iter().map(codec::task_event).collect()
    }

    async fn list_remote(
        &self,
        filter: &ListFilter,
        after: Option<&Cursor>,
        limit: i64,
    ) -> Result<Vec<RemoteTaskRecord>, StoreError> {
        // Only the filters asked for appear in the statement, so the planner
        // can pick the matching (…, created_at, id) index and walk it backwards.
        // Without statistics SQLite prefers the status index for the IN list
        // and sorts every live task; the partial index is ordered already.
        let only_active = filter.active_only
            && filter.status.is_none()
            && filter.server.is_none()
            && filter.principal.is_none()
            && filter.conversation.is_none();
        let mut q = QueryBuilder::<Sqlite>::new(if only_active {
            "SELECT * FROM remote_tasks INDEXED BY remote_tasks_active WHERE 1 = 1"
        } else {
            "SELECT * FROM remote_tasks WHERE 1 = 1"
        });
        if let Some(status) = filter.status {
            q.push(" AND status = ").push_bind(status.as_str());
        }
        if filter.active_only {
            q.push(" AND status IN ('working', 'input_required')");
        }
        if let Some(server) = &filter.server {
            q.push(" AND server = ").push_bind(server.clone());
        }
        if let Some(principal) = &filter.principal {
            q.push(" AND principal = ").push_bind(principal.clone());
        }
        if let Some(conversation) = &filter.conversation {
            q.push(" AND conversation = ")
                .push_bind(conversation.clone());
        }
        if let Some(cursor) = after {
            q.push(" AND (created_at, id) < (")
                .push_bind(cursor.created_at)
                .push(", ")
                .push_bind(cursor.id.clone())
                .push(")");
        }
        q.push(" ORDER BY created_at DESC, id DESC LIMIT ")
            .push_bind(limit.max(0));
        let rows = q.build().fetch_all(&self.reader).await.map_err(db_err)?;
        rows.iter().map(codec::remote_task).collect()
    }

    async fn request_remote_cancel(
        &self,
        id: &str,
        now: i64,
    ) -> Result<Option<RemoteTaskRecord>, StoreError> {
        let mut tx = write_tx(self).await?;
        let Some(current) = fetch_record(&mut tx, id).await? else {
            return Ok(None);
        };
        let Some(change) = transition::request_cancel(&current, now) else {
            return Ok(Some(current));
        };
        write_unclaimed(&mut tx, &change.record).await?;
        write_inputs_and_events(&mut tx, &change, now).await?;
        tx.commit().await.map_err(db_err)?;
        Ok(Some(change.record))
    }

    async fn store_answers(
        &self,
        id: &str,
        answers: &[(String, Value)],
        now: i64,
    ) -> Result<Option<AnswerResult>, StoreError> {
        let mut tx = write_tx(self).await?;
        let Some(current) = fetch_record(&mut tx, id).await? else {
            return Ok(None);
        };
        let answered: BTreeSet<String> = sqlx::query_scalar(
            "SELECT key FROM remote_task_inputs WHERE task_id = ? AND response IS NOT NULL",
        )
        .bind(id)
        .fetch_all(&mut *tx)
        .await
        .map_err(db_err)?
        .into_iter()
        .collect();
        let (change, proposed) = transition::store_answers(&current, &answered, answers, now);
        let Some(change) = change else {
            return Ok(Some(proposed));
        };
        let mut result = AnswerResult {
            stored: Vec::new(),
            ignored: proposed.ignored,
        };
        for key in proposed.stored {
            let Some((_, response)) = answers.iter().find(|(k, _)| *k == key) else {
                result.ignored.push(key);
                continue;
            };
            let changed = sqlx::query(
                "UPDATE remote_task_inputs SET response = ?, answered_at = ?
                 WHERE task_id = ? AND key = ? AND response IS NULL",
            )
            .bind(to_json_text(response))
            .bind(now)
            .bind(id)
            .bind(&key)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?
            .rows_affected();
            if changed == 1 {
                result.stored.push(key);
            } else {
                result.ignored.push(key);
            }
        }
        if result.stored.is_empty() {
            return Ok(Some(result));
        }
        write_unclaimed(&mut tx, &change.record).await?;
        write_inputs_and_events(&mut tx, &change, now).await?;
        tx.commit().await.map_err(db_err)?;
        Ok(Some(result))
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
            Phase::Poll => CLAIM_POLL,
            Phase::Cancel => CLAIM_CANCEL,
            Phase::Update => CLAIM_UPDATE,
        };
        let mut tx = write_tx(self).await?;
        let rows = sqlx::query(sql)
            .bind(owner)
            .bind(now)
            .bind(now.saturating_add(lease_ms))
            .bind(phase.as_str())
            .bind(limit)
            .fetch_all(&mut *tx)
            .await
            .map_err(db_err)?;
        let mut claimed = codec::claimed_records(phase, rows.iter().map(codec::remote_task));
        if phase == Phase::Update {
            for task in &mut claimed {
                let rows = sqlx::query(
                    "SELECT task_id, key, response FROM remote_task_inputs
                     WHERE task_id = ? AND response IS NOT NULL AND sent_at IS NULL
                     ORDER BY key",
                )
                .bind(&task.record.id)
                .fetch_all(&mut *tx)
                .await
                .map_err(db_err)?;
                task.answers = rows
                    .iter()
                    .map(|r| codec::answer_pair(r).map(|(_, pair)| pair))
                    .collect::<Result<_, _>>()?;
            }
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
        let mut tx = write_tx(self).await?;
        for (i, entry) in results.iter().enumerate() {
            let current = match fetch_record(&mut tx, &entry.fence.task_id).await {
                Ok(Some(current)) => current,
                Ok(None) => continue,
                Err(StoreError::Corrupt(e)) => {
                    tracing::error!(task = %entry.fence.task_id, "cannot apply to a corrupt remote task: {e}");
                    continue;
                }
                Err(e) => return Err(e),
            };
            if !codec::fence_matches(&current, &entry.fence) {
                continue;
            }
            let unsent = unsent_after(&mut tx, &entry.fence.task_id, &entry.observation).await?;
            let change = transition::observe(
                &current,
                entry.phase,
                &entry.observation,
                now,
                policy,
                entry.jitter,
                unsent,
            );
            if !write_fenced(&mut tx, &change.record, &entry.fence).await? {
                continue;
            }
            write_inputs_and_events(&mut tx, &change, now).await?;
            write_sent(&mut tx, &change, now).await?;
            applied[i] = true;
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
        let mut tx = write_tx(self).await?;
        let rows = sqlx::query(
            "UPDATE remote_tasks
             SET notify_owner = ?1, notify_token = lower(hex(randomblob(16))),
                 notify_expires_at = ?3
             WHERE id IN (
                 SELECT id FROM remote_tasks
                 WHERE next_notify_at <= ?2 AND next_notify_at IS NOT NULL
                   AND event_version > delivered_version
                   AND (notify_expires_at IS NULL OR notify_expires_at < ?2)
                 ORDER BY next_notify_at LIMIT ?4)
             RETURNING id, notify_owner, notify_token, notify_attempts, delivered_version,
                       next_notify_at",
        )
        .bind(owner)
        .bind(now)
        .bind(now.saturating_add(lease_ms))
        .bind(limit)
        .fetch_all(&mut *tx)
        .await
        .map_err(db_err)?;
        let mut claims = notify_heads(&rows)?;
        for (claim, delivered) in &mut claims {
            let rows = sqlx::query(
                "SELECT * FROM remote_task_events WHERE task_id = ? AND version > ?
                 ORDER BY version LIMIT ?",
            )
            .bind(&claim.fence.task_id)
            .bind(*delivered)
            .bind(max_events.max(1))
            .fetch_all(&mut *tx)
            .await
            .map_err(db_err)?;
            claim.events = rows
                .iter()
                .map(codec::task_event)
                .collect::<Result<_, _>>()?;
        }
        tx.commit().await.map_err(db_err)?;
        Ok(claims.into_iter().map(|(c, _)| c).collect())
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
        let mut tx = write_tx(self).await?;
        for (i, entry) in results.iter().enumerate() {
            let f = &entry.fence;
            if entry.released {
                let changed = sqlx::query(
                    "UPDATE remote_tasks
                     SET notify_owner = NULL, notify_token = NULL, notify_expires_at = NULL
                     WHERE id = ? AND notify_owner = ? AND notify_token = ?",
                )
                .bind(&f.task_id)
                .bind(&f.owner)
                .bind(&f.token)
                .execute(&mut *tx)
                .await
                .map_err(db_err)?
                .rows_affected();
                done[i] = changed == 1;
                continue;
            }
            let dead: BTreeSet<i64> = entry.dead_lettered.iter().copied().collect();
            let (error, retry_at) = match &entry.failure {
                Some((error, at)) => (Some(error.as_str()), Some(*at)),
                None => (None, None),
            };
            // SET expressions see the row as it was, under the write lock: a
            // newer event (event_version grown meanwhile) keeps the task due.
            let changed = sqlx::query(
                "UPDATE remote_tasks SET
                    delivered_version = max(delivered_version, min(?1, event_version)),
                    dead_letters = dead_letters + ?2,
                    notify_attempts = CASE
                        WHEN ?3 IS NULL THEN 0
                        WHEN min(?1, event_version) > delivered_version THEN 1
                        ELSE notify_attempts + 1 END,
                    last_notify_error = ?3,
                    next_notify_at = CASE
                        WHEN max(delivered_version, min(?1, event_version)) >= event_version THEN NULL
                        ELSE coalesce(?4, ?5) END,
                    notify_owner = NULL, notify_token = NULL, notify_expires_at = NULL
                 WHERE id = ?6 AND notify_owner = ?7 AND notify_token = ?8",
            )
            .bind(entry.delivered_through)
            .bind(dead.len() as i64)
            .bind(error)
            .bind(retry_at)
            .bind(now)
            .bind(&f.task_id)
            .bind(&f.owner)
            .bind(&f.token)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?
            .rows_affected();
            if changed != 1 {
                continue;
            }
            let dead_json = to_json_text(&Value::from(dead.into_iter().collect::<Vec<_>>()));
            sqlx::query(
                "UPDATE remote_task_events
                 SET delivered_at = ?1,
                     dead_lettered = (version IN (SELECT value FROM json_each(?2)))
                 WHERE task_id = ?3 AND version <= ?4 AND delivered_at IS NULL",
            )
            .bind(now)
            .bind(dead_json)
            .bind(&f.task_id)
            .bind(entry.delivered_through)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
            done[i] = true;
        }
        tx.commit().await.map_err(db_err)?;
        Ok(done)
    }

    async fn remote_counts(&self) -> Result<Vec<(TaskStatus, i64)>, StoreError> {
        let rows = sqlx::query("SELECT status, count(*) AS n FROM remote_tasks GROUP BY status")
            .fetch_all(&self.reader)
            .await
            .map_err(db_err)?;
        codec::status_counts(rows.iter().map(|r| {
            Ok((
                r.try_get::<String, _>("status").map_err(db_err)?,
                r.try_get::<i64, _>("n").map_err(db_err)?,
            ))
        }))
    }

    async fn notification_backlog(&self) -> Result<i64, StoreError> {
        // Pending events always leave next_notify_at set (finishing clears it
        // only when nothing is pending), so the partial notify index covers them.
        sqlx::query_scalar(
            "SELECT coalesce(sum(event_version - delivered_version), 0) FROM remote_tasks
             WHERE next_notify_at IS NOT NULL AND event_version > delivered_version",
        )
        .fetch_one(&self.reader)
        .await
        .map_err(db_err)
    }
}

/// Notify claims (without events yet) in due order, each with the version
/// delivered so far.
fn notify_heads(rows: &[sqlx::sqlite::SqliteRow]) -> Result<Vec<(NotifyClaim, i64)>, StoreError> {
    let mut heads = Vec::with_capacity(rows.len());
    for r in rows {
        let due: Option<i64> = r.try_get("next_notify_at").map_err(db_err)?;
        let claim = NotifyClaim {
            fence: Fence {
                task_id: r.try_get("id").map_err(db_err)?,
                owner: r.try_get("notify_owner").map_err(db_err)?,
                token: r.try_get("notify_token").map_err(db_err)?,
            },
            attempts: r.try_get("notify_attempts").map_err(db_err)?,
            events: Vec::new(),
        };
        let delivered: i64 = r.try_get("delivered_version").map_err(db_err)?;
        heads.push((due, claim, delivered));
    }
    heads.sort_by(|a, b| (a.0, &a.1.fence.task_id).cmp(&(b.0, &b.1.fence.task_id)));
    Ok(heads.into_iter().map(|(_, c, d)| (c, d)).collect())
}
