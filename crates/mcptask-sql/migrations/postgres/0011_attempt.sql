-- The latest run of a call's work the tracker has seen (1, then one more per
-- rerun after an interruption), so that a rerun is recorded once in the
-- call's timeline.
ALTER TABLE remote_tasks ADD COLUMN attempt BIGINT NOT NULL DEFAULT 1;
