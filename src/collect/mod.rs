//! Collectors: one per source. Each reads through [`crate::fsroot`], parses with
//! [`crate::kernel`] and returns typed [`Data`]; rendering lives with the data type.

pub mod cgroup;
#[cfg(test)]
mod example;
pub mod failures;
pub mod hugepages;
pub mod node;
pub mod numa;
pub mod process;
pub mod rdma_filter;
pub mod rdma_netlink;
pub mod rdma_sysfs;
pub mod settings;
pub mod software;

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use crate::budget::{Claim, Grants};
use crate::exposition::Exposition;
use crate::fsroot::{Roots, SourceError};
use crate::trend::{Observation, Scope, TrendConfig};

use settings::{of, CollectorConfig, Context, Plain};

/// What a collector's run produced, behind one trait so the sampler, the snapshot and the trend
/// analyser need no list of collectors. Cheap to share: snapshots hold it in an `Arc`.
pub trait Stats: std::fmt::Debug + Send + Sync + 'static {
    /// Writes the fixed series and, of each class this data claims, the granted entities.
    fn render(&self, out: &mut Exposition, grants: &Grants);

    /// What grows with the host, entity by entity, for the series budget ([`crate::budget`]).
    fn claims(&self) -> Vec<Claim> {
        Vec::new()
    }

    /// The ids of the trend points (see [`Observation::id`]) exported under `grants`: those of the
    /// granted entities. `None`: every point.
    fn exported_trends(&self, _grants: &Grants) -> Option<std::collections::HashSet<String>> {
        None
    }

    /// What the trend analyser watches in this data, observed at `at` (monotonic seconds).
    fn observations(&self, _at: f64) -> Vec<Observation> {
        Vec::new()
    }

    /// The trend scopes this data covers completely: scopes of that kind missing from it have
    /// gone (the process exited, the cgroup was removed) and their history is dropped.
    fn trend_scopes(&self) -> &'static [Scope] {
        &[]
    }

    /// For readers that need the collector's own type (the failures collector's page, tests).
    fn as_any(&self) -> &dyn Any;
}

/// The typed result of one collection, shared by every snapshot that holds it.
pub type Data = Arc<dyn Stats>;

/// A collector the exporter knows: the one list from which the `--collector.<name>` flags, the
/// `[collector.<name>]` sections of the configuration and the sampler's threads are derived (as
/// node_exporter's registerCollector). A collector with settings of its own defines them in its
/// module ([`settings::Configured`]); its entry here names it with [`settings::of`].
pub struct Registration {
    pub name: &'static str,
    /// What it reads, for the flag's help.
    pub reads: &'static str,
    pub default_interval: &'static str,
    /// Off for the opt-in collectors (`--collector.<name>` enables them).
    pub default_enabled: bool,
    /// Its own settings and how it is built from them.
    pub settings: &'static dyn settings::Section,
}

/// Every collector, in output order.
pub const REGISTRY: &[Registration] = &[
    Registration {
        name: "node",
        reads: "/proc/meminfo, vmstat, vm sysctls, hugepages",
        default_interval: "1s",
        default_enabled: true,
        settings: &Plain(|cx| {
            let floor = cx.trend.node_memory_available_floor_ratio;
            Box::new(node::NodeCollector::new(cx.roots.clone(), procfs::page_size(), floor))
        }),
    },
    Registration {
        name: "numa",
        reads: "per NUMA node memory and hugepages",
        default_interval: "1s",
        default_enabled: true,
        settings: &Plain(|cx| Box::new(numa::NumaCollector::new(cx.roots.clone(), procfs::page_size()))),
    },
    Registration {
        name: "process",
        reads: "VmLck, VmPin, memlock limits per process",
        default_interval: "1s",
        default_enabled: true,
        settings: of::<process::ProcessCollector>(),
    },
    Registration {
        name: "cgroup",
        reads: "memory usage and limits per cgroup",
        default_interval: "1s",
        default_enabled: true,
        settings: of::<cgroup::CgroupCollector>(),
    },
    Registration {
        name: "rdma_sysfs",
        reads: "/sys/class/infiniband devices, ports, counters",
        default_interval: "5s",
        default_enabled: true,
        settings: of::<rdma_sysfs::RdmaSysfsCollector>(),
    },
    Registration {
        name: "rdma_netlink",
        reads: "RDMA resources and registered memory",
        default_interval: "5s",
        default_enabled: true,
        settings: of::<rdma_netlink::RdmaNetlinkCollector>(),
    },
    Registration {
        name: "software",
        reads: "kernel, NVIDIA driver and RDMA module versions, GPUDirect mode",
        default_interval: "30s",
        default_enabled: true,
        settings: &Plain(|cx| Box::new(software::SoftwareCollector::new(cx.roots.clone()))),
    },
    Registration {
        name: "failures",
        reads: "refused registrations and locks, traced with kprobes in tracefs instances of its own (needs root)",
        default_interval: "1s",
        // Opt-in: it defines kprobes in the running kernel, which needs write access to tracefs
        // (root's) that the default unit does not grant (docs/systemd.md, the failures collector).
        default_enabled: false,
        settings: &Plain(|cx| Box::new(failures::FailuresCollector::new(cx.roots.clone()))),
    },
];

/// One source of metrics.
pub trait Collector: Send {
    fn name(&self) -> &'static str;

    /// Runs one collection. Problems that make the result incomplete or wrong are pushed to
    /// `errors` (the collector then reports failure) while whatever was read is still returned.
    /// Expected absences (a process that exited, an optional file) are not errors.
    fn collect(&mut self, errors: &mut Vec<SourceError>) -> Option<Data>;
}

/// Builds the enabled collectors of a configuration, in its order (the registry's).
pub fn build(
    collectors: &[CollectorConfig],
    roots: &Roots,
    trend: &TrendConfig,
) -> Vec<(Box<dyn Collector>, Duration)> {
    collectors
        .iter()
        .filter(|c| c.enabled)
        .map(|c| (c.settings.build(&Context { roots, interval: c.interval, trend }), c.interval))
        .collect()
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
