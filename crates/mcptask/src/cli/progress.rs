//! The progress line of a command that waits (a call under way, a call
//! followed to its end): on a terminal, one line redrawn in place with a
//! spinner and the elapsed time; otherwise a plain line every few seconds,
//! so a log shows the wait without filling up.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

const SPINNER: [&str; 8] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧"];

/// How often a waiting command redraws its line.
pub const TICK: Duration = Duration::from_millis(250);

/// Off a terminal, one line every this many ticks (5 s).
const PLAIN_EVERY: usize = 20;

/// Where a progress line is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Show {
    /// Nowhere (`--json`: standard error carries notes only).
    Never,
    /// On a terminal only (a call that does not wait: a script's log
    /// stays as it was).
    OnTerminal,
    /// On a terminal, and as a plain line every few seconds elsewhere.
    Always,
}

/// A progress line on standard error.
pub struct Progress {
    /// Shown at all.
    shown: bool,
    /// Redrawn in place (standard error is a terminal).
    live: bool,
    ticks: AtomicUsize,
    /// A live line is on the screen and must be erased before other output.
    drawn: AtomicBool,
}

impl Progress {
    /// A line on standard error, shown as `show` says.
    pub fn new(show: Show) -> Self {
        let live = std::io::stderr().is_terminal();
        Progress {
            shown: match show {
                Show::Never => false,
                Show::OnTerminal => live,
                Show::Always => true,
            },
            live,
            ticks: AtomicUsize::new(0),
            drawn: AtomicBool::new(false),
        }
    }

    /// Show `what` has been going on for `elapsed` (call once per [`TICK`]).
    pub fn tick(&self, what: &str, elapsed: Duration) {
        if !self.shown {
            return;
        }
        let tick = self.ticks.fetch_add(1, Ordering::Relaxed);
        let line = format!(
            "{} {what} ({:.0}s)",
            SPINNER[tick % SPINNER.len()],
            elapsed.as_secs_f64()
        );
        if self.live {
            eprint!("\r\x1b[2K{line}");
            let _ = std::io::stderr().flush();
            self.drawn.store(true, Ordering::Relaxed);
        } else if tick.is_multiple_of(PLAIN_EVERY) {
            eprintln!("{line}");
        }
    }

    /// Erase a live line, so that what is printed next starts a clean line.
    pub fn clear(&self) {
        if self.drawn.swap(false, Ordering::Relaxed) {
            eprint!("\r\x1b[2K");
            let _ = std::io::stderr().flush();
        }
    }

    /// Tick until dropped (while something else is awaited): `what` and the
    /// time since `started`. Off a terminal the first line comes after a
    /// few seconds: a request answered at once leaves no line in a log.
    pub async fn run(&self, what: &str, started: std::time::Instant) {
        if !self.live {
            self.ticks.fetch_add(1, Ordering::Relaxed);
        }
        loop {
            self.tick(what, started.elapsed());
            tokio::time::sleep(TICK).await;
        }
    }
}
