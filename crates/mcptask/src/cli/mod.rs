//! The user-facing commands that talk to a running gateway.

pub mod client;
pub mod commands;
pub mod conformance_client;
pub mod dead_letters;
pub mod exit;
pub mod inputs;
pub mod login;
pub mod output;
pub mod pre_task;
pub mod setup;
pub mod tools;
