//! A tiny `log` backend: `-v` info, `-vv` debug, `-vvv` trace, to standard error.

use std::io::Write;

struct StderrLogger;

impl log::Log for StderrLogger {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            // A closed stderr must not turn a log line into a panic.
            let _ = writeln!(
                std::io::stderr().lock(),
                "[{} {}] {}",
                record.level().as_str().to_ascii_lowercase(),
                record.target(),
                record.args()
            );
        }
    }

    fn flush(&self) {}
}

static LOGGER: StderrLogger = StderrLogger;

/// Installs the logger; `verbosity` counts `-v`s (0: warnings and errors only).
pub fn init(verbosity: u8) {
    let level = match verbosity {
        0 => log::LevelFilter::Warn,
        1 => log::LevelFilter::Info,
        2 => log::LevelFilter::Debug,
        _ => log::LevelFilter::Trace,
    };
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(level);
    }
}
