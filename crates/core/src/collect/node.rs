//! Node-wide memory: `/proc/meminfo`, `/proc/vmstat`, `/proc/sys/vm/*`, hugepage pools and the
//! transparent hugepage mode.

use std::sync::Arc;

use crate::charge::Charge;
use crate::exposition::{Exposition, Kind};
use crate::trend::{Observation, Scope};
use memlock_kernel::fsroot::{self, Roots, SourceError};
use memlock_kernel::{meminfo, parse_u64, sysvm, vmstat};

use super::hugepages::{self, HugepagePool};
use super::{keep, optional, Collector, Data};

#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct NodeStats {
    pub meminfo: meminfo::Meminfo,
    /// FOLL_PIN pin references held now, times the page size: RDMA registrations, io_uring
    /// buffers, vfio, O_DIRECT (an upper bound: a page pinned twice counts twice).
    pub pinned_bytes: Option<u64>,
    pub overcommit_mode: Option<u64>,
    pub overcommit_ratio: Option<u64>,
    pub max_map_count: Option<u64>,
    pub hugepages: Vec<HugepagePool>,
    pub thp_enabled: Option<sysvm::Choice>,
    /// MemAvailable at which the node scope's trend says memory runs out
    /// (`trend.node_memory_available_floor_ratio` of MemTotal).
    pub(crate) memory_available_floor_bytes: Option<u64>,
}

pub(crate) struct NodeCollector {
    roots: Roots,
    page_size: u64,
    available_floor_ratio: f64,
}

impl NodeCollector {
    pub fn new(roots: Roots, page_size: u64, available_floor_ratio: f64) -> Self {
        Self { roots, page_size, available_floor_ratio }
    }

    pub fn read(&self, errors: &mut Vec<SourceError>) -> Option<NodeStats> {
        let mut stats = NodeStats::default();
        let mut any = false;
        match fsroot::read_fields(&self.roots.proc("meminfo"), meminfo::parse_fields, errors) {
            Ok(info) => {
                stats.memory_available_floor_bytes =
                    info.mem_total.map(|total| (total as f64 * self.available_floor_ratio) as u64);
                stats.meminfo = info;
                any = true;
            }
            Err(e) => errors.push(e),
        }
        match fsroot::read_fields(&self.roots.proc("vmstat"), vmstat::parse_fields, errors) {
            Ok(stat) => {
                stats.pinned_bytes = stat.pinned_pages().and_then(|p| p.checked_mul(self.page_size));
                any = true;
            }
            Err(e) => errors.push(e),
        }
        let mut sysctl = |name: &str| {
            keep(optional(fsroot::read_parsed(&self.roots.proc(format!("sys/vm/{name}")), parse_u64)), errors)
        };
        stats.overcommit_mode = sysctl("overcommit_memory");
        stats.overcommit_ratio = sysctl("overcommit_ratio");
        stats.max_map_count = sysctl("max_map_count");
        stats.hugepages = hugepages::read_pools(&self.roots.sys("kernel/mm/hugepages"), errors);
        stats.thp_enabled = keep(
            optional(fsroot::read_parsed(
                &self.roots.sys("kernel/mm/transparent_hugepage/enabled"),
                sysvm::parse_choice,
            )),
            errors,
        );
        any.then_some(stats)
    }
}

impl Collector for NodeCollector {
    fn name(&self) -> &'static str {
        "node"
    }

    fn collect(&mut self, errors: &mut Vec<SourceError>) -> Option<Data> {
        self.read(errors).map(|s| Arc::new(s) as Data)
    }
}

impl NodeStats {
    /// The node scope of the trend analysis: MemAvailable falling towards its floor, as memory
    /// in use (MemTotal − MemAvailable) rising towards MemTotal minus the floor. Not Mlocked +
    /// pinned: pinning memory that is already allocated does not lower MemAvailable, and a page
    /// both mlocked and pinned would count twice.
    pub(crate) fn observation(&self, at: f64) -> Option<Observation> {
        let (total, available) = (self.meminfo.mem_total?, self.meminfo.mem_available?);
        let floor = self.memory_available_floor_bytes.unwrap_or(0);
        Some(Observation {
            scope: Scope::Node,
            id: String::new(),
            labels: Vec::new(),
            at,
            charge: Charge::enforced(total.saturating_sub(available), Some(total.saturating_sub(floor))),
        })
    }

    pub fn render(&self, out: &mut Exposition) {
        let m = &self.meminfo;
        let gauges: [(&'static str, &'static str, Option<u64>); 11] = [
            ("memlock_node_memory_total_bytes", "MemTotal from /proc/meminfo.", m.mem_total),
            ("memlock_node_memory_free_bytes", "MemFree from /proc/meminfo.", m.mem_free),
            (
                "memlock_node_memory_available_bytes",
                "MemAvailable from /proc/meminfo: memory available without swapping.",
                m.mem_available,
            ),
            (
                "memlock_node_memory_available_floor_bytes",
                "The MemAvailable floor the node's trend and alerts predict against.",
                self.memory_available_floor_bytes,
            ),
            (
                "memlock_node_mlocked_bytes",
                "Mlocked from /proc/meminfo: memory locked by mlock() on the node.",
                m.mlocked,
            ),
            ("memlock_node_unevictable_bytes", "Unevictable from /proc/meminfo.", m.unevictable),
            ("memlock_node_committed_bytes", "Committed_AS from /proc/meminfo.", m.committed_as),
            (
                "memlock_node_commit_limit_bytes",
                "CommitLimit from /proc/meminfo, enforced only when overcommit_memory is 2.",
                m.commit_limit,
            ),
            ("memlock_node_cma_total_bytes", "CmaTotal from /proc/meminfo.", m.cma_total),
            ("memlock_node_cma_free_bytes", "CmaFree from /proc/meminfo.", m.cma_free),
            ("memlock_node_hugetlb_bytes", "Hugetlb from /proc/meminfo: memory in hugepages of every size.", m.hugetlb),
        ];
        for (name, help, value) in gauges {
            out.family(name, help, Kind::Gauge).maybe(&[], value);
        }
        out.family(
            "memlock_node_pinned_bytes",
            "FOLL_PIN references held on the node times the page size, an upper bound of pinned memory.",
            Kind::Gauge,
        )
        .maybe(&[], self.pinned_bytes);
        out.family("memlock_node_hugepages", "Hugepages per page size and state, in pages.", Kind::Gauge);
        hugepages::render(out, &[], &self.hugepages);
        out.family(
            "memlock_node_overcommit_mode",
            "vm.overcommit_memory (0 heuristic, 1 always, 2 never).",
            Kind::Gauge,
        )
        .maybe(&[], self.overcommit_mode);
        out.family("memlock_node_overcommit_ratio", "vm.overcommit_ratio.", Kind::Gauge)
            .maybe(&[], self.overcommit_ratio.map(|r| r as f64 / 100.0));
        out.family(
            "memlock_node_max_map_areas",
            "vm.max_map_count: the most memory map areas a process may have.",
            Kind::Gauge,
        )
        .maybe(&[], self.max_map_count);
        if let Some(thp) = &self.thp_enabled {
            out.family(
                "memlock_node_transparent_hugepage_enabled",
                "Transparent hugepage mode: 1 for the active mode.",
                Kind::Gauge,
            );
            for option in &thp.options {
                out.sample(&[("mode", option)], *option == thp.active);
            }
        }
    }
}

impl super::Stats for NodeStats {
    fn render(&self, out: &mut Exposition, _grants: &crate::budget::Grants) {
        NodeStats::render(self, out)
    }

    fn observations(&self, at: f64) -> Vec<Observation> {
        self.observation(at).into_iter().collect()
    }

    fn trend_scopes(&self) -> &'static [Scope] {
        &[Scope::Node]
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// This collector's entry in the registry ([`crate::collect::REGISTRY`]): its name, flags,
/// default interval and settings.
pub(crate) const REGISTRATION: super::Registration = super::Registration {
    name: "node",
    reads: "/proc/meminfo, vmstat, vm sysctls, hugepages",
    default_interval: "1s",
    default_enabled: true,
    settings: &super::settings::Plain(|cx| {
        let floor = cx.trend.node_memory_available_floor_ratio;
        Box::new(NodeCollector::new(cx.roots.clone(), procfs::page_size(), floor))
    }),
};
