-- A remote task id is unique among live tasks only: a server that forgets its
-- tasks (a restart with an in-memory store) may hand the same id out again,
-- and the new task must be tracked as new, not matched to the settled one.
DROP INDEX remote_tasks_handle;
CREATE UNIQUE INDEX remote_tasks_handle ON remote_tasks (server, principal, remote_task_id)
    WHERE status IN ('working', 'input_required');
-- Settled tasks by the time they settled: the purge sweep walks this.
CREATE INDEX remote_tasks_settled ON remote_tasks (completed_at)
    WHERE completed_at IS NOT NULL AND status NOT IN ('working', 'input_required');

-- A notify target behind a task's outbox, from next_version on. The outbox
-- moves on for the other targets; this row is retried with backoff.
CREATE TABLE remote_notify_lag (
    task_id         TEXT    NOT NULL REFERENCES remote_tasks (id) ON DELETE CASCADE,
    target          TEXT    NOT NULL,
    next_version    BIGINT NOT NULL,
    -- Each event's retry budget runs from max(occurred_at, budget_from).
    budget_from     BIGINT NOT NULL DEFAULT 0,
    attempts        BIGINT NOT NULL DEFAULT 0,
    next_attempt_at BIGINT NOT NULL,
    last_error      TEXT,
    owner           TEXT,
    token           TEXT,
    expires_at      BIGINT,
    PRIMARY KEY (task_id, target)
);
CREATE INDEX remote_notify_lag_due ON remote_notify_lag (next_attempt_at);

-- Events a target gave up on, until an operator redrives them.
CREATE TABLE remote_notify_dead (
    task_id  TEXT    NOT NULL REFERENCES remote_tasks (id) ON DELETE CASCADE,
    target   TEXT    NOT NULL,
    version  BIGINT NOT NULL,
    error    TEXT    NOT NULL,
    dead_at  BIGINT NOT NULL,
    PRIMARY KEY (task_id, target, version)
);
CREATE INDEX remote_notify_dead_newest ON remote_notify_dead (dead_at);
CREATE INDEX remote_notify_dead_by_target ON remote_notify_dead (target, dead_at);
