//! `mcptask demo`: the demo server and a gateway in one process.

pub mod walkthrough;
