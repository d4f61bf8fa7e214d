//! Configuration: built-in defaults, then an optional TOML file, then `MEMLOCK_EXPORTER_*`
//! environment variables, then command-line flags (each layer overrides the one before).
//!
//! The merged tree is checked against the known keys before it is deserialised, so a typo is
//! reported as "unknown key `web.listn_address` in /etc/memlock-exporter/config.toml" rather
//! than silently ignored. Validation turns the raw strings into typed values once; the rest of
//! the program only sees [`Config`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use config::{Environment, File, FileFormat, Map, Value, ValueKind};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::collect::settings::Refused;
use crate::collect::{Registration, REGISTRY};
use crate::fsroot::Roots;
use crate::trend::TrendConfig;

// The collectors' settings live with the collectors ([`crate::collect::settings`]); named here
// too for the preflight commands, benchmarks and tests that build collectors themselves.
pub use crate::collect::cgroup::CgroupConfig;
pub use crate::collect::process::ProcessConfig;
pub use crate::collect::rdma_filter::RdmaConfig;
pub use crate::collect::settings::CollectorConfig;
pub use crate::values::{bounded, parse_duration, shown};

/// Environment variables with this prefix override the file: `MEMLOCK_EXPORTER_WEB__LISTEN_ADDRESS`
/// sets `web.listen_address` (a double underscore separates levels).
pub const ENV_PREFIX: &str = "MEMLOCK_EXPORTER";

// Every part of a message is bounded ([`bounded`]): a value, a key or a parser's message may
// be as long as the file (issue 24: a 900 KB value came back whole, twice for a regex).
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

// ---------------------------------------------------------------------------------------------
// Raw layer: what the file, the environment and the flags may say. Every field has a default,
// and the serialised defaults double as the list of known keys.

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawConfig {
    pub web: RawWeb,
    pub path: RawPaths,
    /// `[collector.<name>]`, read section by section against the registry ([`collector_sections`]).
    #[serde(skip_serializing)]
    pub collector: serde::de::IgnoredAny,
    pub trend: RawTrend,
    pub alerting: RawAlerting,
    pub log: RawLog,
    pub series: RawSeries,
}

/// The series budget ([`crate::budget`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawSeries {
    /// At most this many series per scrape, the ones that page first; 0: no limit.
    pub limit: u64,
}

impl Default for RawSeries {
    fn default() -> Self {
        Self { limit: crate::budget::DEFAULT_LIMIT }
    }
}

/// Trend analysis of the node, cgroup and process scopes.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawTrend {
    /// How far back the rise is fitted.
    pub window: String,
    /// Slower rises are not reported as rising (noise floor).
    pub min_rise_bytes_per_second: u64,
    /// The node scope predicts when MemAvailable falls to this fraction of MemTotal.
    pub node_memory_available_floor_ratio: f64,
}

impl Default for RawTrend {
    fn default() -> Self {
        Self {
            window: "30s".into(),
            min_rise_bytes_per_second: 4096,
            node_memory_available_floor_ratio: TrendConfig::default().node_memory_available_floor_ratio,
        }
    }
}

/// The fast path: alerts sent straight to Alertmanager from the 1 s samples.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawAlerting {
    /// Alertmanager base URLs (http://host:9093). Empty: the fast path is off.
    pub alertmanager_urls: Vec<String>,
    /// The `instance` label of the alerts; empty: the node's hostname.
    pub instance: String,
    /// Predicted exhaustion within this many seconds is critical.
    pub exhaustion_critical_seconds: u64,
    /// Usage of a limit at or above this ratio is a warning.
    pub usage_ratio_warning: f64,
    /// Active alerts are sent again this often (Alertmanager expires alerts it stops hearing of).
    pub resend_interval: String,
    /// A condition must be gone this long before its alert resolves (no flapping).
    pub resolve_after: String,
    /// Per request.
    pub timeout: String,
    /// Runbook anchors are appended to this URL (`#memlockprocesslimitexhaustionimminent`).
    pub runbook_url: String,
}

impl Default for RawAlerting {
    fn default() -> Self {
        Self {
            alertmanager_urls: Vec::new(),
            instance: String::new(),
            exhaustion_critical_seconds: 120,
            usage_ratio_warning: 0.9,
            resend_interval: "30s".into(),
            resolve_after: "5s".into(),
            timeout: "5s".into(),
            runbook_url: DEFAULT_RUNBOOK_URL.into(),
        }
    }
}

/// Where docs/runbooks.md is published.
pub const DEFAULT_RUNBOOK_URL: &str = "https://github.com/memlock-exporter/memlock-exporter/blob/main/docs/runbooks.md";

impl RawConfig {
    /// The defaults with every list given one element: the `config` crate drops empty lists
    /// when it serialises, and the key check must still know that those keys exist.
    fn key_template() -> Self {
        let mut t = Self::default();
        t.alerting.alertmanager_urls = vec![String::new()];
        t
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawWeb {
    pub listen_address: String,
    pub telemetry_path: String,
    /// TLS and basic auth, in the Prometheus exporter-toolkit format; empty: plain HTTP, no auth.
    pub config_file: String,
    /// Requests served at the same time; more get 503 at once. 0: no limit.
    pub max_requests: u64,
    /// Bytes of snapshot text that responses in flight may keep alive. 0: no limit.
    pub max_response_bytes: u64,
}

impl Default for RawWeb {
    fn default() -> Self {
        Self {
            listen_address: ":9478".into(),
            telemetry_path: "/metrics".into(),
            config_file: String::new(),
            max_requests: 40,
            max_response_bytes: 64 << 20,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawPaths {
    pub procfs: String,
    pub sysfs: String,
}

impl Default for RawPaths {
    fn default() -> Self {
        Self { procfs: "/proc".into(), sysfs: "/sys".into() }
    }
}

/// The `[collector.<name>]` section of every registered collector with its defaults:
/// `enabled` and `interval` from the registry, the collector's own keys from its settings
/// (`template`: with every list given one element, for the key check).
fn collector_sections(template: bool) -> Result<Map<String, Value>, config::ConfigError> {
    let mut sections = Map::new();
    for registration in REGISTRY {
        let mut keys = registration.settings.defaults(template)?;
        keys.insert("enabled".into(), Value::from(registration.default_enabled));
        keys.insert("interval".into(), Value::from(registration.default_interval));
        sections.insert(registration.name.to_owned(), Value::from(keys));
    }
    Ok(sections)
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawLog {
    pub level: String,
    pub format: String,
}

impl Default for RawLog {
    fn default() -> Self {
        Self { level: "info".into(), format: "text".into() }
    }
}

// ---------------------------------------------------------------------------------------------
// Validated layer.

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
    pub resend_interval: Duration,
    pub resolve_after: Duration,
    pub timeout: Duration,
    pub runbook_url: String,
}

#[derive(Debug, Clone)]
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
    pub file_keys: BTreeSet<String>,
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

/// Where each layer comes from. Flags arrive as `(key, value)` pairs already named like the
/// file's keys (`collector.node.enabled`).
#[derive(Debug, Default, Clone)]
pub struct Sources {
    pub file: Option<PathBuf>,
    /// `None` reads the process environment; tests pass a map.
    pub env: Option<BTreeMap<String, String>>,
    pub flags: Vec<(String, Value)>,
}

/// Builds and validates the configuration from its layers.
pub fn load(sources: &Sources) -> Result<Config, ConfigError> {
    let other = |e: config::ConfigError| ConfigError::Other(e.to_string());
    let defaults = config::Config::try_from(&RawConfig::default()).map_err(other)?;
    let mut builder = config::Config::builder()
        .set_default("collector", Value::from(collector_sections(false).map_err(other)?))
        .map_err(other)?
        .add_source(defaults);
    let mut file_keys = Map::new();
    if let Some(path) = &sources.file {
        // Read it ourselves so a missing file, a directory or bad TOML names the file.
        // A reload runs on the daemon's event loop: the reader does not block on a FIFO.
        let text = crate::fsroot::read_regular_text(path, crate::fsroot::MAX_FILE_BYTES)
            .map_err(|e| ConfigError::File { path: path.clone(), message: e.detail() })?;
        let file = File::from_str(&text, FileFormat::Toml).required(true);
        file_keys = config::Source::collect(&file)
            .map_err(|e| ConfigError::File { path: path.clone(), message: e.to_string() })?;
        builder = builder.add_source(file);
    }
    let mut env = Environment::with_prefix(ENV_PREFIX).prefix_separator("_").separator("__").try_parsing(true);
    if let Some(map) = &sources.env {
        env = env.source(Some(map.iter().map(|(k, v)| (k.clone(), v.clone())).collect::<Map<_, _>>()));
    }
    let env_keys = config::Source::collect(&env).map_err(other)?;
    builder = builder.add_source(env);
    for (key, value) in &sources.flags {
        builder = builder.set_override(key.as_str(), value.clone()).map_err(other)?;
    }
    let merged = builder.build().map_err(other)?;

    let origin_of = |key: &str| -> String {
        if sources.flags.iter().any(|(k, _)| k == key) {
            format!("the command-line flags ({})", flag_name(key))
        } else if env_keys.contains_key(key) {
            format!("the environment ({ENV_PREFIX}_{})", key.to_uppercase().replace('.', "__"))
        } else if let (Some(path), true) = (&sources.file, lookup(&file_keys, key)) {
            path.display().to_string()
        } else {
            "the built-in defaults".into()
        }
    };
    let mut known = config::Source::collect(&config::Config::try_from(&RawConfig::key_template()).map_err(other)?)
        .map_err(other)?;
    known.insert("collector".into(), Value::from(collector_sections(true).map_err(other)?));
    let given = config::Source::collect(&merged).map_err(other)?;
    check_known_keys("", &given, &known, &origin_of)?;

    let raw: RawConfig = merged.try_deserialize().map_err(|e| type_error(e, "", &origin_of))?;
    let sections = given.get("collector").cloned().unwrap_or_else(|| Value::from(Map::<String, Value>::new()));
    let mut config = validate(raw, sections, sources.file.clone(), &origin_of)?;
    leaf_keys("", &file_keys, &mut config.file_keys);
    Ok(config)
}

/// The dotted names of every value in a nested table (an empty list counts: it is a value).
fn leaf_keys(prefix: &str, table: &Map<String, Value>, out: &mut BTreeSet<String>) {
    for (name, value) in table {
        let key = if prefix.is_empty() { name.clone() } else { format!("{prefix}.{name}") };
        match &value.kind {
            ValueKind::Table(inner) if !inner.is_empty() => leaf_keys(&key, inner, out),
            _ => {
                out.insert(key);
            }
        }
    }
}

/// Refuses a reload that would fail open (issue 24): a configuration file emptied or truncated
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

/// Whether a dotted key is present in a nested table.
fn lookup(table: &Map<String, Value>, key: &str) -> bool {
    let mut current = table;
    let mut parts = key.split('.').peekable();
    while let Some(part) = parts.next() {
        match current.get(part) {
            None => return false,
            Some(_) if parts.peek().is_none() => return true,
            Some(Value { kind: ValueKind::Table(inner), .. }) => current = inner,
            Some(_) => return false,
        }
    }
    false
}

/// The flag that sets a key, for messages (`web.listen_address` -> `--web.listen-address`).
pub fn flag_name(key: &str) -> String {
    format!("--{}", key.replace('_', "-"))
}

fn check_known_keys(
    prefix: &str,
    given: &Map<String, Value>,
    known: &Map<String, Value>,
    origin_of: &dyn Fn(&str) -> String,
) -> Result<(), ConfigError> {
    for (name, value) in given {
        let key = if prefix.is_empty() { name.clone() } else { format!("{prefix}.{name}") };
        let Some(expected) = known.get(name) else {
            let mut names: Vec<&str> = known.keys().map(String::as_str).collect();
            names.sort_unstable();
            let section = if prefix.is_empty() { "at the top level".to_owned() } else { format!("in [{prefix}]") };
            return Err(ConfigError::UnknownKey {
                origin: origin_of(&key),
                key,
                hint: format!("; known keys {section}: {}", names.join(", ")),
            });
        };
        if let (ValueKind::Table(given_table), ValueKind::Table(known_table)) = (&value.kind, &expected.kind) {
            check_known_keys(&key, given_table, known_table, origin_of)?;
        }
    }
    Ok(())
}

/// A value of the wrong type, named by its whole key: `prefix` (`collector.process`, or empty)
/// before the key the error carries, which is relative to what was deserialized.
fn type_error(err: config::ConfigError, prefix: &str, origin_of: &dyn Fn(&str) -> String) -> ConfigError {
    let within = match &err {
        config::ConfigError::Type { key, .. } | config::ConfigError::At { key, .. } => key.clone(),
        _ => None,
    };
    let key = match within {
        Some(key) if prefix.is_empty() => key,
        // An element of a list: `include[0]`.
        Some(key) if key.starts_with('[') => format!("{prefix}{key}"),
        Some(key) => format!("{prefix}.{key}"),
        None if prefix.is_empty() => return ConfigError::Other(err.to_string()),
        None => prefix.to_owned(),
    };
    let message = match err {
        config::ConfigError::Type { unexpected, expected, .. } => format!("found {unexpected}, expected {expected}"),
        // serde's own errors (a string where a list belongs) arrive wrapped with the key.
        config::ConfigError::At { error, .. } => match *error {
            config::ConfigError::Type { unexpected, expected, .. } => {
                format!("found {unexpected}, expected {expected}")
            }
            inner => inner.to_string(),
        },
        other => other.to_string(),
    };
    ConfigError::Invalid { origin: origin_of(&key), key, message }
}

/// Every registered collector's `enabled`, `interval` and own settings, from the merged
/// `[collector]` table. Each error names the whole key (`collector.process.top_n`).
fn collectors(sections: Value, origin_of: &dyn Fn(&str) -> String) -> Result<Vec<CollectorConfig>, ConfigError> {
    let invalid = |key: String, message: String| ConfigError::Invalid { origin: origin_of(&key), key, message };
    let mut sections =
        Map::<String, Value>::deserialize(sections).map_err(|e| type_error(e, "collector", origin_of))?;
    // Intervals first, then the collectors' own settings, each in registry order.
    struct Common {
        registration: &'static Registration,
        prefix: String,
        enabled: bool,
        interval: String,
        own: Map<String, Value>,
    }
    let mut common = Vec::new();
    for registration in REGISTRY {
        let name = registration.name;
        let prefix = format!("collector.{name}");
        let section = sections.remove(name).unwrap_or_else(|| Value::from(Map::<String, Value>::new()));
        let ValueKind::Table(mut own) = section.kind.clone() else {
            // Not a table: refused as the whole section's type, named by the collector's own.
            let message = match registration.settings.validate(section) {
                Err(Refused::Type(e)) => return Err(type_error(e, &prefix, origin_of)),
                _ => "must be a table".to_owned(),
            };
            return Err(invalid(prefix, message));
        };
        // Both are in the defaults, which the layers only add to.
        let mut take = |key: &str| -> Result<(Value, String), ConfigError> {
            let full = format!("{prefix}.{key}");
            match own.remove(key) {
                Some(value) => Ok((value, full)),
                None => Err(invalid(full, "missing".into())),
            }
        };
        let (value, key) = take("enabled")?;
        let enabled = bool::deserialize(value).map_err(|e| type_error(e, &key, origin_of))?;
        let (value, key) = take("interval")?;
        let interval = String::deserialize(value).map_err(|e| type_error(e, &key, origin_of))?;
        common.push(Common { registration, prefix, enabled, interval, own });
    }
    let mut intervals = Vec::new();
    for c in &common {
        let key = format!("{}.interval", c.prefix);
        intervals.push(crate::values::interval(&c.interval).map_err(|m| invalid(key, m))?);
    }
    let mut collectors = Vec::new();
    for (Common { registration, prefix, enabled, own, .. }, interval) in common.into_iter().zip(intervals) {
        let settings = registration.settings.validate(Value::from(own)).map_err(|refused| match refused {
            Refused::Type(e) => type_error(e, &prefix, origin_of),
            Refused::Invalid(e) => invalid(format!("{prefix}.{}", e.key), e.message),
        })?;
        collectors.push(CollectorConfig { name: registration.name, enabled, interval, settings });
    }
    Ok(collectors)
}

fn validate(
    raw: RawConfig,
    sections: Value,
    file: Option<PathBuf>,
    origin_of: &dyn Fn(&str) -> String,
) -> Result<Config, ConfigError> {
    let invalid =
        |key: &str, message: String| ConfigError::Invalid { key: key.into(), origin: origin_of(key), message };

    if raw.web.listen_address.trim().is_empty() {
        return Err(invalid(
            "web.listen_address",
            "must not be empty (for example \":9478\" or \"127.0.0.1:9478\")".into(),
        ));
    }
    split_listen_address(&raw.web.listen_address).map_err(|m| invalid("web.listen_address", m))?;
    if !raw.web.telemetry_path.starts_with('/') || raw.web.telemetry_path.len() < 2 {
        return Err(invalid(
            "web.telemetry_path",
            format!("{} must start with '/' and name a path", shown(&raw.web.telemetry_path)),
        ));
    }
    if !matchable_path(&raw.web.telemetry_path) {
        return Err(invalid(
            "web.telemetry_path",
            format!(
                "{} can never match a request: no query ('?'), fragment ('#'), spaces or control characters",
                shown(&raw.web.telemetry_path)
            ),
        ));
    }
    if matches!(raw.web.telemetry_path.as_str(), "/-/healthy" | "/-/ready") {
        // The telemetry path is matched first: the probe would be answered with a scrape,
        // slow and refused under load where a probe must not be (issue 24).
        return Err(invalid(
            "web.telemetry_path",
            format!("{} is the liveness or readiness probe's path: choose another", shown(&raw.web.telemetry_path)),
        ));
    }
    for (key, path) in [("path.procfs", &raw.path.procfs), ("path.sysfs", &raw.path.sysfs)] {
        if path.is_empty() {
            return Err(invalid(key, "must not be empty".into()));
        }
    }
    let interval = |key: &str, text: &str| -> Result<Duration, ConfigError> {
        crate::values::interval(text).map_err(|m| invalid(key, m))
    };
    let collectors = collectors(sections, origin_of)?;
    let window = parse_duration(&raw.trend.window).map_err(|m| invalid("trend.window", m))?;
    if window < Duration::from_secs(3) || window > Duration::from_secs(3600) {
        return Err(invalid("trend.window", format!("{} is outside 3s..1h", shown(&raw.trend.window))));
    }
    let floor = raw.trend.node_memory_available_floor_ratio;
    if !(0.0..0.5).contains(&floor) {
        return Err(invalid("trend.node_memory_available_floor_ratio", format!("{floor} is not in [0, 0.5)")));
    }
    let trend = TrendConfig {
        window,
        min_rise_bytes_per_second: raw.trend.min_rise_bytes_per_second as f64,
        node_memory_available_floor_ratio: floor,
        ..TrendConfig::default()
    };

    let a = &raw.alerting;
    for url in &a.alertmanager_urls {
        Endpoint::parse(url).map_err(|m| invalid("alerting.alertmanager_urls", m))?;
    }
    if !(a.usage_ratio_warning > 0.0 && a.usage_ratio_warning <= 1.0) {
        return Err(invalid("alerting.usage_ratio_warning", format!("{} is not in (0, 1]", a.usage_ratio_warning)));
    }
    let alerting = AlertingConfig {
        alertmanager_urls: a.alertmanager_urls.clone(),
        instance: a.instance.clone(),
        exhaustion_critical: Duration::from_secs(a.exhaustion_critical_seconds),
        usage_ratio_warning: a.usage_ratio_warning,
        resend_interval: interval("alerting.resend_interval", &a.resend_interval)?,
        resolve_after: parse_duration(&a.resolve_after).map_err(|m| invalid("alerting.resolve_after", m))?,
        timeout: interval("alerting.timeout", &a.timeout)?,
        runbook_url: a.runbook_url.clone(),
    };

    let log_level = match raw.log.level.to_ascii_lowercase().as_str() {
        "debug" => LogLevel::Debug,
        "info" => LogLevel::Info,
        "warn" | "warning" => LogLevel::Warn,
        "error" => LogLevel::Error,
        other => return Err(invalid("log.level", format!("{} is not one of debug, info, warn, error", shown(other)))),
    };
    let log_format = match raw.log.format.to_ascii_lowercase().as_str() {
        "text" | "logfmt" => LogFormat::Text,
        "json" => LogFormat::Json,
        other => return Err(invalid("log.format", format!("{} is not one of text, json", shown(other)))),
    };
    Ok(Config {
        listen_address: raw.web.listen_address,
        telemetry_path: raw.web.telemetry_path,
        web_config_file: (!raw.web.config_file.is_empty()).then(|| PathBuf::from(&raw.web.config_file)),
        max_requests: usize::try_from(raw.web.max_requests).unwrap_or(usize::MAX),
        max_response_bytes: usize::try_from(raw.web.max_response_bytes).unwrap_or(usize::MAX),
        roots: Roots { procfs: PathBuf::from(raw.path.procfs), sysfs: PathBuf::from(raw.path.sysfs) },
        collectors,
        log_level,
        log_format,
        trend,
        alerting,
        series_limit: usize::try_from(raw.series.limit).unwrap_or(usize::MAX),
        file,
        file_keys: BTreeSet::new(),
    })
}

/// Splits a Go-style listen address: `:9478` (all interfaces), `host:port`, `[v6]:port`.
pub fn split_listen_address(address: &str) -> Result<(Option<String>, u16), String> {
    let (host, port) = address
        .rsplit_once(':')
        .ok_or_else(|| format!("{} has no port (expected host:port or :port)", shown(address)))?;
    let port: u16 = port
        .parse()
        .map_err(|_| format!("{}: port {} is not a number from 0 to 65535", shown(address), shown(port)))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Ok(((!host.is_empty()).then(|| host.to_owned()), port))
}

/// An Alertmanager to deliver to: `http://host:port[/prefix]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub base: String,
}

impl Endpoint {
    pub fn parse(url: &str) -> Result<Endpoint, String> {
        let rest = url.strip_prefix("http://").ok_or_else(|| {
            format!("{} must start with http:// (https to Alertmanager is not supported yet)", shown(url))
        })?;
        let authority = rest.split('/').next().unwrap_or("");
        if authority.is_empty() || authority.contains('@') {
            return Err(format!("{} has no host (or has credentials, which are not supported)", shown(url)));
        }
        let uri: hyper::Uri = url.parse().map_err(|e| format!("{} is not a valid URL: {e}", shown(url)))?;
        let _ = uri;
        Ok(Endpoint { base: url.trim_end_matches('/').to_owned() })
    }

    pub fn alerts_url(&self) -> String {
        format!("{}/api/v2/alerts", self.base)
    }
}

/// Whether a request can reach `path`: the server compares it with the path of the request
/// target as hyper has it, parsed by the `http` crate (a `PathAndQuery`, without the query;
/// a fragment is cut off, spaces and control characters are refused), so it must be exactly
/// such a path (issue 15: "/metrics?x" or "/a b" were accepted and never served).
fn matchable_path(path: &str) -> bool {
    path.parse::<hyper::http::uri::PathAndQuery>().is_ok_and(|parsed| parsed.path() == path && parsed.query().is_none())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_temp(name: &str, text: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("memlock-config-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("config.toml");
        std::fs::write(&path, text).unwrap();
        path
    }

    fn load_with(
        file: Option<PathBuf>,
        env: &[(&str, &str)],
        flags: Vec<(String, Value)>,
    ) -> Result<Config, ConfigError> {
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        load(&Sources { file, env: Some(env), flags })
    }

    #[test]
    fn defaults_need_no_file() {
        let cfg = load_with(None, &[], vec![]).unwrap();
        assert_eq!(cfg.listen_address, ":9478");
        assert_eq!(cfg.telemetry_path, "/metrics");
        assert_eq!(cfg.max_response_bytes, 64 << 20, "the budget docs/reliability.md measured");
        assert_eq!(cfg.roots.procfs, PathBuf::from("/proc"));
        assert_eq!(cfg.collector("node").unwrap().interval, Duration::from_secs(1));
        assert!(cfg.collector("numa").unwrap().enabled);
        assert_eq!(cfg.log_level, LogLevel::Info);
    }

    #[test]
    fn layers_override_in_order_file_env_flags() {
        let path = write_temp(
            "layers",
            "[web]\nlisten_address = \"127.0.0.1:1\"\n[log]\nlevel \
            = \"debug\"\n[collector.numa]\nenabled = false\ninterval = \"5s\"\n",
        );
        let cfg = load_with(
            Some(path.clone()),
            &[("MEMLOCK_EXPORTER_WEB__LISTEN_ADDRESS", "127.0.0.1:2"), ("MEMLOCK_EXPORTER_LOG__FORMAT", "json")],
            vec![("web.listen_address".into(), Value::from("127.0.0.1:3"))],
        )
        .unwrap();
        assert_eq!(cfg.listen_address, "127.0.0.1:3");
        assert_eq!(cfg.log_format, LogFormat::Json);
        assert_eq!(cfg.log_level, LogLevel::Debug);
        let numa = cfg.collector("numa").unwrap();
        assert!(!numa.enabled);
        assert_eq!(numa.interval, Duration::from_secs(5));
        assert_eq!(cfg.file, Some(path));
    }

    #[test]
    fn unknown_keys_name_the_key_and_the_file() {
        let path = write_temp("unknown", "[web]\nlisten_adress = \":1\"\n");
        let err = load_with(Some(path.clone()), &[], vec![]).unwrap_err().to_string();
        assert!(err.contains("`web.listen_adress`"), "{err}");
        assert!(err.contains(&path.display().to_string()), "{err}");
        assert!(err.contains("listen_address"), "hint lists the known keys: {err}");

        let path = write_temp("unknown-top", "colector = 1\n");
        let err = load_with(Some(path), &[], vec![]).unwrap_err().to_string();
        assert!(err.contains("`colector`"), "{err}");

        let err = load_with(None, &[("MEMLOCK_EXPORTER_WEB__PORT", "1")], vec![]).unwrap_err().to_string();
        assert!(err.contains("`web.port`") && err.contains("MEMLOCK_EXPORTER_WEB__PORT"), "{err}");
    }

    #[test]
    fn invalid_values_name_the_key_and_where_they_were_set() {
        let path = write_temp("invalid", "[log]\nlevel = \"loud\"\n");
        let err = load_with(Some(path.clone()), &[], vec![]).unwrap_err().to_string();
        assert!(
            err.contains("`log.level`") && err.contains("loud") && err.contains(&path.display().to_string()),
            "{err}"
        );

        let path = write_temp("badtype", "[collector.node]\nenabled = \"sometimes\"\n");
        let err = load_with(Some(path.clone()), &[], vec![]).unwrap_err().to_string();
        assert!(err.contains("collector.node.enabled"), "{err}");

        // A string where a list belongs: serde's error, wrapped by the config crate (found by
        // libFuzzer; it named the key but not the file).
        let path = write_temp("notalist", "[alerting]\nalertmanager_urls = \"node-1\"\n");
        let err = load_with(Some(path.clone()), &[], vec![]).unwrap_err();
        assert!(matches!(&err, ConfigError::Invalid { key, .. } if key == "alerting.alertmanager_urls"), "{err:?}");
        let err = err.to_string();
        assert!(err.contains(&path.display().to_string()) && err.contains("node-1"), "{err}");

        let path = write_temp("interval", "[collector.node]\ninterval = \"10\"\n");
        let err = load_with(Some(path), &[], vec![]).unwrap_err().to_string();
        assert!(err.contains("collector.node.interval") && err.contains("unit"), "{err}");

        let err =
            load_with(None, &[], vec![("web.telemetry_path".into(), Value::from("metrics"))]).unwrap_err().to_string();
        assert!(err.contains("--web.telemetry-path"), "{err}");
        for never in ["/metrics?format=text", "/met rics", "/metrics#top", "/metrics\n", "/m\u{7f}"] {
            let err = load_with(None, &[], vec![("web.telemetry_path".into(), Value::from(never))]).unwrap_err();
            assert!(err.to_string().contains("can never match"), "{never:?}: {err}");
        }
        for probe in ["/-/healthy", "/-/ready"] {
            let err = load_with(None, &[], vec![("web.telemetry_path".into(), Value::from(probe))]).unwrap_err();
            assert!(err.to_string().contains("probe's path"), "{probe:?}: {err}");
        }
        for fine in ["/metrics", "/probe/metrics", "/metrics%3F", "/-/m_e.t~r:i@c!s"] {
            let cfg = load_with(None, &[], vec![("web.telemetry_path".into(), Value::from(fine))]).unwrap();
            assert_eq!(cfg.telemetry_path, fine);
        }
    }

    #[test]
    fn broken_files_name_the_file() {
        let path = write_temp("syntax", "[web\nlisten_address = 1\n");
        let err = load_with(Some(path.clone()), &[], vec![]).unwrap_err().to_string();
        assert!(err.contains(&path.display().to_string()), "{err}");
        let err = load_with(Some(PathBuf::from("/nonexistent/memlock.toml")), &[], vec![]).unwrap_err().to_string();
        assert!(err.contains("/nonexistent/memlock.toml"), "{err}");
        let dir = std::env::temp_dir();
        let err = load_with(Some(dir.clone()), &[], vec![]).unwrap_err().to_string();
        assert!(err.contains(&dir.display().to_string()), "{err}");
    }

    #[test]
    fn enormous_files_and_fifos_are_refused_without_hanging() {
        let path = write_temp("enormous", &format!("# {}\n", "x".repeat(2 << 20)));
        let err = load_with(Some(path.clone()), &[], vec![]).unwrap_err().to_string();
        assert!(err.contains(&path.display().to_string()) && err.contains("larger than"), "{err}");
        // A FIFO in place of the file: no writer, so a blocking open would never return.
        let fifo = path.with_file_name("fifo.toml");
        let name = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo reads the NUL-terminated path we own.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        let (tx, rx) = std::sync::mpsc::channel();
        let owned = fifo.clone();
        std::thread::spawn(move || {
            let _ = tx.send(load_with(Some(owned), &[], vec![]).map(|_| ()).map_err(|e| e.to_string()));
        });
        let err = rx.recv_timeout(Duration::from_secs(10)).expect("loading a FIFO blocked").unwrap_err();
        assert!(err.contains(&fifo.display().to_string()) && err.contains("not a regular file"), "{err}");
        let _ = std::fs::remove_file(&fifo);
    }

    #[test]
    fn collector_settings_are_validated() {
        let path = write_temp("regex", "[collector.cgroup]\nexclude = [\"(unclosed\"]\n");
        let err = load_with(Some(path), &[], vec![]).unwrap_err().to_string();
        assert!(err.contains("collector.cgroup.exclude") && err.contains("regex"), "{err}");
        let path = write_temp("topn", "[collector.process]\ntop_n = 0\n");
        let err = load_with(Some(path), &[], vec![]).unwrap_err().to_string();
        assert!(err.contains("collector.process.top_n"), "{err}");
        let cfg = load_with(None, &[("MEMLOCK_EXPORTER_COLLECTOR__PROCESS__MIN_BYTES", "4096")], vec![]).unwrap();
        let process = cfg.settings::<ProcessConfig>("process").unwrap();
        assert_eq!(process.min_bytes, 4096);
        assert!(process.comm_pattern.as_ref().unwrap().is_match("python3"));
        let cgroup = CgroupConfig {
            exclude: vec![regex::Regex::new("^/system.slice").unwrap()],
            ..cfg.settings::<CgroupConfig>("cgroup").unwrap().clone()
        };
        assert!(!cgroup.wants("/system.slice/sshd.service") && cgroup.wants("/kubepods.slice"));
    }

    /// The messages as they were when the collectors' settings were fields of this module, and
    /// the four that lost their key then (a section of a collector without settings of its own
    /// went through a flattened map: `collector` named instead of `collector.numa.interval`).
    #[test]
    fn collector_setting_errors_name_the_key_and_the_layer() {
        type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a [(&'a str, &'a str)], &'a str);
        const REGEX: &str = "is not a valid regex: regex parse error:";
        let cases: &[Case] = &[
            (
                "[collector.process]\ntop_n = \"x\"\n",
                &[],
                &[],
                "`collector.process.top_n` (set in FILE): found string \"x\", expected an integer",
            ),
            (
                "[collector.process]\ntop_n = 0\n",
                &[],
                &[],
                "`collector.process.top_n` (set in FILE): must be at least 1",
            ),
            (
                "",
                &[("MEMLOCK_EXPORTER_COLLECTOR__PROCESS__TOP_N", "0")],
                &[],
                "`collector.process.top_n` (set in the environment (MEMLOCK_EXPORTER_COLLECTOR__PROCESS__TOP_N)): \
                must be at least 1",
            ),
            (
                "",
                &[],
                &[("collector.process.top_n", "0")],
                "`collector.process.top_n` (set in the command-line flags (--collector.process.top-n)): must be at \
                least 1",
            ),
            (
                "[collector.cgroup]\ninclude = \"x\"\n",
                &[],
                &[],
                "`collector.cgroup.include` (set in FILE): invalid type: string \"x\", expected a sequence",
            ),
            (
                "[collector.cgroup]\ninclude = [\"(x\"]\n",
                &[],
                &[],
                "`collector.cgroup.include` (set in FILE): \"(x\" {REGEX}",
            ),
            (
                "[collector.rdma_netlink]\nexclude = [\"[\"]\n",
                &[],
                &[],
                "`collector.rdma_netlink.exclude` (set in FILE): \"[\" {REGEX}",
            ),
            (
                "[collector.rdma_sysfs]\ninclude = [\"ok\", \"(bad\"]\n",
                &[],
                &[],
                "`collector.rdma_sysfs.include` (set in FILE): \"(bad\" {REGEX}",
            ),
            (
                "[collector.cgroup]\nexclude = [\"ok\", \"(bad\"]\n",
                &[],
                &[],
                "`collector.cgroup.exclude` (set in FILE): \"(bad\" {REGEX}",
            ),
            (
                "[collector.process]\ncomm_pattern = \"(\"\n",
                &[],
                &[],
                "`collector.process.comm_pattern` (set in FILE): \"(\" {REGEX}",
            ),
            (
                "[collector.process]\nfull_scan_interval = \"10\"\n",
                &[],
                &[],
                "`collector.process.full_scan_interval` (set in FILE): \"10\" needs a unit: ms, s, m or h",
            ),
            (
                "[collector.cgroup]\nfull_scan_interval = \"2h\"\n",
                &[],
                &[],
                "`collector.cgroup.full_scan_interval` (set in FILE): \"2h\" is outside 100ms..1h",
            ),
            (
                "[collector.process]\ninterval = \"50ms\"\n",
                &[],
                &[],
                "`collector.process.interval` (set in FILE): \"50ms\" is outside 100ms..1h",
            ),
            (
                "[collector.failures]\ninterval = \"0s\"\n",
                &[],
                &[],
                "`collector.failures.interval` (set in FILE): \"0s\" is outside 100ms..1h",
            ),
            (
                "",
                &[],
                &[("collector.rdma_netlink.interval", "2h")],
                "`collector.rdma_netlink.interval` (set in the command-line flags \
                (--collector.rdma-netlink.interval)): \"2h\" is outside 100ms..1h",
            ),
            (
                "[collector.node]\nenabled = \"sometimes\"\n",
                &[],
                &[],
                "`collector.node.enabled` (set in FILE): found string \"sometimes\", expected a boolean",
            ),
            (
                "[collector.process]\nenabled = \"sometimes\"\n",
                &[],
                &[],
                "`collector.process.enabled` (set in FILE): found string \"sometimes\", expected a boolean",
            ),
            (
                "[collector.cgroup]\nmax_depth = -1\n",
                &[],
                &[],
                "`collector.cgroup.max_depth` (set in FILE): found 64-bit integer `-1`, expected an unsigned 64 bit \
                or less integer",
            ),
            (
                "[collector.process]\ntop_nn = 1\n",
                &[],
                &[],
                "unknown configuration key `collector.process.top_nn` (set in FILE); known keys in \
                [collector.process]: comm_pattern, enabled, full_scan_interval, interval, min_bytes, nccl_version, \
                top_n",
            ),
            (
                "[collector]\nprocess = 5\n",
                &[],
                &[],
                "`collector.process` (set in FILE): invalid type: integer `5`, expected struct RawProcessCollector",
            ),
            (
                "[collector.process]\nmin_bytes = \"big\"\n",
                &[],
                &[],
                "`collector.process.min_bytes` (set in FILE): found string \"big\", expected an integer",
            ),
            (
                "",
                &[("MEMLOCK_EXPORTER_COLLECTOR__PROCESS__NCCL_VERSION", "maybe")],
                &[],
                "`collector.process.nccl_version` (set in the environment \
                (MEMLOCK_EXPORTER_COLLECTOR__PROCESS__NCCL_VERSION)): found string \"maybe\", expected a boolean",
            ),
            (
                "[collector.rdma_sysfs]\ninclude = [[1]]\n",
                &[],
                &[],
                "`collector.rdma_sysfs.include[0]` (set in the built-in defaults): found sequence, expected a string",
            ),
            (
                "[collector.cgroup.include]\nx = 1\n",
                &[],
                &[],
                "`collector.cgroup.include` (set in FILE): invalid type: map, expected a sequence",
            ),
            (
                "",
                &[("MEMLOCK_EXPORTER_COLLECTOR__CGROUP__MAX_DEPTH", "deep")],
                &[],
                "`collector.cgroup.max_depth` (set in the environment \
                (MEMLOCK_EXPORTER_COLLECTOR__CGROUP__MAX_DEPTH)): found string \"deep\", expected an integer",
            ),
            // Lost their key before.
            (
                "",
                &[("MEMLOCK_EXPORTER_COLLECTOR__NUMA__INTERVAL", "10")],
                &[],
                "`collector.numa.interval` (set in the environment (MEMLOCK_EXPORTER_COLLECTOR__NUMA__INTERVAL)): \
                \"10\" needs a unit: ms, s, m or h",
            ),
            (
                "[collector.software]\ninterval = 5\n",
                &[],
                &[],
                "`collector.software.interval` (set in FILE): \"5\" needs a unit: ms, s, m or h",
            ),
            (
                "[collector]\nnode = 5\n",
                &[],
                &[],
                "`collector.node` (set in FILE): invalid type: integer `5`, expected struct RawCollector",
            ),
            ("collector = 3\n", &[], &[], "`collector` (set in FILE): invalid type: integer `3`, expected a map"),
        ];
        let path = write_temp("collector-errors", "");
        for (file, env, flags, expected) in cases {
            std::fs::write(&path, file).unwrap();
            let flags = flags.iter().map(|(k, v)| (k.to_string(), Value::from(*v))).collect();
            let err = load_with(Some(path.clone()), env, flags).unwrap_err().to_string();
            let err = err.replace(&path.display().to_string(), "FILE");
            let expected = expected.replace("{REGEX}", REGEX);
            assert!(err.contains(&expected), "{file:?} {env:?}:\n  got {err}\n want {expected}");
        }
        for fine in ["[collector.rdma_sysfs]\ninclude = [1]\n", "[collector.process]\nnccl_version = 1\n"] {
            std::fs::write(&path, fine).unwrap();
            load_with(Some(path.clone()), &[], vec![]).unwrap();
        }
    }

    #[test]
    fn the_example_file_is_valid_and_matches_the_defaults() {
        let example = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/config.example.toml");
        let from_file = load_with(Some(example), &[], vec![]).unwrap();
        let defaults = load_with(None, &[], vec![]).unwrap();
        assert!(from_file.file_keys.contains("web.listen_address"), "{:?}", from_file.file_keys);
        assert_eq!(
            format!("{:?}", Config { file: None, file_keys: BTreeSet::new(), ..from_file }),
            format!("{defaults:?}")
        );
    }

    /// Issue 24: an emptied or truncated file reloaded as "all defaults", without the
    /// Alertmanager, and nothing paged.
    #[test]
    fn a_reload_that_would_fail_open_is_refused() {
        let load_text = |name: &str, text: &str| load_with(Some(write_temp(name, text)), &[], vec![]).unwrap();
        let running =
            load_text("running", "[web]\nmax_requests = 20\n[alerting]\nalertmanager_urls = [\"http://am:9093\"]\n");
        let refused = |new: &Config| refuse_failing_open(&running, new).map_err(|e| e.to_string());
        for empty in ["", "\n  \n", "# nothing but a comment\n"] {
            let err = refused(&load_text("emptied", empty)).unwrap_err();
            assert!(
                err.contains("config.toml") && err.contains("no settings left") && err.contains("restart"),
                "{err}"
            );
        }
        let truncated = load_text("truncated", "[web]\nmax_requests = 20\n");
        let err = refused(&truncated).unwrap_err();
        assert!(err.contains("`alerting.alertmanager_urls`") && err.contains("config.toml"), "{err}");
        assert!(err.contains("alertmanager_urls = []") && err.contains("http://am:9093"), "{err}");
        let on_purpose = load_text("off", "[web]\nmax_requests = 20\n[alerting]\nalertmanager_urls = []\n");
        assert!(on_purpose.file_keys.contains("alerting.alertmanager_urls"), "{:?}", on_purpose.file_keys);
        assert_eq!(refused(&on_purpose), Ok(()), "switched off on purpose");
        let moved = load_text("moved", "[alerting]\nalertmanager_urls = [\"http://am2:9093\"]\n");
        assert_eq!(refused(&moved), Ok(()), "another Alertmanager, fewer settings");
        let defaults = load_with(None, &[], vec![]).unwrap();
        assert_eq!(refuse_failing_open(&defaults, &load_text("from-empty", "")).map_err(|e| e.to_string()), Ok(()));
    }

    /// The registry is the one list of collectors: each has its keys, defaults and flags.
    #[test]
    fn every_registered_collector_has_its_keys_and_flags() {
        use clap::Parser;
        for registration in crate::collect::REGISTRY {
            let name = registration.name;
            let defaults = load_with(None, &[], vec![]).unwrap();
            let c = defaults.collector(name).unwrap();
            assert_eq!(c.enabled, registration.default_enabled, "{name}");
            assert_eq!(c.interval, parse_duration(registration.default_interval).unwrap(), "{name}");
            let cli = crate::cli::Cli::try_parse_from(["memlock-exporter", &format!("--collector.{name}")]).unwrap();
            let config = load_with(None, &[], cli.serve.overrides()).unwrap();
            assert!(config.collector(name).unwrap().enabled, "{name}");
            let cli = crate::cli::Cli::try_parse_from(["memlock-exporter", &format!("--no-collector.{name}")]).unwrap();
            let config = load_with(None, &[], cli.serve.overrides()).unwrap();
            assert!(!config.collector(name).unwrap().enabled, "{name}");
            let env = format!("MEMLOCK_EXPORTER_COLLECTOR__{}__INTERVAL", name.to_uppercase());
            let config = load_with(None, &[(env.as_str(), "7s")], vec![]).unwrap();
            assert_eq!(config.collector(name).unwrap().interval, Duration::from_secs(7), "{name}");
        }
        let path = write_temp("unknown-collector", "[collector.nodee]\nenabled = false\n");
        let err = load_with(Some(path), &[], vec![]).unwrap_err().to_string();
        assert!(err.contains("`collector.nodee`") && err.contains("rdma_netlink"), "{err}");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("1e400s").is_err());
        assert!(parse_duration("-1s").is_err());
    }
}
