-- Server side: tasks this process hands out to MCP clients (SEP-2663).
-- Timestamps are integer milliseconds since the Unix epoch (UTC).

CREATE TABLE server_tasks (
    id               TEXT    PRIMARY KEY NOT NULL,
    principal        TEXT,
    tool             TEXT    NOT NULL,
    arguments        TEXT    NOT NULL,
    -- Answers gathered by multi-round-trip input before the task was created.
    call_inputs      TEXT,
    status           TEXT    NOT NULL
        CHECK (status IN ('working', 'input_required', 'completed', 'failed', 'cancelled')),
    status_message   TEXT,
    result           TEXT,
    error            TEXT,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    ttl_ms           INTEGER,
    -- created_at + ttl_ms, kept as a column so the TTL sweep is an index range scan.
    expires_at       INTEGER,
    poll_interval_ms INTEGER,
    attempt          INTEGER NOT NULL DEFAULT 1,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    -- Claim: the process running the task and the token of its current claim.
    owner            TEXT,
    claim_token      TEXT,
    -- Last answer / cancel / expiry: the owner's backstop re-check reads this.
    signaled_at      INTEGER NOT NULL DEFAULT 0,
    -- Set when the task settles: reads treat it as gone from then on.
    purge_at         INTEGER
) STRICT;

CREATE INDEX server_tasks_expiry ON server_tasks (expires_at)
    WHERE status IN ('working', 'input_required') AND expires_at IS NOT NULL;
CREATE INDEX server_tasks_live_owner ON server_tasks (owner)
    WHERE status IN ('working', 'input_required');
CREATE INDEX server_tasks_owner_signal ON server_tasks (owner, signaled_at);
CREATE INDEX server_tasks_purge ON server_tasks (purge_at) WHERE purge_at IS NOT NULL;

-- Input requests keyed (task_id, key): a key exists at most once per task for
-- its whole life, so it can never be reissued.
CREATE TABLE server_task_inputs (
    task_id      TEXT    NOT NULL REFERENCES server_tasks (id) ON DELETE CASCADE,
    key          TEXT    NOT NULL,
    request      TEXT    NOT NULL,
    response     TEXT,
    requested_at INTEGER NOT NULL,
    answered_at  INTEGER,
    PRIMARY KEY (task_id, key)
) STRICT;

-- One row per server process incarnation: its lease covers every task it owns,
-- so renewing is one write however many tasks run.
CREATE TABLE server_owners (
    owner_id         TEXT    PRIMARY KEY NOT NULL,
    started_at       INTEGER NOT NULL,
    heartbeat_at     INTEGER NOT NULL,
    lease_expires_at INTEGER NOT NULL
) STRICT;

CREATE INDEX server_owners_lease ON server_owners (lease_expires_at);
