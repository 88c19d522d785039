-- Configuration set through the admin API (`/api/v1/admin/…`): one row per
-- object (a `[[servers]]` table today), kept as the TOML the file would
-- hold, merged with the file and checked like it by every replica.
CREATE TABLE admin_config (
    kind       TEXT NOT NULL,
    name       TEXT NOT NULL,
    body       TEXT NOT NULL,
    changed_by TEXT NOT NULL,
    changed_at INTEGER NOT NULL,
    PRIMARY KEY (kind, name)
);
