-- The W3C trace context of the call (`traceparent`, `tracestate`), so that
-- its polls, driver steps and deliveries, run later by any replica, join the
-- trace the call was made in. NULL: no trace (telemetry off, or rows written
-- before traces were kept).
ALTER TABLE remote_tasks ADD COLUMN traceparent TEXT;
ALTER TABLE remote_tasks ADD COLUMN tracestate TEXT;
