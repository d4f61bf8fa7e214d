//! The process collector's metric families.

use std::collections::HashSet;

use crate::budget::{self, Claim, Grants, Tier};
use crate::exposition::{Exposition, Kind};
use memlock_kernel::pid_limits::Limit;

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
            + self.rdma_libraries.len()
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
/// per stats ([`budget::Ranked`]): both by score in turns by owner ([`crate::fair`]; a cgroup's
/// owner is the uid of its most urgent process), so that one user's crowd of processes or of
/// cgroups cannot take another user's places.
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
        let score = |i: usize| c[i].budget_score() + held(i) / 1e30;
        let (by_score, _) = budget::ranked(c.len(), |_| 0, score);
        let at = |k: usize| &c[by_score[k]];
        let idle = |k: usize| at(k).budget_score() <= 0.0;
        let order: Vec<usize> = crate::fair::order(c.len(), idle, |k| at(k).uid, |k| at(k).cgroup.path.as_str())
            .into_iter()
            .map(|k| by_score[k])
            .collect();
        let scores = crate::fair::capped_scores(order.iter().map(|&i| score(i)));
        let entities = order.iter().zip(scores).map(|(&i, s)| (series(i), s)).collect();
        Self { processes: fair_ranked(p), cgroups: (order, entities) }
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
    pub(crate) fn granted_processes(&self, grants: &Grants) -> Vec<&ProcessSample> {
        let mask = grants.mask(PROCESSES, &self.ranking().processes.0, self.processes.len());
        self.processes.iter().zip(mask).filter_map(|(p, shown)| shown.then_some(p)).collect()
    }

    /// The trend ids of the exported processes (see [`ProcessStats::observations`]).
    pub(crate) fn exported_trend_ids(&self, grants: &Grants) -> HashSet<String> {
        let mut ids = HashSet::new();
        for p in self.granted_processes(grants) {
            for counter in Counter::ALL {
                ids.insert(super::sample::trend_id(p, counter));
            }
        }
        ids
    }

    pub(crate) fn render_granted(&self, out: &mut Exposition, grants: &Grants) {
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
            "VmLck of the process: memory locked with mlock() or mlockall(), and vfio pins.",
            Kind::Gauge,
        );
        each(out, &|p| p.locked_bytes.map(Into::into));
        out.family(
            "memlock_process_pinned_bytes",
            "VmPin of the process: memory pinned by RDMA registrations, io_uring and iommufd.",
            Kind::Gauge,
        );
        each(out, &|p| p.pinned_bytes.map(Into::into));

        out.family(
            "memlock_process_limit_bytes",
            "RLIMIT_MEMLOCK of the process by kind (soft is enforced); absent when unlimited.",
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
            "1 when the process's RLIMIT_MEMLOCK of that kind is unlimited, else 0.",
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
            "1 when the process has CAP_IPC_LOCK in the initial user namespace, exempting it.",
            Kind::Gauge,
        );
        each(out, &|p| p.ipc_lock_exempt.map(Into::into));
        out.family(
            "memlock_process_limit_usage_ratio",
            "VmPin or VmLck (by counter) over the soft RLIMIT_MEMLOCK; at 1 the next charge fails.",
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
            "Always 1; labels give the NCCL library the process has mapped.",
            Kind::Gauge,
        );
        for (process, labels) in processes.iter().zip(&labels) {
            let Some(nccl) = &process.nccl else { continue };
            let mut labels = labels.clone();
            labels.extend([
                ("source", nccl.source),
                ("version", nccl.version.as_deref().unwrap_or("")),
                ("library", nccl.library.as_str()),
            ]);
            out.sample(&labels, 1u64);
        }

        out.family(
            "memlock_process_rdma_library_info",
            "Always 1; labels name a library the process maps that registers memory with RDMA devices.",
            Kind::Gauge,
        );
        for (process, labels) in processes.iter().zip(&labels) {
            for library in &process.rdma_libraries {
                let mut labels = labels.clone();
                labels.extend([("library", library.library), ("file", library.file.as_str())]);
                out.sample(&labels, 1u64);
            }
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
            "Sum of VmLck over every scanned process in the cgroup.",
            Kind::Gauge,
        );
        each_cgroup(out, &|c| Some(c.locked_bytes.into()));
        out.family(
            "memlock_cgroup_pinned_bytes",
            "Sum of VmPin over every scanned process in the cgroup.",
            Kind::Gauge,
        );
        each_cgroup(out, &|c| Some(c.pinned_bytes.into()));
        out.family(
            "memlock_cgroup_limit_usage_ratio_max",
            "Per counter, the highest process usage ratio in the cgroup among non-exempt processes.",
            Kind::Gauge,
        );
        for (cgroup, labels) in cgroups.iter().zip(&cgroup_labels) {
            for (counter, ratio) in Counter::ALL.iter().zip(cgroup.counter_ratio_max) {
                out.maybe(&with(labels, ("counter", counter.as_str())), ratio);
            }
        }
        out.family(
            "memlock_cgroup_processes",
            "User processes in the cgroup seen by the latest full process scan.",
            Kind::Gauge,
        );
        each_cgroup(out, &|c| Some(c.processes.into()));

        let gauges = [
            (
                "memlock_process_scanned_processes",
                "User processes read by the latest full scan of procfs.",
                self.scanned,
            ),
            ("memlock_process_tracked_processes", "Processes re-read on every process interval.", self.tracked),
            (
                "memlock_process_exported_processes",
                "Processes exported with per-process series.",
                processes.len() as u64,
            ),
            (
                "memlock_process_unwatched_processes",
                "Processes holding memory that the trend and fast path skip, past their bound.",
                self.unwatched,
            ),
            (
                "memlock_process_dropped_processes",
                "Processes passing the filter but left out of the per-process series.",
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
            "Full scans started early because node-wide pinned or mlocked memory grew unexplained.",
            Kind::Counter,
        )
        .sample(&[], self.early_full_scans_total);
        out.family(
            "memlock_process_discovered_total",
            "Processes found by the procfs listing between full scans.",
            Kind::Counter,
        )
        .sample(&[], self.discovered_total);
        out.family(
            "memlock_process_listings_skipped_total",
            "Passes that skipped listing procfs because no task appeared or exited.",
            Kind::Counter,
        )
        .sample(&[], self.listings_skipped_total);
        out.family(
            "memlock_process_vanished_total",
            "Processes that exited between being listed and being read.",
            Kind::Counter,
        )
        .sample(&[], self.vanished_total);
        out.family(
            "memlock_process_read_errors_total",
            "Per-process files that could not be read or parsed, by kind.",
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
