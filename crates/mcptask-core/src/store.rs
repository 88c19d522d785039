//! Store traits. The SQL backends in `mcptask-sql` implement them; the runtimes
//! only ever talk to these traits, so every backend must pass the same contract
//! suite.
//!
//! Conventions shared by every method:
//! - `now` is epoch milliseconds from the caller's [`Clock`](crate::Clock).
//! - A fenced write returns `Ok(false)` / `Ok(None)` when the fence no longer
//!   matches (the claim was taken over, or the task is terminal): the caller
//!   learns its claim is stale and nothing was changed.
//! - Terminal states are absorbing: no method moves a task out of
//!   `completed`, `failed` or `cancelled`.

use async_trait::async_trait;
use futures::stream::BoxStream;
use serde_json::Value;

use crate::StoreError;
use crate::server::{
    AnswerOutcome, CancelOutcome, ExpiredTask, Fence, InputState, NewServerTask, Outcome,
    ServerTaskRecord, ServerTaskView, TaskCursor, TaskPage, TaskSignal,
};
use crate::slot::{HeldSlot, Released};

/// The push-channel message ([`ServerTaskStore::listen_signals`]) that says
/// an owner lease was released: its holder stopped and left work for the
/// others to recover. Never a task id (those have no space).
pub const OWNER_RELEASED: &str = "owner released";

/// Durable storage for server-side tasks.
#[async_trait]
pub trait ServerTaskStore: Send + Sync + 'static {
    /// Insert tasks in one transaction. Durable (committed) when this returns, so
    /// a `tasks/get` on any replica resolves them.
    async fn create_tasks(&self, tasks: &[NewServerTask]) -> Result<(), StoreError>;

    /// How many [`create_tasks`](Self::create_tasks) transactions the runtime
    /// should run side by side by default: 1 where writes are serialised
    /// anyway (one SQLite write connection), more where the database commits
    /// concurrent transactions with one flush (PostgreSQL).
    fn create_writers(&self) -> usize {
        1
    }

    /// The task and, when `input_required`, its outstanding input requests, read
    /// in one consistent snapshot. Does not filter by principal, TTL or purge time.
    async fn get_task(&self, task_id: &str) -> Result<Option<ServerTaskView>, StoreError>;

    /// What `tasks/get` reads of the task: [`get_task`](Self::get_task)
    /// narrowed to its [`ServerTaskState`](crate::server::ServerTaskState).
    /// Stores read only those columns, and a waiting task's questions only
    /// when it waits; they may come from a read just after the task's, so a
    /// question answered in between is left out, and a task whose every
    /// question was answered in between reads `working` (as it then is).
    /// The default narrows the whole view.
    async fn get_task_state(
        &self,
        task_id: &str,
    ) -> Result<Option<crate::server::ServerTaskState>, StoreError> {
        Ok(self
            .get_task(task_id)
            .await?
            .map(|view| crate::server::ServerTaskState::of(&view)))
    }

    /// Fenced: replace the status message.
    async fn set_status_message(
        &self,
        fence: &Fence,
        message: Option<&str>,
        now: i64,
    ) -> Result<bool, StoreError>;

    /// Fenced: register input requests (keys new to the task become outstanding;
    /// keys seen before keep their stored request) and report each key's state.
    /// The task becomes `input_required` while any key is outstanding.
    /// `None` means the fence failed. A key asked before with a different
    /// request is refused with [`StoreError::Invalid`]
    /// ([`crate::server::input_conflict`]) and nothing is registered.
    async fn request_inputs(
        &self,
        fence: &Fence,
        requests: &[(String, Value)],
        now: i64,
    ) -> Result<Option<Vec<(String, InputState)>>, StoreError>;

    /// Read the state of input keys without registering anything.
    async fn input_states(
        &self,
        task_id: &str,
        keys: &[String],
    ) -> Result<Vec<(String, InputState)>, StoreError>;

    /// Store responses for outstanding keys (each key at most once, even across
    /// replicas racing), then move the task back to `working` if nothing is
    /// outstanding. Signals the owner.
    async fn answer_inputs(
        &self,
        task_id: &str,
        responses: &[(String, Value)],
        now: i64,
    ) -> Result<AnswerOutcome, StoreError>;

    /// Set the durable cancel flag on a live task and signal its owner.
    async fn request_cancel(&self, task_id: &str, now: i64) -> Result<CancelOutcome, StoreError>;

    /// Fenced: settle the task. Terminal tasks stay as they are. `purge_at`
    /// comes from [`crate::server::retention::purge_at`]. A task past its TTL
    /// at `now` settles as expired whatever `outcome` says
    /// ([`crate::server::reading::settles_as`]): it already reads `failed`.
    async fn finish(
        &self,
        fence: &Fence,
        outcome: &Outcome,
        now: i64,
        purge_at: Option<i64>,
    ) -> Result<bool, StoreError>;

    /// Fenced: start another attempt after an interruption (`attempt + 1`),
    /// with `message` as the task's status message (it says why progress
    /// starts again: [`crate::attempt::rerun_message`]). Returns the
    /// new attempt number.
    async fn begin_rerun(
        &self,
        fence: &Fence,
        now: i64,
        message: &str,
    ) -> Result<Option<i64>, StoreError>;

    /// Create or extend the owner lease of a process to `now + lease_ms`.
    async fn heartbeat(&self, owner: &str, now: i64, lease_ms: i64) -> Result<(), StoreError>;

    /// Take the lowest free process slot of this store ([`crate::slot`]):
    /// the proof that every owner lease and claim named after it belongs to
    /// a process that is gone. `None` when every slot is held, or the
    /// backend has none (the default; an in-memory database): a dead
    /// process's work is then recovered when its leases lapse.
    async fn take_slot(&self) -> Result<Option<Box<dyn HeldSlot>>, StoreError> {
        Ok(None)
    }

    /// Let every owner lease and claim whose owner id starts with `prefix`
    /// (a slot's, [`HeldSlot::prefix`]) lapse at `now`, in one transaction,
    /// so recovery and the claim loops take their work at once. Call it only
    /// while holding that slot and before registering this incarnation's own
    /// ids under it: holding the slot proves their holder is gone. Claims
    /// keep their owners and tokens, so whoever claims the work next mints a
    /// new token and a former holder's fenced writes are refused.
    async fn release_slot(&self, prefix: &str, now: i64) -> Result<Released, StoreError> {
        let _ = (prefix, now);
        Ok(Released::default())
    }

    /// Let the owner lease lapse at once (graceful shutdown), so other replicas
    /// recover whatever this process leaves unfinished without waiting; where
    /// the backend has a push channel, [`OWNER_RELEASED`] is sent on it so
    /// they do so now rather than at their next recovery pass.
    async fn release_owner(&self, owner: &str, now: i64) -> Result<(), StoreError>;

    /// Claim up to `limit` live tasks whose owner's lease expired before `now`,
    /// in one statement: each gets `owner` and a fresh claim token.
    async fn claim_orphans(
        &self,
        owner: &str,
        now: i64,
        limit: i64,
    ) -> Result<Vec<ServerTaskRecord>, StoreError>;

    /// Delete owner rows whose lease expired before `before` and that own no
    /// live task.
    async fn prune_owners(&self, before: i64) -> Result<u64, StoreError>;

    /// Fail up to `limit` live tasks whose TTL elapsed (indexed range scan);
    /// they become purgeable at `purge_at`.
    async fn expire_overdue(
        &self,
        now: i64,
        limit: i64,
        purge_at: i64,
    ) -> Result<Vec<ExpiredTask>, StoreError>;

    /// Delete up to `limit` tasks whose retention ended (indexed range scan).
    async fn purge(&self, now: i64, limit: i64) -> Result<u64, StoreError>;

    /// Live or just-settled tasks owned by `owner` whose signal time is at or
    /// after `since`: the periodic backstop for lost wake-ups.
    async fn signals_since(&self, owner: &str, since: i64) -> Result<Vec<TaskSignal>, StoreError>;

    /// Cross-process wake-ups (task ids), if the backend has a push channel
    /// (PostgreSQL `LISTEN/NOTIFY`). `None` when only the backstop applies.
    async fn listen_signals(&self) -> Result<Option<BoxStream<'static, String>>, StoreError>;

    /// Tell every replica's change feed that these tasks changed state
    /// (hints: subscribers re-read the tasks). One call carries a whole batch
    /// so a backend can send it as one message. A no-op where the backend has
    /// no cross-process channel (the feed then stays in-process).
    async fn publish_changes(&self, task_ids: &[String]) -> Result<(), StoreError> {
        let _ = task_ids;
        Ok(())
    }

    /// The change feed of every replica (task ids, in batches as published),
    /// if the backend has a cross-process channel (PostgreSQL `LISTEN/NOTIFY`).
    /// An empty batch means changes may have been lost (the channel
    /// reconnected): subscribers re-read what they watch. `None`: only this
    /// process's own changes are seen.
    async fn listen_changes(&self) -> Result<Option<BoxStream<'static, Vec<String>>>, StoreError> {
        Ok(None)
    }

    /// Fenced: replace the task's driver state (`driver_state`) in one
    /// update. The caller bounds its size (the runtime applies
    /// [`PayloadLimits::max_arguments_bytes`](crate::payload::PayloadLimits)).
    async fn save_state(&self, fence: &Fence, state: &Value, now: i64) -> Result<bool, StoreError>;

    /// Fenced: withdraw input requests the task no longer waits for. The
    /// unanswered rows of `keys` are deleted (answered ones stay: their
    /// answers are part of the task's history); when no unanswered key is
    /// left the task is `working` again. `false` when the fence failed.
    async fn withdraw_inputs(
        &self,
        fence: &Fence,
        keys: &[String],
        now: i64,
    ) -> Result<bool, StoreError>;

    /// The tasks bound to `principal` (`None`: the tasks of anonymous
    /// callers, not every task), newest first (ties by id descending), at
    /// most `limit`, starting after `cursor`; only live ones with `live_only`.
    /// Tasks past their retention (`purge_at <= now`) are left out. A keyset
    /// walk of the `(principal, created_at, id)` index.
    async fn list_tasks(
        &self,
        principal: Option<&str>,
        live_only: bool,
        cursor: Option<&TaskCursor>,
        limit: i64,
        now: i64,
    ) -> Result<TaskPage, StoreError>;
}

/// Durable storage for remote tasks tracked by a gateway.
///
/// Every state change goes through [`crate::client::transition`]: the store
/// locks the row, computes the change with the shared pure function, and
/// writes it back (claim-owned writes fenced by owner and token), together
/// with new input keys and events, in one transaction.
#[async_trait]
pub trait RemoteTaskStore: Send + Sync + 'static {
    /// Record a handle. A handle already tracked for the same server, principal
    /// and remote id keeps its row (returned as `AlreadyTracked`).
    async fn insert_remote(
        &self,
        task: &crate::client::NewRemoteTask,
        policy: &crate::client::TrackerPolicy,
    ) -> Result<crate::client::InsertOutcome, StoreError>;

    /// Tell every replica's tracker that these tracked tasks changed (hints:
    /// their waiters re-read them). One call carries a batch so a backend can
    /// send it as one message; a no-op where the backend has no channel.
    async fn publish_remote_changes(&self, task_ids: &[String]) -> Result<(), StoreError> {
        let _ = task_ids;
        Ok(())
    }

    /// The tracked-task changes every replica publishes (batches of ids; an
    /// empty batch: some may have been lost, re-read what you watch).
    /// `None`: this backend has no channel; waiters must re-read now and then.
    async fn listen_remote_changes(
        &self,
    ) -> Result<Option<BoxStream<'static, Vec<String>>>, StoreError> {
        Ok(None)
    }

    /// A tracked task by local id.
    async fn get_remote(
        &self,
        id: &str,
    ) -> Result<Option<crate::client::RemoteTaskRecord>, StoreError>;

    /// Make a live task's poll due now, because its server pushed a status
    /// change (`notifications/tasks`): the poll workers then read it with
    /// `tasks/get` as usual, so the pushed snapshot is a hint and polling stays
    /// the truth. A poll already due keeps its time.
    ///
    /// While a claim of the task is not yet applied (a call in flight, which
    /// may have read the task before the change), moving the schedule is not
    /// enough: the claim's apply rewrites it from what its call read. The
    /// store then keeps `now` as a poll hint (the earliest one), and that
    /// apply schedules the next poll no later than the hint; a poll claimed
    /// later covers the hint (the claim clears it).
    ///
    /// Returns whether either took effect (the schedule moved, or a hint was
    /// recorded); the caller may then wake the poll workers. A store that does
    /// not implement it keeps its schedule (push then changes nothing, polling
    /// still settles every task).
    ///
    /// ```no_run
    /// # async fn pushed(store: &dyn mcptask_core::store::RemoteTaskStore, now: i64) -> Result<(), mcptask_core::StoreError> {
    /// // A `notifications/tasks` for the task tracked locally as "t1":
    /// if store.expedite_poll("t1", now).await? {
    ///     // wake the poll workers
    /// }
    /// # Ok(()) }
    /// ```
    async fn expedite_poll(&self, id: &str, now: i64) -> Result<bool, StoreError> {
        let _ = (id, now);
        Ok(false)
    }

    /// [`RemoteTaskStore::expedite_poll`] for a call whose work runs in a
    /// gateway's call runtime (drivers `sep1686`, `sync`) only: the hint of
    /// a changed call task, which changes nothing for any other row.
    async fn expedite_local_poll(&self, id: &str, now: i64) -> Result<bool, StoreError> {
        let _ = (id, now);
        Ok(false)
    }

    /// All input keys ever seen for a task, with local answers.
    async fn remote_inputs(&self, id: &str) -> Result<Vec<crate::client::RemoteInput>, StoreError>;

    /// Events with version greater than `after`, oldest first, at most `limit`.
    async fn remote_events(
        &self,
        id: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<crate::client::TaskEvent>, StoreError>;

    /// Newest first, keyset-paginated.
    async fn list_remote(
        &self,
        filter: &crate::client::ListFilter,
        after: Option<&crate::client::Cursor>,
        limit: i64,
    ) -> Result<Vec<crate::client::RemoteTaskRecord>, StoreError>;

    /// Durable cancel intent (idempotent). `None` if the task does not exist.
    async fn request_cancel(
        &self,
        id: &str,
        now: i64,
    ) -> Result<Option<crate::client::RemoteTaskRecord>, StoreError>;

    /// Store answers to outstanding keys (each key once) and schedule their
    /// delivery. `None` if the task does not exist.
    async fn answer_inputs(
        &self,
        id: &str,
        answers: &[(String, Value)],
        now: i64,
    ) -> Result<Option<crate::client::AnswerResult>, StoreError>;

    /// Claim up to `limit` tasks due for `phase` in one statement: each gets
    /// `owner`, a fresh token and `claim_expires_at = now + lease_ms`.
    async fn claim_remote(
        &self,
        phase: crate::client::Phase,
        owner: &str,
        now: i64,
        lease_ms: i64,
        limit: i64,
    ) -> Result<Vec<crate::client::ClaimedTask>, StoreError>;

    /// The earliest time at which a task that no live lease holds at `now`
    /// is due for `phase` (an ordered index scan that stops at the first
    /// row), so an idle worker can wake for it instead of at its next idle
    /// tick. It can be `<= now`: a task due that no claim has taken yet,
    /// such as one whose push hint was applied after its poll. `None`:
    /// nothing is scheduled. Stores without it answer `None` and workers keep
    /// their idle tick.
    async fn next_due(
        &self,
        phase: crate::client::Phase,
        now: i64,
    ) -> Result<Option<i64>, StoreError> {
        let _ = (phase, now);
        Ok(None)
    }

    /// Apply worker results in one transaction; each entry is fenced on its
    /// own. Returns, per entry, whether it was applied.
    async fn apply_remote(
        &self,
        results: &[crate::client::Applied],
        policy: &crate::client::TrackerPolicy,
        now: i64,
    ) -> Result<Vec<bool>, StoreError>;

    /// Claim up to `limit` tasks with undelivered events due now (separate
    /// notify lease), with at most `max_events` pending events each.
    async fn claim_notifications(
        &self,
        owner: &str,
        now: i64,
        lease_ms: i64,
        limit: i64,
        max_events: i64,
    ) -> Result<Vec<crate::client::NotifyClaim>, StoreError>;

    /// Record delivery results (fenced by the notify claim), in one transaction.
    async fn finish_notifications(
        &self,
        results: &[crate::client::NotifyResult],
        now: i64,
    ) -> Result<Vec<bool>, StoreError>;

    /// Number of tracked tasks per status (for metrics).
    async fn remote_counts(&self) -> Result<Vec<(crate::TaskStatus, i64)>, StoreError>;

    /// Events recorded but not yet delivered (for metrics).
    async fn notification_backlog(&self) -> Result<i64, StoreError>;

    /// Claim up to `limit` `(task, target)` lag rows due now for one of
    /// `targets` (see [`crate::client::delivery`]), with at most `max_events`
    /// pending events each.
    async fn claim_redeliveries(
        &self,
        owner: &str,
        now: i64,
        lease_ms: i64,
        limit: i64,
        max_events: i64,
        targets: &[String],
    ) -> Result<Vec<crate::client::delivery::LagClaim>, StoreError>;

    /// Record redelivery results (each fenced by its lag claim), in one
    /// transaction; a lag row that caught up with its task is removed.
    async fn finish_redeliveries(
        &self,
        results: &[crate::client::delivery::LagResult],
        now: i64,
    ) -> Result<Vec<bool>, StoreError>;

    /// Dead letters matching `filter`, newest first, at most `limit`.
    async fn dead_letters(
        &self,
        filter: &crate::client::delivery::DeadLetterFilter,
        limit: i64,
    ) -> Result<Vec<crate::client::delivery::DeadLetter>, StoreError>;

    /// How many dead letters exist.
    async fn dead_letter_count(&self) -> Result<i64, StoreError>;

    /// Hand the dead letters matching `filter` (at most `limit` `(task,
    /// target)` groups) back to delivery, with a fresh retry budget from
    /// `now`. Returns how many dead letters were redriven.
    async fn redrive_dead_letters(
        &self,
        filter: &crate::client::delivery::DeadLetterFilter,
        now: i64,
        limit: i64,
    ) -> Result<i64, StoreError>;

    /// Delete up to `limit` settled tasks that settled at or before
    /// `settled_before`, with their events, inputs and deliveries, oldest
    /// first. Returns how many tasks were deleted.
    async fn purge_remote(&self, settled_before: i64, limit: i64) -> Result<u64, StoreError>;
}

/// Durable storage for the OAuth tokens of upstream servers, one row per
/// server, shared by every replica on the store. The credentials are sealed
/// (encrypted) before they reach the store; the store never sees a token.
///
/// Refreshing is coordinated by a short lease on the row: the replica that
/// wins [`try_lease_refresh`](Self::try_lease_refresh) refreshes and saves
/// (which releases the lease); the others wait and read the fresh token.
#[async_trait]
pub trait OAuthTokenStore: Send + Sync + 'static {
    /// The token row of `server`, if any.
    async fn load_token(
        &self,
        server: &str,
    ) -> Result<Option<crate::oauth::StoredToken>, StoreError>;

    /// Insert or replace the row of `token.server`: bumps its version, clears
    /// the refresh lease and the last error. Returns the new version.
    async fn save_token(&self, token: &crate::oauth::NewToken, now: i64)
    -> Result<i64, StoreError>;

    /// Delete the row of `server`; whether there was one.
    async fn delete_token(&self, server: &str) -> Result<bool, StoreError>;

    /// Take the refresh lease of `server`'s row for `holder` until
    /// `until`, if it is free at `now` (see
    /// [`lease_available`](crate::oauth::lease_available)). `false` when
    /// another replica holds it or there is no row.
    async fn try_lease_refresh(
        &self,
        server: &str,
        holder: &str,
        now: i64,
        until: i64,
    ) -> Result<bool, StoreError>;

    /// Release `holder`'s lease without a refresh (a peer's fresh token was
    /// found once the lease was won). Nothing else of the row changes.
    async fn release_refresh(&self, server: &str, holder: &str) -> Result<(), StoreError>;

    /// Record why a refresh failed and release `holder`'s lease (the row
    /// keeps its token).
    async fn fail_refresh(
        &self,
        server: &str,
        holder: &str,
        error: &str,
        now: i64,
    ) -> Result<(), StoreError>;
}
