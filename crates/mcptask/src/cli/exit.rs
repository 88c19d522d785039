//! The process exit codes, distinct so that scripts can tell a failed task
//! from a failed command. Documented in the README (CLI).

/// The command did what was asked (for `call --wait` and `tasks show
/// --follow`: the task completed).
pub const OK: i32 = 0;
/// The command itself failed: bad input, an unreachable gateway, an error
/// answer from the gateway.
pub const ERROR: i32 = 1;
// 2 is a usage error (unknown flag, missing argument): clap's own code.
/// A waited-for task (or synchronous call) failed, or completed with a tool
/// result flagged `isError`.
pub const TASK_FAILED: i32 = 3;
/// A waited-for task was cancelled.
pub const TASK_CANCELLED: i32 = 4;
/// `--timeout` passed before the waited-for task settled (it goes on).
pub const WAIT_TIMED_OUT: i32 = 5;
/// Ctrl-C while waiting (128 + SIGINT, as shells report it); the task goes on.
pub const INTERRUPTED: i32 = 130;
