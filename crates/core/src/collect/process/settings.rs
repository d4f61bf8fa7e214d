//! `[collector.process]`: which processes are exported and how often /proc is listed again.

use std::time::Duration;

use regex::Regex;
use serde::{Deserialize, Serialize};

use super::ProcessCollector;
use crate::collect::settings::{Configured, Context, Invalid};
use crate::values;

/// Per-process memlock headroom. `interval` re-reads the processes already tracked (those
/// holding locked or pinned memory, or matching `comm_pattern`; a crowd of them in turns, each
/// owner's most urgent on every pass); every `full_scan_interval` all of /proc is read again,
/// spread over passes when it does not fit in one.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct RawProcessCollector {
    pub full_scan_interval: String,
    /// Export a process when VmPin + VmLck is at least this many bytes...
    pub min_bytes: u64,
    /// ...or when its comm matches this regex (empty: none).
    pub comm_pattern: String,
    /// At most this many processes, the highest usage ratios first.
    pub top_n: u64,
    /// Read `/proc/PID/maps` once per process holding pinned memory for the NCCL and the RDMA
    /// registrant libraries it mapped.
    pub nccl_version: bool,
}

impl Default for RawProcessCollector {
    fn default() -> Self {
        Self {
            // New processes are found every interval by listing procfs, and node-wide growth in
            // pinned or mlocked memory brings a full scan forward: the full scan only refreshes
            // processes that were idle when last read (their limits and cgroup). 60 s keeps the
            // idle cost within 0.5 % of a core with 2,000 processes (30 s: 0.59 %; see
            // docs/benchmarks.md, "Idle cost").
            full_scan_interval: "60s".into(),
            min_bytes: 1 << 20,
            comm_pattern: "^(python[0-9.]*|pt_main_thread|torchrun|deepspeed)$".into(),
            top_n: 200,
            nccl_version: true,
        }
    }
}

#[derive(Debug, Clone)]
pub struct ProcessConfig {
    pub full_scan_interval: Duration,
    pub min_bytes: u64,
    pub comm_pattern: Option<Regex>,
    pub top_n: usize,
    pub nccl_version: bool,
}

impl PartialEq for ProcessConfig {
    fn eq(&self, other: &Self) -> bool {
        // Destructured, so that a field added and not compared does not compile.
        let Self { full_scan_interval, min_bytes, comm_pattern, top_n, nccl_version } = self;
        *full_scan_interval == other.full_scan_interval
            && *min_bytes == other.min_bytes
            && values::same_patterns(comm_pattern.as_slice(), other.comm_pattern.as_slice())
            && *top_n == other.top_n
            && *nccl_version == other.nccl_version
    }
}

impl Configured for ProcessCollector {
    type Raw = RawProcessCollector;
    type Settings = ProcessConfig;

    fn validate(raw: RawProcessCollector) -> Result<ProcessConfig, Invalid> {
        let comm_pattern = match raw.comm_pattern.as_str() {
            "" => None,
            p => Some(values::regex(p).map_err(|m| Invalid::new("comm_pattern", m))?),
        };
        if raw.top_n == 0 {
            return Err(Invalid::new("top_n", "must be at least 1"));
        }
        Ok(ProcessConfig {
            full_scan_interval: values::interval(&raw.full_scan_interval)
                .map_err(|m| Invalid::new("full_scan_interval", m))?,
            min_bytes: raw.min_bytes,
            comm_pattern,
            top_n: usize::try_from(raw.top_n).unwrap_or(usize::MAX),
            nccl_version: raw.nccl_version,
        })
    }

    fn build(context: &Context, settings: &ProcessConfig) -> Self {
        ProcessCollector::new(context.roots, settings.clone(), context.interval)
    }
}
