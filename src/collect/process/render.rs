//! The process collector's metric families.

use crate::exposition::{Exposition, Kind};
use crate::kernel::pid_limits::Limit;

use super::sample::{CgroupAggregate, Counter, ProcessSample};
use super::ProcessStats;

impl ProcessStats {
    pub fn render(&self, out: &mut Exposition) {
        let pids: Vec<String> = self.processes.iter().map(|p| p.pid.to_string()).collect();
        let labels: Vec<Vec<(&str, &str)>> =
            self.processes.iter().zip(&pids).map(|(p, pid)| p.labels(pid).collect()).collect();
        let each = |out: &mut Exposition, value: &dyn Fn(&ProcessSample) -> Option<crate::exposition::Value>| {
            for (process, labels) in self.processes.iter().zip(&labels) {
                out.maybe(labels, value(process));
            }
        };

        out.family(
            "memlock_process_locked_bytes",
            "VmLck of the process (/proc/PID/status): memory locked with mlock() or mlockall(), and vfio's pins, \
                checked by mlock against the soft memlock limit separately from VmPin. Sampled on the process \
                interval (default 1s), only for processes passing the filter.",
            Kind::Gauge,
        );
        each(out, &|p| p.locked_bytes.map(Into::into));
        out.family(
            "memlock_process_pinned_bytes",
            "VmPin of the process (/proc/PID/status): long-term pinned memory (RDMA registrations of host memory, \
                and of GPU memory through nvidia-peermem; verbs queue rings; io_uring fixed buffers), checked by \
                ibv_reg_mr against the soft memlock limit separately from VmLck. dma-buf registrations are not in it. \
                Sampled on the process interval.",
            Kind::Gauge,
        );
        each(out, &|p| p.pinned_bytes.map(Into::into));

        out.family(
            "memlock_process_limit_bytes",
            "RLIMIT_MEMLOCK of the process (/proc/PID/limits), soft (enforced) and hard (the ceiling for raising it); \
                absent when unlimited. Sampled on the full scan interval (default 5s).",
            Kind::Gauge,
        );
        for (process, labels) in self.processes.iter().zip(&labels) {
            let Some(limits) = process.limits else { continue };
            for (kind, limit) in [("soft", limits.soft), ("hard", limits.hard)] {
                out.maybe(&with(labels, ("kind", kind)), limit.bytes());
            }
        }
        out.family(
            "memlock_process_limit_unlimited",
            "1 when the process's RLIMIT_MEMLOCK (soft or hard, by kind) is unlimited, else 0. Sampled on the full \
                scan interval.",
            Kind::Gauge,
        );
        for (process, labels) in self.processes.iter().zip(&labels) {
            let Some(limits) = process.limits else { continue };
            for (kind, limit) in [("soft", limits.soft), ("hard", limits.hard)] {
                out.sample(&with(labels, ("kind", kind)), limit == Limit::Unlimited);
            }
        }
        out.family(
            "memlock_process_ipc_lock",
            "1 when the process holds CAP_IPC_LOCK (CapEff bit 14) in the initial user namespace: the memlock limit is \
                not enforced. 0 when it holds it only inside a user namespace (uid_map), where it does not exempt. \
                Sampled on the process interval.",
            Kind::Gauge,
        );
        each(out, &|p| p.ipc_lock.map(Into::into));
        out.family(
            "memlock_process_limit_usage_ratio",
            "VmPin / soft RLIMIT_MEMLOCK (counter=\"pinned\") and VmLck / soft RLIMIT_MEMLOCK \
                (counter=\"locked\"): the kernel checks each counter on its own, so at 1 the next RDMA registration \
                (pinned) or mlock (locked) that would pass it fails with ENOMEM (unless ipc_lock is 1). Above 1 for an \
                exempt process. Absent when the limit is unlimited or 0. Sampled on the process interval.",
            Kind::Gauge,
        );
        for (process, labels) in self.processes.iter().zip(&labels) {
            for counter in Counter::ALL {
                let ratio = process.charge(counter).and_then(|c| c.ratio());
                out.maybe(&with(labels, ("counter", counter.as_str())), ratio);
            }
        }

        let cgroup_labels: Vec<Vec<(&str, &str)>> =
            self.cgroups.iter().map(|c| c.cgroup.labels.iter().map(|(k, v)| (*k, v.as_str())).collect()).collect();
        let each_cgroup =
            |out: &mut Exposition, value: &dyn Fn(&CgroupAggregate) -> Option<crate::exposition::Value>| {
                for (cgroup, labels) in self.cgroups.iter().zip(&cgroup_labels) {
                    out.maybe(labels, value(cgroup));
                }
            };
        out.family(
            "memlock_cgroup_locked_bytes",
            "Sum of VmLck over every scanned process in the cgroup (not only the exported ones). Sampled on the \
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
            "The highest VmPin / soft RLIMIT_MEMLOCK or VmLck / soft RLIMIT_MEMLOCK (counter says which) among \
                the cgroup's processes that the limit applies to (those with CAP_IPC_LOCK in the initial user \
                namespace are left out; they still count in the byte \
                sums), exported or not; absent when none has a finite, non-zero limit. Sampled on the process \
                interval.",
            Kind::Gauge,
        );
        for (cgroup, labels) in self.cgroups.iter().zip(&cgroup_labels) {
            if let Some((counter, ratio)) = cgroup.usage_ratio_max {
                out.sample(&with(labels, ("counter", counter.as_str())), ratio);
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
                within top_n). Sampled on the process interval.",
                self.processes.len() as u64,
            ),
            (
                "memlock_process_dropped_processes",
                "Processes that passed the filter but were not exported because of \
                top_n. Sampled on the process interval.",
                self.dropped_by_top_n,
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
