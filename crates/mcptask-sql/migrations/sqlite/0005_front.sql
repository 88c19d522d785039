-- Tasks whose work is driven by something other than a native tool (the
-- proxy's drivers): which driver, and the driver's own durable state (JSON),
-- written fenced by the claim holder. Both NULL for a native tool's task.
ALTER TABLE server_tasks ADD COLUMN driver TEXT;
ALTER TABLE server_tasks ADD COLUMN driver_state TEXT;
-- A principal's tasks, newest first: the keyset of list_tasks.
CREATE INDEX server_tasks_principal_created ON server_tasks (principal, created_at DESC, id DESC);
