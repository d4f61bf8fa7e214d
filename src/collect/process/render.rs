//! The process collector's metric families.

use std::collections::HashSet;

use crate::budget::{self, Claim, Grants, Tier};
use crate::exposition::{Exposition, Kind};
use crate::kernel::pid_limits::Limit;

use super::sample::{CgroupAggregate, Counter, ProcessSample};
use super::ProcessStats;

/// Budget classes ([`crate::budget`]): processes with per-process series, and the per-cgroup
/// memlock aggregates.
pub const PROCESSES: &str = "process";
pub const CGROUPS: &str = "process_cgroup";
/// Granted first whatever the scores: one process per GPU rank of an 8-GPU node, and its cgroups.
const FLOOR: usize = 8;
/// At most this many in the page tier; more only after the series that explain a page.
const CAP: usize = 12;

impl ProcessSample {
    /// How urgent the process is for the budget: the higher of its counters' usage ratios where
    /// the limit is enforced (CAP_IPC_LOCK exempts), -1 when none is.
    fn budget_score(&self) -> f64 {
        self.urgency().unwrap_or(-1.0)
    }

    /// The series this process is exported with, its trend series included (a rise per counter
    /// and, while it rises, an exhaustion time).
    fn series(&self) -> usize {
        let present = |v: Option<u64>| usize::from(v.is_some());
        let limits =
            self.limits.map_or(0, |l| 2 + [l.soft, l.hard].iter().filter(|limit| limit.bytes().is_some()).count());
        let ratios = Counter::ALL.iter().filter(|&&c| self.charge(c).and_then(|c| c.ratio()).is_some()).count();
        let trends = 2 * (present(self.locked_bytes) + present(self.pinned_bytes));
        present(self.locked_bytes)
            + present(self.pinned_bytes)
            + usize::from(self.ipc_lock_exempt.is_some())
            + limits
            + ratios
            + usize::from(self.nccl.is_some())
            + trends
    }
}

impl CgroupAggregate {
    /// Its processes' highest urgency ([`ProcessSample::urgency`]: the enforced usage ratio up to
    /// 1, small processes over limits they lowered at 0); 0 for memory held without one; -2 for
    /// none held (most cgroups of a large host: their series say nothing but the process count).
    fn budget_score(&self) -> f64 {
        match self.urgency_max {
            Some(urgency) if urgency > 0.0 => urgency,
            _ if self.locked_bytes > 0 || self.pinned_bytes > 0 => 0.0,
            _ => -2.0,
        }
    }
}

/// The series budget's order of the exported processes and of the cgroup aggregates, made once
/// per stats ([`budget::Ranked`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Ranking {
    processes: budget::Order,
    cgroups: budget::Order,
}

impl Ranking {
    pub(super) fn of(processes: &[ProcessSample], cgroups: &[CgroupAggregate]) -> Self {
        let p = processes;
        let c = cgroups;
        let series = |i: usize| 3 + c[i].counter_ratio_max.iter().flatten().count();
        // Ties (most cgroups) by the memory held.
        let held = |i: usize| c[i].locked_bytes.saturating_add(c[i].pinned_bytes) as f64;
        Self {
            processes: fair_ranked(p),
            cgroups: budget::ranked(c.len(), series, |i| c[i].budget_score() + held(i) / 1e30),
        }
    }
}

/// The budget's order of the processes: by score, in turns by owner ([`crate::fair`]), so that
/// one user's crowd cannot take every place of the budget; the scores capped along it.
fn fair_ranked(p: &[ProcessSample]) -> budget::Order {
    let (by_score, _) = budget::ranked(p.len(), |_| 0, |i| p[i].budget_score());
    let at = |k: usize| &p[by_score[k]];
    let idle = |k: usize| at(k).budget_score() <= 0.0;
    let cgroup = |k: usize| at(k).cgroup.as_deref().map(|c| c.path.as_str());
    let order: Vec<usize> =
        crate::fair::order(p.len(), idle, |k| at(k).uid, cgroup).into_iter().map(|k| by_score[k]).collect();
    let scores = crate::fair::capped_scores(order.iter().map(|&i| p[i].budget_score()));
    let entities = order.iter().zip(scores).map(|(&i, s)| (p[i].series(), s)).collect();
    (order, entities)
}

impl ProcessStats {
    fn ranking(&self) -> &Ranking {
        self.ranking.get_or_rank(|| Ranking::of(&self.processes, &self.cgroups))
    }

    /// Every exported process and every cgroup aggregate.
    pub fn render(&self, out: &mut Exposition) {
        self.render_granted(out, &Grants::all())
    }

    pub fn claims(&self) -> Vec<Claim> {
        let ranking = self.ranking();
        vec![
            Claim { class: PROCESSES, tier: Tier::Page, floor: FLOOR, cap: CAP, entities: ranking.processes.1.clone() },
            // Four series each: up to 16 in the page tier.
            Claim { class: CGROUPS, tier: Tier::Page, floor: FLOOR, cap: 16, entities: ranking.cgroups.1.clone() },
        ]
    }

    /// The processes exported under `grants`, in rank order.
    pub fn granted_processes(&self, grants: &Grants) -> Vec<&ProcessSample> {
        let mask = grants.mask(PROCESSES, &self.ranking().processes.0, self.processes.len());
        self.processes.iter().zip(mask).filter_map(|(p, shown)| shown.then_some(p)).collect()
    }

    /// The trend ids of the exported processes (see [`ProcessStats::observations`]).
    pub fn exported_trend_ids(&self, grants: &Grants) -> HashSet<String> {
        let mut ids = HashSet::new();
        for p in self.granted_processes(grants) {
            for counter in Counter::ALL {
                ids.insert(super::sample::trend_id(p, counter));
            }
        }
        ids
    }

    pub fn render_granted(&self, out: &mut Exposition, grants: &Grants) {
        let processes = self.granted_processes(grants);
        let cgroup_mask = grants.mask(CGROUPS, &self.ranking().cgroups.0, self.cgroups.len());
        let cgroups: Vec<&CgroupAggregate> =
            self.cgroups.iter().zip(cgroup_mask).filter_map(|(c, shown)| shown.then_some(c)).collect();
        let pids: Vec<String> = processes.iter().map(|p| p.pid.to_string()).collect();
        let labels: Vec<Vec<(&str, &str)>> =
            processes.iter().zip(&pids).map(|(p, pid)| p.labels(pid).collect()).collect();
        let each = |out: &mut Exposition, value: &dyn Fn(&ProcessSample) -> Option<crate::exposition::Value>| {
            for (process, labels) in processes.iter().zip(&labels) {
                out.maybe(labels, value(process));
            }
        };

        out.family(
            "memlock_process_locked_bytes",
            "VmLck of the process (/proc/PID/status): memory locked with mlock() or mlockall(), and vfio type1's \
                pins, checked by mlock and vfio against the soft memlock limit separately from VmPin \
                (mlockall(MCL_CURRENT) checks VmSize instead). Sampled on the process interval (default 1s), only \
                for processes passing the filter.",
            Kind::Gauge,
        );
        each(out, &|p| p.locked_bytes.map(Into::into));
        out.family(
            "memlock_process_pinned_bytes",
            "VmPin of the process (/proc/PID/status): long-term pinned memory (RDMA registrations of host memory, \
                and of GPU memory through nvidia-peermem; verbs queue rings; io_uring fixed buffers; iommufd pins), \
                checked by ibv_reg_mr against the soft memlock limit separately from VmLck. io_uring and iommufd \
                check the user's locked_vm instead (every process of the uid), so for them the ratio is a lower \
                bound. dma-buf registrations are not in it. Sampled on the process interval.",
            Kind::Gauge,
        );
        each(out, &|p| p.pinned_bytes.map(Into::into));

        out.family(
            "memlock_process_limit_bytes",
            "RLIMIT_MEMLOCK of the process (/proc/PID/limits), soft (enforced) and hard (the ceiling for raising it); \
                absent when unlimited. Re-read every 2s for processes holding locked or pinned memory (a prlimit shows \
                within seconds), on the full scan interval (default 60s) for the others.",
            Kind::Gauge,
        );
        for (process, labels) in processes.iter().zip(&labels) {
            let Some(limits) = process.limits else { continue };
            for (kind, limit) in [("soft", limits.soft), ("hard", limits.hard)] {
                out.maybe(&with(labels, ("kind", kind)), limit.bytes());
            }
        }
        out.family(
            "memlock_process_limit_unlimited",
            "1 when the process's RLIMIT_MEMLOCK (soft or hard, by kind) is unlimited, else 0. Sampled as \
                memlock_process_limit_bytes.",
            Kind::Gauge,
        );
        for (process, labels) in processes.iter().zip(&labels) {
            let Some(limits) = process.limits else { continue };
            for (kind, limit) in [("soft", limits.soft), ("hard", limits.hard)] {
                out.sample(&with(labels, ("kind", kind)), limit == Limit::Unlimited);
            }
        }
        out.family(
            "memlock_process_ipc_lock",
            "1 when the process holds CAP_IPC_LOCK (CapEff bit 14) in the initial user namespace: the memlock limit is \
                not enforced. 0 when it holds it only inside a user namespace (ns/user, uid_map), where it does not \
                exempt, also when the exporter itself runs in one. Sampled on the process interval.",
            Kind::Gauge,
        );
        each(out, &|p| p.ipc_lock_exempt.map(Into::into));
        out.family(
            "memlock_process_limit_usage_ratio",
            "VmPin / soft RLIMIT_MEMLOCK (counter=\"pinned\") and VmLck / soft RLIMIT_MEMLOCK \
                (counter=\"locked\"): the kernel checks each counter on its own, so at 1 the next RDMA registration \
                (pinned) or mlock (locked) that would pass it fails with ENOMEM (unless ipc_lock is 1). Above 1 for an \
                exempt process. Absent when the limit is unlimited or 0. Sampled on the process interval.",
            Kind::Gauge,
        );
        for (process, labels) in processes.iter().zip(&labels) {
            for counter in Counter::ALL {
                let ratio = process.charge(counter).and_then(|c| c.ratio());
                out.maybe(&with(labels, ("counter", counter.as_str())), ratio);
            }
        }

        out.family(
            "memlock_process_nccl_info",
            "Always 1: the NCCL library the process has mapped (the first libnccl.so* in /proc/PID/maps), read once, \
                when the process is first seen holding pinned memory. version is X.Y.Z when the file name carries \
                it (libnccl.so.2.21.5), empty for libnccl.so.2 (the nvidia-nccl wheels); library is the file name. \
                Absent when no libnccl.so is mapped (NCCL linked statically, or not used) or maps could not be read \
                (another user's process without ptrace access). collector.process.nccl_version turns it off.",
            Kind::Gauge,
        );
        for (process, labels) in processes.iter().zip(&labels) {
            let Some(nccl) = &process.nccl else { continue };
            let mut labels = labels.clone();
            labels.extend([("version", nccl.version.as_deref().unwrap_or("")), ("library", nccl.library.as_str())]);
            out.sample(&labels, 1u64);
        }

        let cgroup_labels: Vec<Vec<(&str, &str)>> =
            cgroups.iter().map(|c| c.cgroup.labels.iter().map(|(k, v)| (*k, v.as_str())).collect()).collect();
        let each_cgroup =
            |out: &mut Exposition, value: &dyn Fn(&CgroupAggregate) -> Option<crate::exposition::Value>| {
                for (cgroup, labels) in cgroups.iter().zip(&cgroup_labels) {
                    out.maybe(labels, value(cgroup));
                }
            };
        out.family(
            "memlock_cgroup_locked_bytes",
            "Sum of VmLck over every scanned process in the cgroup (not only the exported ones), pages shared by \
                processes counted once (Locked: of /proc/PID/smaps_rollup, the share, where readable). Sampled on the \
                process interval.",
            Kind::Gauge,
        );
        each_cgroup(out, &|c| Some(c.locked_bytes.into()));
        out.family(
            "memlock_cgroup_pinned_bytes",
            "Sum of VmPin over every scanned process in the cgroup. Sampled on the process interval.",
            Kind::Gauge,
        );
        each_cgroup(out, &|c| Some(c.pinned_bytes.into()));
        out.family(
            "memlock_cgroup_limit_usage_ratio_max",
            "Per counter, the highest VmPin / soft RLIMIT_MEMLOCK (counter=\"pinned\") or VmLck / soft \
                RLIMIT_MEMLOCK (counter=\"locked\") among the cgroup's processes that the limit applies to (those \
                with CAP_IPC_LOCK in the initial user namespace are left out; they still count in the byte sums), \
                exported or not: the kernel checks each counter on its own, so each has its own worst process. \
                Absent for a counter that none of them holds, or when none has a finite, non-zero limit. Sampled on \
                the process interval.",
            Kind::Gauge,
        );
        for (cgroup, labels) in cgroups.iter().zip(&cgroup_labels) {
            for (counter, ratio) in Counter::ALL.iter().zip(cgroup.counter_ratio_max) {
                out.maybe(&with(labels, ("counter", counter.as_str())), ratio);
            }
        }
        out.family(
            "memlock_cgroup_processes",
            "User processes in the cgroup seen by the latest full process scan. Sampled on the process interval.",
            Kind::Gauge,
        );
        each_cgroup(out, &|c| Some(c.processes.into()));

        let gauges = [
            (
                "memlock_process_scanned_processes",
                "User processes covered by the latest process sample (kernel threads \
                excluded); the cgroup aggregates sum over them. Sampled on the process interval.",
                self.scanned,
            ),
            (
                "memlock_process_tracked_processes",
                "Processes re-read on every process interval (holding locked or \
                pinned memory, or matching comm_pattern); the others are read on full scans. Sampled on the process \
                interval.",
                self.tracked,
            ),
            (
                "memlock_process_exported_processes",
                "Processes exported with per-process series (passing the filter, \
                within top_n and the series budget). Sampled on the process interval.",
                processes.len() as u64,
            ),
            (
                "memlock_process_unwatched_processes",
                "Processes holding locked or pinned memory (or passing the filter) that the fast path and the \
                trends did not follow in the latest sample: beyond the 8,192 most urgent. Above 0, far more \
                processes hold memory than a node runs ranks; those that hold least are left out.",
                self.unwatched,
            ),
            (
                "memlock_process_dropped_processes",
                "Processes that passed the filter but were not exported: beyond top_n, or \
                beyond the series budget (series.limit; the processes nearest their limits are kept). Sampled on the \
                process interval.",
                self.dropped_by_top_n + (self.processes.len() - processes.len()) as u64,
            ),
        ];
        for (name, help, value) in gauges {
            out.family(name, help, Kind::Gauge).sample(&[], value);
        }
        out.family("memlock_process_full_scans_total", "Full scans of procfs by the process collector.", Kind::Counter)
            .sample(&[], self.full_scans_total);
        out.family(
            "memlock_process_early_full_scans_total",
            "Full scans started before full_scan_interval because node-wide pinned (nr_foll_pin_*) or mlocked \
                (nr_mlock) memory grew by more than the re-read processes account for: a process that was not \
                re-read started pinning or locking.",
            Kind::Counter,
        )
        .sample(&[], self.early_full_scans_total);
        out.family(
            "memlock_process_discovered_total",
            "Processes found by the procfs listing of a tracked pass, between full scans: a new process is sampled \
                within one process interval of appearing, and re-read on every pass for its first 10 s.",
            Kind::Counter,
        )
        .sample(&[], self.discovered_total);
        out.family(
            "memlock_process_listings_skipped_total",
            "Tracked passes that did not list procfs because the node's task counters (processes in /proc/stat, \
                the task count in /proc/loadavg) were unchanged since the last listing: no process appeared or \
                exited in between.",
            Kind::Counter,
        )
        .sample(&[], self.listings_skipped_total);
        out.family(
            "memlock_process_vanished_total",
            "Processes that exited between being listed and being read (skipped silently).",
            Kind::Counter,
        )
        .sample(&[], self.vanished_total);
        out.family(
            "memlock_process_read_errors_total",
            "Per-process files that could not be read or parsed, by kind (permission, io, parse, too_large). \
                Permission errors do not fail the collector; the others do.",
            Kind::Counter,
        );
        for (kind, count) in self.read_errors_total.kinds() {
            out.sample(&[("kind", kind)], count);
        }
    }
}

fn with<'a>(labels: &[(&'a str, &'a str)], extra: (&'a str, &'a str)) -> Vec<(&'a str, &'a str)> {
    let mut out = labels.to_vec();
    out.push(extra);
    out
}
