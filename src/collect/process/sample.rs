//! The one definition of what a process is charged against its memlock limit: usage, limit,
//! headroom, ratio and the CAP_IPC_LOCK exemption, used by the exported metrics, the trends, the
//! fast path and `check`.

use std::sync::Arc;

use crate::kernel::pid_limits::MemlockLimits;
use crate::trend::{Observation, Scope};

use super::ProcessStats;

/// A cgroup as it labels processes: its path (the memory hierarchy's, or the unified one) and
/// the label set derived from it. Shared by every process in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupInfo {
    pub path: String,
    /// `cgroup` first, then the attribution labels ([`cgroup_path::labels`]).
    pub labels: Vec<(&'static str, String)>,
}

/// One process, as sampled.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessSample {
    pub pid: u32,
    /// The command name as the kernel prints it in `status` (`\n` and `\\` escaped).
    pub comm: String,
    /// `None` when `/proc/PID/cgroup` names neither a memory nor a unified hierarchy, or could
    /// not be read.
    pub cgroup: Option<Arc<CgroupInfo>>,
    /// `VmLck` in bytes (mlock), checked by the kernel against the soft memlock limit.
    pub locked_bytes: Option<u64>,
    /// `VmPin` in bytes (RDMA registrations, io_uring fixed buffers), checked against the soft
    /// memlock limit separately from `VmLck`.
    pub pinned_bytes: Option<u64>,
    /// RLIMIT_MEMLOCK, as of the last full scan. `None` when `limits` could not be read.
    pub limits: Option<MemlockLimits>,
    /// `CAP_IPC_LOCK` in the effective set: the limit is not enforced.
    pub ipc_lock: Option<bool>,
}

impl ProcessSample {
    /// The figure the kernel compares with the soft limit: the larger of `VmPin` and `VmLck`.
    /// They are separate counters, each checked on its own, so they are never added.
    pub fn usage_bytes(&self) -> Option<u64> {
        match (self.locked_bytes, self.pinned_bytes) {
            (Some(locked), Some(pinned)) => Some(locked.max(pinned)),
            (one, other) => one.or(other),
        }
    }

    /// `usage_bytes / soft limit`; `None` when the soft limit is unlimited or 0 (0 refuses any
    /// lock with EPERM, a ratio would be infinite) or unknown.
    pub fn usage_ratio(&self) -> Option<f64> {
        let soft = self.limits?.soft.bytes().filter(|&soft| soft > 0)?;
        Some(self.usage_bytes()? as f64 / soft as f64)
    }

    /// `VmPin + VmLck`: how much memory the process holds out of reach of reclaim, for the
    /// export filter (not for the limit check).
    pub fn held_bytes(&self) -> u64 {
        self.locked_bytes.unwrap_or(0).saturating_add(self.pinned_bytes.unwrap_or(0))
    }
}

/// The sums over every process of one cgroup seen by the scan (exported or not).
#[derive(Debug, Clone, PartialEq)]
pub struct CgroupAggregate {
    pub cgroup: Arc<CgroupInfo>,
    /// Every process counts in the byte sums, CAP_IPC_LOCK or not: the memory is held either way.
    pub locked_bytes: u64,
    pub pinned_bytes: u64,
    /// The highest [`ProcessSample::usage_ratio`] among its processes whose limit the kernel
    /// enforces (not known to hold CAP_IPC_LOCK); `None` when none has one.
    pub usage_ratio_max: Option<f64>,
    pub processes: u64,
}

impl ProcessStats {
    /// The process scope: max(VmPin, VmLck) of each exported process against its soft memlock
    /// limit. Processes exempt through CAP_IPC_LOCK, or with an unlimited limit, have no
    /// headroom to run out of: their rise is still reported.
    pub fn observations(&self, at: f64) -> Vec<Observation> {
        self.processes
            .iter()
            .filter_map(|p| {
                let usage = p.usage_bytes()?;
                let soft = p.limits.and_then(|l| l.soft.bytes()).filter(|_| p.ipc_lock != Some(true));
                let mut labels = vec![("pid", p.pid.to_string()), ("comm", p.comm.clone())];
                if let Some(cgroup) = &p.cgroup {
                    labels.extend(cgroup.labels.iter().cloned());
                }
                Some(Observation {
                    scope: Scope::Process,
                    // The comm guards against pid reuse mixing two processes' histories.
                    id: format!("{}/{}", p.pid, p.comm),
                    labels,
                    at,
                    value: usage as f64,
                    headroom: soft.map(|s| s.saturating_sub(usage) as f64),
                })
            })
            .collect()
    }
}
