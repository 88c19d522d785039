//! What a rerun says. A task's work that stopped with its process and runs
//! again starts from the beginning, so whatever progress its caller saw
//! goes back: the server side says so in the task's status message when it
//! starts the rerun, and the client side records the same words in the
//! call's timeline. One wording for both, kept apart from either side's
//! modules.

/// The status message a rerun starts with: which attempt, run by which
/// process, and why the task's progress starts again.
///
/// ```
/// use mcptask_core::attempt::rerun_message;
/// let m = rerun_message(2, "gw-b.1");
/// assert!(m.contains("attempt 2") && m.contains("gw-b.1") && m.contains("attempt 1"));
/// ```
pub fn rerun_message(attempt: i64, by: &str) -> String {
    format!(
        "Rerun as attempt {attempt} by {by}: attempt {} stopped with its server process, so the work starts again from the beginning",
        attempt - 1
    )
}
