//! `[collector.rdma_sysfs]` and `[collector.rdma_netlink]`: the RDMA devices each reads, by name
//! ("mlx5_0"). Both collectors have these settings, each in its own section.

use regex::Regex;
use serde::{Deserialize, Serialize};

use super::settings::Invalid;
use crate::values;

/// RDMA devices (sysfs) and registrations (netlink). Patterns match device names ("mlx5_0").
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RawRdmaCollector {
    pub include: Vec<String>,
    pub exclude: Vec<String>,
}

impl RawRdmaCollector {
    /// The defaults with every list given one element ([`super::settings::Configured::key_template`]).
    pub(crate) fn key_template() -> Self {
        Self { include: vec![String::new()], exclude: vec![String::new()] }
    }

    pub fn validate(self) -> Result<RdmaConfig, Invalid> {
        Ok(RdmaConfig {
            include: values::regexes(&self.include).map_err(|m| Invalid::new("include", m))?,
            exclude: values::regexes(&self.exclude).map_err(|m| Invalid::new("exclude", m))?,
        })
    }
}

#[derive(Debug, Clone, Default)]
pub struct RdmaConfig {
    pub include: Vec<Regex>,
    pub exclude: Vec<Regex>,
}

impl RdmaConfig {
    /// Whether a device passes the include and exclude patterns.
    pub fn wants(&self, device: &str) -> bool {
        (self.include.is_empty() || self.include.iter().any(|r| r.is_match(device)))
            && !self.exclude.iter().any(|r| r.is_match(device))
    }
}

impl PartialEq for RdmaConfig {
    fn eq(&self, other: &Self) -> bool {
        // Destructured, so that a field added and not compared does not compile.
        let Self { include, exclude } = self;
        values::same_patterns(include, &other.include) && values::same_patterns(exclude, &other.exclude)
    }
}
