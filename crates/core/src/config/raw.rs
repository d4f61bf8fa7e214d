//! The raw form: what the file, the environment and the flags may say, as the TOML file's
//! sections. The collectors' sections come from the registry ([`collector_sections`]).

use config::{Map, Value};
use serde::{Deserialize, Serialize};

use crate::collect::REGISTRY;
use crate::trend::TrendConfig;

// ---------------------------------------------------------------------------------------------
// Raw layer: what the file, the environment and the flags may say. Every field has a default,
// and the serialised defaults double as the list of known keys.

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawConfig {
    pub web: RawWeb,
    pub path: RawPaths,
    /// `[collector.<name>]`, read section by section against the registry (`collector_sections`).
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
pub(crate) struct RawSeries {
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
pub(crate) struct RawTrend {
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
pub(crate) struct RawAlerting {
    /// Alertmanager base URLs (http://host:9093). Empty: the fast path is off.
    pub alertmanager_urls: Vec<String>,
    /// The `instance` label of the alerts; empty: the node's hostname.
    pub instance: String,
    /// Predicted exhaustion within this many seconds is critical.
    pub exhaustion_critical_seconds: u64,
    /// Usage of a limit at or above this ratio is a warning.
    pub usage_ratio_warning: f64,
    /// Active alerts are sent again this often (Alertmanager expires alerts it stops hearing of).
    pub(crate) resend_interval: String,
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
pub(crate) const DEFAULT_RUNBOOK_URL: &str =
    "https://github.com/memlock-exporter/memlock-exporter/blob/main/docs/runbooks.md";

impl RawConfig {
    /// The defaults with every list given one element: the `config` crate drops empty lists
    /// when it serialises, and the key check must still know that those keys exist.
    pub(super) fn key_template() -> Self {
        let mut t = Self::default();
        t.alerting.alertmanager_urls = vec![String::new()];
        t
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawWeb {
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
pub(crate) struct RawPaths {
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
pub(super) fn collector_sections(template: bool) -> Result<Map<String, Value>, config::ConfigError> {
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
pub(crate) struct RawLog {
    pub level: String,
    pub format: String,
}

impl Default for RawLog {
    fn default() -> Self {
        Self { level: "info".into(), format: "text".into() }
    }
}
