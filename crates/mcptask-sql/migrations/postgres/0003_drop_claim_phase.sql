-- The phase of a work claim was recorded but never read: the claim's owner and
-- token are the whole fence, and each phase has its own due column.
ALTER TABLE remote_tasks DROP COLUMN claim_phase;
