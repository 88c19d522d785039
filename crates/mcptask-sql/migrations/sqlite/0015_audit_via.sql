-- The virtual server a call came through (`/mcp/<name>`), recorded with
-- its audit entry; NULL for a call made at `/mcp`, REST, the CLI or Rust.
ALTER TABLE audit_events ADD COLUMN via TEXT;
