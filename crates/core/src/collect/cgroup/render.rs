//! The cgroup collector's metric families and trend observations.

use std::collections::HashSet;

use crate::budget::{self, Claim, Grants, Tier};
use crate::exposition::{Exposition, Kind};

use crate::trend::{Observation, Scope};

use super::{CgroupMemory, CgroupRdma, CgroupStats, Version};

/// Budget classes ([`crate::budget`]): the memory series of a cgroup (its trend included), and
/// its rdma controller series.
pub const MEMORY: &str = "cgroup";
pub const RDMA: &str = "cgroup_rdma";
/// Granted first whatever the scores (fewer than processes: cgroups cost as much and page less).
const FLOOR: usize = 4;
/// At most this many in the page tier; more only after the series that explain a page.
const CAP: usize = 12;

impl CgroupMemory {
    /// Working set (usage where memory.stat is unknown) over the effective limit, plus 1 once the
    /// OOM killer has run in it: cgroups that OOM or are about to come first. -1 without a limit
    /// (nothing to run out of: no cgroup alert can fire).
    fn budget_score(&self) -> f64 {
        // The one definition of the cgroup's charge (the trend, the fast path and `check` use it).
        let Some(ratio) = self.charge().and_then(|c| c.ratio()) else { return -1.0 };
        let oom = self.events.oom.unwrap_or(0) + self.events.oom_kill.unwrap_or(0) > 0;
        ratio + if oom { 1.0 } else { 0.0 }
    }

    fn series(&self) -> usize {
        let fields = [
            self.usage_bytes,
            self.working_set_bytes,
            self.limit.and_then(|l| l.bytes()),
            self.limit.map(|l| u64::from(l.is_unlimited())),
            self.high.and_then(|l| l.bytes()),
            self.swap_limit.and_then(|l| l.bytes()),
            self.unevictable_bytes,
            self.events.max,
            self.events.oom,
            self.events.oom_kill,
        ];
        // The trend: a rise and, while rising, an exhaustion time.
        let trend = if self.limit.and_then(|l| l.bytes()).is_some() { 2 } else { 0 };
        fields.iter().filter(|v| v.is_some()).count() + trend
    }
}

impl CgroupRdma {
    fn series(&self) -> usize {
        let count = |list: &[memlock_kernel::rdma_cgroup::RdmaDevice]| {
            list.iter()
                .map(|d| usize::from(d.hca_handle.is_some()) + usize::from(d.hca_object.is_some()))
                .sum::<usize>()
        };
        count(&self.current) + count(&self.max)
    }
}

/// The series budget's order of the memory and the rdma entries ([`budget::Ranked`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Ranking {
    memory: budget::Order,
    rdma: budget::Order,
}

impl Ranking {
    fn of(m: &[CgroupMemory], r: &[CgroupRdma]) -> Self {
        // Ties (cgroups without a limit) by usage, the largest first.
        let usage = |i: usize| m[i].usage_bytes.unwrap_or(0) as f64 / 1e30;
        Self {
            memory: budget::ranked(m.len(), |i| m[i].series(), |i| m[i].budget_score() + usage(i)),
            rdma: budget::ranked(r.len(), |i| r[i].series(), |_| 0.4),
        }
    }
}

impl CgroupStats {
    fn ranking(&self) -> &Ranking {
        self.ranking.get_or_rank(|| Ranking::of(&self.memory, &self.rdma))
    }

    pub fn claims(&self) -> Vec<Claim> {
        let ranking = self.ranking();
        vec![
            Claim { class: MEMORY, tier: Tier::Page, floor: FLOOR, cap: CAP, entities: ranking.memory.1.clone() },
            Claim { class: RDMA, tier: Tier::Explain, floor: 0, cap: usize::MAX, entities: ranking.rdma.1.clone() },
        ]
    }

    fn granted_memory(&self, grants: &Grants) -> Vec<&CgroupMemory> {
        let mask = grants.mask(MEMORY, &self.ranking().memory.0, self.memory.len());
        self.memory.iter().zip(mask).filter_map(|(c, shown)| shown.then_some(c)).collect()
    }

    /// The trend ids (cgroup paths) of the exported cgroups.
    pub(crate) fn exported_trend_ids(&self, grants: &Grants) -> HashSet<String> {
        self.granted_memory(grants).iter().map(|c| c.path().to_owned()).collect()
    }

    /// The cgroup scope of the trend analysis: the working set against the effective limit.
    /// Not the raw usage: a job streaming a dataset through page cache fills its cgroup with
    /// cache that the kernel reclaims at the limit, and would look like a steep ramp to OOM.
    /// Cgroups without a limit have nothing to run out of and are not tracked.
    pub fn observations(&self, at: f64) -> Vec<Observation> {
        self.memory
            .iter()
            .filter_map(|c| {
                // Cgroups without a limit have nothing to run out of.
                let charge = c.charge().filter(|charge| charge.limit_bytes.is_some())?;
                Some(Observation {
                    scope: Scope::Cgroup,
                    id: c.path().to_owned(),
                    labels: (*c.labels).clone(),
                    at,
                    charge,
                })
            })
            .collect()
    }

    /// Every cgroup.
    pub fn render(&self, out: &mut Exposition) {
        self.render_granted(out, &Grants::all())
    }

    pub(crate) fn render_granted(&self, out: &mut Exposition, grants: &Grants) {
        let memory = self.granted_memory(grants);
        let base: Vec<Vec<(&str, &str)>> =
            memory.iter().map(|c| c.labels.iter().map(|(k, v)| (*k, v.as_str())).collect()).collect();
        type Field = fn(&CgroupMemory) -> Option<u64>;
        let gauges: [(&'static str, &'static str, Field); 7] = [
            (
                "memlock_cgroup_memory_usage_bytes",
                "Memory charged to the cgroup and its descendants, page cache included.",
                |c| c.usage_bytes,
            ),
            (
                "memlock_cgroup_memory_working_set_bytes",
                "Usage minus inactive page cache, as kubelet computes the working set.",
                |c| c.working_set_bytes,
            ),
            (
                "memlock_cgroup_memory_limit_bytes",
                "The cgroup's effective memory limit: the lowest on its path to the root.",
                |c| c.limit?.bytes(),
            ),
            (
                "memlock_cgroup_memory_limit_unlimited",
                "1 when no cgroup on the path to the root sets a memory limit, else 0.",
                |c| c.limit.map(|l| u64::from(l.is_unlimited())),
            ),
            (
                "memlock_cgroup_memory_high_bytes",
                "memory.high of the cgroup (v2): above it the kernel throttles and reclaims.",
                |c| c.high?.bytes(),
            ),
            (
                "memlock_cgroup_memory_swap_limit_bytes",
                "The cgroup's swap limit (memory.swap.max on v2, memsw on v1).",
                |c| c.swap_limit?.bytes(),
            ),
            (
                "memlock_cgroup_memory_unevictable_bytes",
                "Unevictable (mlocked) memory of the cgroup and its descendants.",
                |c| c.unevictable_bytes,
            ),
        ];
        for (name, help, field) in gauges {
            out.family(name, help, Kind::Gauge);
            for (cgroup, labels) in memory.iter().zip(&base) {
                out.maybe(labels, field(cgroup));
            }
        }
        out.family(
            "memlock_cgroup_memory_events_total",
            "Memory events of the cgroup and its descendants by event: max, oom, oom_kill.",
            Kind::Counter,
        );
        for (cgroup, labels) in memory.iter().zip(&base) {
            let e = &cgroup.events;
            for (event, value) in [("max", e.max), ("oom", e.oom), ("oom_kill", e.oom_kill)] {
                let mut labels = labels.clone();
                labels.push(("event", event));
                out.maybe(&labels, value);
            }
        }
        self.render_rdma(out, grants);
        self.render_scan(out);
    }

    fn render_rdma(&self, out: &mut Exposition, grants: &Grants) {
        let mask = grants.mask(RDMA, &self.ranking().rdma.0, self.rdma.len());
        out.family(
            "memlock_cgroup_rdma",
            "rdma cgroup controller counts per device, resource and kind (current or max).",
            Kind::Gauge,
        );
        for cgroup in self.rdma.iter().zip(mask).filter_map(|(c, shown)| shown.then_some(c)) {
            let base: Vec<(&str, &str)> = cgroup.labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let mut devices: Vec<&str> = cgroup.current.iter().chain(&cgroup.max).map(|d| d.device.as_str()).collect();
            devices.sort_unstable();
            devices.dedup();
            for device in devices {
                for (kind, list) in [("current", &cgroup.current), ("max", &cgroup.max)] {
                    let Some(entry) = list.iter().find(|d| d.device == device) else { continue };
                    for (resource, value) in [("hca_handle", entry.hca_handle), ("hca_object", entry.hca_object)] {
                        let mut labels = base.clone();
                        labels.extend([("device", device), ("resource", resource), ("kind", kind)]);
                        out.maybe(&labels, value.and_then(|v| v.count()));
                    }
                }
            }
        }
    }

    fn render_scan(&self, out: &mut Exposition) {
        let version = |v: Option<Version>| match v {
            Some(Version::V1) => "v1",
            Some(Version::V2) => "v2",
            None => "none",
        };
        let memory = if self.memory_version.is_none() && self.memory_disabled {
            "disabled"
        } else {
            version(self.memory_version)
        };
        out.family(
            "memlock_cgroup_hierarchy_info",
            "Always 1; labels give the cgroup layout and each controller's hierarchy version.",
            Kind::Gauge,
        )
        .sample(&[("layout", self.layout.as_str()), ("memory", memory), ("rdma", version(self.rdma_version))], 1u64);
        out.family(
            "memlock_cgroup_scan_cgroups_walked",
            "Cgroup directories found by the latest walk of the memory and rdma hierarchies.",
            Kind::Gauge,
        )
        .sample(&[], self.scan.walked);
        out.family(
            "memlock_cgroup_scan_cgroups_skipped",
            "Cgroups not exported, or exported in part, by reason.",
            Kind::Gauge,
        );
        let s = &self.scan;
        let reasons = [
            ("filtered", s.filtered),
            ("too_deep", s.too_deep),
            ("vanished", s.vanished),
            ("permission_denied", s.permission_denied),
            ("read_error", s.read_errors),
        ];
        for (reason, value) in reasons {
            out.sample(&[("reason", reason)], value);
        }
        out.family(
            "memlock_cgroup_scan_cgroups_renamed",
            "Cgroups whose directory name is not UTF-8, exported with those bytes escaped.",
            Kind::Gauge,
        )
        .sample(&[], s.renamed);
    }
}
