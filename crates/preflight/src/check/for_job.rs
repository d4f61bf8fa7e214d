//! `check` judges for the job's ranks, not for whoever runs it: the capability the ranks hold,
//! the alert rules' policy on the node's figures, how many communicators a training job runs,
//! the launcher's own fix, and the facts of the checklist.

use crate::check::launch_path::{self, LaunchPath};
use crate::findings::{Fact, Finding, Launch, Status};
use crate::machine::Machine;
use crate::policy;
use memlock_core::units::bytes as human;
use memlock_kernel::fsroot::{self, Roots};
use memlock_kernel::meminfo::Meminfo;
use memlock_kernel::pid_creds::{self, CapHeld, CAP_IPC_LOCK};

/// Communicators per rank assumed when `--communicators` is not given. A training job rarely
/// runs one: PyTorch's default process group plus the data, tensor and pipeline parallel groups
/// of a 3D-parallel stack (Megatron-LM, DeepSpeed) make four, each registering its own buffers.
pub(crate) const DEFAULT_COMMUNICATORS: u64 = 4;

/// The alert each policy finding agrees with, named in the finding when its condition holds.
pub(crate) const ALERT_AVAILABLE_LOW: &str = "MemlockNodeMemoryAvailableLow's condition";
pub(crate) const ALERT_HUGEPAGES: &str = "MemlockNodeHugepagesUnusedWhileMemoryLow's condition";
pub(crate) const ALERT_CGROUP_NEAR: &str = "MemlockCgroupNearMemoryLimit's condition";
pub(crate) const ALERT_OVERCOMMIT: &str = "MemlockNodeStrictOvercommitWithRdma's condition";
pub(crate) const ALERT_COMMIT_HEADROOM: &str = "MemlockNodeCommitHeadroomLow's condition";
pub(crate) const ALERT_MRS_NEAR_CAP: &str = "MemlockRdmaMrsNearDeviceCap's condition";

/// MemAvailable below `node_available_low_ratio` of MemTotal (MemlockNodeMemoryAvailableLow).
pub(crate) fn available_low(m: &Meminfo) -> bool {
    match (m.mem_available, m.mem_total) {
        (Some(available), Some(total)) if total > 0 => {
            (available as f64) < policy::NODE_AVAILABLE_LOW_RATIO * total as f64
        }
        _ => false,
    }
}

/// MemlockNodeCommitHeadroomLow's condition, mode 2 aside: CommitLimit - Committed_AS below
/// `overcommit_headroom_low_ratio` of CommitLimit.
pub(crate) fn commit_headroom_low(m: &Meminfo) -> bool {
    match (m.commit_limit, m.committed_as) {
        (Some(limit), Some(committed)) => {
            (limit.saturating_sub(committed) as f64) < policy::OVERCOMMIT_HEADROOM_LOW_RATIO * limit as f64
        }
        _ => false,
    }
}

/// MemlockNodeHugepagesUnusedWhileMemoryLow's condition on meminfo's default-size pool: more
/// than `hugepages_unused_ratio` of the pool free and not reserved, a pool (`Hugetlb`, every
/// size) above `hugepages_min_pool_ratio` of MemTotal, and MemAvailable low.
pub(crate) fn hugepage_squeeze(m: &Meminfo) -> bool {
    let (Some(total), Some(free), Some(total_mem)) = (m.hugepages_total, m.hugepages_free, m.mem_total) else {
        return false;
    };
    if total == 0 || total_mem == 0 {
        return false;
    }
    let unused = free.saturating_sub(m.hugepages_reserved.unwrap_or(0)) as f64 / total as f64;
    let pool = m.hugetlb.or_else(|| m.hugepage_size.map(|size| size.saturating_mul(total))).unwrap_or(0);
    unused > policy::HUGEPAGES_UNUSED_RATIO
        && pool as f64 > policy::HUGEPAGES_MIN_POOL_RATIO * total_mem as f64
        && available_low(m)
}

/// What the capability judgement found, for the finding.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct CapJudged {
    /// The checker holds CAP_IPC_LOCK and was judged without it (no `--pid`, no `--as-root`).
    pub left_out: bool,
    pub held: Option<CapHeld>,
    /// CAP_IPC_LOCK is in a bounding set narrower than the node's (a container's) but not
    /// effective: it was added to a container whose user is not root.
    pub(crate) bounding_only_in_container: bool,
    pub uid: Option<u32>,
}

/// Judges the rank's capability: with `--pid`, that process's effective set (as read); without,
/// a normal user's rank, unless `--as-root`.
pub(crate) fn judge_capability(roots: &Roots, pid: &str, given_pid: bool, as_root: bool, m: &mut Machine) -> CapJudged {
    let read = |pid: &str| fsroot::read_parsed(&roots.proc(pid).join("status"), pid_creds::parse).ok();
    let creds = read(pid);
    let held = creds.and_then(|c| c.holds(CAP_IPC_LOCK));
    let node_bounding = read("1").and_then(|c| c.cap_bnd);
    let bounding_only_in_container = held.is_some_and(|h| h.bounding && !h.effective)
        && creds.and_then(|c| c.cap_bnd).zip(node_bounding).is_some_and(|(own, node)| own != node);
    let mut judged = CapJudged { held, bounding_only_in_container, uid: creds.and_then(|c| c.uid), left_out: false };
    if !given_pid && !as_root && m.ipc_lock == Some(true) {
        judged.left_out = true;
        m.ipc_lock = Some(false);
    }
    judged
}

/// Rewrites the `memlock.cap_ipc_lock` finding with the four sets and what they mean.
pub(crate) fn explain_capability(judged: &CapJudged, findings: &mut [Finding]) {
    let Some(finding) = findings.iter_mut().find(|f| f.id == "memlock.cap_ipc_lock") else { return };
    let Some(held) = judged.held else { return };
    let yes = |b: bool| if b { "yes" } else { "no" };
    let sets = format!(
        "CAP_IPC_LOCK effective {}, permitted {}, bounding {}, ambient {}",
        yes(held.effective),
        yes(held.permitted),
        yes(held.bounding),
        yes(held.ambient)
    );
    if judged.left_out {
        finding.status = Status::Pass;
        finding.measured = format!(
            "{sets} (uid {}): left out, check judges a normal user's rank, which does not hold it; --as-root judges \
                a job that runs as root, --pid a running rank",
            judged.uid.map_or("?".into(), |u| u.to_string())
        );
    } else if judged.bounding_only_in_container {
        finding.status = Status::Warn;
        finding.measured = format!(
            "{sets}: in the container's bounding set only, where adding IPC_LOCK to a non-root container puts it \
                (docker --cap-add, a pod's securityContext.capabilities.add): the exec of a non-root user without \
                file capabilities leaves it out of the effective set (security/commoncap.c \
                cap_bprm_creds_from_file), and only the effective set lifts the limit: the memlock limit applies"
        );
        finding.fix = "raise the memlock limit where the container gets it (below); adding the capability to a \
            non-root container does nothing"
            .into();
    } else {
        finding.measured = format!("{sets}: {}", finding.measured);
    }
}

/// Attaches the launcher's fix to the memlock findings that are not PASS, and returns the
/// diagnosis for the report. `None` when the memlock limit passes.
pub(crate) fn launcher_fix(
    roots: &Roots,
    files: &super::rdma_stack::Roots,
    pid: &str,
    own: bool,
    findings: &mut [Finding],
) -> Option<Launch> {
    let failing =
        |f: &Finding| f.id.starts_with("memlock.") && f.status != Status::Pass && f.id != "memlock.cap_ipc_lock";
    if !findings.iter().any(failing) {
        return None;
    }
    let sources = launch_path::Sources { procfs: &roots.procfs, etc: files.etc, rootfs: files.rootfs };
    let d = launch_path::diagnose(&sources, pid, own);
    let mut first = true;
    for f in findings.iter_mut().filter(|f| failing(f)) {
        f.fix = if first {
            format!("{} (verify: {})", d.first, d.verify)
        } else {
            "the same fix as the first memlock finding's (how the ranks get their limit, below)".into()
        };
        first = false;
    }
    Some(Launch {
        path: path_name(&d.path).into(),
        evidence: d.evidence,
        first: d.first,
        verify: d.verify,
        others: d.others,
        errors: d.errors,
    })
}

fn path_name(path: &LaunchPath) -> &'static str {
    match path {
        LaunchPath::Slurm { .. } => "Slurm (slurmd, slurmstepd)",
        LaunchPath::Docker { .. } => "Docker",
        LaunchPath::Kubernetes { .. } => "Kubernetes",
        LaunchPath::Containerd { .. } => "containerd",
        LaunchPath::Ssh { .. } => "ssh login (pam_limits)",
        LaunchPath::Service { .. } => "a systemd service",
        LaunchPath::Login => "a login",
        LaunchPath::Unknown => "not told",
    }
}

/// The checklist's facts, as read.
pub fn facts(m: &Machine, roots: &Roots, stack: &super::rdma_stack::Roots, shape: String) -> Vec<Fact> {
    let mut facts = vec![Fact { name: "job shape".into(), value: shape }];
    let mut push = |name: &str, value: Option<String>| {
        facts.push(Fact { name: name.into(), value: value.unwrap_or_else(|| "not read".into()) })
    };
    let bytes = |v: Option<u64>| v.map(|b| human(b as f64));
    let i = &m.meminfo;
    push("MemTotal", bytes(i.mem_total));
    push("MemAvailable", bytes(i.mem_available));
    push("Mlocked", bytes(i.mlocked));
    push("pinned (FOLL_PIN)", node_pinned(roots).map(|b| human(b as f64)));
    push(
        "hugepages",
        i.hugepages_total.map(|total| {
            format!(
                "{total} x {} total, {} free, {} reserved",
                human(i.hugepage_size.unwrap_or(0) as f64),
                i.hugepages_free.unwrap_or(0),
                i.hugepages_reserved.unwrap_or(0)
            )
        }),
    );
    push(
        "cgroup memory limit",
        m.cgroup.as_ref().map(|c| match c.limit_bytes {
            Some(limit) => format!("{} on {}", human(limit as f64), c.path),
            None => format!("none on {}", c.path),
        }),
    );
    push(
        "overcommit",
        m.overcommit_mode
            .map(|mode| format!("{mode}, CommitLimit {}, Committed_AS {}", show(i.commit_limit), show(i.committed_as))),
    );
    let software = memlock_core::collect::software::SoftwareCollector::new(roots.clone()).read(&mut Vec::new());
    push("kernel", Some(software.kernel.clone()).filter(|k| !k.is_empty()));
    push("NVIDIA driver", Some(software.nvidia_driver.clone()).filter(|k| !k.is_empty()).or(Some("none".into())));
    let modules: Vec<String> =
        software.modules.iter().filter(|(_, v)| !v.is_empty()).map(|(name, v)| format!("{name} {v}")).collect();
    push("RDMA modules", Some(if modules.is_empty() { "none loaded".into() } else { modules.join(", ") }));
    push("rdma-core", Some(super::rdma_stack::rdma_core(stack, &m.pid)));
    push("OFED", Some(super::rdma_stack::ofed(stack)));
    push("NCCL", nccl_mapped(roots, &m.pid));
    facts
}

fn show(v: Option<u64>) -> String {
    v.map_or("?".into(), |b| human(b as f64))
}

/// FOLL_PIN pages held on the node: `nr_foll_pin_acquired - nr_foll_pin_released` (mm/gup.c),
/// times the page size.
fn node_pinned(roots: &Roots) -> Option<u64> {
    let text = fsroot::read_string(&roots.proc("vmstat")).ok()?;
    let field =
        |name: &str| text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse::<u64>().ok());
    let held = field("nr_foll_pin_acquired")?.saturating_sub(field("nr_foll_pin_released")?);
    // SAFETY: sysconf has no memory effects; a failure returns -1, handled below.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(page).ok().map(|page| held.saturating_mul(page))
}

/// The NCCL the checked process has mapped, from its maps.
fn nccl_mapped(roots: &Roots, pid: &str) -> Option<String> {
    let text = fsroot::read_string(&roots.proc(pid).join("maps")).ok()?;
    let found = text.lines().find_map(memlock_kernel::versions::nccl_mapping);
    Some(match found {
        Some(mapping) => mapping.version.unwrap_or(mapping.library),
        None => "not mapped by the checked process".into(),
    })
}

#[cfg(test)]
#[path = "tests/for_job.rs"]
mod tests;
