//! Command output on stdout that survives its reader going away.
//!
//! `println!` panics when stdout is a pipe whose reader has exited
//! (`solus health | head -1`: "failed printing to stdout: Broken pipe").
//! Rust ignores SIGPIPE, so the write fails with `EPIPE` instead of ending
//! the process as it ends C tools. The reader has everything it wanted, so
//! the command ends quietly with success, as ripgrep does.

use std::io::{ErrorKind, Write};

/// Writes `args` to stdout (no newline added). On `EPIPE` (`ErrorKind::BrokenPipe`)
/// the process exits with status 0 at once; on any other write error it
/// prints `error: writing to stdout: ...` on stderr and exits with status 1.
pub fn write_stdout(args: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    // Flush here: stdout is line-buffered, and a failure must surface at the
    // write that caused it, not at exit where std would drop it silently.
    if let Err(e) = out.write_fmt(args).and_then(|()| out.flush()) {
        if e.kind() == ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: writing to stdout: {e}");
        std::process::exit(1);
    }
}

/// `println!` for command output: see [`write_stdout`].
macro_rules! outln {
    () => {
        $crate::cli::output::write_stdout(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::cli::output::write_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` for command output: see [`write_stdout`].
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::output::write_stdout(format_args!($($arg)*))
    };
}
