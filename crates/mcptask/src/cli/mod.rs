//! The user-facing commands that talk to a running gateway.

pub mod answers;
pub mod audit;
pub mod client;
pub mod commands;
pub mod conformance_client;
pub mod dead_letters;
pub mod exit;
pub mod follow;
pub mod inputs;
pub mod login;
pub mod outcome;
pub mod output;
pub mod pre_task;
pub mod progress;
pub mod prompt;
pub mod servers;
pub mod setup;
pub mod tools;
