//! `check --nccl-log`: each failed call of the job's log explained: which process and call, which
//! limit its errno points to, this node's figures when the failure happened here, and the fix
//! the check gives for that limit.

use std::collections::BTreeMap;

use crate::estimate::from_log::{LogFailure, LogReport};
use crate::findings::{Finding, Status};
use crate::machine::{memlock_exempt, Machine};
use memlock_core::units::bytes as human;
use memlock_kernel::fsroot::Roots;
use memlock_kernel::pid_limits;

use super::{CGROUP_FIX, MEMLOCK_FIX};

/// Failures named one by one in a finding; the rest are counted.
const LISTED: usize = 8;

/// This node's name as NCCL prints it: getHostName (src/misc/utils.cc) stops at the first `.`.
pub fn hostname(roots: &Roots) -> String {
    let name = std::fs::read_to_string(roots.proc("sys/kernel/hostname")).unwrap_or_default();
    name.trim().split('.').next().unwrap_or_default().to_owned()
}

/// Calls that register memory: the kernel pins the pages (ib_umem_get) unless dma-buf brings
/// them (ib_umem_dmabuf_get pins nothing of the process's).
fn registers(call: &str) -> bool {
    matches!(call, "ibv_reg_mr" | "ibv_reg_mr_iova2" | "ibv_reg_mr_iova" | "fi_mr_regattr" | "fi_mr_reg")
}

/// Calls whose queue the provider allocates in user memory and the kernel pins (mlx5's CQ and QP
/// buffers, registered through ib_umem_get by mlx5_ib create_cq / create_qp).
fn queues(call: &str) -> bool {
    matches!(call, "ibv_create_cq" | "ibv_create_qp" | "ibv_create_srq")
}

/// Which limit an errno of a call points to, and the fix.
fn limit(call: &str, errno: Option<i32>) -> (&'static str, String) {
    match errno {
        Some(12) if registers(call) || queues(call) => (
            "ENOMEM from pinning: the memlock limit (drivers/infiniband/core/umem.c ib_umem_get: pinned_vm past \
                RLIMIT_MEMLOCK without CAP_IPC_LOCK), the cgroup's memory limit (pinning faults the pages in and \
                charges them to the job's cgroup), or the NIC's own cap (its MR, CQ or QP count; \
                memlock_rdma_resources and the RDMA cgroup's hca_object show it)",
            format!("{MEMLOCK_FIX}; if the limit is already unlimited: {CGROUP_FIX}"),
        ),
        Some(12) if call == "ibv_reg_dmabuf_mr" => (
            "ENOMEM registering through dma-buf: no memlock charge (ib_umem_dmabuf_get pins no process memory); \
                the NIC's cap or the GPU's BAR space",
            "lower NCCL_BUFFSIZE or the channels (NCCL_MAX_NCHANNELS), or check the NIC's MR limits".to_owned(),
        ),
        Some(1 | 13) => (
            "permission: not a size limit (the RDMA device file, or a memlock limit of 0)",
            format!("check access to /dev/infiniband/uverbs*; {MEMLOCK_FIX}"),
        ),
        Some(14 | 22) => (
            "a bad address or argument: no limit (GPU memory NCCL could not register: nvidia-peermem not loaded \
                or dma-buf unsupported)",
            "check GPUDirect on the node (memlock-exporter estimate says which mode it detects)".to_owned(),
        ),
        _ => ("not one of the limits `check` judges", "see the WARN lines around it in the log".to_owned()),
    }
}

/// This node's figures, when the failure happened on it.
fn node_figures(m: &Machine, need: Option<u64>) -> String {
    let mut parts = Vec::new();
    if let Some(limits) = m.limits {
        let soft = match limits.soft {
            pid_limits::Limit::Unlimited => "unlimited".to_owned(),
            pid_limits::Limit::Bytes(b) => human(b as f64),
        };
        let exempt = if memlock_exempt(m) { ", not enforced (CAP_IPC_LOCK)" } else { "" };
        parts.push(format!("memlock soft limit of pid {} {soft}{exempt}", m.pid));
    }
    if let Some(c) = &m.cgroup {
        let used = c.working_set_bytes.or(c.usage_bytes).map_or("?".to_owned(), |b| human(b as f64));
        let limit = c.limit_bytes.map_or("no limit".to_owned(), |b| format!("limit {}", human(b as f64)));
        parts.push(format!("cgroup {} {used} used, {limit}", c.path));
    }
    if let Some(need) = need {
        parts.push(format!("the log's connections of that process need {}", human(need as f64)));
    }
    parts.join("; ")
}

fn who(LogFailure { at: f, rank, .. }: &LogFailure) -> String {
    let rank = rank.map_or(String::new(), |r| format!("rank {r} "));
    let dev = f.cuda_dev.map_or(String::new(), |d| format!(", GPU {d}"));
    let comm = f.communicator.as_ref().map_or(String::new(), |c| format!(", communicator {c}"));
    format!("{rank}({}:{}{dev}{comm}, log line {})", f.host, f.pid, f.line)
}

/// One finding per failed call and errno, FAIL, naming the processes.
pub fn explain(r: &LogReport, m: &Machine, this_host: &str) -> Vec<Finding> {
    let mut groups: BTreeMap<(String, Option<i32>), Vec<&LogFailure>> = BTreeMap::new();
    for f in &r.failures {
        groups.entry((f.at.call.clone(), f.at.errno)).or_default().push(f);
    }
    let mut out = Vec::new();
    for ((call, errno), failures) in groups {
        let first = failures[0];
        let error = match (first.errno_name, first.at.error.as_deref()) {
            (Some(name), Some(text)) => format!("{name} ({text})"),
            (None, Some(text)) => text.to_owned(),
            (Some(name), None) => name.to_owned(),
            (None, None) => "no error text".to_owned(),
        };
        let mut names: Vec<String> = failures.iter().take(LISTED).map(|f| who(f)).collect();
        if failures.len() > LISTED {
            names.push(format!("and {} more", failures.len() - LISTED));
        }
        let (what, fix) = limit(&call, errno);
        let mut measured =
            format!("{call} failed with {error} in {} process(es): {}; {what}", failures.len(), names.join(", "));
        if let Some(here) = failures.iter().map(|f| &f.at).find(|f| !this_host.is_empty() && f.host == this_host) {
            let need = r.ranks.iter().find(|k| k.host == here.host && k.pid == here.pid).map(|k| k.memlock_bytes);
            measured.push_str(&format!("; on this node ({this_host}): {}", node_figures(m, need)));
        }
        out.push(Finding::new(format!("nccl.log.{call}"), Status::Fail, measured, fix));
    }
    out.push(memlock_need(r, m));
    if !r.exact {
        out.push(Finding::new(
            "nccl.log.bounds",
            Status::Warn,
            format!("the log passed a reader cap ({} lines): counts are lower bounds", r.lines),
            "give the log of one job",
        ));
    }
    out
}

/// The log's busiest process against the memlock limit `check` judges (the checked process's,
/// as for the model's need): what the job's own connections charge to VmPin.
fn memlock_need(r: &LogReport, m: &Machine) -> Finding {
    let busiest = r.ranks.iter().max_by_key(|k| k.memlock_bytes);
    let who = busiest.map_or(String::new(), |k| {
        let rank = k.rank.map_or(String::new(), |x| format!("rank {x} "));
        format!(" ({rank}{}:{})", k.host, k.pid)
    });
    let need = human(r.per_rank_max_bytes as f64);
    let limit = match m.limits.map(|l| l.soft) {
        Some(pid_limits::Limit::Bytes(b)) => human(b as f64),
        _ => "unlimited".to_owned(),
    };
    let exempt = if memlock_exempt(m) { ", not enforced (CAP_IPC_LOCK)" } else { "" };
    if r.fits_memlock_limit {
        let measured = format!(
            "the log's busiest process{who} sets up connections charging {need} to VmPin; \
            memlock soft limit {limit}{exempt}"
        );
        Finding::new("nccl.log.memlock", Status::Pass, measured, "")
    } else {
        let measured = format!(
            "the log's busiest process{who} sets up connections charging {need} to VmPin > \
            memlock soft limit {limit}"
        );
        Finding::new("nccl.log.memlock", Status::Fail, measured, MEMLOCK_FIX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::from_log;
    use crate::machine::CgroupHeadroom;
    use crate::nccl::model::{estimate, Inputs};

    fn report(name: &str) -> LogReport {
        let l =
            from_log::load(&format!("{}/../../tests/fixtures/nccl-logs/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap();
        let i = Inputs::new(2, 8, 8);
        let e = estimate(&i);
        let m = machine();
        from_log::report(&i, &e, &l, &crate::estimate::verdict(&e, &m))
    }

    fn machine() -> Machine {
        Machine {
            pid: "4242".into(),
            limits: Some(pid_limits::MemlockLimits {
                soft: pid_limits::Limit::Bytes(8 << 20),
                hard: pid_limits::Limit::Bytes(8 << 20),
            }),
            ipc_lock: Some(false),
            initial_user_ns: Some(true),
            cgroup: Some(CgroupHeadroom {
                path: "/slurm/uid_1000/job_77".into(),
                usage_bytes: Some(1 << 30),
                working_set_bytes: Some(1 << 29),
                limit_bytes: Some(64 << 30),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn enomem_from_registration_names_the_rank_the_limits_and_this_nodes_figures() {
        let r = report("2x8x8-enomem-v2.21.log");
        let f = explain(&r, &machine(), "gpu-a02");
        assert_eq!(f.len(), 2);
        assert_eq!((f[0].id.as_str(), f[0].status), ("nccl.log.ibv_reg_mr_iova2", Status::Fail));
        let m = &f[0].measured;
        assert!(
            m.starts_with(
                "ibv_reg_mr_iova2 failed with ENOMEM (Cannot allocate memory) in 1 process(es): rank 13 \
            (gpu-a02:41105, GPU 5, log line"
            ),
            "{m}"
        );
        assert!(m.contains("ib_umem_get") && m.contains("cgroup") && m.contains("NIC's own cap"), "{m}");
        assert!(m.contains("on this node (gpu-a02): memlock soft limit of pid 4242 8.0 MiB"), "{m}");
        assert!(m.contains("cgroup /slurm/uid_1000/job_77 512.0 MiB used, limit 64.0 GiB"), "{m}");
        assert!(f[0].fix.starts_with(MEMLOCK_FIX), "{}", f[0].fix);
        // Elsewhere: no node figures.
        assert!(!explain(&r, &machine(), "gpu-a01")[0].measured.contains("on this node"));
        assert!(!explain(&r, &machine(), "")[0].measured.contains("on this node"));
    }

    #[test]
    fn each_call_and_errno_is_one_finding_and_other_errnos_are_no_memlock_limit() {
        let r = report("public-deepep-143-create-cq.log");
        let f = explain(&r, &machine(), "elsewhere");
        assert_eq!(f.len(), 2, "{f:?}");
        assert!(f[0].measured.contains("in 2 process(es): (msm-h200-2:4016, GPU 7"), "{}", f[0].measured);
        let r = report("public-nccl-563-ofi-enomem.log");
        assert_eq!(explain(&r, &machine(), "x")[0].id, "nccl.log.fi_mr_regattr");
        assert!(limit("ibv_reg_mr_iova2", Some(22)).0.starts_with("a bad address"));
        assert!(limit("ibv_reg_dmabuf_mr", Some(12)).0.contains("no memlock charge"));
        assert!(limit("posix_fallocate", None).0.contains("not one of the limits"));
    }

    #[test]
    fn the_logs_busiest_process_is_judged_against_the_limit() {
        // 2 x 8 x 8: 76.4 MiB per process against 8 MiB.
        let r = report("2x8x8-ring-tree-v2.21.log");
        let f = explain(&r, &machine(), "");
        assert_eq!(f.len(), 1, "no failure in the log: {f:?}");
        assert_eq!((f[0].id.as_str(), f[0].status), ("nccl.log.memlock", Status::Fail));
        assert!(f[0].measured.starts_with("the log's busiest process (rank "), "{}", f[0].measured);
        assert!(
            f[0].measured.ends_with("charging 76.4 MiB to VmPin > memlock soft limit 8.0 MiB"),
            "{}",
            f[0].measured
        );
        assert_eq!(f[0].fix, MEMLOCK_FIX);
        // A process with no network line (NVIDIA/nccl issue 1814's excerpt) charges nothing.
        let r = report("public-nccl-1814-init-complete.log");
        let f = explain(&r, &machine(), "");
        assert_eq!(f[0].status, Status::Pass, "{f:?}");
    }
}
