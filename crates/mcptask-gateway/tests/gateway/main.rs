//! The gateway library in this process: authorization, policy and
//! readiness against real HTTP peers and real SQLite files; the route's
//! rules at both faces of a call, on the in-process seam (`seam`); the
//! front's crash windows, injected through the store (`crash`).

mod authorization;
mod crash;
mod issuer;
mod limits;
mod oauth_config;
mod peers;
mod readiness;
mod route;
mod seam;
mod trust;
