//! Per NUMA node: `/sys/devices/system/node/nodeN/{meminfo,vmstat,hugepages}`.

use std::sync::Arc;

use crate::budget::{Claim, Grants, Tier};
use crate::exposition::{Exposition, Kind};
use memlock_kernel::fsroot::{self, Roots, SourceError};
use memlock_kernel::{meminfo, vmstat};

use super::hugepages::{self, HugepagePool};
use super::{optional, Collector, Data};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NumaNode {
    pub id: u32,
    pub mem_total: Option<u64>,
    pub mem_free: Option<u64>,
    pub mlocked: Option<u64>,
    pub pinned_bytes: Option<u64>,
    pub hugepages: Vec<HugepagePool>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct NumaStats {
    pub nodes: Vec<NumaNode>,
}

pub(crate) struct NumaCollector {
    roots: Roots,
    page_size: u64,
}

impl NumaCollector {
    pub fn new(roots: Roots, page_size: u64) -> Self {
        Self { roots, page_size }
    }

    pub fn read(&self, errors: &mut Vec<SourceError>) -> Option<NumaStats> {
        let base = self.roots.sys("devices/system/node");
        // A kernel without CONFIG_NUMA has no node directory: nothing to report, not an error.
        let names = match optional(fsroot::list_dir(&base)) {
            Ok(Some(names)) => names,
            Ok(None) => return Some(NumaStats::default()),
            Err(e) => {
                errors.push(e);
                return None;
            }
        };
        let mut ids: Vec<u32> =
            names.iter().filter_map(|n| memlock_kernel::name_number(n.strip_prefix("node")?)).collect();
        ids.sort_unstable();
        let mut stats = NumaStats::default();
        for id in ids {
            let dir = base.join(format!("node{id}"));
            let info = match fsroot::read_fields(&dir.join("meminfo"), meminfo::parse_fields, errors) {
                Ok(info) => info,
                Err(e) => {
                    errors.push(e);
                    meminfo::Meminfo::default()
                }
            };
            let pinned_bytes = match fsroot::read_fields(&dir.join("vmstat"), vmstat::parse_fields, errors) {
                Ok(stat) => stat.pinned_pages().and_then(|p| p.checked_mul(self.page_size)),
                Err(e) => {
                    errors.push(e);
                    None
                }
            };
            stats.nodes.push(NumaNode {
                id,
                mem_total: info.mem_total,
                mem_free: info.mem_free,
                mlocked: info.mlocked,
                pinned_bytes,
                hugepages: hugepages::read_pools(&dir.join("hugepages"), errors),
            });
        }
        Some(stats)
    }
}

impl Collector for NumaCollector {
    fn name(&self) -> &'static str {
        "numa"
    }

    fn collect(&mut self, errors: &mut Vec<SourceError>) -> Option<Data> {
        self.read(errors).map(|s| Arc::new(s) as Data)
    }
}

/// The budget class of NUMA nodes ([`crate::budget`]).
const CLASS: &str = "numa_node";

impl NumaNode {
    fn series(&self) -> usize {
        let fields = [self.mem_total, self.mem_free, self.mlocked, self.pinned_bytes];
        let pools: usize = self.hugepages.iter().map(|p| p.states().iter().filter(|(_, v)| v.is_some()).count()).sum();
        fields.iter().filter(|v| v.is_some()).count() + pools
    }
}

impl NumaStats {
    /// NUMA nodes explain a page (which node's hugepages or free memory ran short) and grow with
    /// the host: one claim, in node order.
    pub fn claims(&self) -> Vec<Claim> {
        let entities = self.nodes.iter().map(|n| (n.series(), 0.5)).collect();
        vec![Claim { class: CLASS, tier: Tier::Explain, floor: 0, cap: usize::MAX, entities }]
    }

    pub(crate) fn render_granted(&self, out: &mut Exposition, grants: &Grants) {
        let granted = grants.get(CLASS);
        let nodes: Vec<&NumaNode> = self.nodes.iter().take(granted).collect();
        let ids: Vec<String> = nodes.iter().map(|n| n.id.to_string()).collect();
        type Field = fn(&NumaNode) -> Option<u64>;
        let gauges: [(&'static str, &'static str, Field); 4] = [
            ("memlock_numa_memory_total_bytes", "MemTotal of the NUMA node.", |n| n.mem_total),
            ("memlock_numa_memory_free_bytes", "MemFree of the NUMA node.", |n| n.mem_free),
            ("memlock_numa_mlocked_bytes", "Mlocked of the NUMA node.", |n| n.mlocked),
            (
                "memlock_numa_pinned_bytes",
                "FOLL_PIN references held on the NUMA node times the page size, an upper bound.",
                |n| n.pinned_bytes,
            ),
        ];
        for (name, help, field) in gauges {
            out.family(name, help, Kind::Gauge);
            for (node, id) in nodes.iter().zip(&ids) {
                out.maybe(&[("numa_node", id)], field(node));
            }
        }
        out.family(
            "memlock_numa_hugepages",
            "Hugepages of the NUMA node per page size and state, in pages.",
            Kind::Gauge,
        );
        for (node, id) in nodes.iter().zip(&ids) {
            hugepages::render(out, &[("numa_node", id)], &node.hugepages);
        }
    }
}

impl super::Stats for NumaStats {
    fn render(&self, out: &mut Exposition, grants: &Grants) {
        self.render_granted(out, grants)
    }

    fn claims(&self) -> Vec<Claim> {
        NumaStats::claims(self)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// This collector's entry in the registry ([`crate::collect::REGISTRY`]): its name, flags,
/// default interval and settings.
pub(crate) const REGISTRATION: super::Registration = super::Registration {
    name: "numa",
    reads: "per NUMA node memory and hugepages",
    default_interval: "1s",
    default_enabled: true,
    settings: &super::settings::Plain(|cx| Box::new(NumaCollector::new(cx.roots.clone(), procfs::page_size()))),
};
