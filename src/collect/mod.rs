//! Collectors: one per source. Each reads through [`crate::fsroot`], parses with
//! [`crate::kernel`] and returns typed [`Data`]; rendering lives with the data type.

pub mod cgroup;
pub mod hugepages;
pub mod node;
pub mod numa;
pub mod process;
pub mod rdma_netlink;
pub mod rdma_sysfs;

use std::sync::Arc;

use crate::config::Config;
use crate::exposition::Exposition;
use crate::fsroot::SourceError;
use crate::trend::{Observation, Scope};

/// Every collector the exporter knows, in output order.
pub const NAMES: &[&str] = &["node", "numa", "process", "cgroup", "rdma_sysfs", "rdma_netlink"];

/// The typed result of one collection. Cheap to clone: snapshots share it.
#[derive(Debug, Clone)]
pub enum Data {
    Node(Arc<node::NodeStats>),
    Numa(Arc<numa::NumaStats>),
    Process(Arc<process::ProcessStats>),
    Cgroup(Arc<cgroup::CgroupStats>),
    RdmaSysfs(Arc<rdma_sysfs::RdmaSysfsStats>),
    RdmaNetlink(Arc<rdma_netlink::RdmaNetlinkStats>),
}

impl Data {
    /// What the trend analyser watches in this data, observed at `at` (monotonic seconds).
    pub fn observations(&self, at: f64) -> Vec<Observation> {
        match self {
            Data::Node(stats) => stats.observation(at).into_iter().collect(),
            Data::Cgroup(stats) => stats.observations(at),
            Data::Process(stats) => process_observations(stats, at),
            _ => Vec::new(),
        }
    }

    /// The trend scopes this data covers completely: scopes of that kind missing from it have
    /// gone (the process exited, the cgroup was removed) and their history is dropped.
    pub fn trend_scopes(&self) -> &'static [Scope] {
        match self {
            Data::Node(_) => &[Scope::Node],
            Data::Cgroup(_) => &[Scope::Cgroup],
            Data::Process(_) => &[Scope::Process],
            _ => &[],
        }
    }

    pub fn render(&self, out: &mut Exposition) {
        match self {
            Data::Node(stats) => stats.render(out),
            Data::Numa(stats) => stats.render(out),
            Data::Process(stats) => stats.render(out),
            Data::Cgroup(stats) => stats.render(out),
            Data::RdmaSysfs(stats) => stats.render(out),
            Data::RdmaNetlink(stats) => stats.render(out),
        }
    }
}

/// The process scope: max(VmPin, VmLck) of each exported process against its soft memlock
/// limit. Processes exempt through CAP_IPC_LOCK, or with an unlimited limit, have no headroom
/// to run out of: their rise is still reported.
fn process_observations(stats: &process::ProcessStats, at: f64) -> Vec<Observation> {
    stats
        .processes
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

/// One source of metrics.
pub trait Collector: Send {
    fn name(&self) -> &'static str;

    /// Runs one collection. Problems that make the result incomplete or wrong are pushed to
    /// `errors` (the collector then reports failure) while whatever was read is still returned.
    /// Expected absences (a process that exited, an optional file) are not errors.
    fn collect(&mut self, errors: &mut Vec<SourceError>) -> Option<Data>;
}

/// Builds the enabled collectors from the configuration.
pub fn build(config: &Config) -> Vec<(Box<dyn Collector>, std::time::Duration)> {
    let page_size = procfs::page_size();
    let mut out: Vec<(Box<dyn Collector>, std::time::Duration)> = Vec::new();
    for c in config.collectors.iter().filter(|c| c.enabled) {
        let collector: Box<dyn Collector> = match c.name {
            "node" => Box::new(node::NodeCollector::new(config.roots.clone(), page_size)),
            "numa" => Box::new(numa::NumaCollector::new(config.roots.clone(), page_size)),
            "process" => Box::new(process::ProcessCollector::new(&config.roots, config.process.clone(), c.interval)),
            "rdma_sysfs" => {
                Box::new(rdma_sysfs::RdmaSysfsCollector::new(config.roots.clone(), config.rdma_sysfs.clone()))
            }
            "rdma_netlink" => {
                Box::new(rdma_netlink::RdmaNetlinkCollector::new(config.roots.clone(), config.rdma_netlink.clone()))
            }
            "cgroup" => Box::new(cgroup::CgroupCollector::new(config.roots.clone(), config.cgroup.clone())),
            _ => continue,
        };
        out.push((collector, c.interval));
    }
    out
}

/// Reads an optional file: `Ok(None)` when it does not exist.
pub(crate) fn optional<T>(result: Result<T, SourceError>) -> Result<Option<T>, SourceError> {
    match result {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// Keeps the value and records the error, so one bad file does not hide the others.
pub(crate) fn keep<T>(result: Result<Option<T>, SourceError>, errors: &mut Vec<SourceError>) -> Option<T> {
    match result {
        Ok(v) => v,
        Err(e) => {
            errors.push(e);
            None
        }
    }
}
