//! The gateway library in this process: authorization, policy and
//! readiness against real HTTP peers and real SQLite files.

mod authorization;
mod issuer;
mod limits;
mod oauth_config;
mod readiness;
mod trust;
