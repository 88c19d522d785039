//! Crash points for the fault tests: a process started with
//! `MCPTASK_TEST_CRASH_AT=<point>` aborts where the code names that point,
//! leaving its store as a SIGKILL at that instant would (no drain, no
//! release). The windows they open are too narrow to hit with a signal from
//! outside. Without the variable (production) a crash point does nothing.

use std::sync::OnceLock;

/// The environment variable naming the point to abort at.
pub const CRASH_AT: &str = "MCPTASK_TEST_CRASH_AT";

/// Abort the process here if [`CRASH_AT`] names `point`.
pub(crate) fn crash_point(point: &str) {
    static AT: OnceLock<Option<String>> = OnceLock::new();
    let at = AT.get_or_init(|| std::env::var(CRASH_AT).ok().filter(|v| !v.is_empty()));
    if at.as_deref() == Some(point) {
        eprintln!("{CRASH_AT}={point}: aborting the process here");
        std::process::abort();
    }
}
