-- OAuth credentials of upstream servers, one row per server, shared by every
-- replica on this database. `sealed` is the credentials encrypted and
-- authenticated with the operator's secret key (base64): the tokens are never
-- stored in clear. The other columns are what the refresh decisions need.
CREATE TABLE oauth_tokens (
    server        TEXT PRIMARY KEY,
    endpoint      TEXT NOT NULL,
    sealed        TEXT NOT NULL,
    expires_at    INTEGER,
    refreshable   INTEGER NOT NULL DEFAULT 0,
    issuer        TEXT,
    scopes        TEXT NOT NULL DEFAULT '',
    updated_at    INTEGER NOT NULL,
    version       INTEGER NOT NULL,
    -- The replica refreshing the token, and until when its lease holds.
    lease_owner   TEXT,
    lease_until   INTEGER,
    last_error    TEXT,
    last_error_at INTEGER
);
