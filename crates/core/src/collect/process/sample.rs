//! The one definition of what a process is charged against its memlock limit: usage, limit,
//! headroom, ratio and the CAP_IPC_LOCK exemption, used by the exported metrics, the trends, the
//! fast path and `check`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::charge::Charge;
use crate::trend::{Observation, Scope};
use memlock_kernel::fsroot;
use memlock_kernel::pid_limits::MemlockLimits;
use memlock_kernel::registrants::RdmaLibrary;
use memlock_kernel::versions::NcclMapping;
use memlock_kernel::{uid_map, ParseError};

use super::ProcessStats;

/// A cgroup as it labels processes: its path (the memory hierarchy's, or the unified one) and
/// the label set derived from it. Shared by every process in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupInfo {
    pub path: String,
    /// `cgroup` first, then the attribution labels ([`cgroup_path::labels`]).
    pub labels: Vec<(&'static str, String)>,
}

/// One process, as sampled.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessSample {
    pub pid: u32,
    /// The command name, with the kernel's escaping in `status` undone.
    pub comm: String,
    /// `None` when `/proc/PID/cgroup` names neither a memory nor a unified hierarchy, or could
    /// not be read.
    pub cgroup: Option<Arc<CgroupInfo>>,
    /// `VmLck` in bytes (mlock, vfio type1), checked by the kernel against the soft memlock limit
    /// (`do_mlock`; `mlockall(MCL_CURRENT)` checks VmSize instead, mm/mlock.c).
    pub locked_bytes: Option<u64>,
    /// `VmPin` in bytes (RDMA registrations, io_uring fixed buffers, iommufd pins), checked by
    /// RDMA registration (`ib_umem_get`) against the soft memlock limit separately from `VmLck`.
    /// io_uring and iommufd add to it but check the user's `locked_vm` (every process of the
    /// uid), so for them the ratio is a lower bound.
    pub pinned_bytes: Option<u64>,
    /// RLIMIT_MEMLOCK, as of the last full scan, or of the last 2 s for a process holding memory
    /// (`scan::LIMITS_REFRESH`). `None` when `limits` could not be read.
    pub limits: Option<MemlockLimits>,
    /// CAP_IPC_LOCK in CapEff (bit 14), wherever it is held. `None` when CapEff could not be read.
    pub cap_ipc_lock: Option<bool>,
    /// Whether the capability lifts the limit ([`ipc_lock_exempts`]): held in CapEff and in the
    /// initial user namespace (`memlock_process_ipc_lock`). `None` when CapEff could not be read.
    pub(crate) ipc_lock_exempt: Option<bool>,
    /// The NCCL library the process has mapped (`/proc/PID/maps`), read once, when the process
    /// is first seen holding pinned memory (NCCL's registrations are what pins it). `None` until
    /// then, or when no `libnccl.so*` is mapped (NCCL linked statically, or not used).
    pub nccl: Option<Arc<NcclMapping>>,
    /// The other libraries that register memory with an RDMA device, one per family, read from
    /// `maps` in the same pass as [`ProcessSample::nccl`]; empty until then or when none is mapped.
    pub(crate) rdma_libraries: Vec<RdmaLibrary>,
    /// The real uid (`status`): whose process it is. Every ranking shares its places fairly
    /// among owners ([`crate::fair`]), so one user's crowd displaces only that user's processes.
    pub uid: Option<u32>,
    /// The proportional share of its locked pages (`Locked:` of `smaps_rollup`, see
    /// [`memlock_kernel::smaps_rollup`]): a page locked by n processes counts 1/n in each. Read
    /// only while `VmLck` is above 0; `None` then when unreadable (another user's process read
    /// without ptrace access, a kernel before 4.14). Ranks and sums per cgroup; the limit check
    /// is `VmLck`'s.
    pub(crate) locked_share_bytes: Option<u64>,
}

/// The trend analyser's id for one counter of a process (the comm guards against pid reuse
/// mixing two processes' histories).
pub(crate) fn trend_id(p: &ProcessSample, counter: Counter) -> String {
    format!("{}/{}/{}", p.pid, p.comm, counter.as_str())
}

impl ProcessSample {
    /// The counter's bytes: `VmPin` or `VmLck`.
    pub(crate) fn counter_bytes(&self, counter: Counter) -> Option<u64> {
        match counter {
            Counter::Pinned => self.pinned_bytes,
            Counter::Locked => self.locked_bytes,
        }
    }

    /// One counter against the soft memlock limit, as the kernel checks it. `None` when the
    /// counter or the limits are unknown; the limit is `None` when unlimited.
    pub fn charge(&self, counter: Counter) -> Option<Charge> {
        let limits = self.limits?;
        Some(Charge {
            used_bytes: self.counter_bytes(counter)?,
            limit_bytes: limits.soft.bytes(),
            // An unknown CapEff counts as enforced: missing a real refusal costs more than a
            // false warning.
            enforced: self.ipc_lock_exempt != Some(true),
            own_bytes: match counter {
                Counter::Locked => self.locked_share_bytes,
                // Pins are counted per mm by the kernel; no per-page share is printed for them.
                Counter::Pinned => None,
            },
        })
    }

    /// The counter nearest its limit and its ratio (ties: VmPin, which RDMA fails on).
    #[cfg(test)]
    pub(crate) fn worst_ratio(&self) -> Option<(Counter, f64)> {
        Counter::ALL.iter().filter_map(|&c| Some((c, self.charge(c)?.ratio()?))).fold(None, |worst, (c, ratio)| {
            match worst {
                Some((_, w)) if w >= ratio => worst,
                _ => Some((c, ratio)),
            }
        })
    }

    /// How urgent the process is, for every ranking (top_n, the series budget, the fast path's
    /// bound, the cgroup aggregates): the higher of [`Charge::urgency`] over its counters; `None` when
    /// no limit is enforced on it (CAP_IPC_LOCK, unlimited, unreadable).
    pub(crate) fn urgency(&self) -> Option<f64> {
        Counter::ALL.iter().filter_map(|&c| self.charge(c)?.urgency()).reduce(f64::max)
    }

    /// [`ProcessSample::urgency`] with exempt processes ranked by their ratio too, for top_n:
    /// the per-process series show an exempt process far over its limit (opensm), the budget
    /// and the alerts do not count it.
    pub(crate) fn rank_urgency(&self) -> Option<f64> {
        Counter::ALL.iter().filter_map(|&c| Charge { enforced: true, ..self.charge(c)? }.urgency()).reduce(f64::max)
    }

    /// The larger of the two counters, for ranking by bytes (never for the limit check), shared
    /// locked pages counted once ([`ProcessSample::locked_own_bytes`]).
    pub(crate) fn larger_counter_bytes(&self) -> u64 {
        self.locked_own_bytes().max(self.pinned_bytes.unwrap_or(0))
    }

    /// `VmLck` with the pages it shares counted once among the processes that lock them: its
    /// share where known, else `VmLck`. What the cgroup sums add up.
    pub(crate) fn locked_own_bytes(&self) -> u64 {
        let locked = self.locked_bytes.unwrap_or(0);
        self.locked_share_bytes.map_or(locked, |share| share.min(locked))
    }

    /// `VmPin + VmLck`: how much memory the process holds out of reach of reclaim, for the
    /// export filter (not for the limit check).
    pub fn held_bytes(&self) -> u64 {
        self.locked_bytes.unwrap_or(0).saturating_add(self.pinned_bytes.unwrap_or(0))
    }

    /// The process's label set, the one every per-process series carries: `pid`, `comm`, then
    /// the cgroup's (`cgroup` and the attribution labels). `pid` is the caller's buffer.
    pub fn labels<'a>(&'a self, pid: &'a str) -> impl Iterator<Item = (&'static str, &'a str)> {
        let cgroup = self.cgroup.iter().flat_map(|c| c.labels.iter().map(|(k, v)| (*k, v.as_str())));
        [("pid", pid), ("comm", self.comm.as_str())].into_iter().chain(cgroup)
    }
}

/// The two counters the kernel checks, each on its own, against the soft RLIMIT_MEMLOCK: a
/// process can hold 6 MiB locked and still register 7 MiB under an 8 MiB limit. They are never
/// added, and a ramp in one is not hidden behind the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Counter {
    /// `VmPin`, `mm->pinned_vm`: RDMA registrations (ibv_reg_mr, through `ib_umem_get`, which
    /// checks it), GPU memory registered through nvidia-peermem, verbs queue rings; also io_uring
    /// fixed buffers and iommufd pins, which the kernel checks against the user's `locked_vm`
    /// instead (io_uring/rsrc.c `__io_account_mem`, drivers/iommu/iommufd/pages.c
    /// `incr_user_locked_vm`), and perf rings beyond the per-user allowance (`perf_mmap`,
    /// kernel/events/core.c, refuses with EPERM).
    Pinned,
    /// `VmLck`, `mm->locked_vm`: mlock, mlockall, and vfio type1's pins (`vfio_lock_acct`,
    /// drivers/vfio/vfio_iommu_type1.c).
    Locked,
}

impl Counter {
    pub const ALL: [Counter; 2] = [Counter::Pinned, Counter::Locked];

    /// The `counter` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Counter::Pinned => "pinned",
            Counter::Locked => "locked",
        }
    }

    /// The `/proc/PID/status` field.
    pub fn field(self) -> &'static str {
        match self {
            Counter::Pinned => "VmPin",
            Counter::Locked => "VmLck",
        }
    }
}

/// Whether CAP_IPC_LOCK lifts the memlock limit. `ib_umem_get` and `mlock` ask
/// `capable(CAP_IPC_LOCK)`, which checks the initial user namespace: the capability in CapEff
/// (bit 14) exempts unless the process is known to be in another user namespace. `None` when
/// CapEff is unknown.
pub fn ipc_lock_exempts(cap_ipc_lock: Option<bool>, initial_user_namespace: Option<bool>) -> Option<bool> {
    cap_ipc_lock.map(|held| held && initial_user_namespace != Some(false))
}

/// Whether a process is in the initial user namespace, from what could be read:
/// - `same_namespace_as_init`: its `ns/user` link against that of this procfs's pid 1 (needs
///   ptrace access). Different links are proof of another namespace, even one that maps every
///   uid onto itself. Equal links prove nothing when pid 1 is itself in a user namespace (a
///   rootless container's init), so they do not outweigh the map.
/// - `uid_map_is_initial`: `uid_map` is the initial identity map (see [`uid_map::is_initial`]).
///
/// `None` when neither could be read.
///
/// [`uid_map::is_initial`]: memlock_kernel::uid_map::is_initial
pub(crate) fn initial_user_namespace(
    uid_map_is_initial: Option<bool>,
    same_namespace_as_init: Option<bool>,
) -> Option<bool> {
    match (uid_map_is_initial, same_namespace_as_init) {
        (_, Some(false)) => Some(false),
        (Some(initial), _) => Some(initial),
        (None, links) => links,
    }
}

/// Where the reader of a procfs stands, for judging other processes' user namespaces: the
/// daemon's scan and `check` decide through this one view ([`UserNamespaceView::judge`]), so
/// that an exporter inside a user namespace (a container without the host's) does not take a
/// namespaced root's CAP_IPC_LOCK for an exemption the kernel refuses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserNamespaceView {
    /// Whether the reader is in the initial user namespace (its own `self/uid_map`, which the
    /// kernel shows relative to the parent namespace). `None` when unreadable (a fixture tree):
    /// read as the initial namespace's view.
    pub reader_initial: Option<bool>,
    /// The reader's own `self/ns/user` link.
    pub(crate) reader_link: Option<PathBuf>,
    /// The `ns/user` link of this procfs's pid 1; `None` without ptrace access.
    pub(crate) init_link: Option<PathBuf>,
}

impl UserNamespaceView {
    pub fn read(procfs: &Path) -> Self {
        Self {
            reader_initial: fsroot::read_parsed(&procfs.join("self/uid_map"), uid_map::is_initial).ok(),
            reader_link: std::fs::read_link(procfs.join("self/ns/user")).ok(),
            init_link: std::fs::read_link(procfs.join("1/ns/user")).ok(),
        }
    }

    pub(crate) fn reader_is_namespaced(&self) -> bool {
        self.reader_initial == Some(false)
    }

    /// What a process's `uid_map` says, from where the reader stands ([`uid_map::judge`]).
    pub(crate) fn judge_map(&self, text: &str) -> Result<Option<bool>, ParseError> {
        uid_map::judge(text, !self.reader_is_namespaced())
    }

    /// Whether a process is in the initial user namespace, from its map (as
    /// [`Self::judge_map`] read it) and its `ns/user` link: a link equal to the reader's own,
    /// when the reader is namespaced, is the reader's namespace; one unlike pid 1's is another
    /// namespace; then [`initial_user_namespace`] combines them.
    pub fn judge(&self, map: Option<bool>, link: Option<&Path>) -> Option<bool> {
        let links = link.and_then(|own| {
            if self.reader_is_namespaced() && self.reader_link.as_deref() == Some(own) {
                return Some(false);
            }
            self.init_link.as_deref().map(|init| own == init)
        });
        initial_user_namespace(map, links)
    }
}

/// Whether the process at `proc_dir` is in the initial user namespace, reading its `ns/user`
/// and `uid_map` (for `check`; the scan reads them through its reused buffers). A malformed
/// map tells nothing.
pub fn user_namespace_of(view: &UserNamespaceView, proc_dir: &Path) -> Option<bool> {
    let link = std::fs::read_link(proc_dir.join("ns/user")).ok();
    let map = fsroot::read_parsed(&proc_dir.join("uid_map"), |text| view.judge_map(text)).ok().flatten();
    view.judge(map, link.as_deref())
}

/// The sums over every process of one cgroup seen by the scan (exported or not).
#[derive(Debug, Clone, PartialEq)]
pub struct CgroupAggregate {
    pub cgroup: Arc<CgroupInfo>,
    /// Every process counts in the byte sums, CAP_IPC_LOCK or not: the memory is held either way.
    /// Locked pages shared by processes count once ([`ProcessSample::locked_own_bytes`]).
    pub locked_bytes: u64,
    pub pinned_bytes: u64,
    /// The highest usage ratio over both counters among its processes whose limit the kernel
    /// enforces (not known to hold CAP_IPC_LOCK), and the counter it is on; `None` when none
    /// has a finite, non-zero limit.
    pub(crate) usage_ratio_max: Option<(Counter, f64)>,
    /// The same per counter, indexed as [`Counter::ALL`]: the kernel checks VmPin and VmLck
    /// apart, so a process at 0.93 on `locked` is not hidden behind another at 0.95 on `pinned`.
    pub(crate) counter_ratio_max: [Option<f64>; 2],
    /// The highest [`ProcessSample::urgency`] of its processes, for ranking the aggregates.
    pub(crate) urgency_max: Option<f64>,
    /// Whose the cgroup is, for sharing the series budget's places by owner ([`crate::fair`]):
    /// the uid of its most urgent process (of its first, when none has an enforced limit).
    pub uid: Option<u32>,
    pub processes: u64,
}

impl ProcessStats {
    /// The process scope: each counter of each exported process against its soft memlock limit,
    /// as its own trend (`counter` label), so a ramp in VmPin under a flat VmLck is seen from
    /// its first sample. Processes exempt through CAP_IPC_LOCK, or with an unlimited limit,
    /// have no headroom to run out of: their rise is still reported.
    /// Every process the collector watches is observed, exported or not ([`ProcessStats::watched`]):
    /// the fast path evaluates them whatever top_n and the series budget keep.
    pub fn observations(&self, at: f64) -> Vec<Observation> {
        self.observations_with(|_| at)
    }

    /// [`ProcessStats::observations`], each watched process observed at `at(index)`.
    pub(crate) fn observations_with(&self, at: impl Fn(usize) -> f64) -> Vec<Observation> {
        let mut out = Vec::with_capacity(self.watched.len() * Counter::ALL.len());
        let mut pid = String::new();
        for (i, p) in self.watched.iter().enumerate() {
            let at = at(i);
            pid.clear();
            pid.push_str(&p.pid.to_string());
            for counter in Counter::ALL {
                let Some(used_bytes) = p.counter_bytes(counter) else { continue };
                // Without readable limits the rise is still worth reporting.
                let charge = p.charge(counter).unwrap_or(Charge::enforced(used_bytes, None));
                let mut labels: Vec<(&'static str, String)> = p.labels(&pid).map(|(k, v)| (k, v.to_owned())).collect();
                labels.push(("counter", counter.as_str().to_owned()));
                out.push(Observation { scope: Scope::Process, id: trend_id(p, counter), labels, at, charge });
            }
        }
        out
    }
}
