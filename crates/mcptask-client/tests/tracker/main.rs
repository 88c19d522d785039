//! The tracker and the upstream layer against real servers, one binary:
//! tracking end to end over Streamable HTTP ([`tracking`]), task status
//! notifications ([`push`]), OAuth to a protected server ([`oauth`]), the reference "everything" server over stdio
//! ([`upstream_everything`]) and a SEP-2663 server ([`upstream_sep2663`]).
//! The tracker's store runs on SQLite and on a real PostgreSQL.

mod oauth;
mod push;
mod tracking;
mod upstream_everything;
mod upstream_sep2663;
