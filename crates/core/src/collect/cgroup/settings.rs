//! `[collector.cgroup]`: which cgroups are read and how often the hierarchy is walked again.

use std::time::Duration;

use regex::Regex;
use serde::{Deserialize, Serialize};

#[cfg(doc)]
use crate::collect::settings::Configured;
use crate::collect::settings::Invalid;
use crate::values;

/// Per-cgroup memory. `interval` re-reads the cgroups already known; every
/// `full_scan_interval` the hierarchy is walked again.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct RawCgroupCollector {
    pub full_scan_interval: String,
    /// Regexes over the cgroup path ("/kubepods.slice/..."); empty includes all.
    pub include: Vec<String>,
    pub exclude: Vec<String>,
    /// Depth below the hierarchy root that the walk descends to.
    pub max_depth: u64,
}

impl Default for RawCgroupCollector {
    fn default() -> Self {
        Self {
            // A walk every interval: a new cgroup is sampled within one interval.
            full_scan_interval: "1s".into(),
            include: Vec::new(),
            exclude: Vec::new(),
            max_depth: 12,
        }
    }
}

#[derive(Debug, Clone)]
pub struct CgroupConfig {
    pub full_scan_interval: Duration,
    pub include: Vec<Regex>,
    pub exclude: Vec<Regex>,
    pub max_depth: usize,
}

impl CgroupConfig {
    /// Whether a cgroup path passes the include and exclude patterns.
    pub fn wants(&self, path: &str) -> bool {
        (self.include.is_empty() || self.include.iter().any(|r| r.is_match(path)))
            && !self.exclude.iter().any(|r| r.is_match(path))
    }
}

impl PartialEq for CgroupConfig {
    fn eq(&self, other: &Self) -> bool {
        // Destructured, so that a field added and not compared does not compile.
        let Self { full_scan_interval, include, exclude, max_depth } = self;
        *full_scan_interval == other.full_scan_interval
            && values::same_patterns(include, &other.include)
            && values::same_patterns(exclude, &other.exclude)
            && *max_depth == other.max_depth
    }
}

impl RawCgroupCollector {
    /// The defaults with every list given one element ([`Configured::key_template`]).
    pub(crate) fn key_template() -> Self {
        Self { include: vec![String::new()], exclude: vec![String::new()], ..Default::default() }
    }

    pub fn validate(self) -> Result<CgroupConfig, Invalid> {
        Ok(CgroupConfig {
            full_scan_interval: values::interval(&self.full_scan_interval)
                .map_err(|m| Invalid::new("full_scan_interval", m))?,
            include: values::regexes(&self.include).map_err(|m| Invalid::new("include", m))?,
            exclude: values::regexes(&self.exclude).map_err(|m| Invalid::new("exclude", m))?,
            max_depth: usize::try_from(self.max_depth).unwrap_or(usize::MAX),
        })
    }
}
