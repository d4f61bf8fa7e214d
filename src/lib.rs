//! memlock-exporter's binary: the command line, the daemon's wiring (its own metrics, reload,
//! systemd's notify protocol and watchdog, logging) and the HTTP endpoints.

pub mod cli;
pub mod heap;
pub mod logging;
pub mod reload;
pub mod sdnotify;
pub mod serve;
