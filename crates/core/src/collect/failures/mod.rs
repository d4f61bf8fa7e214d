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
//! A reload that keeps the collector enabled keeps its tracer, probes, counters and series
//! ([`FailuresCollector::new`]). The probes and the instances are removed when the last
//! collector is dropped (exit, a reload that disables it), and those of an earlier run that died
//! without removing them are removed at start. Whatever keeps it from running (no tracefs, no kprobe events, no
//! permission, none of the functions) is `memlock_failures_supported{reason}` 0, never a failed
//! scrape.

mod calls;
mod cause;
mod pairing;
mod probes;
mod render;
mod series;
mod trace;

use std::sync::{Arc, Mutex, PoisonError, Weak};

use memlock_kernel::fsroot::{Roots, SourceError};
use trace::Tracer;

use super::{Collector, Data};

pub use calls::{errno_name, Call, Check};
pub(crate) use cause::Cause;
pub(crate) use cause::SeriesKey;
pub use cause::{classify, Figures};
pub use pairing::{Refusal, MAX_PENDING};
pub use probes::{Mode, Unsupported};
pub(crate) use series::{Book, Series, SERIES_HOLD};
pub use trace::wait_removed;
#[cfg(test)]
pub(crate) use {calls::CALLS, series::MAX_SERIES};

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

/// The collector: a handle on the tracer of its roots, shared with every other collector of the
/// same roots alive at the time.
pub(crate) struct FailuresCollector {
    tracer: Arc<Tracer>,
    /// Where tracefs is looked for, named by the error that says why the collector cannot run.
    tracefs: std::path::PathBuf,
}

/// The running tracers, by the roots they read. A reload that restarts the sampler builds the
/// new collectors before it stops the old ones (`Daemon::try_reload` in src/daemon/lifecycle.rs), so
/// the new collector takes the old one's tracer over: its probes, counters, series and the pages
/// they hold go on, and a counter never goes back to 0 nor a firing page resolves because of a
/// reload. A reload that disables the collector drops the last handle: the tracer stops, removes
/// its probes and forgets what it counted. One of other roots (path.procfs or path.sysfs
/// changed) is another host's view and starts afresh.
static TRACERS: Mutex<Vec<(Roots, Weak<Tracer>)>> = Mutex::new(Vec::new());

impl FailuresCollector {
    pub fn new(roots: Roots) -> Self {
        let tracefs = roots.sys("kernel/tracing");
        let mut tracers = TRACERS.lock().unwrap_or_else(PoisonError::into_inner);
        tracers.retain(|(_, tracer)| tracer.strong_count() > 0);
        if let Some(tracer) = tracers.iter().find(|(r, _)| *r == roots).and_then(|(_, t)| t.upgrade()) {
            return Self { tracer, tracefs };
        }
        let tracer = Arc::new(Tracer::start(roots.clone()));
        tracers.push((roots, Arc::downgrade(&tracer)));
        Self { tracer, tracefs }
    }
}

impl Collector for FailuresCollector {
    fn name(&self) -> &'static str {
        "failures"
    }

    fn collect(&mut self, errors: &mut Vec<SourceError>) -> Option<Data> {
        let stats = self.tracer.stats();
        if let Some(reason) = stats.unsupported.filter(|r| *r != Unsupported::Starting) {
            errors.push(cannot_run(&self.tracefs, reason));
        }
        Some(Arc::new(stats) as Data)
    }
}

/// The error that fails the collector's run when it cannot trace: the directory and the reason,
/// as `memlock_failures_supported{reason}` names it.
fn cannot_run(tracefs: &std::path::Path, reason: Unsupported) -> SourceError {
    SourceError::Io {
        path: tracefs.to_owned(),
        source: std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            format!(
                "the failures collector cannot run ({}): refused registrations and locks are not traced \
                    (memlock_failures_supported)",
                reason.as_str()
            ),
        ),
    }
}

/// This collector's entry in the registry ([`crate::collect::REGISTRY`]): its name, flags,
/// default interval and settings.
pub(crate) const REGISTRATION: super::Registration = super::Registration {
    name: "failures",
    reads: "refused registrations and locks, traced with kprobes in tracefs instances of its own (needs root)",
    default_interval: "1s",
    // Opt-in: it defines kprobes in the running kernel, which needs write access to tracefs
    // (root's) that the default unit does not grant (README.md, the failures collector).
    default_enabled: false,
    settings: &super::settings::Plain(|cx| Box::new(FailuresCollector::new(cx.roots.clone()))),
};

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    #[test]
    fn without_tracefs_the_collector_says_so() {
        let tmp = tempfile::Builder::new().prefix("failures-no-tracefs-").tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
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
        // Not a successful run: the sampler reports success 0 when a collector returns errors.
        let mut errors = Vec::new();
        assert!(collector.collect(&mut errors).is_some());
        assert_eq!(errors.len(), 1, "{errors:?}");
        let message = errors[0].to_string();
        assert!(message.contains("kernel/tracing") && message.contains("no_tracefs"), "{message}");
        drop(collector);
    }

    /// Review finding: a reload that restarted the sampler gave the collector an empty book, so
    /// counters went back to 0 and the pages of refusals resolved.
    #[test]
    fn a_reload_that_keeps_the_collector_keeps_its_refusals_and_disabling_it_forgets_them() {
        let tmp = tempfile::Builder::new().prefix("failures-reload-").tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        std::fs::create_dir_all(dir.join("sys/kernel/tracing")).unwrap();
        let roots = Roots { procfs: "/proc".into(), sysfs: dir.join("sys") };
        let key = SeriesKey {
            pid: 612,
            comm: "c".into(),
            cgroup: "/".into(),
            call: "ib_umem_get",
            errno: "ENOMEM".into(),
            cause: Cause::Memlock,
        };
        let book = |collector: &mut FailuresCollector| {
            let data = collector.collect(&mut Vec::new()).unwrap();
            data.as_any().downcast_ref::<FailuresStats>().unwrap().book.clone()
        };
        let old = FailuresCollector::new(roots.clone());
        old.tracer.record(key.clone(), 1 << 20, Figures::default(), Instant::now());
        // The reload: the new sampler's collector is built, then the old one is dropped.
        let mut new = FailuresCollector::new(roots.clone());
        drop(old);
        let kept = book(&mut new);
        assert_eq!(kept.series.get(&key).map(|s| s.count), Some(1), "{kept:?}");
        assert_eq!(kept.totals.values().sum::<u64>(), 1);
        // Other roots are another tracer.
        let other = Roots { procfs: "/proc".into(), sysfs: dir.join("other") };
        assert!(book(&mut FailuresCollector::new(other)).series.is_empty());
        // Disabled (the last collector dropped), then enabled again: nothing is left.
        drop(new);
        assert!(book(&mut FailuresCollector::new(roots)).series.is_empty());
    }
}
