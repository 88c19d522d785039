-- Client side: remote task handles a gateway tracks to a terminal state.
-- Timestamps are integer milliseconds since the Unix epoch (UTC).

CREATE TABLE remote_tasks (
    id                 TEXT    PRIMARY KEY,
    server             TEXT    NOT NULL,
    server_hash        TEXT    NOT NULL,
    remote_task_id     TEXT    NOT NULL,
    -- '' for anonymous callers, so the uniqueness below holds for them too.
    principal          TEXT    NOT NULL DEFAULT '',
    conversation       TEXT,
    call_id            TEXT,
    correlation        TEXT,
    tool               TEXT    NOT NULL,
    arguments          TEXT,
    status             TEXT    NOT NULL
        CHECK (status IN ('working', 'input_required', 'completed', 'failed', 'cancelled')),
    status_message     TEXT,
    input_requests     TEXT    NOT NULL DEFAULT '[]',
    result             TEXT,
    result_truncated   BOOLEAN NOT NULL DEFAULT FALSE,
    error              TEXT,
    remote_created_at  BIGINT,
    ttl_ms             BIGINT,
    poll_interval_ms   BIGINT,
    created_at         BIGINT NOT NULL,
    updated_at         BIGINT NOT NULL,
    completed_at       BIGINT,
    -- Phase schedules: NULL means "not due for this phase".
    next_poll_at       BIGINT,
    last_polled_at     BIGINT,
    poll_count         BIGINT NOT NULL DEFAULT 0,
    consecutive_errors BIGINT NOT NULL DEFAULT 0,
    last_error         TEXT,
    cancel_requested_at BIGINT,
    cancel_sent_at     BIGINT,
    next_cancel_at     BIGINT,
    cancel_attempts    BIGINT NOT NULL DEFAULT 0,
    next_update_at     BIGINT,
    -- Work claim (poll, cancel and update share it: one remote call per task at a time).
    claim_owner        TEXT,
    claim_token        TEXT,
    claim_expires_at   BIGINT,
    claim_phase        TEXT,
    -- Outbox: events up to event_version exist; up to delivered_version are delivered.
    event_version      BIGINT NOT NULL DEFAULT 0,
    delivered_version  BIGINT NOT NULL DEFAULT 0,
    next_notify_at     BIGINT,
    notify_attempts    BIGINT NOT NULL DEFAULT 0,
    last_notify_error  TEXT,
    dead_letters       BIGINT NOT NULL DEFAULT 0,
    notify_owner       TEXT,
    notify_token       TEXT,
    notify_expires_at  BIGINT
);

-- Claims order by due time with a LIMIT; until the table has statistics the
-- planner may scan and sort every due row instead of walking the due index.
-- Analyse this hot table early and often rather than after 10% of it changed.
ALTER TABLE remote_tasks SET (autovacuum_analyze_scale_factor = 0.01, autovacuum_analyze_threshold = 200);

CREATE UNIQUE INDEX remote_tasks_handle ON remote_tasks (server, principal, remote_task_id);
-- The due indexes carry the claim's whole predicate: only live tasks are in them.
CREATE INDEX remote_tasks_poll_due ON remote_tasks (next_poll_at)
    WHERE next_poll_at IS NOT NULL AND status IN ('working', 'input_required');
CREATE INDEX remote_tasks_cancel_due ON remote_tasks (next_cancel_at)
    WHERE next_cancel_at IS NOT NULL AND status IN ('working', 'input_required');
CREATE INDEX remote_tasks_update_due ON remote_tasks (next_update_at)
    WHERE next_update_at IS NOT NULL AND status IN ('working', 'input_required');
CREATE INDEX remote_tasks_notify_due ON remote_tasks (next_notify_at) WHERE next_notify_at IS NOT NULL;
CREATE INDEX remote_tasks_newest ON remote_tasks (created_at, id);
CREATE INDEX remote_tasks_by_status ON remote_tasks (status, created_at, id);
-- Listing live tasks only (active_only, the usual view) walks this newest first
-- instead of sorting every live task found through remote_tasks_by_status.
CREATE INDEX remote_tasks_active ON remote_tasks (created_at, id)
    WHERE status IN ('working', 'input_required');
CREATE INDEX remote_tasks_by_server ON remote_tasks (server, created_at, id);
CREATE INDEX remote_tasks_by_principal ON remote_tasks (principal, created_at, id);
CREATE INDEX remote_tasks_by_conversation ON remote_tasks (conversation, created_at, id)
    WHERE conversation IS NOT NULL;

-- Every input key ever seen for a task (deduplicated by key) and the local answer.
CREATE TABLE remote_task_inputs (
    task_id       TEXT    NOT NULL REFERENCES remote_tasks (id) ON DELETE CASCADE,
    key           TEXT    NOT NULL,
    request       TEXT    NOT NULL,
    response      TEXT,
    first_seen_at BIGINT NOT NULL,
    answered_at   BIGINT,
    sent_at       BIGINT,
    PRIMARY KEY (task_id, key)
);

-- Timeline and outbox: (task_id, version) is the idempotency key of delivery.
CREATE TABLE remote_task_events (
    task_id       TEXT    NOT NULL REFERENCES remote_tasks (id) ON DELETE CASCADE,
    version       BIGINT NOT NULL,
    kind          TEXT    NOT NULL,
    status        TEXT    NOT NULL,
    occurred_at   BIGINT NOT NULL,
    data          TEXT    NOT NULL,
    delivered_at  BIGINT,
    dead_lettered BOOLEAN NOT NULL DEFAULT FALSE,
    PRIMARY KEY (task_id, version)
);
