//! Logging to stderr with tracing-subscriber, as text or JSON lines.

use tracing::level_filters::LevelFilter;

use crate::config::{LogFormat, LogLevel};

pub fn init(level: LogLevel, format: LogFormat) {
    let level = match level {
        LogLevel::Debug => LevelFilter::DEBUG,
        LogLevel::Info => LevelFilter::INFO,
        LogLevel::Warn => LevelFilter::WARN,
        LogLevel::Error => LevelFilter::ERROR,
    };
    let builder = tracing_subscriber::fmt().with_max_level(level).with_writer(std::io::stderr).with_target(false);
    // try_init: a second call (tests, a reload) keeps the first subscriber instead of panicking.
    let _ = match format {
        LogFormat::Text => builder.with_ansi(false).try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}
