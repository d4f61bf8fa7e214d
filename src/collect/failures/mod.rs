//! Refused registrations and locks, seen in the kernel as they happen (opt-in, `--collector.failures`).
//!
//! The other collectors predict; this one reports the failure itself. It defines tracefs kprobe
//! events (Documentation/trace/kprobetrace.rst) on the kernel functions that refuse memory past
//! RLIMIT_MEMLOCK, enables them in a tracefs instance of its own (never the global buffer, whose
//! users it would disturb), and reads that instance's `trace_pipe` on a thread of its own:
//! - `ib_umem_get` (drivers/infiniband/core/umem.c): every `ibv_reg_mr`. Returns an `ERR_PTR`:
//!   `-ENOMEM` when `pinned_vm + npages > RLIMIT_MEMLOCK` without CAP_IPC_LOCK, and also when an
//!   allocation or `pin_user_pages_fast` fails (a cgroup at its limit, a node out of memory).
//! - `do_mlock` (mm/mlock.c): mlock and mlock2. `-ENOMEM` when `locked_vm + len` passes the
//!   limit, or from `apply_vma_lock_flags`.
//! - `__io_account_mem` (io_uring/rsrc.c): io_uring fixed buffers (and zero-copy send
//!   notifications), charged to the user's `locked_vm`; its only failure is `-ENOMEM` past the
//!   limit. Its size argument is in pages.
//! - `user_shm_lock` (mm/mlock.c): `shmctl(SHM_LOCK)` through `shmem_lock` (mm/shmem.c), which
//!   returns `-ENOMEM` when it returns false; false only past the limit (per user, ucounts).
//!
//! Each function gets an entry probe (the size) and a return probe filtered in the kernel to
//! failures. Where the kernel has hist triggers and synthetic events, it pairs them itself and
//! only a failed call is traced ([`kernel_pairing`]); elsewhere every entry is traced and paired
//! with its return per task here ([`Mode`]), and an entry whose task never returns (it exited) is
//! forgotten when the table is full, oldest first. A failure wakes the reader at once (the returns have a tracefs
//! instance of their own, see [`Probes`]) and is attributed while the process usually still
//! exists: its pid, comm and cgroup, its VmPin/VmLck and soft limit, its cgroup's usage and
//! limit, read from /proc and the cgroup filesystem at that moment.
//!
//! The probes and the instance are removed when the collector is dropped (exit, a reload that
//! disables it or replaces it), and those of an earlier run that died without removing them are
//! removed at start. Whatever keeps it from running (no tracefs, no kprobe events, no
//! permission, none of the functions) is `memlock_failures_supported{reason}` 0, never a failed
//! scrape.

mod calls;
mod cause;
mod pairing;
mod probes;
mod render;
mod series;
mod trace;

use std::sync::Arc;

use crate::fsroot::{Roots, SourceError};
use trace::Tracer;

use super::{Collector, Data};

pub use calls::{errno_name, Call, Check, CALLS};
pub use cause::{classify, Cause, Figures};
pub use pairing::{Pairing, Refusal, MAX_PENDING};
pub use probes::{Mode, Unsupported, PAIRING_ENV, PREFIX};
pub use render::CLASS;
pub use series::{Book, Series, SeriesKey, MAX_SERIES, SERIES_HOLD};
pub use trace::READ_EVERY;

/// The collector's data for one snapshot.
#[derive(Debug, Clone)]
pub struct FailuresStats {
    /// `None`: running.
    pub unsupported: Option<Unsupported>,
    /// How entries are paired with returns, while running.
    pub mode: Option<Mode>,
    /// Each function of [`CALLS`]: whether it is probed.
    pub probed: Vec<(&'static str, bool)>,
    pub book: Book,
}

pub struct FailuresCollector {
    roots: Roots,
    tracer: Option<Tracer>,
}

impl FailuresCollector {
    pub fn new(roots: Roots) -> Self {
        Self { roots, tracer: None }
    }
}

impl Collector for FailuresCollector {
    fn name(&self) -> &'static str {
        "failures"
    }

    fn collect(&mut self, _errors: &mut Vec<SourceError>) -> Option<Data> {
        let roots = &self.roots;
        let tracer = self.tracer.get_or_insert_with(|| Tracer::start(roots.clone()));
        Some(Arc::new(tracer.stats()) as Data)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    #[test]
    fn without_tracefs_the_collector_says_so() {
        let dir = std::env::temp_dir().join(format!("failures-no-tracefs-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sys/kernel/tracing")).unwrap();
        let roots = Roots { procfs: "/proc".into(), sysfs: dir.join("sys") };
        let mut collector = FailuresCollector::new(roots);
        let deadline = Instant::now() + Duration::from_secs(20);
        let reason = loop {
            let data = collector.collect(&mut Vec::new()).unwrap();
            let stats = data.as_any().downcast_ref::<FailuresStats>().unwrap();
            if stats.unsupported != Some(Unsupported::Starting) || Instant::now() > deadline {
                break stats.unsupported;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(reason, Some(Unsupported::NoTracefs));
        drop(collector);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
