-- The audit trail: one row per call that ended or was refused, on every
-- face, kept or not. No arguments, no results, no error text: an error is
-- a short stable class. Rows older than `[audit] retention_days` are purged.
CREATE TABLE audit_events (
    seq         BIGSERIAL PRIMARY KEY,
    at          BIGINT NOT NULL,
    call_id     TEXT,
    -- '' for an anonymous caller, as remote_tasks.principal.
    principal   TEXT NOT NULL DEFAULT '',
    face        TEXT NOT NULL,
    server      TEXT NOT NULL,
    tool        TEXT NOT NULL,
    driver      TEXT NOT NULL,
    outcome     TEXT NOT NULL,
    error_class TEXT,
    duration_ms BIGINT NOT NULL
);
-- Listings walk (at, seq) backwards, filtered; the purge walks `at`
-- forwards.
CREATE INDEX audit_events_at ON audit_events (at, seq);
CREATE INDEX audit_events_principal ON audit_events (principal, at, seq);
CREATE INDEX audit_events_server_tool ON audit_events (server, tool, at, seq);
CREATE INDEX audit_events_outcome ON audit_events (outcome, at, seq);
