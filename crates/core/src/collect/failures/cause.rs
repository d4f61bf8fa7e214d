//! Why a refusal happened: the figures read about the process right after it, and the cause
//! they point to.

use memlock_kernel::fsroot::{self, Roots};
use memlock_kernel::{memcg, pid_cgroup, pid_limits, pid_status, Limit};

use super::calls::{errno_name, Call, Check};
use super::pairing::Refusal;
use crate::collect::process::Counter;

/// Why a refusal happened, as far as the figures read right after it tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Cause {
    /// The request plus what the process (or user) holds passes the soft RLIMIT_MEMLOCK.
    Memlock,
    /// The process's memory cgroup is at its limit: the pages could not be charged.
    CgroupMemory,
    Other,
}

impl Cause {
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::Memlock => "memlock",
            Cause::CgroupMemory => "cgroup_memory",
            Cause::Other => "other",
        }
    }
}

/// What was read about the process right after its refusal. `None`: could not be read (the
/// process had exited).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Figures {
    pub pinned_bytes: Option<u64>,
    pub locked_bytes: Option<u64>,
    pub(crate) soft_limit: Option<Limit>,
    pub ipc_lock: Option<bool>,
    pub(crate) cgroup_usage: Option<u64>,
    pub(crate) cgroup_limit: Option<Limit>,
}

/// The cause of a refusal of `requested` bytes by `call` with `errno`. The limit check comes
/// first in each function (ib_umem_get, do_mlock check it before pinning or locking a page), so
/// a request past the limit is a memlock refusal whatever the cgroup's state.
pub fn classify(call: &Call, errno: i32, requested: u64, figures: &Figures) -> Cause {
    if errno != libc::ENOMEM {
        return Cause::Other;
    }
    let past_limit = match call.check {
        Check::User => true,
        Check::Process(counter) => {
            let held = match counter {
                Counter::Pinned => figures.pinned_bytes,
                Counter::Locked => figures.locked_bytes,
            };
            let exempt = figures.ipc_lock == Some(true);
            match (held, figures.soft_limit) {
                (Some(held), Some(Limit::Bytes(limit))) => !exempt && held.saturating_add(requested) > limit,
                _ => false,
            }
        }
    };
    if past_limit {
        return Cause::Memlock;
    }
    match (figures.cgroup_usage, figures.cgroup_limit) {
        (Some(usage), Some(Limit::Bytes(limit))) if usage.saturating_add(requested) > limit => Cause::CgroupMemory,
        _ => Cause::Other,
    }
}

/// One failure series' labels: who was refused, by which call, and why (what [`attribute`] finds).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SeriesKey {
    pub pid: u32,
    pub comm: String,
    pub cgroup: String,
    pub call: &'static str,
    pub errno: String,
    pub(crate) cause: Cause,
}

pub(super) fn attribute(roots: &Roots, refusal: &Refusal) -> (SeriesKey, u64, Figures) {
    let tid = refusal.tid;
    let mut figures = Figures::default();
    let mut pid = tid;
    if let Ok(text) = fsroot::read_string(&roots.proc(format!("{tid}/status"))) {
        let tgid = text.lines().find_map(|l| l.strip_prefix("Tgid:")).and_then(|v| memlock_kernel::decimal(v.trim()));
        if let Some(tgid) = tgid {
            pid = tgid;
        }
        if let Ok(status) = pid_status::parse_fields(&text) {
            let status = status.value;
            figures.pinned_bytes = status.pinned_bytes;
            figures.locked_bytes = status.locked_bytes;
            figures.ipc_lock = status.ipc_lock();
        }
    }
    if let Ok(limits) = fsroot::read_parsed(&roots.proc(format!("{tid}/limits")), pid_limits::parse) {
        figures.soft_limit = Some(limits.soft);
    }
    let mut cgroup = String::new();
    if let Ok(text) = fsroot::read_string(&roots.proc(format!("{tid}/cgroup"))) {
        if let Ok(Some(path)) = pid_cgroup::memory_path(&text) {
            cgroup = path.to_owned();
            let detected =
                crate::collect::cgroup::detect(&roots.sys("fs/cgroup"), &roots.proc("cgroups"), &mut Vec::new());
            if let Some(mount) = detected.memory {
                let dir = mount.root.join(path.trim_start_matches('/'));
                let (usage, limit) = match mount.version {
                    crate::collect::cgroup::Version::V1 => (
                        dir.join("memory.usage_in_bytes"),
                        fsroot::read_parsed(&dir.join("memory.limit_in_bytes"), memcg::parse_v1_limit),
                    ),
                    crate::collect::cgroup::Version::V2 => (
                        dir.join("memory.current"),
                        fsroot::read_parsed(&dir.join("memory.max"), memcg::parse_v2_limit),
                    ),
                };
                figures.cgroup_usage = fsroot::read_parsed(&usage, memlock_kernel::parse_u64).ok();
                figures.cgroup_limit = limit.ok();
            }
        }
    }
    let requested = refusal.requested.unwrap_or(0);
    let cause = classify(&refusal.call, refusal.errno, requested, &figures);
    let key = SeriesKey {
        pid,
        comm: refusal.comm.clone(),
        cgroup,
        call: refusal.call.function,
        errno: errno_name(refusal.errno),
        cause,
    };
    (key, requested, figures)
}

#[cfg(test)]
mod tests {
    use super::super::calls::CALLS;
    use super::*;

    fn figures(pinned: u64, locked: u64, limit: u64) -> Figures {
        Figures {
            pinned_bytes: Some(pinned),
            locked_bytes: Some(locked),
            soft_limit: Some(Limit::Bytes(limit)),
            ipc_lock: Some(false),
            cgroup_usage: Some(100 << 20),
            cgroup_limit: Some(Limit::Bytes(1 << 30)),
        }
    }

    #[test]
    fn causes() {
        let [umem, mlock, io, shm] = CALLS;
        let mib = 1 << 20;
        // 6 MiB pinned + 4 MiB asked for > 8 MiB: memlock; the other counter does not count.
        assert_eq!(classify(&umem, libc::ENOMEM, 4 * mib, &figures(6 * mib, 0, 8 * mib)), Cause::Memlock);
        assert_eq!(classify(&umem, libc::ENOMEM, 4 * mib, &figures(0, 6 * mib, 8 * mib)), Cause::Other);
        assert_eq!(classify(&mlock, libc::ENOMEM, 4 * mib, &figures(0, 6 * mib, 8 * mib)), Cause::Memlock);
        // CAP_IPC_LOCK exempts; an unlimited limit never refuses.
        let exempt = Figures { ipc_lock: Some(true), ..figures(6 * mib, 0, 8 * mib) };
        assert_eq!(classify(&umem, libc::ENOMEM, 4 * mib, &exempt), Cause::Other);
        let unlimited = Figures { soft_limit: Some(Limit::Unlimited), ..figures(6 * mib, 0, 8 * mib) };
        assert_eq!(classify(&umem, libc::ENOMEM, 4 * mib, &unlimited), Cause::Other);
        // Under the limit, with the cgroup full: cgroup_memory.
        let full = Figures { cgroup_usage: Some((1 << 30) - mib), ..figures(0, 0, 8 * mib) };
        assert_eq!(classify(&umem, libc::ENOMEM, 4 * mib, &full), Cause::CgroupMemory);
        // Only ENOMEM is a memory refusal.
        assert_eq!(classify(&umem, libc::EFAULT, 4 * mib, &figures(6 * mib, 0, 8 * mib)), Cause::Other);
        // Per-user accounting: its only ENOMEM is the limit.
        assert_eq!(classify(&io, libc::ENOMEM, 0, &Figures::default()), Cause::Memlock);
        assert_eq!(classify(&shm, libc::ENOMEM, 0, &Figures::default()), Cause::Memlock);
        // Nothing could be read (the process exited): other, not a guess.
        assert_eq!(classify(&umem, libc::ENOMEM, 4 * mib, &Figures::default()), Cause::Other);
    }
}
