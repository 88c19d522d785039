-- How a tracked remote task is polled and cancelled: 'sep2663' (tasks/get,
-- tasks/cancel, tasks/update) or 'triplet' (a submit/status/cancel toolset),
-- and the driver's own data as JSON (the triplet's status and cancel tool
-- names). Rows recorded before this migration are SEP-2663 tasks.
ALTER TABLE remote_tasks ADD COLUMN driver TEXT NOT NULL DEFAULT 'sep2663';
ALTER TABLE remote_tasks ADD COLUMN driver_data TEXT;
