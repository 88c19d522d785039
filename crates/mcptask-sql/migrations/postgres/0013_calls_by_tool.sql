-- The console lists calls by tool (`GET /api/v1/tasks?tool=`), newest
-- first, like the other listing filters: an index walked backwards.
CREATE INDEX remote_tasks_by_tool ON remote_tasks (tool, created_at, id);
