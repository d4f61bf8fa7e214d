//! Configuration: built-in defaults, then an optional TOML file, then `MEMLOCK_EXPORTER_*`
//! environment variables, then command-line flags (each layer overrides the one before).
//!
//! The merged tree is checked against the known keys before it is deserialised, so a typo is
//! reported as "unknown key `web.listn_address` in /etc/memlock-exporter/config.toml" rather
//! than silently ignored. Validation turns the raw strings into typed values once; the rest of
//! the program only sees [`Config`].
//!
//! Here: the validated [`Config`] and its errors. The layers and their merge: `layers`; the raw
//! form the layers give (the TOML file's sections): `raw`; from raw to typed: `validate`. The
//! collectors' own sections are defined by the collectors ([`crate::collect::settings`]).

mod layers;
mod raw;
mod validate;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use thiserror::Error;

use crate::trend::TrendConfig;
use memlock_kernel::fsroot::Roots;

pub use layers::{load, Sources};
pub use validate::split_listen_address;
pub use validate::Endpoint;

// The collectors' settings live with the collectors ([`crate::collect::settings`]); named here
// too for the preflight commands, benchmarks and tests that build collectors themselves.
pub use crate::collect::cgroup::CgroupConfig;
pub use crate::collect::process::ProcessConfig;
pub use crate::collect::rdma_filter::RdmaConfig;
pub use crate::collect::settings::CollectorConfig;
pub use crate::values::parse_duration;
pub use crate::values::{bounded, shown};

/// Environment variables with this prefix override the file: `MEMLOCK_EXPORTER_WEB__LISTEN_ADDRESS`
/// sets `web.listen_address` (a double underscore separates levels).
pub(crate) const ENV_PREFIX: &str = "MEMLOCK_EXPORTER";

// Every part of a message is bounded ([`bounded`], which says why).
#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("config file {}: {}", path.display(), bounded(.message))]
    File { path: PathBuf, message: String },
    #[error("unknown configuration key `{}` (set in {}){}", bounded(.key), bounded(.origin), bounded(.hint))]
    UnknownKey { key: String, origin: String, hint: String },
    #[error("invalid value for `{}` (set in {}): {}", bounded(.key), bounded(.origin), bounded(.message))]
    Invalid { key: String, origin: String, message: String },
    #[error("configuration: {}", bounded(.0))]
    Other(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    Debug,
    Info,
    Warn,
    Error,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AlertingConfig {
    pub alertmanager_urls: Vec<String>,
    pub instance: String,
    pub exhaustion_critical: Duration,
    pub usage_ratio_warning: f64,
    pub(crate) resend_interval: Duration,
    pub resolve_after: Duration,
    pub timeout: Duration,
    pub runbook_url: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub listen_address: String,
    pub telemetry_path: String,
    /// The web configuration file (TLS, basic auth), if any.
    pub web_config_file: Option<PathBuf>,
    /// 0: no limit.
    pub max_requests: usize,
    /// 0: no limit.
    pub max_response_bytes: usize,
    pub roots: Roots,
    pub collectors: Vec<CollectorConfig>,
    pub log_level: LogLevel,
    pub log_format: LogFormat,
    pub trend: TrendConfig,
    pub alerting: AlertingConfig,
    /// At most this many series per scrape ([`crate::budget`]); 0: no limit.
    pub series_limit: usize,
    /// The file the configuration came from, if any (for reload and messages).
    pub file: Option<PathBuf>,
    /// The keys that file sets (`alerting.alertmanager_urls`), so a reload can tell a file that
    /// lost its settings from one that changed them ([`refuse_failing_open`]).
    pub(crate) file_keys: BTreeSet<String>,
}

impl Config {
    pub fn collector(&self, name: &str) -> Option<&CollectorConfig> {
        self.collectors.iter().find(|c| c.name == name)
    }

    /// The own settings of the collector `name`, if they are of type `T` (`ProcessConfig`).
    pub fn settings<T: 'static>(&self, name: &str) -> Option<&T> {
        self.collector(name)?.settings()
    }
}

/// Refuses a reload that would fail open: a configuration file emptied or truncated
/// by a bad deploy loads as "all defaults", and the defaults have no Alertmanager, so the fast
/// path would stop paging while every gauge looked healthy. Refused:
/// - a file with no settings left (empty, blanks or comments only) when the running
///   configuration had some from it: running on the defaults on purpose takes a restart;
/// - a reload that turns the fast path off without saying so: the file must set
///   `alerting.alertmanager_urls = []` (a truncation cannot write that line), or restart.
///
/// The error names the file and the key; the running configuration is kept.
pub fn refuse_failing_open(running: &Config, new: &Config) -> Result<(), ConfigError> {
    if let Some(path) = &new.file {
        if new.file_keys.is_empty() && !running.file_keys.is_empty() {
            return Err(ConfigError::File {
                path: path.clone(),
                message: format!(
                    "has no settings left (emptied or truncated?) where the running configuration had {} from it; a \
                        reload keeps the running configuration: to run on the built-in defaults on purpose, restart \
                        the exporter",
                    running.file_keys.len()
                ),
            });
        }
    }
    const URLS: &str = "alerting.alertmanager_urls";
    if !running.alerting.alertmanager_urls.is_empty()
        && new.alerting.alertmanager_urls.is_empty()
        && !new.file_keys.contains(URLS)
    {
        let origin = new.file.as_ref().map_or_else(|| "the built-in defaults".into(), |p| p.display().to_string());
        return Err(ConfigError::Invalid {
            key: URLS.into(),
            origin,
            message: format!(
                "a reload cannot switch the fast path off by leaving the key out (was {}; a truncated file?): set \
                    `{URLS} = []` in the file to switch it off on purpose, or restart the exporter",
                running.alerting.alertmanager_urls.join(",")
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
