//! The node as the preflight reads it, once, through the injected roots: the process's memlock
//! limits and CAP_IPC_LOCK, memory, its memory cgroup, the RDMA ports and which of them NCCL
//! opens. `check` judges it, `estimate` compares its need with it.

use std::collections::BTreeMap;
use std::path::Path;

use crate::nccl::env::Environment;
use memlock_core::collect::cgroup::CgroupCollector;
use memlock_core::collect::process::{ipc_lock_exempts, user_namespace_of, UserNamespaceView};
use memlock_core::collect::rdma_caps::{RdmaCapsCollector, RdmaCapsStats, LIBIBVERBS};
use memlock_core::collect::rdma_netlink::RdmaNetlinkCollector;
use memlock_core::collect::rdma_sysfs::{RdmaSysfsCollector, SysfsDevice, SysfsPort};
use memlock_core::config::{CgroupConfig, RdmaConfig};
use memlock_kernel::fsroot::{self, Roots, SourceError};
use memlock_kernel::{meminfo, parse_u64, pid_cgroup, pid_limits, pid_status};

/// Everything the checks look at, read once through the injected roots.
#[derive(Debug, Clone, Default)]
pub struct Machine {
    pub pid: String,
    pub limits: Option<pid_limits::MemlockLimits>,
    pub ipc_lock: Option<bool>,
    /// Whether the process shares the initial user namespace (`None`: could not tell).
    pub(crate) initial_user_ns: Option<bool>,
    pub meminfo: meminfo::Meminfo,
    pub overcommit_mode: Option<u64>,
    pub max_map_count: Option<u64>,
    /// The checked process's environment with NCCL's configuration files, as NCCL reads it.
    pub environment: Environment,
    /// The memory cgroup of the process, when one could be read.
    pub cgroup: Option<CgroupHeadroom>,
    /// RDMA devices from sysfs (empty: none on this node).
    pub rdma: Vec<SysfsDevice>,
    /// The devices' own caps and the MRs in use, read from the live node only (`None` when the
    /// sysfs root is not `/sys`, or there is no RDMA device).
    pub(crate) nic_caps: Option<NicCaps>,
    /// The network interfaces of the process's network namespace (`/proc/PID/net/dev`), when
    /// readable.
    pub interfaces: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CgroupHeadroom {
    pub path: String,
    pub usage_bytes: Option<u64>,
    /// Usage minus inactive page cache, which the kernel reclaims before it refuses a charge;
    /// `None` when `memory.stat` could not be read (usage is used instead).
    pub working_set_bytes: Option<u64>,
    /// The effective limit (lowest on the path); `None` when unlimited.
    pub limit_bytes: Option<u64>,
}

/// The devices' own caps and the MRs in use, read from the live node.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NicCaps {
    pub caps: RdmaCapsStats,
    /// MRs per device (RDMA netlink's resource summary); a device missing here was not counted.
    pub(crate) mrs_in_use: BTreeMap<String, u64>,
}

/// The caps through libibverbs and the MRs from RDMA netlink, as the daemon's rdma_caps and
/// rdma_netlink collectors read them; what cannot be read is left out, never an error.
fn live_nic_caps(roots: &Roots) -> NicCaps {
    let caps = RdmaCapsCollector::new(LIBIBVERBS).read();
    let mut ignored = Vec::new();
    let mrs_in_use = RdmaNetlinkCollector::new(roots.clone(), RdmaConfig::default())
        .read(&mut ignored)
        .map(|stats| {
            stats
                .devices
                .into_iter()
                .filter_map(|d| {
                    let mrs = d.resources.iter().find(|(kind, _)| kind == "mr").map(|(_, n)| *n)?;
                    Some((d.name, mrs))
                })
                .collect()
        })
        .unwrap_or_default();
    NicCaps { caps, mrs_in_use }
}

/// Reads the machine state the checks need. Only the target process's limits are required:
/// without them there is nothing to check (exit 2).
pub(crate) fn read_machine(roots: &Roots, pid: &str, environment: Environment) -> Result<Machine, SourceError> {
    let proc_dir = roots.proc(pid);
    let limits = fsroot::read_parsed(&proc_dir.join("limits"), pid_limits::parse)?;
    let status_text = fsroot::read_string(&proc_dir.join("status"))?;
    let ipc_lock = pid_status::parse(&status_text)
        .map_err(|source| SourceError::Parse { path: proc_dir.join("status"), source })?
        .ipc_lock();
    let meminfo = fsroot::read_parsed(&roots.proc("meminfo"), meminfo::parse)?;
    let sysctl = |name: &str| fsroot::read_parsed(&roots.proc(format!("sys/vm/{name}")), parse_u64).ok();
    let cgroup = fsroot::read_string(&proc_dir.join("cgroup"))
        .ok()
        .and_then(|text| pid_cgroup::memory_path(&text).ok().flatten().map(str::to_owned))
        .and_then(|path| cgroup_headroom(roots, &path));
    let mut rdma_errors = Vec::new();
    let rdma = RdmaSysfsCollector::new(roots.clone(), RdmaConfig::default())
        .read(&mut rdma_errors)
        .map(|stats| stats.devices)
        .unwrap_or_default();
    let nic_caps = (!rdma.is_empty() && roots.sysfs == Path::new("/sys")).then(|| live_nic_caps(roots));
    Ok(Machine {
        cgroup,
        rdma,
        nic_caps,
        pid: pid.to_owned(),
        limits: Some(limits),
        ipc_lock,
        initial_user_ns: same_user_namespace(&roots.procfs, &proc_dir),
        meminfo,
        overcommit_mode: sysctl("overcommit_memory"),
        max_map_count: sysctl("max_map_count"),
        environment,
        interfaces: fsroot::read_string(&proc_dir.join("net/dev")).ok().map(|t| net_dev_interfaces(&t)),
    })
}

/// The interface names of `/proc/PID/net/dev` (net/core/net-procfs.c dev_seq_show: two header
/// lines, then `name: counters` per interface).
pub(crate) fn net_dev_interfaces(text: &str) -> Vec<String> {
    text.lines().skip(2).filter_map(|l| l.split_once(':').map(|(name, _)| name.trim().to_owned())).collect()
}

/// Reads one cgroup's usage and effective limit with the cgroup collector itself, limited to
/// that path.
fn cgroup_headroom(roots: &Roots, path: &str) -> Option<CgroupHeadroom> {
    let exact = regex::Regex::new(&format!("^{}$", regex::escape(path))).ok()?;
    let config = CgroupConfig {
        full_scan_interval: std::time::Duration::from_secs(3600),
        include: vec![exact],
        exclude: Vec::new(),
        max_depth: 64,
    };
    let mut errors = Vec::new();
    let stats = CgroupCollector::new(roots.clone(), config).read(&mut errors);
    let memory = stats.memory.iter().find(|m| m.path() == path)?;
    Some(CgroupHeadroom {
        path: path.to_owned(),
        usage_bytes: memory.usage_bytes,
        working_set_bytes: memory.working_set_bytes,
        limit_bytes: memory.limit.and_then(|l| l.bytes()),
    })
}

/// CAP_IPC_LOCK exempts only when held in the initial user namespace (capable() checks it there):
/// the daemon's decision ([`UserNamespaceView::judge`]) over the process's `ns/user` link and
/// `uid_map`, from where this `check` stands (inside a user namespace, a namespaced root's map
/// still shows it). In a container with its own PID namespace pid 1 is the container's init, in
/// the same user namespace, so equal links to pid 1's prove nothing there.
fn same_user_namespace(procfs: &Path, proc_dir: &Path) -> Option<bool> {
    user_namespace_of(&UserNamespaceView::read(procfs), proc_dir)
}

/// Whether NCCL opens port `port` of `device` as NCCL_IB_HCA reads (net_ib/init.cc
/// ncclIbInitDevices): per port, `matchIfList(name, port, list) ^ searchNot`, the list parsed
/// by parseStringList without trimming (crates/preflight/src/nccl/grammar.rs). Unset selects every port. NCCL
/// tests only ACTIVE ports with an InfiniBand or Ethernet link layer: [`nccl_opens`].
pub(crate) fn ib_hca_selects(spec: Option<&[u8]>, device: &str, port: u32) -> bool {
    match spec {
        None => true,
        Some(value) => crate::nccl::grammar::parse_if_list(value, 32).selects(device, i64::from(port)),
    }
}

/// The ports NCCL opens: ACTIVE (IBV_PORT_ACTIVE, 4) and selected by NCCL_IB_HCA; each is one
/// NIC to NCCL. NCCL's IB transport also skips link layers other than InfiniBand and Ethernet;
/// those (EFA's "Unknown") are served by a net plugin (aws-ofi-nccl), so they are counted too.
pub(crate) fn nccl_opens(spec: Option<&[u8]>, device: &SysfsDevice, port: &SysfsPort) -> bool {
    port.state.as_ref().is_some_and(|s| s.value == 4) && ib_hca_selects(spec, &device.name, port.number)
}

/// Whether the memlock limit is lifted for the checked process: the one CAP_IPC_LOCK rule
/// ([`ipc_lock_exempts`]), for `check` and `estimate` alike.
pub(crate) fn memlock_exempt(m: &Machine) -> bool {
    ipc_lock_exempts(m.ipc_lock, m.initial_user_ns) == Some(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_namespace_is_told_from_uid_map_without_the_namespace_links() {
        let tmp = tempfile::Builder::new().prefix("memlock-check-userns-").tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let (proc_dir, init_dir) = (dir.join("4100"), dir.join("1"));
        std::fs::create_dir_all(&proc_dir).unwrap();
        let captures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/captures");
        assert_eq!(same_user_namespace(&dir, &proc_dir), None, "nothing to tell it by");
        std::fs::copy(captures.join("proc_userns_uid_map"), proc_dir.join("uid_map")).unwrap();
        assert_eq!(same_user_namespace(&dir, &proc_dir), Some(false));
        std::fs::copy(captures.join("proc_self_uid_map"), proc_dir.join("uid_map")).unwrap();
        assert_eq!(same_user_namespace(&dir, &proc_dir), Some(true));
        // Links that differ prove a namespace of its own.
        std::fs::create_dir_all(proc_dir.join("ns")).unwrap();
        std::fs::create_dir_all(init_dir.join("ns")).unwrap();
        std::os::unix::fs::symlink("user:[4026532001]", proc_dir.join("ns/user")).unwrap();
        std::os::unix::fs::symlink("user:[4026531837]", init_dir.join("ns/user")).unwrap();
        assert_eq!(same_user_namespace(&dir, &proc_dir), Some(false));
        // Links that match prove nothing when pid 1 is a rootless container's init: uid_map
        // decides.
        std::fs::remove_file(proc_dir.join("ns/user")).unwrap();
        std::os::unix::fs::symlink("user:[4026531837]", proc_dir.join("ns/user")).unwrap();
        std::fs::copy(captures.join("proc_userns_uid_map"), proc_dir.join("uid_map")).unwrap();
        assert_eq!(same_user_namespace(&dir, &proc_dir), Some(false));
        std::fs::remove_file(proc_dir.join("uid_map")).unwrap();
        assert_eq!(same_user_namespace(&dir, &proc_dir), Some(true), "the links alone");
    }

    #[test]
    fn the_fixture_node_is_read_through_the_roots() {
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
        let roots = Roots { procfs: fixtures.join("proc"), sysfs: fixtures.join("sys") };
        let pids: Vec<String> = std::fs::read_dir(&roots.procfs)
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()) && roots.procfs.join(n).join("limits").exists())
            .collect();
        assert!(!pids.is_empty());
        let mut with_cgroup_limit = 0;
        for pid in &pids {
            let m = read_machine(&roots, pid, Environment::default()).unwrap();
            assert!(!m.rdma.is_empty(), "the fixture sysfs has RDMA devices");
            if m.cgroup.as_ref().is_some_and(|c| c.limit_bytes.is_some()) {
                with_cgroup_limit += 1;
            }
        }
        assert!(with_cgroup_limit > 0, "some fixture process sits in a limited cgroup");
    }
}
