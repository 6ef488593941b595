//! Standard output that never panics: a closed pipe ends the program quietly (exit 0),
//! any other write error (a full disk, `/dev/full`) becomes an error message.

use std::io::Write;

/// Writes `args` to standard output. A broken pipe (`sluice info | head -1`) exits 0
/// at once; other errors are returned as a message.
pub fn write(args: std::fmt::Arguments<'_>) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    out.write_fmt(args).map_err(io_error)
}

/// Flushes standard output (same error rules as [`write`]).
pub fn flush() -> Result<(), String> {
    std::io::stdout().flush().map_err(io_error)
}

/// Maps a stdout error: broken pipe -> quiet exit, otherwise a message.
pub fn io_error(e: std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    format!("cannot write to standard output: {e}")
}

/// `print!` that returns `Err(String)` instead of panicking.
#[macro_export]
macro_rules! out {
    ($($t:tt)*) => { $crate::out::write(format_args!($($t)*)) };
}

/// `println!` that returns `Err(String)` instead of panicking.
#[macro_export]
macro_rules! outln {
    () => { $crate::out::write(format_args!("\n")) };
    ($($t:tt)*) => { $crate::out::write(format_args!("{}\n", format_args!($($t)*))) };
}
