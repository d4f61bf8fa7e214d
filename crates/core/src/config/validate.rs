//! From the raw form to the typed [`Config`]: each value checked once, each error naming the key
//! and the layer that set it.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use config::{Map, Value, ValueKind};
use serde::Deserialize;

use super::raw::RawConfig;
use super::{AlertingConfig, CollectorConfig, Config, ConfigError, LogFormat, LogLevel};
use crate::collect::settings::Refused;
use crate::collect::{Registration, REGISTRY};
use crate::trend::TrendConfig;
use crate::values::{parse_duration, shown};
use memlock_kernel::fsroot::Roots;

/// A value of the wrong type, named by its whole key: `prefix` (`collector.process`, or empty)
/// before the key the error carries, which is relative to what was deserialized.
pub(super) fn type_error(err: config::ConfigError, prefix: &str, origin_of: &dyn Fn(&str) -> String) -> ConfigError {
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

pub(super) fn validate(
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
        // slow and refused under load where a probe must not be.
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
/// such a path: "/metrics?x" or "/a b" would be accepted and never served.
fn matchable_path(path: &str) -> bool {
    path.parse::<hyper::http::uri::PathAndQuery>().is_ok_and(|parsed| parsed.path() == path && parsed.query().is_none())
}
