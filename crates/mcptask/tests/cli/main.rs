//! The binary as a user runs it, one binary: the command line ([`cli`]), its
//! errors ([`cli_errors`]), `mcptask login` ([`login`]), `mcptask migrate` ([`migrate`]) and the demo
//! server over stdio ([`stdio`]), `proxy --stdio` against a host that
//! misbehaves ([`proxy_stdio_bounds`]), `servers` and `config export` against
//! the admin API ([`servers`]), and `call --wait` as a person waits on it
//! ([`wait`]).

mod cli;
mod cli_errors;
mod login;
mod migrate;
mod outcomes;
mod proxy_stdio_bounds;
mod servers;
mod stdio;
mod wait;
