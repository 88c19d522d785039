-- One row per call. The tracker's table holds every call a gateway keeps,
-- whatever its driver: 'sep2663' and 'toolset' rows follow an upstream
-- task; 'sep1686' and 'sync' rows follow the call runtime's task of the
-- same id (server_tasks), whose work drives the upstream.

-- Which face made the call: 'rust', 'api', 'cli' or 'mcp' (NULL: made
-- before faces were recorded).
ALTER TABLE remote_tasks ADD COLUMN face TEXT;

-- One name per driver: submit/status/cancel toolsets were 'triplet'.
UPDATE remote_tasks SET driver = 'toolset' WHERE driver = 'triplet';
UPDATE server_tasks SET driver = 'toolset' WHERE driver = 'triplet';

-- Front tasks of 2025-11-25 and synchronous upstreams had no row of their
-- own in the tracker's list: give each one, under its own id. Their front
-- tool name is '<prefix>__<tool>' (the prefix defaults to the server's
-- name); live ones are polled at once and read their state from the task.
INSERT INTO remote_tasks (id, server, server_hash, remote_task_id, principal, tool, arguments,
        status, status_message, input_requests, result, error, created_at, updated_at,
        completed_at, next_poll_at, driver, face)
SELECT id,
       CASE WHEN instr(tool, '__') > 0 THEN substr(tool, 1, instr(tool, '__') - 1) ELSE '' END,
       '',
       id,
       COALESCE(principal, ''),
       CASE WHEN instr(tool, '__') > 0 THEN substr(tool, instr(tool, '__') + 2) ELSE tool END,
       arguments,
       status,
       status_message,
       '[]',
       result,
       error,
       created_at,
       updated_at,
       CASE WHEN status IN ('working', 'input_required') THEN NULL ELSE updated_at END,
       CASE WHEN status IN ('working', 'input_required') THEN created_at ELSE NULL END,
       driver,
       'mcp'
  FROM server_tasks
 WHERE driver IN ('sep1686', 'sync')
   AND id NOT IN (SELECT id FROM remote_tasks);
