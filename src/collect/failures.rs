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

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::budget::{Claim, Grants, Tier};
use crate::collect::process::Counter;
use crate::exposition::{Exposition, Kind};
use crate::fsroot::{self, Roots, SourceError};
use crate::kernel::trace_pipe::{self, Line};
use crate::kernel::{memcg, pid_cgroup, pid_limits, pid_status, Limit};
use crate::stop::Stop;

use super::{Collector, Data};

/// How often the reader drains the entries' trace_pipe (a failed return wakes it at once): one
/// poll and one read per period when idle, the entries of a burst in a few large reads.
pub const READ_EVERY: Duration = Duration::from_millis(50);

/// Tasks whose entries wait for a return, at most (tasks in a call, and those whose last call
/// succeeded: their return was filtered out in the kernel).
pub const MAX_PENDING: usize = 4096;

/// Failure series (one per process, call, errno and cause) kept at most; later ones are only
/// counted in the node totals and `memlock_registration_failures_overflow_total`.
pub const MAX_SERIES: usize = 64;
/// How long a series pages after its last refusal (the fast path's `MemlockRegistrationFailed`
/// and the Prometheus rule hold it as long); past it, a full table gives the series' place to
/// a new one.
pub const SERIES_HOLD: Duration = Duration::from_secs(600);

/// Every name the collector creates in tracefs starts with this.
pub const PREFIX: &str = "memlock_exporter_";

/// `userspace` in this environment variable pairs entries in user space even where the kernel
/// could ([`Mode`]): to compare the two, and to test the fallback on a kernel that has both. A
/// diagnostic, not a setting: outside the configuration's `MEMLOCK_EXPORTER_` prefix, whose
/// variables must be configuration keys.
pub const PAIRING_ENV: &str = "MEMLOCK_FAILURES_PAIRING";

/// Per-CPU ring buffer of the instance: at 1,000 registrations/s one entry line of about 120
/// bytes each, [`READ_EVERY`] holds 6 KiB.
const BUFFER_KB: u64 = 256;

/// What the kernel checks a refused request against, where this collector can read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// The process's own counter (VmPin or VmLck) plus the size against its soft limit.
    Process(Counter),
    /// The user's counter (not in /proc): a failure of this function is the limit.
    User,
}

/// One probed kernel function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call {
    /// The function, also the `call` label.
    pub function: &'static str,
    /// The size argument's fetch (`$argN`, Documentation/trace/kprobetrace.rst).
    pub size_arg: &'static str,
    /// Bytes per unit of the size argument: 0 for pages (the page size).
    pub size_unit: u64,
    /// `$retval`'s type: the function's return type.
    pub ret_type: &'static str,
    /// The return probe's filter (kernel/trace/trace_events_filter.c syntax): failures only.
    pub failure_filter: &'static str,
    pub check: Check,
}

impl Call {
    /// The errno of a return value that is a failure, `None` for a success.
    pub fn errno(&self, ret: i128) -> Option<i32> {
        match self.ret_type {
            // bool: false is the refusal, which the caller turns into -ENOMEM (shmem_lock).
            "u8" => (ret == 0).then_some(libc::ENOMEM),
            // ERR_PTR: -MAX_ERRNO..-1; any other value is a pointer.
            _ => (-4095..0).contains(&ret).then(|| i32::try_from(-ret).unwrap_or(0)),
        }
    }

    /// The event names' stem: the function without leading underscores.
    pub fn stem(&self) -> &'static str {
        self.function.trim_start_matches('_')
    }
}

/// The functions, in the order they are reported.
pub const CALLS: [Call; 4] = [
    Call {
        function: "ib_umem_get",
        size_arg: "$arg3:u64",
        size_unit: 1,
        ret_type: "s64",
        failure_filter: "ret < 0 && ret >= -4095",
        check: Check::Process(Counter::Pinned),
    },
    Call {
        function: "do_mlock",
        size_arg: "$arg2:u64",
        size_unit: 1,
        ret_type: "s32",
        failure_filter: "ret < 0",
        check: Check::Process(Counter::Locked),
    },
    Call {
        function: "__io_account_mem",
        size_arg: "$arg2:u64",
        size_unit: 0,
        ret_type: "s32",
        failure_filter: "ret < 0",
        check: Check::User,
    },
    Call {
        function: "user_shm_lock",
        size_arg: "$arg1:u64",
        size_unit: 1,
        ret_type: "u8",
        failure_filter: "ret == 0",
        check: Check::User,
    },
];

/// The errno's name, for the label (the failures these functions return).
pub fn errno_name(errno: i32) -> String {
    let name = match errno {
        libc::EPERM => "EPERM",
        libc::EINTR => "EINTR",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EINVAL => "EINVAL",
        libc::ENOSPC => "ENOSPC",
        libc::EOVERFLOW => "EOVERFLOW",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        other => return format!("E{other}"),
    };
    name.to_owned()
}

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
    pub soft_limit: Option<Limit>,
    pub ipc_lock: Option<bool>,
    pub cgroup_usage: Option<u64>,
    pub cgroup_limit: Option<Limit>,
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

/// A refused call as the trace showed it, before attribution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub call: Call,
    /// The task (thread) id.
    pub tid: u32,
    /// `$comm` at the return, else the trace's.
    pub comm: String,
    pub errno: i32,
    /// The size asked for, in bytes; `None` when the entry was not seen (lost, or before start).
    pub requested: Option<u64>,
}

/// Entries kept per task: a task's last calls, so that a return pairs with the entry of its
/// own call even when the task called again before the entries were read.
const ENTRIES_PER_TASK: usize = 4;

/// Pairs entries with returns, from trace_pipe lines. Pure: no I/O, no clock. Entries must be
/// fed before the returns they pair with (the reader drains the entry instance first); the
/// trace timestamps (`mono` clock, the same on every CPU) pick the entry of the returning call.
#[derive(Debug)]
pub struct Pairing {
    page_size: u64,
    /// tid -> its latest entries: (timestamp, call index, size in bytes), oldest first.
    pending: HashMap<u32, Vec<(u64, usize, u64)>>,
    /// Insertion order of the tids, for forgetting the oldest when full (may hold stale tids).
    order: VecDeque<u32>,
    pub lost_events: u64,
    pub unparsed_lines: u64,
    pub forgotten_entries: u64,
}

impl Pairing {
    pub fn new(page_size: u64) -> Self {
        Self {
            page_size,
            pending: HashMap::new(),
            order: VecDeque::new(),
            lost_events: 0,
            unparsed_lines: 0,
            forgotten_entries: 0,
        }
    }

    /// Tasks with entries waiting.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// One line of trace_pipe; a refusal when it is a failed return.
    pub fn line(&mut self, line: &[u8]) -> Option<Refusal> {
        let event = match trace_pipe::parse_line(line) {
            Ok(Line::Event(e)) => e,
            Ok(Line::Lost { events, .. }) => {
                self.lost_events = self.lost_events.saturating_add(events.unwrap_or(1));
                return None;
            }
            Err(_) => {
                self.unparsed_lines += 1;
                return None;
            }
        };
        let Some((index, call, entry)) = CALLS.iter().enumerate().find_map(|(i, c)| {
            // The kernel's pairing: `GROUP_STEM_fail`, the size of a failed call, just before
            // its return (see `synthetic_name`); to the pairing here it is that call's entry.
            let synthetic = event.name.strip_suffix(SYNTHETIC_SUFFIX).and_then(|n| n.strip_suffix(c.stem()));
            if synthetic.is_some_and(|group| group.ends_with('_')) {
                return Some((i, c, true));
            }
            let rest = event.name.strip_prefix(c.stem())?;
            match rest {
                "_entry" => Some((i, c, true)),
                "_return" => Some((i, c, false)),
                _ => None,
            }
        }) else {
            self.unparsed_lines += 1;
            return None;
        };
        if entry {
            let Some(size) = event.number("size").and_then(|s| u64::try_from(s).ok()) else {
                self.unparsed_lines += 1;
                return None;
            };
            let unit = if call.size_unit == 0 { self.page_size } else { call.size_unit };
            self.remember(event.pid, event.timestamp, index, size.saturating_mul(unit));
            return None;
        }
        let errno = event.number("ret").and_then(|r| call.errno(r))?;
        let requested = self.take(event.pid, event.timestamp, index);
        let comm = event.string("comm").unwrap_or(event.comm);
        Some(Refusal {
            call: *call,
            tid: event.pid,
            comm: String::from_utf8_lossy(comm).into_owned(),
            errno,
            requested,
        })
    }

    /// The size of the latest entry of `index` at or before `at`; entries up to `at` are done.
    fn take(&mut self, tid: u32, at: u64, index: usize) -> Option<u64> {
        let entries = self.pending.get_mut(&tid)?;
        let size = entries.iter().rev().find(|(t, i, _)| *t <= at && *i == index).map(|(_, _, s)| *s);
        entries.retain(|(t, _, _)| *t > at);
        if entries.is_empty() {
            self.pending.remove(&tid);
        }
        size
    }

    fn remember(&mut self, tid: u32, at: u64, index: usize, size: u64) {
        let entries = self.pending.entry(tid).or_default();
        if entries.is_empty() {
            self.order.push_back(tid);
        }
        if entries.len() == ENTRIES_PER_TASK {
            entries.remove(0);
        }
        entries.push((at, index, size));
        while self.pending.len() > MAX_PENDING {
            let Some(oldest) = self.order.pop_front() else { break };
            if self.pending.remove(&oldest).is_some() {
                self.forgotten_entries += 1;
            }
        }
        // Returns remove from `pending` but not from `order`: compact when it has grown stale.
        if self.order.len() > 2 * MAX_PENDING {
            let pending = &self.pending;
            let mut seen = std::collections::HashSet::new();
            self.order.retain(|tid| pending.contains_key(tid) && seen.insert(*tid));
        }
    }
}

/// One failure series' labels.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SeriesKey {
    pub pid: u32,
    pub comm: String,
    pub cgroup: String,
    pub call: &'static str,
    pub errno: String,
    pub cause: Cause,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub count: u64,
    /// The size of the last refused request (0 when its entry was not seen).
    pub requested_bytes: u64,
    /// When the last one happened (for the fast path's page).
    pub last_at: Instant,
    /// The figures the cause was judged on, for the page's description.
    pub figures: Figures,
}

/// What the reader has seen, shared with the collector.
#[derive(Debug, Clone, Default)]
pub struct Book {
    pub series: BTreeMap<SeriesKey, Series>,
    /// By (call, errno, cause): every failure, series or not.
    pub totals: BTreeMap<(&'static str, String, Cause), u64>,
    pub overflow: u64,
    pub lost_events: u64,
    pub unparsed_lines: u64,
    pub forgotten_entries: u64,
    /// Tasks with entries waiting for their return.
    pub pending: u64,
}

impl Book {
    pub fn record(&mut self, key: SeriesKey, requested: u64, figures: Figures, at: Instant) {
        *self.totals.entry((key.call, key.errno.clone(), key.cause)).or_default() += 1;
        if let Some(series) = self.series.get_mut(&key) {
            series.count += 1;
            series.requested_bytes = requested;
            series.last_at = at;
            series.figures = figures;
        } else {
            if self.series.len() >= MAX_SERIES {
                // Full: the series refused longest ago gives way once it no longer pages
                // (SERIES_HOLD), so 64 old refusals cannot keep a new one from paging; a
                // series that still pages is never pushed out by a newcomer.
                let oldest = self.series.iter().min_by_key(|(_, s)| s.last_at).map(|(k, s)| (k.clone(), s.last_at));
                match oldest {
                    Some((old, last_at)) if at.saturating_duration_since(last_at) > SERIES_HOLD => {
                        self.series.remove(&old);
                    }
                    _ => {
                        self.overflow += 1;
                        return;
                    }
                }
            }
            self.series.insert(key, Series { count: 1, requested_bytes: requested, last_at: at, figures });
        }
    }
}

/// Why the collector does not run, the `reason` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unsupported {
    NoTracefs,
    NoKprobeEvents,
    NoPermission,
    NoSuchFunction,
    SetupFailed,
    /// Setting up (the first second or so).
    Starting,
}

impl Unsupported {
    pub fn as_str(self) -> &'static str {
        match self {
            Unsupported::NoTracefs => "no_tracefs",
            Unsupported::NoKprobeEvents => "no_kprobe_events",
            Unsupported::NoPermission => "no_permission",
            Unsupported::NoSuchFunction => "no_such_function",
            Unsupported::SetupFailed => "setup_failed",
            Unsupported::Starting => "starting",
        }
    }
}

/// Where an entry's size meets its failed return, the `mode` label of `memlock_failures_pairing`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Hist triggers and a synthetic event per call (see [`kernel_pairing`]): nothing reaches
    /// the collector but failures.
    Kernel,
    /// Every entry is traced and read (kernels without hist triggers or synthetic events).
    Userspace,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Kernel => "kernel",
            Mode::Userspace => "userspace",
        }
    }
}

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

// ---------------------------------------------------------------------------------------------
// tracefs.

/// The tracefs mount: `<sysfs>/kernel/tracing`, else the debugfs path of older setups. A
/// directory without `instances` is an unmounted mount point; one that cannot be looked into
/// (tracefs's root is root's, mode 0700) is a permission problem, not a missing tracefs.
fn find_tracefs(roots: &Roots) -> Result<PathBuf, Unsupported> {
    let mut denied = false;
    for dir in [roots.sys("kernel/tracing"), roots.sys("kernel/debug/tracing")] {
        match std::fs::metadata(dir.join("instances")) {
            Ok(meta) if meta.is_dir() => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => denied = true,
            _ => {}
        }
    }
    Err(if denied { Unsupported::NoPermission } else { Unsupported::NoTracefs })
}

fn write_file(path: &Path, text: &str) -> Result<(), SourceError> {
    let io = |source| SourceError::Io { path: path.to_owned(), source };
    let mut file = OpenOptions::new().append(true).open(path).map_err(io)?;
    file.write_all(text.as_bytes()).map_err(io)
}

/// The probes of one collector: its event group, its instances and its synthetic events share
/// one name, unique per process and collector, so a reload's new collector never touches the
/// old one's. Failed returns go to the instance `NAME_ret`, which wakes the reader at once (its
/// `buffer_percent` 0), so a refusal is attributed while the process that got it still exists.
/// The size asked for reaches it one of two ways ([`Mode`]): in the kernel, a synthetic event
/// per call in `NAME_ret` that hist triggers emit only for a failed call ([`kernel_pairing`]);
/// else every entry, traced to the instance `NAME` and read in batches.
#[derive(Debug)]
struct Probes {
    tracefs: PathBuf,
    name: String,
    /// The event names defined in `kprobe_events`.
    events: Vec<String>,
    /// The synthetic events defined in `synthetic_events`.
    synthetic: Vec<String>,
}

/// The instance of the return events.
const RETURNS_SUFFIX: &str = "_ret";

/// A synthetic event's name ends with this: `GROUP_STEM_fail`.
const SYNTHETIC_SUFFIX: &str = "_fail";

/// The synthetic event of `call` in the group `name` (names are global, not per instance).
fn synthetic_name(name: &str, call: &Call) -> String {
    format!("{name}_{}{SYNTHETIC_SUFFIX}", call.stem())
}

impl Probes {
    fn entries(&self) -> PathBuf {
        self.tracefs.join("instances").join(&self.name)
    }

    fn returns(&self) -> PathBuf {
        self.tracefs.join("instances").join(format!("{}{RETURNS_SUFFIX}", self.name))
    }

    fn remove(&self) {
        remove_probes(&self.tracefs, &self.name, &self.events, &self.synthetic);
    }
}

/// Removes the hist triggers of the group `name`'s events in `instance`, those with an action
/// first: an entry's trigger defines the variable a return's refers to, and cannot go before it
/// (EBUSY). A trigger is removed by writing its own text, as the file lists it, after a `!`
/// (Documentation/trace/events.rst, 6.3; kernel/trace/trace_events_trigger.c).
fn remove_triggers(instance: &Path, name: &str) {
    let Ok(events) = fsroot::list_dir(&instance.join("events").join(name)) else { return };
    let mut triggers = Vec::new();
    for event in events {
        let file = instance.join("events").join(name).join(event).join("trigger");
        let Ok(text) = fsroot::read_string(&file) else { continue };
        for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
            // "hist:keys=...:size=2048 if ret < 0 [active]"
            let spec = line.rsplit_once(" [").map_or(line, |(spec, _)| spec);
            triggers.push((!spec.contains(":onmatch("), file.clone(), spec.to_owned()));
        }
    }
    triggers.sort_by_key(|(plain, _, _)| *plain);
    for (_, file, spec) in triggers {
        if let Err(e) = write_file(&file, &format!("!{spec}\n")) {
            tracing::warn!(path = %file.display(), trigger = %spec, error = %e.detail(),
                "cannot remove a hist trigger");
        }
    }
}

/// Removes, in the order the kernel allows: the hist triggers (they refer to the synthetic
/// events and keep the instance busy), the instances (which disables their events), the
/// synthetic events (EBUSY while enabled anywhere), the kprobe event definitions (EBUSY while
/// enabled). Errors are logged: nothing else can be done.
fn remove_probes(tracefs: &Path, name: &str, events: &[String], synthetic: &[String]) {
    for instance in [name.to_owned(), format!("{name}{RETURNS_SUFFIX}")] {
        let dir = tracefs.join("instances").join(instance);
        if dir.is_dir() {
            remove_triggers(&dir, name);
            if let Err(e) = std::fs::remove_dir(&dir) {
                tracing::warn!(path = %dir.display(), error = %e, "cannot remove a tracefs instance of the failures \
                    collector");
            }
        }
    }
    let definitions = tracefs.join("synthetic_events");
    for event in synthetic {
        if let Err(e) = write_file(&definitions, &format!("!{event}\n")) {
            tracing::warn!(event = %event, error = %e.detail(), "cannot remove a synthetic event");
        }
    }
    let definitions = tracefs.join("kprobe_events");
    for event in events {
        if let Err(e) = write_file(&definitions, &format!("-:{name}/{event}\n")) {
            tracing::warn!(event = %format!("{name}/{event}"), error = %e.detail(), "cannot remove a kprobe event");
        }
    }
}

/// Whether the process that made `name` (`memlock_exporter_<pid>_<n>`) is an exporter still
/// running (this one included: its collectors remove their own); anything else with the prefix
/// is left over. A pid reused by another exporter keeps a leftover until that one exits.
fn owner_alive(roots: &Roots, name: &str) -> bool {
    let Some(pid) = name.strip_prefix(PREFIX).and_then(|r| r.split('_').next()).and_then(crate::kernel::decimal::<u32>)
    else {
        return false;
    };
    if pid == std::process::id() {
        return true;
    }
    // comm is at most 15 bytes.
    fsroot::read_string(&roots.proc(format!("{pid}/comm"))).is_ok_and(|c| c.trim_end() == "memlock-exporte")
}

/// The group (`memlock_exporter_<pid>_<n>`) a name with the prefix belongs to.
fn group_of(name: &str) -> Option<String> {
    let mut parts = name.strip_prefix(PREFIX)?.split('_');
    let (pid, n) = (parts.next()?, parts.next()?);
    Some(format!("{PREFIX}{pid}_{n}"))
}

/// What an earlier run may have left: per group, its kprobe events and synthetic events.
type Leftovers = BTreeMap<String, (Vec<String>, Vec<String>)>;

/// Removes the triggers, instances, synthetic events and event definitions of earlier runs that
/// died without removing them.
fn remove_leftovers(roots: &Roots, tracefs: &Path) -> usize {
    let mut groups = Leftovers::new();
    if let Ok(text) = fsroot::read_string(&tracefs.join("kprobe_events")) {
        for line in text.lines() {
            // "p:GROUP/EVENT SYMBOL ARGS" or "r10:GROUP/EVENT ..."
            let Some((_, rest)) = line.split_once(':') else { continue };
            let Some((group, event)) = rest.split(' ').next().and_then(|id| id.split_once('/')) else { continue };
            if group.starts_with(PREFIX) {
                groups.entry(group.to_owned()).or_default().0.push(event.to_owned());
            }
        }
    }
    if let Ok(text) = fsroot::read_string(&tracefs.join("synthetic_events")) {
        // "NAME\tFIELD; FIELD"
        for event in text.lines().filter_map(|l| l.split_whitespace().next()) {
            if let Some(group) = group_of(event) {
                groups.entry(group).or_default().1.push(event.to_owned());
            }
        }
    }
    if let Ok(names) = fsroot::list_dir(&tracefs.join("instances")) {
        for name in names.into_iter().filter(|n| n.starts_with(PREFIX)) {
            let base = name.strip_suffix(RETURNS_SUFFIX).unwrap_or(&name).to_owned();
            groups.entry(base).or_default();
        }
    }
    let mut removed = 0;
    for (name, (events, synthetic)) in groups {
        if !owner_alive(roots, &name) {
            tracing::info!(name = %name, "removing the failures collector's probes left by an earlier run");
            remove_probes(tracefs, &name, &events, &synthetic);
            removed += 1;
        }
    }
    removed
}

/// Which of [`CALLS`] the kernel can probe: `available_filter_functions` lists
/// `name` or `name [module]` per line (a module's only while it is loaded).
fn available(tracefs: &Path) -> Result<Vec<bool>, SourceError> {
    let path = tracefs.join("available_filter_functions");
    let mut found = vec![false; CALLS.len()];
    let text = fsroot::read_bytes(&path)?;
    for line in text.split(|&b| b == b'\n') {
        let name = line.split(|&b| b == b' ').next().unwrap_or(line);
        for (i, call) in CALLS.iter().enumerate() {
            if name == call.function.as_bytes() {
                found[i] = true;
            }
        }
    }
    Ok(found)
}

static SEQUENCE: AtomicU64 = AtomicU64::new(0);

/// The pipes of a running set of probes: entries (userspace pairing only), returns.
type Pipes = (Option<std::fs::File>, std::fs::File);

/// Pairs each call's entry with its failed return in the kernel, in the returns instance
/// (Documentation/trace/histogram.rst, section 2.2, "onmatch"): the entry event gets the hist
/// trigger `hist:keys=common_pid:sz0=size`, which keeps its size per task in a hist map
/// (kernel/trace/trace_events_hist.c, `event_hist_trigger`: the variable is updated at every
/// call); the return event gets `hist:keys=common_pid:sz=$sz0:onmatch(GROUP.STEM_entry)
/// .trace(GROUP_STEM_fail,$sz,ret) if FAILURE`, which emits the synthetic event
/// (kernel/trace/trace_events_synth.c, `trace_event_raw_event_synth`) with that size when the
/// call failed. The entry event is enabled nowhere: a trigger enables it in soft mode, so it is
/// recorded for its trigger and discarded at once (kernel/trace/trace.h,
/// `__event_trigger_test_discard`), never formatted nor read. A successful call costs two probe
/// hits, a map update and two filter tests; only failures reach trace_pipe: the synthetic event,
/// then the return (filtered, the return is written from the per-CPU buffered event after its
/// triggers ran, kernel/trace/trace.c, `trace_event_buffer_lock_reserve`), both of one CPU.
///
/// The map holds 2,048 tasks (TRACING_MAP_BITS_DEFAULT); one is never removed, so on a node that
/// has seen more tasks call a function the entries of new ones are dropped, and their failures
/// are still counted, from the return, with the size unknown (0). `Err`: the kernel cannot
/// (no CONFIG_SYNTH_EVENTS or CONFIG_HIST_TRIGGERS), with what it refused; what was done is
/// undone.
fn kernel_pairing(probes: &mut Probes, probed: &[Call]) -> Result<(), String> {
    let returns = probes.returns();
    let definitions = probes.tracefs.join("synthetic_events");
    if !definitions.exists() {
        return Err(format!("{} does not exist (CONFIG_SYNTH_EVENTS)", definitions.display()));
    }
    let name = probes.name.clone();
    let undo = |probes: &mut Probes, message: String| {
        remove_triggers(&returns, &name);
        for event in std::mem::take(&mut probes.synthetic) {
            let _ = write_file(&returns.join("events/synthetic").join(&event).join("enable"), "0");
            let _ = write_file(&definitions, &format!("!{event}\n"));
        }
        message
    };
    for call in probed {
        let synthetic = synthetic_name(&name, call);
        let definition = format!("{synthetic} u64 size; {} ret\n", call.ret_type);
        if let Err(e) = write_file(&definitions, &definition) {
            return Err(undo(
                probes,
                format!("cannot define the synthetic event {}: {}", definition.trim_end(), e.detail()),
            ));
        }
        probes.synthetic.push(synthetic);
    }
    for call in probed {
        let stem = call.stem();
        let events = returns.join("events").join(&name);
        let synthetic = synthetic_name(&name, call);
        let triggers = [
            (events.join(format!("{stem}_entry/trigger")), "hist:keys=common_pid:sz0=size".to_owned()),
            (
                events.join(format!("{stem}_return/trigger")),
                format!(
                    "hist:keys=common_pid:sz=$sz0:onmatch({name}.{stem}_entry).trace({synthetic},$sz,ret) if {}",
                    call.failure_filter
                ),
            ),
            (returns.join("events/synthetic").join(&synthetic).join("enable"), "1".to_owned()),
        ];
        for (file, text) in triggers {
            if let Err(e) = write_file(&file, &text) {
                return Err(undo(probes, format!("cannot write {text} to {}: {}", file.display(), e.detail())));
            }
        }
    }
    Ok(())
}

/// Defines and enables the probes. `Err` with the reason and a message for the log.
fn set_up(
    roots: &Roots,
    found: &mut Vec<(&'static str, bool)>,
    mode: &mut Option<Mode>,
) -> Result<(Probes, Pipes), (Unsupported, String)> {
    let tracefs = find_tracefs(roots).map_err(|reason| {
        let path = roots.sys("kernel/tracing");
        let message = match reason {
            Unsupported::NoPermission => format!("cannot look into {} (tracefs is root's)", path.display()),
            _ => format!("no tracefs at {} (mount -t tracefs nodev {0})", path.display()),
        };
        (reason, message)
    })?;
    let definitions = tracefs.join("kprobe_events");
    if !definitions.exists() {
        return Err((
            Unsupported::NoKprobeEvents,
            format!("{} does not exist: the kernel is built without CONFIG_KPROBE_EVENTS", definitions.display()),
        ));
    }
    if let Err(e) = OpenOptions::new().append(true).open(&definitions) {
        let reason = match e.raw_os_error() {
            Some(libc::EACCES | libc::EPERM | libc::EROFS) => Unsupported::NoPermission,
            _ => Unsupported::SetupFailed,
        };
        let message = format!(
            "cannot open {} for writing: {e} (tracefs is root's: run as root, or grant write access)",
            definitions.display()
        );
        return Err((reason, message));
    }
    remove_leftovers(roots, &tracefs);
    let present = available(&tracefs).map_err(|e| (Unsupported::SetupFailed, e.to_string()))?;
    *found = CALLS.iter().zip(&present).map(|(c, p)| (c.function, *p)).collect();
    if !present.iter().any(|p| *p) {
        let names = CALLS.map(|c| c.function).join(", ");
        return Err((Unsupported::NoSuchFunction, format!("none of {names} is in available_filter_functions")));
    }
    let name = format!("{PREFIX}{}_{}", std::process::id(), SEQUENCE.fetch_add(1, Ordering::Relaxed));
    let mut probes = Probes { tracefs: tracefs.clone(), name: name.clone(), events: Vec::new(), synthetic: Vec::new() };
    let fail = |probes: &Probes, message: String| {
        probes.remove();
        (Unsupported::SetupFailed, message)
    };
    for (call, _) in CALLS.iter().zip(&present).filter(|(_, p)| **p) {
        let stem = call.stem();
        let entry = format!("p:{name}/{stem}_entry {} size={}\n", call.function, call.size_arg);
        let exit = format!("r:{name}/{stem}_return {} ret=$retval:{} comm=$comm\n", call.function, call.ret_type);
        for (event, definition) in [(format!("{stem}_entry"), entry), (format!("{stem}_return"), exit)] {
            if let Err(e) = write_file(&definitions, &definition) {
                // A function listed but not probeable (a kprobe blacklist) is skipped, not fatal.
                let shown = definition.trim_end();
                tracing::warn!(definition = %shown, error = %e.detail(), "cannot define a kprobe event");
                if let Some(entry) = found.iter_mut().find(|(f, _)| *f == call.function) {
                    entry.1 = false;
                }
                break;
            }
            probes.events.push(event);
        }
    }
    if !found.iter().any(|(_, p)| *p) {
        return Err(fail(&probes, "no kprobe event could be defined".into()));
    }
    let probed: Vec<Call> = CALLS.into_iter().filter(|c| found.iter().any(|(f, p)| *p && *f == c.function)).collect();
    let make_instance = |probes: &Probes, instance: &Path, settings: &[(&str, String)]| {
        if let Err(e) = std::fs::create_dir(instance) {
            return Err(fail(probes, format!("cannot create {}: {e}", instance.display())));
        }
        for (file, value) in settings {
            if let Err(e) = write_file(&instance.join(file), value) {
                return Err(fail(probes, format!("cannot set {}: {}", instance.join(file).display(), e.detail())));
            }
        }
        Ok(())
    };
    // One clock for both instances and every CPU (the default "local" is per CPU), so an entry
    // and its return compare.
    let settings = [("trace_clock", "mono".to_owned()), ("buffer_size_kb", BUFFER_KB.to_string())];
    let returns_settings = [settings[0].clone(), settings[1].clone(), ("buffer_percent", "0".to_owned())];
    make_instance(&probes, &probes.returns(), &returns_settings)?;
    let userspace_asked = std::env::var_os(PAIRING_ENV).is_some_and(|v| v == "userspace");
    let kernel =
        if userspace_asked { Err(format!("{PAIRING_ENV}=userspace")) } else { kernel_pairing(&mut probes, &probed) };
    *mode = Some(match kernel {
        Ok(()) => Mode::Kernel,
        Err(why) => {
            tracing::info!(reason = %why, "failures collector: entries paired with returns in user space");
            make_instance(&probes, &probes.entries(), &settings)?;
            for call in &probed {
                let event = probes.entries().join("events").join(&name).join(format!("{}_entry", call.stem()));
                if let Err(e) = write_file(&event.join("enable"), "1") {
                    return Err(fail(&probes, format!("cannot enable {}: {}", event.display(), e.detail())));
                }
            }
            Mode::Userspace
        }
    });
    for call in &probed {
        let event = probes.returns().join("events").join(&name).join(format!("{}_return", call.stem()));
        if let Err(e) = write_file(&event.join("filter"), call.failure_filter) {
            return Err(fail(&probes, format!("cannot set {}: {}", event.join("filter").display(), e.detail())));
        }
        if let Err(e) = write_file(&event.join("enable"), "1") {
            return Err(fail(&probes, format!("cannot enable {}: {}", event.display(), e.detail())));
        }
    }
    let open = |instance: PathBuf| {
        let pipe = instance.join("trace_pipe");
        OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&pipe)
            .map_err(|e| format!("cannot open {}: {e}", pipe.display()))
    };
    let entries = match mode {
        Some(Mode::Userspace) => Some(open(probes.entries()).map_err(|m| fail(&probes, m))?),
        _ => None,
    };
    let returns = open(probes.returns()).map_err(|m| fail(&probes, m))?;
    Ok((probes, (entries, returns)))
}

// ---------------------------------------------------------------------------------------------
// Attribution.

fn attribute(roots: &Roots, refusal: &Refusal) -> (SeriesKey, u64, Figures) {
    let tid = refusal.tid;
    let mut figures = Figures::default();
    let mut pid = tid;
    if let Ok(text) = fsroot::read_string(&roots.proc(format!("{tid}/status"))) {
        let tgid = text.lines().find_map(|l| l.strip_prefix("Tgid:")).and_then(|v| crate::kernel::decimal(v.trim()));
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
                figures.cgroup_usage = fsroot::read_parsed(&usage, crate::kernel::parse_u64).ok();
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

// ---------------------------------------------------------------------------------------------
// The tracing thread and the collector.

/// What the tracing thread shares with the collector.
#[derive(Debug, Default)]
struct Shared {
    /// `None` while setting up.
    state: Option<Result<(), Unsupported>>,
    probed: Vec<(&'static str, bool)>,
    mode: Option<Mode>,
    book: Book,
}

fn lock(shared: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Sets up, traces until stopped, removes the probes.
fn trace(roots: Roots, shared: Arc<Mutex<Shared>>, stop: Arc<Stop>, waker: Option<Arc<OwnedFd>>) {
    let mut probed = CALLS.iter().map(|c| (c.function, false)).collect();
    let mut mode = None;
    let outcome = set_up(&roots, &mut probed, &mut mode);
    {
        let mut shared = lock(&shared);
        shared.probed = probed.clone();
        shared.mode = outcome.is_ok().then_some(mode).flatten();
        shared.state = Some(outcome.as_ref().map(|_| ()).map_err(|(reason, _)| *reason));
    }
    let (probes, pipes) = match outcome {
        Ok(running) => running,
        Err((reason, message)) => {
            tracing::warn!(reason = reason.as_str(), "failures collector cannot run: {message}");
            return;
        }
    };
    let found: Vec<&str> = probed.iter().filter(|(_, p)| *p).map(|(f, _)| *f).collect();
    let missing: Vec<&str> = probed.iter().filter(|(_, p)| !*p).map(|(f, _)| *f).collect();
    let pairing = mode.map_or("", Mode::as_str);
    tracing::info!(instance = %probes.name, probed = %found.join(","), not_found = %missing.join(","), pairing,
        "failures collector: tracing refused registrations and locks");
    if let Err(e) = read_loop(pipes, &roots, &shared, &stop, waker.as_deref()) {
        tracing::warn!(error = %e, "failures collector: reading trace_pipe failed; it stops tracing");
        lock(&shared).state = Some(Err(Unsupported::SetupFailed));
    }
    // The pipes are closed: the instances can go.
    probes.remove();
    tracing::info!(instance = %probes.name, "failures collector: probes removed");
}

/// Appends what `pipe` has to `line`, feeding each whole line to `pairing`.
fn drain(
    pipe: &mut std::fs::File,
    buf: &mut [u8],
    line: &mut Vec<u8>,
    pairing: &mut Pairing,
    refusals: &mut Vec<Refusal>,
) -> std::io::Result<()> {
    loop {
        match pipe.read(buf) {
            Ok(0) => return Ok(()),
            Ok(n) => {
                for &b in &buf[..n] {
                    // A line longer than any event is cut, and rejected as a whole.
                    if line.len() <= trace_pipe::MAX_LINE_BYTES {
                        line.push(b);
                    }
                    if b == b'\n' {
                        refusals.extend(pairing.line(line));
                        line.clear();
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

fn read_loop(
    pipes: Pipes,
    roots: &Roots,
    shared: &Mutex<Shared>,
    stop: &Stop,
    waker: Option<&OwnedFd>,
) -> std::io::Result<()> {
    let (mut entries, mut returns) = pipes;
    let mut pairing = Pairing::new(procfs::page_size());
    let mut buf = vec![0u8; 64 * 1024];
    let (mut entry_line, mut return_line) = (Vec::with_capacity(256), Vec::with_capacity(256));
    // Wakes at a failed return or at the stop (the waker), else every READ_EVERY for the entries
    // of the user space pairing; with the kernel's, nothing else (no wake-up while no call fails).
    let timeout = match (&entries, waker) {
        (None, Some(_)) => -1,
        _ => i32::try_from(READ_EVERY.as_millis()).unwrap_or(50),
    };
    loop {
        let mut polled = [libc::pollfd { fd: returns.as_raw_fd(), events: libc::POLLIN, revents: 0 }; 2];
        if let Some(waker) = waker {
            polled[1].fd = waker.as_raw_fd();
        }
        let count = if waker.is_some() { 2 } else { 1 };
        // SAFETY: `count` valid pollfds for the duration of the call.
        let ready = unsafe { libc::poll(polled.as_mut_ptr(), count, timeout) };
        if ready < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        if stop.sleep_until(Instant::now()) {
            return Ok(());
        }
        let mut refusals = Vec::new();
        // Entries first: a return pairs with an entry already read.
        if let Some(entries) = &mut entries {
            drain(entries, &mut buf, &mut entry_line, &mut pairing, &mut refusals)?;
        }
        drain(&mut returns, &mut buf, &mut return_line, &mut pairing, &mut refusals)?;
        let now = Instant::now();
        let attributed: Vec<_> = refusals.iter().map(|r| attribute(roots, r)).collect();
        let mut shared = lock(shared);
        for (key, requested, figures) in attributed {
            tracing::warn!(pid = key.pid, comm = %key.comm, cgroup = %key.cgroup, call = key.call,
                errno = %key.errno, cause = key.cause.as_str(), requested_bytes = requested,
                "a registration or lock was refused");
            shared.book.record(key, requested, figures, now);
        }
        shared.book.lost_events = pairing.lost_events;
        shared.book.unparsed_lines = pairing.unparsed_lines;
        shared.book.forgotten_entries = pairing.forgotten_entries;
        shared.book.pending = pairing.pending() as u64;
    }
}

pub struct FailuresCollector {
    roots: Roots,
    shared: Arc<Mutex<Shared>>,
    thread: Option<Tracing>,
    started: bool,
}

/// The tracing thread, its stop and its waker.
type Tracing = (JoinHandle<()>, Arc<Stop>, Option<Arc<OwnedFd>>);

/// An eventfd that wakes the tracing thread's poll at the stop; `None` when it cannot be made
/// (the thread then looks at the stop every READ_EVERY).
fn waker() -> Option<Arc<OwnedFd>> {
    // SAFETY: eventfd takes no pointers; a non-negative return is a new descriptor we own.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    // SAFETY: `fd` is open and owned by nothing else.
    (fd >= 0).then(|| Arc::new(unsafe { OwnedFd::from_raw_fd(fd) }))
}

impl FailuresCollector {
    pub fn new(roots: Roots) -> Self {
        Self { roots, shared: Arc::default(), thread: None, started: false }
    }

    /// Set-up reads available_filter_functions (tens of thousands of lines) and writes tracefs:
    /// on the tracing thread, so no collection waits for it.
    fn start(&mut self) {
        self.started = true;
        let stop = Arc::new(Stop::default());
        let waker = waker();
        let (roots, shared, thread_stop, thread_waker) =
            (self.roots.clone(), self.shared.clone(), stop.clone(), waker.clone());
        let run = move || trace(roots, shared, thread_stop, thread_waker);
        match std::thread::Builder::new().name("failures-trace".into()).spawn(run) {
            Ok(thread) => self.thread = Some((thread, stop, waker)),
            Err(e) => {
                tracing::warn!(error = %e, "failures collector: cannot start its tracing thread");
                lock(&self.shared).state = Some(Err(Unsupported::SetupFailed));
            }
        }
    }
}

impl Drop for FailuresCollector {
    /// Exit, or a reload that disables or replaces the collector: the thread removes its probes.
    fn drop(&mut self) {
        if let Some((thread, stop, waker)) = self.thread.take() {
            stop.stop();
            if let Some(waker) = waker {
                let one = 1u64.to_ne_bytes();
                // SAFETY: 8 bytes from a live buffer to an open eventfd.
                let _ = unsafe { libc::write(waker.as_raw_fd(), one.as_ptr().cast(), one.len()) };
            }
            let _ = thread.join();
        }
    }
}

impl Collector for FailuresCollector {
    fn name(&self) -> &'static str {
        "failures"
    }

    fn collect(&mut self, _errors: &mut Vec<SourceError>) -> Option<Data> {
        if !self.started {
            self.start();
        }
        let shared = lock(&self.shared);
        let unsupported = match shared.state {
            None => Some(Unsupported::Starting),
            Some(Ok(())) => None,
            Some(Err(reason)) => Some(reason),
        };
        let probed = if shared.probed.is_empty() {
            CALLS.iter().map(|c| (c.function, false)).collect()
        } else {
            shared.probed.clone()
        };
        let mode = if unsupported.is_none() { shared.mode } else { None };
        Some(Arc::new(FailuresStats { unsupported, mode, probed, book: shared.book.clone() }) as Data)
    }
}

// ---------------------------------------------------------------------------------------------
// Rendering.

/// The budget's class of the per-process failure series.
pub const CLASS: &str = "registration_failures";

impl FailuresStats {
    /// The series in the order they are granted: the latest failure first.
    pub fn ordered(&self) -> Vec<(&SeriesKey, &Series)> {
        let mut series: Vec<_> = self.book.series.iter().collect();
        series.sort_by(|a, b| b.1.last_at.cmp(&a.1.last_at).then_with(|| a.0.cmp(b.0)));
        series
    }

    pub fn render(&self, out: &mut Exposition, grants: &Grants) {
        out.family(
            "memlock_failures_supported",
            "1 when the failures collector traces refused registrations and locks; 0 with the reason it cannot: \
                no_tracefs (not mounted), no_kprobe_events (kernel without CONFIG_KPROBE_EVENTS), no_permission \
                (tracefs is root's: run as root, no capability needed), no_such_function (none of the probed \
                functions in available_filter_functions), setup_failed (see the log), starting (setting up, the \
                first second).",
            Kind::Gauge,
        );
        match self.unsupported {
            None => out.sample(&[("reason", "")], 1u64),
            Some(reason) => out.sample(&[("reason", reason.as_str())], 0u64),
        };
        out.family(
            "memlock_failures_probed",
            "1 for each kernel function the failures collector probes, 0 for one the running kernel does not have \
                (ib_umem_get: ibv_reg_mr, in ib_uverbs or ib_core, loaded; do_mlock: mlock/mlock2; \
                __io_account_mem: io_uring buffers; user_shm_lock: SHM_LOCK).",
            Kind::Gauge,
        );
        for (call, probed) in &self.probed {
            out.sample(&[("call", call)], u64::from(*probed));
        }
        out.family(
            "memlock_failures_pairing",
            "1 with the way the failures collector learns a refused call's size: kernel (hist triggers and a synthetic \
                event pair each entry with its return in the kernel; nothing but failures is traced), userspace \
                (a kernel without CONFIG_HIST_TRIGGERS or CONFIG_SYNTH_EVENTS: every entry is traced and read).",
            Kind::Gauge,
        );
        if let Some(mode) = self.mode {
            out.sample(&[("mode", mode.as_str())], 1u64);
        }
        out.family(
            "memlock_node_registration_failures_total",
            "Refused registrations and locks on the node, every one (no per-process bound): call is the kernel \
                function, errno its error, cause memlock (the request passed the soft RLIMIT_MEMLOCK), cgroup_memory \
                (the memory cgroup at its limit) or other.",
            Kind::Counter,
        );
        for ((call, errno, cause), count) in &self.book.totals {
            out.sample(&[("call", call), ("errno", errno), ("cause", cause.as_str())], *count);
        }
        let granted = grants.get(CLASS);
        let ordered = self.ordered();
        let shown = &ordered[..granted.min(ordered.len())];
        out.family(
            "memlock_registration_failures_total",
            "Refused registrations and locks per process, traced in the kernel (kprobes on ib_umem_get, do_mlock, \
                __io_account_mem, user_shm_lock): pid, comm and cgroup of the process, call the kernel function, \
                errno its error, cause memlock, cgroup_memory or other. At most 64 series; later ones are counted \
                in memlock_registration_failures_overflow_total.",
            Kind::Counter,
        );
        let mut pids = Vec::with_capacity(shown.len());
        for (key, _) in shown {
            pids.push(key.pid.to_string());
        }
        for ((key, series), pid) in shown.iter().zip(&pids) {
            out.sample(&labels(key, pid), series.count);
        }
        out.family(
            "memlock_registration_failure_requested_bytes",
            "The size the last refused request of the series asked for, in bytes (0 when its entry event was not \
                seen).",
            Kind::Gauge,
        );
        for ((key, series), pid) in shown.iter().zip(&pids) {
            out.sample(&labels(key, pid), series.requested_bytes);
        }
        out.family(
            "memlock_registration_failures_overflow_total",
            "Refusals not given a series of their own (past the 64 kept); the node total still counts them.",
            Kind::Counter,
        );
        out.sample(&[], self.book.overflow);
        out.family(
            "memlock_failures_trace_lost_events_total",
            "Events the kernel's ring buffer overwrote before the collector read them (trace_pipe's LOST EVENTS \
                markers): refusals may have been missed.",
            Kind::Counter,
        );
        out.sample(&[], self.book.lost_events);
        out.family(
            "memlock_failures_trace_unparsed_lines_total",
            "trace_pipe lines the collector could not read (a comm with a newline splits its event in two).",
            Kind::Counter,
        );
        out.sample(&[], self.book.unparsed_lines);
        out.family(
            "memlock_failures_forgotten_entries_total",
            "Entry events dropped unpaired because the table of calls in progress was full (tasks that exited \
                between entry and return).",
            Kind::Counter,
        );
        out.sample(&[], self.book.forgotten_entries);
        out.family(
            "memlock_failures_pending_tasks",
            "Tasks whose latest entry events wait for a return (at most 4,096; a successful return is filtered out \
                in the kernel, so the tasks that called recently stay here until forgotten).",
            Kind::Gauge,
        );
        out.sample(&[], self.book.pending);
    }
}

fn labels<'a>(key: &'a SeriesKey, pid: &'a str) -> [(&'static str, &'a str); 6] {
    [
        ("pid", pid),
        ("comm", &key.comm),
        ("cgroup", &key.cgroup),
        ("call", key.call),
        ("errno", &key.errno),
        ("cause", key.cause.as_str()),
    ]
}

impl super::Stats for FailuresStats {
    fn render(&self, out: &mut Exposition, grants: &Grants) {
        FailuresStats::render(self, out, grants)
    }

    fn claims(&self) -> Vec<Claim> {
        vec![Claim {
            class: CLASS,
            tier: Tier::Page,
            floor: MAX_SERIES,
            cap: MAX_SERIES,
            entities: self.book.series.iter().map(|_| (2, 1.0)).collect(),
        }]
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: u64 = 4096;

    fn entry(tid: u32, stem: &str, size: u64) -> String {
        format!("{:>16}-{tid:<7} [000] ..... 1.000000: {stem}_entry: ({stem}+0x0/0x10) size={size}\n", "t")
    }

    fn ret(tid: u32, stem: &str, ret: i64, comm: &str) -> String {
        format!(
            "{comm:>16}-{tid:<7} [001] ..... 1.000100: {stem}_return: (caller+0x1/0x2 <- {stem}) ret={ret} \
             comm=\"{comm}\"\n"
        )
    }

    #[test]
    fn an_entry_and_its_failed_return_make_one_refusal() {
        let mut p = Pairing::new(PAGE);
        assert_eq!(p.line(entry(7, "ib_umem_get", 1 << 20).as_bytes()), None);
        let r = p.line(ret(7, "ib_umem_get", -12, "nccl [ib]: x-1").as_bytes()).unwrap();
        assert_eq!((r.call.function, r.tid, r.errno, r.requested), ("ib_umem_get", 7, libc::ENOMEM, Some(1 << 20)));
        assert_eq!(r.comm, "nccl [ib]: x-1");
        assert_eq!(p.pending(), 0);
        // A second return of the same task without an entry: refused, size unknown.
        let r = p.line(ret(7, "ib_umem_get", -12, "x").as_bytes()).unwrap();
        assert_eq!(r.requested, None);
    }

    #[test]
    fn a_return_pairs_with_its_own_entry_when_the_task_called_again_before_the_read() {
        let mut p = Pairing::new(PAGE);
        let at = |t: &str, line: String| line.replace("1.000000", t).replace("1.000100", t);
        // The entries instance is drained first: both entries, then the return between them.
        p.line(at("1.000000", entry(7, "ib_umem_get", 1 << 20)).as_bytes());
        p.line(at("1.000300", entry(7, "ib_umem_get", 2 << 20)).as_bytes());
        let r = p.line(at("1.000200", ret(7, "ib_umem_get", -12, "x")).as_bytes()).unwrap();
        assert_eq!(r.requested, Some(1 << 20));
        // The later entry still waits for its own return.
        let r = p.line(at("1.000400", ret(7, "ib_umem_get", -12, "x")).as_bytes()).unwrap();
        assert_eq!(r.requested, Some(2 << 20));
        assert_eq!(p.pending(), 0);
    }

    #[test]
    fn the_kernels_pairing_gives_the_size_in_a_synthetic_event_before_the_return() {
        let mut p = Pairing::new(PAGE);
        // As the 6.1 guest printed them (the synthetic event's comm not yet in saved-cmdlines).
        let synthetic = "           <...>-144     [001] ...2.    17.052414: memlock_exporter_9_0_do_mlock_fail: \
            size=1048576 ret=-12\n";
        let returned =
            "           <...>-144     [001] .....    17.064313: do_mlock_return: (__x64_sys_mlock+0x17/0x20 <- \
            do_mlock) ret=-12 comm=\"failures-mlock-\"\n";
        assert_eq!(p.line(synthetic.as_bytes()), None);
        let r = p.line(returned.as_bytes()).unwrap();
        assert_eq!((r.call.function, r.tid, r.requested), ("do_mlock", 144, Some(1 << 20)));
        assert_eq!(r.comm, "failures-mlock-");
        assert_eq!(p.pending(), 0);
        // io_uring's in pages; a name that only ends like one is not ours.
        let synthetic =
            "               x-9       [000] ..... 1.000000: memlock_exporter_1_0_io_account_mem_fail: size=3";
        p.line(format!("{synthetic} ret=-12\n").as_bytes());
        assert_eq!(p.line(ret(9, "io_account_mem", -12, "x").as_bytes()).unwrap().requested, Some(3 * PAGE));
        p.line(b"               x-9       [000] ..... 1.000000: memlock_exporter_1_0xdo_mlock_fail: size=3 ret=-12\n");
        assert_eq!(p.unparsed_lines, 1);
        // A failure whose entry the kernel's map could not hold: counted, size unknown.
        assert_eq!(p.line(ret(10, "ib_umem_get", -12, "x").as_bytes()).unwrap().requested, None);
    }

    #[test]
    fn leftover_names_map_to_their_group() {
        assert_eq!(group_of("memlock_exporter_77_3_do_mlock_fail").as_deref(), Some("memlock_exporter_77_3"));
        assert_eq!(group_of("memlock_exporter_77_3_ret").as_deref(), Some("memlock_exporter_77_3"));
        assert_eq!(group_of("memlock_exporter_77"), None);
        assert_eq!(group_of("other_77_3"), None);
        assert_eq!(synthetic_name("memlock_exporter_77_3", &CALLS[2]), "memlock_exporter_77_3_io_account_mem_fail");
    }

    #[test]
    fn successes_are_not_refusals() {
        let mut p = Pairing::new(PAGE);
        p.line(entry(7, "ib_umem_get", 4096).as_bytes());
        // A pointer (kernel addresses are negative as s64) and NULL are not errors.
        assert_eq!(p.line(ret(7, "ib_umem_get", -0x7a00_0000_0000, "x").as_bytes()), None);
        assert_eq!(p.line(ret(7, "do_mlock", 0, "x").as_bytes()), None);
        assert_eq!(p.line(ret(7, "user_shm_lock", 1, "x").as_bytes()), None);
        let r = p.line(ret(7, "user_shm_lock", 0, "x").as_bytes()).unwrap();
        assert_eq!(r.errno, libc::ENOMEM);
    }

    #[test]
    fn io_uring_sizes_are_pages_and_entries_pair_by_call() {
        let mut p = Pairing::new(PAGE);
        p.line(entry(9, "io_account_mem", 3).as_bytes());
        let r = p.line(ret(9, "io_account_mem", -12, "x").as_bytes()).unwrap();
        assert_eq!((r.call.function, r.requested), ("__io_account_mem", Some(3 * PAGE)));
        // An entry of another call is not this return's size.
        p.line(entry(9, "do_mlock", 100).as_bytes());
        assert_eq!(p.line(ret(9, "ib_umem_get", -12, "x").as_bytes()).unwrap().requested, None);
    }

    #[test]
    fn pending_entries_are_bounded() {
        let mut p = Pairing::new(PAGE);
        for tid in 0..(MAX_PENDING as u32 * 3) {
            p.line(entry(tid, "do_mlock", 1).as_bytes());
        }
        assert_eq!(p.pending(), MAX_PENDING);
        assert_eq!(p.forgotten_entries, 2 * MAX_PENDING as u64);
        assert!(p.order.len() <= 2 * MAX_PENDING + 1);
        // The newest are kept.
        let last = MAX_PENDING as u32 * 3 - 1;
        assert_eq!(p.line(ret(last, "do_mlock", -12, "x").as_bytes()).unwrap().requested, Some(1));
    }

    #[test]
    fn lost_events_and_bad_lines_are_counted() {
        let mut p = Pairing::new(PAGE);
        p.line(b"CPU:1 [LOST 17 EVENTS]\n");
        p.line(b"CPU:0 [LOST EVENTS]\n");
        p.line(b"garbage\n");
        p.line(entry(1, "not_ours", 1).as_bytes());
        assert_eq!((p.lost_events, p.unparsed_lines), (18, 2));
    }

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

    fn key(pid: u32) -> SeriesKey {
        SeriesKey {
            pid,
            comm: "c".into(),
            cgroup: "/".into(),
            call: "ib_umem_get",
            errno: "ENOMEM".into(),
            cause: Cause::Memlock,
        }
    }

    #[test]
    fn series_are_bounded_and_totals_complete() {
        let mut book = Book::default();
        let now = Instant::now();
        for pid in 0..(MAX_SERIES as u32 + 10) {
            book.record(key(pid), 1, Figures::default(), now);
        }
        book.record(key(0), 2, Figures::default(), now);
        assert_eq!(book.series.len(), MAX_SERIES);
        assert_eq!(book.overflow, 10);
        assert_eq!(book.series[&key(0)].count, 2);
        assert_eq!(book.totals[&("ib_umem_get", "ENOMEM".to_owned(), Cause::Memlock)], MAX_SERIES as u64 + 11);
    }

    #[test]
    fn unsupported_renders_the_reason_and_no_failure() {
        let stats = FailuresStats {
            unsupported: Some(Unsupported::NoKprobeEvents),
            mode: None,
            probed: CALLS.iter().map(|c| (c.function, false)).collect(),
            book: Book::default(),
        };
        let mut out = Exposition::new();
        stats.render(&mut out, &Grants::all());
        let text = out.finish();
        assert!(text.contains("memlock_failures_supported{reason=\"no_kprobe_events\"} 0\n"), "{text}");
        assert!(text.contains("memlock_failures_probed{call=\"ib_umem_get\"} 0\n"), "{text}");
        assert!(!text.contains("memlock_registration_failures_total{"), "{text}");
        assert!(!text.contains("memlock_failures_pairing{"), "{text}");
    }

    #[test]
    fn a_recorded_failure_renders_with_its_labels() {
        let mut book = Book::default();
        book.record(key(42), 1 << 20, Figures::default(), Instant::now());
        let stats =
            FailuresStats { unsupported: None, mode: Some(Mode::Kernel), probed: vec![("ib_umem_get", true)], book };
        let mut out = Exposition::new();
        stats.render(&mut out, &Grants::all());
        let text = out.finish();
        let labels = "{pid=\"42\",comm=\"c\",cgroup=\"/\",call=\"ib_umem_get\",errno=\"ENOMEM\",cause=\"memlock\"}";
        assert!(text.contains(&format!("memlock_registration_failures_total{labels} 1\n")), "{text}");
        assert!(text.contains(&format!("memlock_registration_failure_requested_bytes{labels} 1048576\n")), "{text}");
        assert!(text.contains("memlock_failures_supported{reason=\"\"} 1\n"), "{text}");
        assert!(text.contains("memlock_failures_pairing{mode=\"kernel\"} 1\n"), "{text}");
        let mut out = Exposition::new();
        stats.render(&mut out, &Grants::none());
        assert!(!out.finish().contains("memlock_registration_failures_total{pid"));
    }

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
