-- A push hint ("poll this task now") that arrived while a claim of the task
-- was in flight: the claim's fenced apply writes the whole row, so moving
-- next_poll_at then would be overwritten. The apply schedules the next poll
-- no later than this time and clears it; a poll claim clears it too (that
-- poll covers every earlier hint). NULL: no hint pending.
ALTER TABLE remote_tasks ADD COLUMN poll_hint_at INTEGER;
