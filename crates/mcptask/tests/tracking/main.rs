//! Tracking that survives processes, one binary: a tracker against the real
//! demo server ([`tracker_e2e`]), four tracker processes killed at random on
//! one PostgreSQL ([`tracker_chaos`]), submit/status/cancel toolsets
//! ([`toolset`]), a server restarted under its tasks ([`restart`]) and two
//! server replicas on one PostgreSQL ([`replicas_pg`]).

mod replicas_pg;
mod restart;
mod toolset;
mod tracker_chaos;
mod tracker_e2e;
