//! Every SQL statement the stores run, by name, written once.
//!
//! The statements are portable SQL with `$N` parameters (SQLite reads `$N` as
//! the N-th parameter too). Where the dialects truly differ, a statement
//! takes a *fragment* from its backend: row locking (`FOR UPDATE`, `SKIP
//! LOCKED`), how a list parameter is tested (`= ANY($n)` against an array, or
//! `IN (SELECT value FROM json_each($n))`), the names of the two-argument
//! `greatest`/`least`, a planner hint, and the push-signal statement. Each
//! backend's `statements.rs` names its fragments and instantiates
//! `statements!` once, so a reader finds every statement here and every
//! dialect difference there.
//!
//! Two rules are defined here and nowhere else:
//! - `live!`: the live-status predicate (`mcptask_core::lease::LIVE_STATUSES`);
//! - `fenced_by!`: the fenced-update predicate (`mcptask_core::lease::Fence`):
//!   a claim-owned write changes a row only while it names the claim.

/// The statements of one backend.
#[derive(Debug)]
pub struct Statements {
    // --- server tasks -------------------------------------------------------
    /// A task and its outstanding input requests, in one snapshot.
    pub get_task: &'static str,
    /// `get_task`'s task row narrowed to what `tasks/get` reads.
    pub get_task_state: &'static str,
    /// A task's unanswered input requests, by key.
    pub pending_inputs: &'static str,
    /// Fenced: replace the status message.
    pub set_status_message: &'static str,
    /// Fenced: check the claim and lock the row until commit.
    pub touch_fenced: &'static str,
    /// Register an input key (the first request for a key wins).
    pub insert_input_request: &'static str,
    /// The stored state of a list of input keys.
    pub input_states: &'static str,
    /// Move a task to `input_required`.
    pub mark_input_required: &'static str,
    /// Read and lock a task's status and owner.
    pub lock_task_status: &'static str,
    /// Store the answer to an outstanding key (at most once).
    pub answer_input: &'static str,
    /// Back to `working` once no key is outstanding; signals the owner.
    pub resume_after_answers: &'static str,
    /// Set the durable cancel flag on a live task.
    pub request_cancel: &'static str,
    /// Whether a task id exists at all.
    pub task_exists: &'static str,
    /// Fenced: lock a claimed task's row and read its deadline.
    pub lock_fenced: &'static str,
    /// Fenced: settle a task with its outcome and purge time.
    pub finish: &'static str,
    /// Fenced: start another attempt after an interruption.
    pub begin_rerun: &'static str,
    /// Create or extend a process's owner lease.
    pub heartbeat: &'static str,
    /// Let an owner lease lapse at once.
    pub release_owner: &'static str,
    /// Claim live tasks whose owner's lease expired.
    pub claim_orphans: &'static str,
    /// Delete expired owner rows that own no live task.
    pub prune_owners: &'static str,
    /// Let the owner leases of a slot's earlier incarnations lapse (`$1`
    /// the slot's owner-id prefix, `$2` the lapse time).
    pub release_slot_owners: &'static str,
    /// Let the work claims a slot's earlier incarnations hold on live
    /// tracked tasks lapse (`$1` prefix, `$2` lapse time).
    pub release_slot_claims: &'static str,
    /// Let the notify claims a slot's earlier incarnations hold lapse
    /// (`$1` prefix, `$2` lapse time).
    pub release_slot_notify_claims: &'static str,
    /// Fail live tasks whose TTL elapsed.
    pub expire_overdue: &'static str,
    /// Delete tasks whose retention ended.
    pub purge: &'static str,
    /// Tasks of an owner signalled since a time (the backstop re-check).
    pub signals_since: &'static str,
    /// Wake the owner of task `$1` in other processes; `None` where the
    /// backend has no push channel.
    pub signal: Option<&'static str>,
    /// Fenced: replace the driver state.
    pub save_state: &'static str,
    /// Delete the unanswered input rows of a list of keys.
    pub withdraw_inputs: &'static str,
    /// `input_required` while a key is unanswered, else `working` (no signal:
    /// the owner itself withdrew).
    pub settle_input_status: &'static str,
    /// A principal's tasks, newest first, after a keyset cursor.
    pub list_tasks: &'static str,
    /// The anonymous callers' tasks (`principal IS NULL`), likewise; `$1`
    /// must be NULL.
    pub list_anonymous_tasks: &'static str,
    // --- remote tasks -------------------------------------------------------
    /// Record a remote task handle unless the handle is already tracked.
    pub insert_remote: &'static str,
    /// A tracked remote task by local id.
    pub get_remote: &'static str,
    /// Read and lock one tracked task.
    pub lock_remote: &'static str,
    /// Read and lock a batch of tracked tasks, in id order.
    pub lock_remotes: &'static str,
    /// A tracked task by server, principal and remote id.
    pub find_handle: &'static str,
    /// Every input key of a tracked task.
    pub remote_inputs: &'static str,
    /// Events of a tracked task after a version.
    pub remote_events: &'static str,
    /// Fenced: write a worker's state change, claim columns included; the
    /// next poll comes no later than a pending poll hint, which it clears.
    pub update_remote_fenced: &'static str,
    /// Fenced, set-based: `update_remote_fenced` for a whole batch in one
    /// statement (`$1` a JSON array of `remote_fenced_rows!` objects),
    /// returning the ids it wrote. `None` where one statement per row costs
    /// no round trip (SQLite runs in-process).
    pub update_remotes_fenced: Option<&'static str>,
    /// Write an application's state change, leaving the claim alone.
    pub update_remote_unclaimed: &'static str,
    /// Register an input key seen in a snapshot (first request wins).
    pub insert_remote_input: &'static str,
    /// Append a numbered event to the outbox.
    pub insert_event: &'static str,
    /// Keys of a tracked task that have a local answer.
    pub answered_keys: &'static str,
    /// Store a local answer for an outstanding key (at most once).
    pub store_answer: &'static str,
    /// Answers not yet sent, other than a list of acknowledged keys.
    pub count_unsent_except: &'static str,
    /// Mark acknowledged answers as sent.
    pub mark_sent: &'static str,
    /// Keys whose answers the server acknowledged, with when.
    pub acked_inputs: &'static str,
    /// Clear a key's answer so it can be given again (request replaced when given).
    pub reopen_input: &'static str,
    /// A live task's poll made due now (its server pushed a change); a poll
    /// due sooner keeps its time. Under a claim not yet applied, the time is
    /// also kept as the poll hint, for that claim's apply.
    pub expedite_poll: &'static str,
    /// `expedite_poll` for a call run in the call runtime only (driver `$3`
    /// or `$4`): a change of any other call task's row changes nothing.
    pub expedite_local_poll: &'static str,
    /// Claim tasks due for `tasks/get` (clearing their poll hints).
    pub claim_poll: &'static str,
    /// Claim tasks due for `tasks/cancel`.
    pub claim_cancel: &'static str,
    /// Claim tasks due for `tasks/update`.
    pub claim_update: &'static str,
    /// The earliest `next_poll_at` of a task no lease holds at `$1` (as `due`).
    pub next_poll_due: &'static str,
    /// The earliest `next_cancel_at` of a task no lease holds at `$1` (as `due`).
    pub next_cancel_due: &'static str,
    /// The earliest `next_update_at` of a task no lease holds at `$1` (as `due`).
    pub next_update_due: &'static str,
    /// The answers still to send for a batch of claimed tasks.
    pub unsent_answers: &'static str,
    /// Claim tasks with undelivered events (separate notify lease).
    pub claim_notify: &'static str,
    /// The next undelivered events of a batch of notify claims.
    pub claimed_events: &'static str,
    /// Fenced: give a notify claim back without counting an attempt.
    pub release_notify: &'static str,
    /// Fenced: record a delivery result and reschedule.
    pub finish_notify: &'static str,
    /// Mark events delivered or dead-lettered.
    pub mark_events_delivered: &'static str,
    /// The base of a filtered, keyset-paginated listing.
    pub list_remote: &'static str,
    /// `list_remote` when the only filter is "live tasks".
    pub list_live_remote: &'static str,
    /// A listing's condition "the result says the tool failed" (`isError`
    /// true; false, never NULL, otherwise): `mcptask_core::outcome`'s
    /// `tool_error` in SQL.
    pub tool_error: &'static str,
    /// Tracked tasks per status.
    pub remote_counts: &'static str,
    /// Events recorded but not yet delivered.
    pub notification_backlog: &'static str,
    /// The targets behind the outbox of a batch of tasks.
    pub lagging_targets: &'static str,
    /// Hand a target's delivery from a version on to a lag row, unless one
    /// exists (it already covers every version from its own on).
    pub insert_lag: &'static str,
    /// Record an event a target gave up on.
    pub insert_dead_letter: &'static str,
    /// Count dead letters on their task.
    pub add_dead_letters: &'static str,
    /// Claim lag rows due for redelivery to the given targets.
    pub claim_lag: &'static str,
    /// The pending events of the lag rows of one claim.
    pub lag_events: &'static str,
    /// Fenced: record a redelivery attempt and reschedule.
    pub finish_lag: &'static str,
    /// Fenced: give a lag claim back untouched.
    pub release_lag: &'static str,
    /// Drop a lag row that has caught up with its task's outbox.
    pub drop_caught_up_lag: &'static str,
    /// The base of a filtered dead-letter listing.
    pub list_dead_letters: &'static str,
    /// How many dead letters exist.
    pub count_dead_letters: &'static str,
    /// The base of the (task, target) groups a redrive takes.
    pub dead_letter_groups: &'static str,
    /// Start (or restart) a lag row for a redriven group, with a fresh budget.
    pub redrive_lag: &'static str,
    /// Remove the dead letters of a redriven group.
    pub delete_dead_letters: &'static str,
    /// Delete settled tasks (with their events, inputs and deliveries) that
    /// settled before a time, oldest first.
    pub purge_remote: &'static str,

    // --- OAuth tokens of upstream servers ---------------------------------
    /// A server's token row.
    pub load_token: &'static str,
    /// Insert or replace a server's token: bump the version, clear the lease
    /// and the last error; returns the version.
    pub save_token: &'static str,
    /// Delete a server's token row.
    pub delete_token: &'static str,
    /// Take the refresh lease when it is free, run out, or already ours
    /// (`mcptask_core::oauth::lease_available`).
    pub lease_token: &'static str,
    /// Release our lease, nothing else.
    pub release_token_lease: &'static str,
    /// Record a refresh failure and release our lease.
    pub fail_token_refresh: &'static str,

    // --- the audit trail ---------------------------------------------------
    /// Append one entry.
    pub append_audit: &'static str,
    /// The base of a filtered listing (filters are appended with `AND`).
    pub list_audit: &'static str,
    /// Delete entries recorded before a time, oldest first.
    pub purge_audit: &'static str,

    // --- configuration set through the admin API ---------------------------
    /// Every entry, by kind and name.
    pub list_admin_entries: &'static str,
    /// Insert or replace one entry.
    pub put_admin_entry: &'static str,
    /// Delete one entry.
    pub delete_admin_entry: &'static str,
}

/// Parameters of one row of [`insert_tasks`], in bind order: id, principal,
/// tool, arguments, call inputs, status message, created at, TTL, expires at,
/// poll interval, owner, claim token, driver, driver state.
pub const INSERT_TASK_PARAMS: usize = 14;

/// The most rows one [`insert_tasks`] statement carries.
pub const MAX_INSERT_ROWS: usize = 64;

/// Insert new server tasks, each claimed by its creator: `rows` rows of
/// [`INSERT_TASK_PARAMS`] parameters each (`$1…$14` for the first row, `$15…`
/// for the next). The statement is the same on every backend.
///
/// A group commit inserts its whole batch with a few of these instead of one
/// round trip per row. `rows` is rounded down to a power of two (at most
/// [`MAX_INSERT_ROWS`]): callers split a batch into such chunks, so each
/// connection's prepared-statement cache holds at most seven insert texts
/// whatever the batch sizes.
pub fn insert_tasks(rows: usize) -> &'static str {
    static TEXTS: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| {
        let mut texts = Vec::new();
        let mut rows = 1;
        while rows <= MAX_INSERT_ROWS {
            texts.push(insert_tasks_text(rows));
            rows *= 2;
        }
        texts
    });
    let rows = rows.clamp(1, MAX_INSERT_ROWS);
    &TEXTS[rows.ilog2() as usize]
}

fn insert_tasks_text(rows: usize) -> String {
    let mut sql = String::from(
        "INSERT INTO server_tasks (id, principal, tool, arguments, call_inputs,
            status, status_message, created_at, updated_at, ttl_ms, expires_at,
            poll_interval_ms, owner, claim_token, driver, driver_state)
         VALUES ",
    );
    for row in 0..rows {
        let p = |n: usize| format!("${}", row * INSERT_TASK_PARAMS + n);
        if row > 0 {
            sql.push_str(", ");
        }
        // created_at ($7) is also the first updated_at.
        sql.push_str(&format!(
            "({}, {}, {}, {}, {}, 'working', {}, {}, {}, {}, {}, {}, {}, {}, {}, {})",
            p(1),
            p(2),
            p(3),
            p(4),
            p(5),
            p(6),
            p(7),
            p(7),
            p(8),
            p(9),
            p(10),
            p(11),
            p(12),
            p(13),
            p(14)
        ));
    }
    sql
}

/// The live-status predicate on a status column (`status`, `t.status`, or
/// `+status` for SQLite's "do not use this index" hint).
macro_rules! live {
    ($status:tt) => {
        concat!($status, " IN ('working', 'input_required')")
    };
}
pub(crate) use live;

/// The fenced-update predicate: row `$1` still names the claim whose owner and
/// token are the given parameters.
macro_rules! fenced_by {
    ($owner:tt = $owner_param:tt, $token:tt = $token_param:tt) => {
        concat!(
            "id = $1 AND ",
            $owner,
            " = ",
            $owner_param,
            " AND ",
            $token,
            " = ",
            $token_param
        )
    };
}
pub(crate) use fenced_by;

/// A server task's fence (`$1` id, `$2` owner, `$3` token): claim-owned and live.
macro_rules! server_fence {
    () => {
        concat!(
            $crate::flows::sql::fenced_by!("owner" = "$2", "claim_token" = "$3"),
            " AND ",
            $crate::flows::sql::live!("status")
        )
    };
}
pub(crate) use server_fence;

/// The columns a remote-task state change writes, as `$2 … $29` (`$1` is the
/// id), but for `next_poll_at` (`$13`): an application write stores it as
/// is, a fenced apply merges it with a pending push hint
/// (`hinted_next_poll!`).
macro_rules! remote_mutable_columns {
    () => {
        "status = $2, status_message = $3, input_requests = $4, result = $5,
         result_truncated = $6, error = $7, remote_created_at = $8, ttl_ms = $9,
         poll_interval_ms = $10, updated_at = $11, completed_at = $12,
         last_polled_at = $14, poll_count = $15, consecutive_errors = $16, last_error = $17,
         cancel_requested_at = $18, cancel_sent_at = $19, next_cancel_at = $20,
         cancel_attempts = $21, next_update_at = $22, event_version = $23,
         delivered_version = $24, next_notify_at = $25, notify_attempts = $26,
         last_notify_error = $27, dead_letters = $28, attempt = $29"
    };
}
pub(crate) use remote_mutable_columns;

/// The `next_poll_at` a fenced apply writes: the computed time `$new`, or the
/// push hint `$hint` recorded while the claim was in flight when that is
/// sooner (the hint came after the claimed call had read the task, so only
/// another poll sees what it announced). A settled task (`$new` NULL) stays
/// unscheduled. `$min` is the dialect's two-argument `least`; every such
/// write also clears the hint.
macro_rules! hinted_next_poll {
    ($min:tt, $new:tt, $hint:tt) => {
        concat!(
            "CASE WHEN ",
            $hint,
            " IS NOT NULL AND ",
            $new,
            " IS NOT NULL THEN ",
            $min,
            "(",
            $new,
            ", ",
            $hint,
            ") ELSE ",
            $new,
            " END"
        )
    };
}
pub(crate) use hinted_next_poll;

/// The fields of one row of a set-based fenced write, in the order the
/// store's row builder emits them: `remote_mutable_columns!`'s columns (their
/// names and types), the new claim columns, and the fence the row must still
/// carry (`fence_owner`, `fence_token`).
macro_rules! remote_fenced_rows {
    () => {
        "id TEXT, status TEXT, status_message TEXT, input_requests TEXT, result TEXT,
         result_truncated BOOLEAN, error TEXT, remote_created_at BIGINT, ttl_ms BIGINT,
         poll_interval_ms BIGINT, updated_at BIGINT, completed_at BIGINT, next_poll_at BIGINT,
         last_polled_at BIGINT, poll_count BIGINT, consecutive_errors BIGINT, last_error TEXT,
         cancel_requested_at BIGINT, cancel_sent_at BIGINT, next_cancel_at BIGINT,
         cancel_attempts BIGINT, next_update_at BIGINT, event_version BIGINT,
         delivered_version BIGINT, next_notify_at BIGINT, notify_attempts BIGINT,
         last_notify_error TEXT, dead_letters BIGINT, attempt BIGINT, claim_owner TEXT, claim_token TEXT,
         claim_expires_at BIGINT, fence_owner TEXT, fence_token TEXT"
    };
}
pub(crate) use remote_fenced_rows;

/// A phase claim: due rows of the phase's schedule column, oldest due first,
/// not claimed by a live lease. `$1` owner, `$2` token, `$3` now, `$4` lease
/// end, `$5` limit.
macro_rules! claim_due {
    ($due:tt, $extra:tt, $status:tt, $skip_locked:tt) => {
        concat!(
            "UPDATE remote_tasks SET claim_owner = $1, claim_token = $2, claim_expires_at = $4",
            $extra,
            " WHERE id IN (SELECT id FROM remote_tasks WHERE ",
            $due,
            " <= $3 AND ",
            $due,
            " IS NOT NULL AND ",
            $crate::flows::sql::live!($status),
            " AND (claim_expires_at IS NULL OR claim_expires_at < $3) ORDER BY ",
            $due,
            " LIMIT $5",
            $skip_locked,
            ") RETURNING *"
        )
    };
}
pub(crate) use claim_due;

/// The earliest due time of a phase's schedule column among live tasks no
/// live lease holds (`$1` now): an ordered index scan that stops at the first
/// row. It can be `<= now`: a task due now that no claim has taken yet (a
/// push hint applied after its poll), so the worker claims again at once.
macro_rules! next_due {
    ($due:tt, $status:tt) => {
        concat!(
            "SELECT ",
            $due,
            " AS due FROM remote_tasks WHERE ",
            $due,
            " IS NOT NULL AND ",
            $crate::flows::sql::live!($status),
            " AND (claim_expires_at IS NULL OR claim_expires_at < $1) ORDER BY ",
            $due,
            " LIMIT 1"
        )
    };
}
pub(crate) use next_due;

/// A page of tasks matching `$principal` (which reads `$1`): `$2` live
/// only, `$3` now (retention), `$4`/`$5` the keyset cursor (created_at, id;
/// NULL for the first page), `$6` limit.
macro_rules! list_tasks_where {
    ($principal:tt) => {
        concat!(
            "SELECT * FROM server_tasks
             WHERE ",
            $principal,
            "
               AND (NOT $2 OR ",
            $crate::flows::sql::live!("status"),
            ")
               AND (purge_at IS NULL OR purge_at > $3)
               AND ($4 IS NULL OR (created_at, id) < ($4, $5))
             ORDER BY created_at DESC, id DESC
             LIMIT $6"
        )
    };
}
pub(crate) use list_tasks_where;

/// `expedite_poll` (`$2` now) moves the poll: no live lease, and the poll
/// is due later.
macro_rules! expedite_moves {
    () => {
        "((claim_expires_at IS NULL OR claim_expires_at < $2) AND next_poll_at > $2)"
    };
}
pub(crate) use expedite_moves;

/// `expedite_poll` (`$2` now) records a hint: a claim not yet applied, and
/// no hint as early pending.
macro_rules! expedite_hints {
    () => {
        "(claim_token IS NOT NULL AND (poll_hint_at IS NULL OR poll_hint_at > $2))"
    };
}
pub(crate) use expedite_hints;

/// Build a backend's [`Statements`] from its dialect fragments.
macro_rules! statements {
    (
        locks: ($for_update:tt, $skip_locked:tt, $skip_locked_tasks:tt),
        claim_status: $claim_status:tt,
        signal: $signal:expr,
        in_list: ($in:tt, $in_end:tt),
        greatest_least: ($max:tt, $min:tt),
        live_index_hint: $active_hint:tt,
        tool_error: $tool_error:expr,
        fenced_set_update: $fenced_set_update:expr $(,)?
    ) => {
        $crate::flows::sql::Statements {
            // One statement, one snapshot: the status and the outstanding
            // inputs always agree.
            get_task: "SELECT t.*, i.key AS input_key, i.request AS input_request
                 FROM server_tasks t
                 LEFT JOIN server_task_inputs i
                   ON i.task_id = t.id AND i.response IS NULL AND t.status = 'input_required'
                 WHERE t.id = $1
                 ORDER BY i.key",
            // Half the columns and no join: the hottest read costs the
            // database (and the decoder) what a bare primary-key lookup
            // does (docs/BENCHMARKS.md). A waiting task's questions are a
            // second read (`pending_inputs`).
            get_task_state: "SELECT principal, status, status_message, result, error,
                   created_at, updated_at, ttl_ms, poll_interval_ms, purge_at, attempt, owner
                 FROM server_tasks WHERE id = $1",
            pending_inputs: "SELECT key AS input_key, request AS input_request
                 FROM server_task_inputs
                 WHERE task_id = $1 AND response IS NULL ORDER BY key",
            set_status_message: concat!(
                "UPDATE server_tasks SET status_message = $4, updated_at = $5 WHERE ",
                $crate::flows::sql::server_fence!()
            ),
            // Checks the fence and locks the row until commit.
            touch_fenced: concat!(
                "UPDATE server_tasks SET updated_at = ", $max, "(updated_at, $4) WHERE ",
                $crate::flows::sql::server_fence!()
            ),
            insert_input_request: "INSERT INTO server_task_inputs (task_id, key, request, requested_at)
                 VALUES ($1, $2, $3, $4) ON CONFLICT (task_id, key) DO NOTHING",
            input_states: concat!(
                "SELECT key, request, response FROM server_task_inputs WHERE task_id = $1 AND key ",
                $in, "$2", $in_end
            ),
            mark_input_required:
                "UPDATE server_tasks SET status = 'input_required', updated_at = $2 WHERE id = $1",
            lock_task_status: concat!(
                "SELECT status, owner FROM server_tasks WHERE id = $1", $for_update
            ),
            answer_input: "UPDATE server_task_inputs SET response = $3, answered_at = $4
                 WHERE task_id = $1 AND key = $2 AND response IS NULL",
            resume_after_answers: concat!(
                "UPDATE server_tasks SET
                    status = CASE WHEN EXISTS (SELECT 1 FROM server_task_inputs
                                               WHERE task_id = $1 AND response IS NULL)
                                  THEN 'input_required' ELSE 'working' END,
                    updated_at = $2, signaled_at = $2
                 WHERE id = $1 AND ",
                $crate::flows::sql::live!("status")
            ),
            request_cancel: concat!(
                "UPDATE server_tasks SET cancel_requested = TRUE, signaled_at = $2, updated_at = $2
                 WHERE id = $1 AND ",
                $crate::flows::sql::live!("status"),
                " RETURNING owner"
            ),
            task_exists: "SELECT id FROM server_tasks WHERE id = $1",
            lock_fenced: concat!(
                "SELECT expires_at FROM server_tasks WHERE ",
                $crate::flows::sql::server_fence!(),
                $for_update
            ),
            finish: concat!(
                "UPDATE server_tasks SET status = $4, result = $5, error = $6,
                    status_message = $7, updated_at = $8, purge_at = $9
                 WHERE ",
                $crate::flows::sql::server_fence!()
            ),
            begin_rerun: concat!(
                "UPDATE server_tasks SET attempt = attempt + 1, status_message = $5, updated_at = $4 WHERE ",
                $crate::flows::sql::server_fence!(),
                " RETURNING attempt"
            ),
            save_state: concat!(
                "UPDATE server_tasks SET driver_state = $4, updated_at = $5 WHERE ",
                $crate::flows::sql::server_fence!()
            ),
            withdraw_inputs: concat!(
                "DELETE FROM server_task_inputs
                 WHERE task_id = $1 AND response IS NULL AND key ",
                $in, "$2", $in_end
            ),
            settle_input_status: concat!(
                "UPDATE server_tasks SET
                    status = CASE WHEN EXISTS (SELECT 1 FROM server_task_inputs
                                               WHERE task_id = $1 AND response IS NULL)
                                  THEN 'input_required' ELSE 'working' END,
                    updated_at = $2
                 WHERE id = $1 AND ",
                $crate::flows::sql::live!("status")
            ),
            // Keyset walks of server_tasks_principal_created. Two statements,
            // not one NULL-safe comparison: PostgreSQL cannot use an index
            // for `IS NOT DISTINCT FROM` (a sequential scan and a sort of
            // every task), while `= $1` and `IS NULL` are index conditions on
            // both backends.
            list_tasks: $crate::flows::sql::list_tasks_where!("principal = $1"),
            list_anonymous_tasks: $crate::flows::sql::list_tasks_where!(
                "principal IS NULL AND CAST($1 AS TEXT) IS NULL"
            ),
            heartbeat: "INSERT INTO server_owners (owner_id, started_at, heartbeat_at, lease_expires_at)
                 VALUES ($1, $2, $2, $3)
                 ON CONFLICT (owner_id) DO UPDATE SET heartbeat_at = $2, lease_expires_at = $3",
            release_owner: "UPDATE server_owners SET lease_expires_at = $2 WHERE owner_id = $1",
            // Walk the (few) expired owners, then their live tasks via the
            // partial owner index: never a scan of all tasks.
            claim_orphans: concat!(
                "UPDATE server_tasks SET owner = $1, claim_token = $2, updated_at = $3
                 WHERE id IN (
                     SELECT t.id FROM server_owners o
                     JOIN server_tasks t ON t.owner = o.owner_id
                     WHERE o.lease_expires_at < $3 AND o.owner_id <> $1 AND ",
                $crate::flows::sql::live!("t.status"),
                " LIMIT $4", $skip_locked_tasks, ")
                 RETURNING *"
            ),
            // A slot's owner ids share its prefix (`mcptask_sql::slot`);
            // `substr` rather than `LIKE`, whose `_` would match any
            // character. Owner rows are few; the claims are looked for
            // among live tasks (and undelivered events) only.
            release_slot_owners: "UPDATE server_owners SET lease_expires_at = $2
                 WHERE lease_expires_at > $2 AND substr(owner_id, 1, length($1)) = $1",
            release_slot_claims: concat!(
                "UPDATE remote_tasks SET claim_expires_at = $2
                 WHERE claim_expires_at > $2 AND substr(claim_owner, 1, length($1)) = $1 AND ",
                $crate::flows::sql::live!("status")
            ),
            release_slot_notify_claims: "UPDATE remote_tasks SET notify_expires_at = $2
                 WHERE next_notify_at IS NOT NULL AND event_version > delivered_version
                   AND notify_expires_at > $2 AND substr(notify_owner, 1, length($1)) = $1",
            prune_owners: concat!(
                "DELETE FROM server_owners
                 WHERE lease_expires_at < $1
                   AND NOT EXISTS (SELECT 1 FROM server_tasks t
                                   WHERE t.owner = server_owners.owner_id AND ",
                $crate::flows::sql::live!("t.status"),
                ")"
            ),
            expire_overdue: concat!(
                "UPDATE server_tasks
                 SET status = 'failed', error = $1, status_message = $2,
                     updated_at = $3, signaled_at = $3, purge_at = $4
                 WHERE id IN (
                     SELECT id FROM server_tasks
                     WHERE expires_at <= $3 AND expires_at IS NOT NULL AND ",
                $crate::flows::sql::live!("status"),
                " ORDER BY expires_at LIMIT $5", $skip_locked, ")
                 RETURNING id, owner"
            ),
            purge: concat!(
                "DELETE FROM server_tasks WHERE id IN (
                     SELECT id FROM server_tasks WHERE purge_at <= $1 AND purge_at IS NOT NULL
                     ORDER BY purge_at LIMIT $2", $skip_locked, ")"
            ),
            signals_since: "SELECT id, status, cancel_requested, signaled_at FROM server_tasks
                 WHERE owner = $1 AND signaled_at >= $2",
            signal: $signal,

            insert_remote: "INSERT INTO remote_tasks (id, status, status_message, input_requests,
                    result, result_truncated, error, remote_created_at, ttl_ms, poll_interval_ms,
                    updated_at, completed_at, next_poll_at, last_polled_at, poll_count,
                    consecutive_errors, last_error, cancel_requested_at, cancel_sent_at,
                    next_cancel_at, cancel_attempts, next_update_at, event_version,
                    delivered_version, next_notify_at, notify_attempts, last_notify_error,
                    dead_letters, attempt, server, server_hash, remote_task_id, principal,
                    conversation, call_id, correlation, tool, arguments, created_at, driver,
                    driver_data, face, traceparent, tracestate)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16,
                    $17, $18, $19, $20, $21, $22, $23, $24, $25, $26, $27, $28,
                    $29, $30, $31, $32, $33, $34, $35, $36, $37, $38, $39, $40, $41, $42, $43, $44)
                 ON CONFLICT (server, principal, remote_task_id) WHERE status IN ('working', 'input_required')
                 DO NOTHING
                 RETURNING id",
            get_remote: "SELECT * FROM remote_tasks WHERE id = $1",
            lock_remote: concat!("SELECT * FROM remote_tasks WHERE id = $1", $for_update),
            // Always in id order, so two batches cannot deadlock each other.
            lock_remotes: concat!(
                "SELECT * FROM remote_tasks WHERE id ", $in, "$1", $in_end, " ORDER BY id",
                $for_update
            ),
            // Only live rows hold the handle: a settled task with the same
            // remote id is an older task the server has forgotten.
            find_handle: concat!(
                "SELECT * FROM remote_tasks
                 WHERE server = $1 AND principal = $2 AND remote_task_id = $3 AND ",
                $crate::flows::sql::live!("status")
            ),
            remote_inputs:
                "SELECT * FROM remote_task_inputs WHERE task_id = $1 ORDER BY first_seen_at, key",
            remote_events: "SELECT * FROM remote_task_events WHERE task_id = $1 AND version > $2
                 ORDER BY version LIMIT $3",
            // A claim-owned write: every mutable column and the claim, fenced.
            update_remote_fenced: concat!(
                "UPDATE remote_tasks SET ",
                $crate::flows::sql::remote_mutable_columns!(),
                ", next_poll_at = ",
                $crate::flows::sql::hinted_next_poll!($min, "CAST($13 AS BIGINT)", "poll_hint_at"),
                ", poll_hint_at = NULL, claim_owner = $30, claim_token = $31, claim_expires_at = $32 WHERE ",
                $crate::flows::sql::fenced_by!("claim_owner" = "$33", "claim_token" = "$34")
            ),
            update_remotes_fenced: $fenced_set_update,
            // An application write (cancel intent, answers): the claim columns
            // stay, so a worker's claim in flight stays valid, and so does a
            // push hint recorded for that claim's apply.
            update_remote_unclaimed: concat!(
                "UPDATE remote_tasks SET ",
                $crate::flows::sql::remote_mutable_columns!(),
                ", next_poll_at = $13 WHERE id = $1"
            ),
            insert_remote_input: "INSERT INTO remote_task_inputs (task_id, key, request, first_seen_at)
                 VALUES ($1, $2, $3, $4) ON CONFLICT (task_id, key) DO NOTHING",
            insert_event: "INSERT INTO remote_task_events
                    (task_id, version, kind, status, occurred_at, data)
                 VALUES ($1, $2, $3, $4, $5, $6)",
            answered_keys:
                "SELECT key FROM remote_task_inputs WHERE task_id = $1 AND response IS NOT NULL",
            store_answer: "UPDATE remote_task_inputs SET response = $3, answered_at = $4
                 WHERE task_id = $1 AND key = $2 AND response IS NULL",
            count_unsent_except: concat!(
                "SELECT count(*) AS n FROM remote_task_inputs
                 WHERE task_id = $1 AND response IS NOT NULL AND sent_at IS NULL
                   AND NOT (key ", $in, "$2", $in_end, ")"
            ),
            mark_sent: concat!(
                "UPDATE remote_task_inputs SET sent_at = $2
                 WHERE task_id = $1 AND response IS NOT NULL AND sent_at IS NULL AND key ",
                $in, "$3", $in_end
            ),
            acked_inputs: "SELECT key, sent_at FROM remote_task_inputs
                 WHERE task_id = $1 AND sent_at IS NOT NULL",
            reopen_input: "UPDATE remote_task_inputs
                 SET request = COALESCE($3, request), response = NULL, answered_at = NULL, sent_at = NULL
                 WHERE task_id = $1 AND key = $2",
            // Two effects, each taken when it changes something. Without a
            // live lease the poll moves to now (a poll due sooner keeps its
            // time). Under a claim not yet applied, whose apply will write
            // next_poll_at from what its call read (maybe before the change
            // pushed), the earliest hint waits in poll_hint_at for that
            // apply; a lapsed claim gets both, as its late result still
            // applies unless someone reclaims first.
            expedite_poll: concat!(
                "UPDATE remote_tasks SET
                    next_poll_at = CASE WHEN ", $crate::flows::sql::expedite_moves!(), "
                                   THEN $2 ELSE next_poll_at END,
                    poll_hint_at = CASE WHEN ", $crate::flows::sql::expedite_hints!(), "
                                   THEN $2 ELSE poll_hint_at END
                 WHERE id = $1 AND ",
                $crate::flows::sql::live!("status"),
                " AND (", $crate::flows::sql::expedite_moves!(),
                " OR ", $crate::flows::sql::expedite_hints!(), ")"
            ),
            expedite_local_poll: concat!(
                "UPDATE remote_tasks SET
                    next_poll_at = CASE WHEN ", $crate::flows::sql::expedite_moves!(), "
                                   THEN $2 ELSE next_poll_at END,
                    poll_hint_at = CASE WHEN ", $crate::flows::sql::expedite_hints!(), "
                                   THEN $2 ELSE poll_hint_at END
                 WHERE id = $1 AND driver IN ($3, $4) AND ",
                $crate::flows::sql::live!("status"),
                " AND (", $crate::flows::sql::expedite_moves!(),
                " OR ", $crate::flows::sql::expedite_hints!(), ")"
            ),
            // The poll claimed covers every hint recorded before it.
            claim_poll: $crate::flows::sql::claim_due!(
                "next_poll_at", ", poll_count = poll_count + 1, poll_hint_at = NULL",
                $claim_status, $skip_locked
            ),
            claim_cancel: $crate::flows::sql::claim_due!(
                "next_cancel_at", "", $claim_status, $skip_locked
            ),
            claim_update: $crate::flows::sql::claim_due!(
                "next_update_at", "", $claim_status, $skip_locked
            ),
            next_poll_due: $crate::flows::sql::next_due!("next_poll_at", $claim_status),
            next_cancel_due: $crate::flows::sql::next_due!("next_cancel_at", $claim_status),
            next_update_due: $crate::flows::sql::next_due!("next_update_at", $claim_status),
            unsent_answers: concat!(
                "SELECT task_id, key, response FROM remote_task_inputs
                 WHERE response IS NOT NULL AND sent_at IS NULL AND task_id ",
                $in, "$1", $in_end, " ORDER BY task_id, key"
            ),
            // `$1` owner, `$2` token, `$3` now, `$4` lease end, `$5` limit.
            claim_notify: concat!(
                "UPDATE remote_tasks
                 SET notify_owner = $1, notify_token = $2, notify_expires_at = $4
                 WHERE id IN (
                     SELECT id FROM remote_tasks
                     WHERE next_notify_at <= $3 AND next_notify_at IS NOT NULL
                       AND event_version > delivered_version
                       AND (notify_expires_at IS NULL OR notify_expires_at < $3)
                     ORDER BY next_notify_at LIMIT $5", $skip_locked, ")
                 RETURNING id, notify_owner, notify_token, notify_attempts, delivered_version,
                           next_notify_at"
            ),
            // Versions are dense (each event is the previous + 1), so "the
            // next $2 undelivered events" is a primary-key range per task.
            claimed_events: concat!(
                "SELECT e.* FROM remote_tasks t
                 JOIN remote_task_events e
                   ON e.task_id = t.id AND e.version > t.delivered_version
                  AND e.version <= t.delivered_version + $2
                 WHERE t.id ", $in, "$1", $in_end, "
                 ORDER BY e.task_id, e.version"
            ),
            release_notify: concat!(
                "UPDATE remote_tasks
                 SET notify_owner = NULL, notify_token = NULL, notify_expires_at = NULL
                 WHERE ",
                $crate::flows::sql::fenced_by!("notify_owner" = "$2", "notify_token" = "$3")
            ),
            // SET expressions see the locked row as it is now: an event
            // recorded meanwhile (event_version grown) keeps the task due.
            // `$4` delivered through, `$5` dead letters, `$6` error, `$7`
            // retry at, `$8` now.
            finish_notify: concat!(
                "UPDATE remote_tasks SET
                    delivered_version = ", $max, "(delivered_version, ", $min, "($4, event_version)),
                    dead_letters = dead_letters + $5,
                    notify_attempts = CASE
                        WHEN CAST($6 AS TEXT) IS NULL THEN 0
                        WHEN ", $min, "($4, event_version) > delivered_version THEN 1
                        ELSE notify_attempts + 1 END,
                    last_notify_error = $6,
                    next_notify_at = CASE
                        WHEN ", $max, "(delivered_version, ", $min, "($4, event_version)) >= event_version
                            THEN NULL
                        ELSE COALESCE($7, $8) END,
                    notify_owner = NULL, notify_token = NULL, notify_expires_at = NULL
                 WHERE ",
                $crate::flows::sql::fenced_by!("notify_owner" = "$2", "notify_token" = "$3")
            ),
            mark_events_delivered: concat!(
                "UPDATE remote_task_events SET delivered_at = $3, dead_lettered = (version ",
                $in, "$4", $in_end, ")
                 WHERE task_id = $1 AND version <= $2 AND delivered_at IS NULL"
            ),
            list_remote: "SELECT * FROM remote_tasks WHERE TRUE",
            list_live_remote: concat!("SELECT * FROM remote_tasks", $active_hint, " WHERE TRUE"),
            tool_error: $tool_error,
            remote_counts: "SELECT status, count(*) AS n FROM remote_tasks GROUP BY status",
            // Pending events always leave next_notify_at set (finishing clears
            // it only when nothing is pending): the partial notify index covers them.
            notification_backlog: "SELECT CAST(COALESCE(SUM(event_version - delivered_version), 0) AS BIGINT) AS n
                 FROM remote_tasks
                 WHERE next_notify_at IS NOT NULL AND event_version > delivered_version",
            lagging_targets: concat!(
                "SELECT task_id, target FROM remote_notify_lag WHERE task_id ", $in, "$1", $in_end
            ),
            // `$4` attempts, `$5` retry at, `$6` error.
            insert_lag: "INSERT INTO remote_notify_lag
                    (task_id, target, next_version, budget_from, attempts, next_attempt_at, last_error)
                 VALUES ($1, $2, $3, 0, $4, $5, $6)
                 ON CONFLICT (task_id, target) DO NOTHING",
            insert_dead_letter: "INSERT INTO remote_notify_dead (task_id, target, version, error, dead_at)
                 VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (task_id, target, version) DO NOTHING",
            add_dead_letters: "UPDATE remote_tasks SET dead_letters = dead_letters + $2 WHERE id = $1",
            // `$1` owner, `$2` token, `$3` now, `$4` lease end, `$5` limit, `$6` targets.
            claim_lag: concat!(
                "UPDATE remote_notify_lag SET owner = $1, token = $2, expires_at = $4
                 WHERE (task_id, target) IN (
                     SELECT task_id, target FROM remote_notify_lag
                     WHERE next_attempt_at <= $3 AND (expires_at IS NULL OR expires_at < $3)
                       AND target ", $in, "$6", $in_end, "
                     ORDER BY next_attempt_at LIMIT $5", $skip_locked, ")
                 RETURNING task_id, target, owner, token, attempts, budget_from, next_version,
                           next_attempt_at"
            ),
            lag_events: "SELECT l.target AS lag_target, e.* FROM remote_notify_lag l
                 JOIN remote_task_events e
                   ON e.task_id = l.task_id AND e.version >= l.next_version
                  AND e.version < l.next_version + $3
                 WHERE l.owner = $1 AND l.token = $2
                 ORDER BY e.task_id, l.target, e.version",
            // `$4` target, `$5` next version, `$6` error, `$7` retry at, `$8` now.
            finish_lag: "UPDATE remote_notify_lag SET
                    attempts = CASE
                        WHEN CAST($6 AS TEXT) IS NULL THEN 0
                        WHEN $5 > next_version THEN 1
                        ELSE attempts + 1 END,
                    next_version = $5, last_error = $6, next_attempt_at = COALESCE($7, $8),
                    owner = NULL, token = NULL, expires_at = NULL
                 WHERE task_id = $1 AND target = $4 AND owner = $2 AND token = $3",
            release_lag: "UPDATE remote_notify_lag SET owner = NULL, token = NULL, expires_at = NULL
                 WHERE task_id = $1 AND target = $4 AND owner = $2 AND token = $3",
            // Events are only ever appended, so a row past the newest version
            // has nothing left to send (a later event goes through the outbox,
            // which sees no lag row and delivers it itself).
            drop_caught_up_lag: "DELETE FROM remote_notify_lag
                 WHERE task_id = $1 AND target = $2 AND owner IS NULL
                   AND next_version > (SELECT event_version FROM remote_tasks WHERE id = $1)",
            list_dead_letters: "SELECT * FROM remote_notify_dead WHERE TRUE",
            count_dead_letters: "SELECT count(*) AS n FROM remote_notify_dead",
            dead_letter_groups: "SELECT task_id, target, MIN(version) AS first_version,
                    count(*) AS n
                 FROM remote_notify_dead WHERE TRUE",
            // Clearing the claim makes an in-flight attempt's result stale, so
            // it cannot move the row past the redriven versions.
            redrive_lag: concat!(
                "INSERT INTO remote_notify_lag
                    (task_id, target, next_version, budget_from, attempts, next_attempt_at)
                 VALUES ($1, $2, $3, $4, 0, $4)
                 ON CONFLICT (task_id, target) DO UPDATE SET
                    next_version = ", $min, "(remote_notify_lag.next_version, excluded.next_version),
                    budget_from = excluded.budget_from, attempts = 0,
                    next_attempt_at = excluded.next_attempt_at, last_error = NULL,
                    owner = NULL, token = NULL, expires_at = NULL"
            ),
            delete_dead_letters: "DELETE FROM remote_notify_dead WHERE task_id = $1 AND target = $2",
            // The partial settled index, walked oldest first; events, inputs
            // and deliveries go with their task (ON DELETE CASCADE).
            purge_remote: concat!(
                "DELETE FROM remote_tasks WHERE id IN (
                     SELECT id FROM remote_tasks
                     WHERE completed_at <= $1 AND completed_at IS NOT NULL
                       AND status NOT IN ('working', 'input_required')
                     ORDER BY completed_at LIMIT $2", $skip_locked, ")"
            ),
            load_token: "SELECT * FROM oauth_tokens WHERE server = $1",
            save_token: "INSERT INTO oauth_tokens (server, endpoint, sealed, expires_at, refreshable,
                    issuer, scopes, updated_at, version)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 1)
                 ON CONFLICT (server) DO UPDATE SET
                    endpoint = excluded.endpoint, sealed = excluded.sealed,
                    expires_at = excluded.expires_at, refreshable = excluded.refreshable,
                    issuer = excluded.issuer, scopes = excluded.scopes,
                    updated_at = excluded.updated_at, version = oauth_tokens.version + 1,
                    lease_owner = NULL, lease_until = NULL,
                    last_error = NULL, last_error_at = NULL
                 RETURNING version",
            delete_token: "DELETE FROM oauth_tokens WHERE server = $1",
            // $2 holder, $3 now, $4 lease end.
            lease_token: "UPDATE oauth_tokens SET lease_owner = $2, lease_until = $4
                 WHERE server = $1
                   AND (lease_owner IS NULL OR lease_owner = $2
                        OR lease_until IS NULL OR lease_until <= $3)",
            release_token_lease: "UPDATE oauth_tokens SET lease_owner = NULL, lease_until = NULL
                 WHERE server = $1 AND lease_owner = $2",
            // $2 holder, $3 error, $4 now.
            fail_token_refresh: "UPDATE oauth_tokens SET last_error = $3, last_error_at = $4,
                    lease_owner = CASE WHEN lease_owner = $2 THEN NULL ELSE lease_owner END,
                    lease_until = CASE WHEN lease_owner = $2 THEN NULL ELSE lease_until END
                 WHERE server = $1",
            append_audit: "INSERT INTO audit_events (at, call_id, principal, face, server, tool,
                    driver, outcome, error_class, duration_ms, via)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
            list_audit: "SELECT * FROM audit_events WHERE TRUE",
            // The `at` index, walked oldest first.
            purge_audit: concat!(
                "DELETE FROM audit_events WHERE seq IN (
                     SELECT seq FROM audit_events WHERE at < $1
                     ORDER BY at, seq LIMIT $2", $skip_locked, ")"
            ),
            list_admin_entries: "SELECT * FROM admin_config ORDER BY kind, name",
            put_admin_entry: "INSERT INTO admin_config (kind, name, body, changed_by, changed_at)
                 VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (kind, name) DO UPDATE SET
                    body = excluded.body, changed_by = excluded.changed_by,
                    changed_at = excluded.changed_at",
            delete_admin_entry: "DELETE FROM admin_config WHERE kind = $1 AND name = $2",
        }
    };
}
pub(crate) use statements;

#[cfg(test)]
mod tests {
    use mcptask_core::lease::LIVE_STATUSES;

    #[test]
    fn the_live_predicate_lists_exactly_the_live_statuses() {
        let quoted: Vec<String> = LIVE_STATUSES
            .iter()
            .map(|s| format!("'{}'", s.as_str()))
            .collect();
        assert_eq!(
            live!("status"),
            format!("status IN ({})", quoted.join(", "))
        );
    }

    #[test]
    fn a_multi_row_insert_numbers_each_row_after_the_previous() {
        let two = super::insert_tasks(2);
        assert!(two.contains("($1, $2, $3, $4, $5, 'working', $6, $7, $7, $8,"));
        assert!(two.contains("($15, $16, $17, $18, $19, 'working', $20, $21, $21, $22,"));
        assert!(two.ends_with("$28)"));
        // Not a power of two: the largest chunk that fits.
        assert_eq!(super::insert_tasks(3), two);
        assert_eq!(
            super::insert_tasks(1000).matches("'working'").count(),
            super::MAX_INSERT_ROWS
        );
    }

    #[test]
    fn the_fence_names_id_owner_and_token() {
        assert_eq!(
            fenced_by!("o" = "$2", "k" = "$3"),
            "id = $1 AND o = $2 AND k = $3"
        );
    }
}
