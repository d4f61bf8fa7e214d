//! Logging to stderr with tracing-subscriber, as text or JSON lines. The level can change at run
//! time (a configuration reload); the format cannot.

use std::sync::OnceLock;

use tracing::level_filters::LevelFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, Registry};

use crate::config::{LogFormat, LogLevel};

static LEVEL: OnceLock<reload::Handle<LevelFilter, Registry>> = OnceLock::new();

fn filter(level: LogLevel) -> LevelFilter {
    match level {
        LogLevel::Debug => LevelFilter::DEBUG,
        LogLevel::Info => LevelFilter::INFO,
        LogLevel::Warn => LevelFilter::WARN,
        LogLevel::Error => LevelFilter::ERROR,
    }
}

pub fn init(level: LogLevel, format: LogFormat) {
    let (level_layer, handle) = reload::Layer::new(filter(level));
    let output = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_target(false);
    let registry = tracing_subscriber::registry().with(level_layer);
    // try_init: a second call (tests) keeps the first subscriber instead of panicking.
    let installed = match format {
        LogFormat::Text => registry.with(output.with_ansi(false)).try_init(),
        LogFormat::Json => registry.with(output.json().flatten_event(true)).try_init(),
    };
    if installed.is_ok() {
        let _ = LEVEL.set(handle);
    }
}

/// Changes the level of the subscriber [`init`] installed; false when there is none.
pub fn set_level(level: LogLevel) -> bool {
    LEVEL.get().is_some_and(|handle| handle.reload(filter(level)).is_ok())
}
