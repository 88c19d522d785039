//! Standard output for commands whose output is often piped (`| head`,
//! `| grep -m1`). `println!` panics when the reader has gone away; a closed
//! pipe is the reader saying "enough", so it ends the process quietly with
//! exit status 0 instead.

use std::io::{ErrorKind, Write};

/// Write `args` to standard output and flush; a closed pipe exits with 0.
pub fn write(args: std::fmt::Arguments<'_>) {
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout.write_fmt(args).and_then(|()| stdout.flush()) {
        if e.kind() == ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        // Anything else (a full disk behind a redirect) is worth a message,
        // not a panic.
        eprintln!("error: cannot write to standard output: {e}");
        std::process::exit(1);
    }
}

/// `println!` that ends quietly on a closed pipe.
macro_rules! outln {
    () => { $crate::cli::output::write(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::cli::output::write(format_args!("{}\n", format_args!($($arg)*))) };
}

pub(crate) use outln;
