-- OAuth credentials of upstream servers, one row per server, shared by every
-- replica on this database. `sealed` is the credentials encrypted and
-- authenticated with the operator's secret key (base64): the tokens are never
-- stored in clear. The other columns are what the refresh decisions need.
CREATE TABLE oauth_tokens (
    server        TEXT PRIMARY KEY,
    endpoint      TEXT NOT NULL,
    sealed        TEXT NOT NULL,
    expires_at    BIGINT,
    refreshable   BOOLEAN NOT NULL DEFAULT FALSE,
    issuer        TEXT,
    scopes        TEXT NOT NULL DEFAULT '',
    updated_at    BIGINT NOT NULL,
    version       BIGINT NOT NULL,
    -- The replica refreshing the token, and until when its lease holds.
    lease_owner   TEXT,
    lease_until   BIGINT,
    last_error    TEXT,
    last_error_at BIGINT
);
