//! Reading one process: `status`, `limits`, `cgroup` and, for holders of CAP_IPC_LOCK, the
//! user namespace, through one reused path and text buffer.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;

use crate::collect::nccl_version;
use memlock_kernel::fsroot::{self, SourceError};
use memlock_kernel::pid_limits;
use memlock_kernel::registrants::{self, RdmaLibrary};
use memlock_kernel::versions::NcclMapping;
use memlock_kernel::{cgroup_path, pid_cgroup, pid_stat, pid_status, smaps_rollup, ParseError};

use super::sample::{ipc_lock_exempts, CgroupInfo, ProcessSample, UserNamespaceView};
use super::settings::ProcessConfig;
use super::{is_tracked, ReadErrors};

/// What the collector remembers about a process between passes.
#[derive(Debug, Clone)]
pub(super) struct Record {
    pub(super) sample: ProcessSample,
    pub(super) comm_matches: bool,
    /// Re-read on every pass, not only on full scans.
    pub(super) tracked: bool,
    /// `limits` or `cgroup` could not be read or parsed (a real error, not a refusal): they are
    /// read again on every pass until they can, so the failure shows on every run.
    pub(super) incomplete: bool,
    /// Found by a tracked pass's listing: re-read on every pass until then, since a job's
    /// process registers its memory within seconds of starting, before it holds any.
    pub(super) probation_until: Option<std::time::Instant>,
    /// `/proc/PID/maps` was read for the NCCL library (once per process).
    pub(super) nccl_read: bool,
    /// When `limits` was last read: re-read every [`LIMITS_REFRESH`] while the process holds
    /// memory, on full scans otherwise.
    pub(super) limits_read_at: Option<std::time::Instant>,
    /// `VmLck` when `smaps_rollup` was last read, and when: read again when `VmLck` changes, or
    /// every [`LIMITS_REFRESH`] (other processes mapping or unmapping the pages change the share).
    pub(super) share_read: Option<(u64, std::time::Instant)>,
    /// When `status` was last read: a pass re-reads only part of a crowd, and the trend of a
    /// process not re-read is observed at the time its values were read, not as new samples.
    pub(super) status_read_at: Option<std::time::Instant>,
}

/// How often the limits of a process holding locked or pinned memory are re-read between full
/// scans: `prlimit --memlock` on a running job is a fix operators apply, and its effect must show
/// within seconds, not at the next full scan (60 s). Only holders: one more 13 µs read every
/// 2 s per holder, nothing for the idle processes the idle-cost target is about.
pub(super) const LIMITS_REFRESH: std::time::Duration = std::time::Duration::from_secs(2);

/// Builds `<procfs>/<pid>/<file>` paths in one reused buffer and reads them into one reused
/// text buffer: a full scan reads three files per process.
pub(super) struct PidReader {
    pub(super) procfs: OsString,
    pub(super) path: PathBuf,
    text: String,
    /// Where this exporter stands for judging user namespaces.
    pub(super) namespaces: UserNamespaceView,
}

impl PidReader {
    pub(super) fn new(procfs: &std::path::Path) -> Self {
        let namespaces = UserNamespaceView::read(procfs);
        if namespaces.reader_is_namespaced() && namespaces.init_link.is_none() {
            tracing::warn!(
                procfs = %procfs.display(),
                "the exporter runs in a user namespace and cannot read pid 1's ns/user: CAP_IPC_LOCK of a process \
                    whose uid_map covers every uid (the host's, as seen from here) is taken as exempting; a \
                    namespaced one's is not"
            );
        }
        Self {
            procfs: procfs.as_os_str().to_owned(),
            path: PathBuf::with_capacity(64),
            text: String::with_capacity(4096),
            namespaces,
        }
    }

    /// Builds `<procfs>/<pid>/<file>` in the path buffer.
    pub(super) fn resolve(&mut self, pid: u32, file: &str) {
        let mut digits = [0u8; 10];
        let path = self.path.as_mut_os_string();
        path.clear();
        path.push(&self.procfs);
        path.push("/");
        path.push(format_pid(pid, &mut digits));
        path.push("/");
        path.push(file);
    }

    pub(super) fn read(&mut self, pid: u32, file: &str) -> Result<&str, SourceError> {
        self.resolve(pid, file);
        fsroot::read_into(&self.path, &mut self.text)?;
        Ok(&self.text)
    }

    /// Names the file last read.
    pub(super) fn parse_error(&self, source: ParseError) -> SourceError {
        SourceError::Parse { path: self.path.clone(), source }
    }
}

/// Decimal digits of `pid` without allocating.
pub(super) fn format_pid(mut pid: u32, digits: &mut [u8; 10]) -> &str {
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + (pid % 10) as u8;
        pid /= 10;
        if pid == 0 {
            break;
        }
    }
    std::str::from_utf8(&digits[start..]).unwrap_or("0")
}

/// A procfs entry name that is a pid: decimal digits only (`self`, `sys`... are not).
pub(super) fn parse_pid_bytes(name: &[u8]) -> Option<u32> {
    // Canonical as the kernel names them: `01` beside `1` in a fake root would be pid 1 twice.
    if name.is_empty() || name.len() > 10 || !name.iter().all(u8::is_ascii_digit) || name.starts_with(b"0") {
        return None;
    }
    let pid = name.iter().try_fold(0u32, |pid, &digit| pid.checked_mul(10)?.checked_add(u32::from(digit - b'0')))?;
    (pid > 0).then_some(pid)
}

/// What reading a process (or one of its files) gave: the caller tells a process read from one
/// that is not a user process, one that exited, one whose files are refused and a failure
/// without looking at anything else (the cgroup reader's `read::Outcome` does the same).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome<T> {
    Read(T),
    /// A kernel thread, or a zombie without a live thread: discovery does not read it again.
    KernelThread,
    /// Exited between being listed (or tracked) and being read: counted in `vanished`.
    Gone,
    /// Its `status` is refused (EACCES, EPERM: `hidepid=`, a foreign user namespace): counted,
    /// not a failure of the collector.
    Refused,
    /// A real error, counted and reported: the pid is retried on every pass.
    Failed,
}

impl<T> Outcome<T> {
    pub(super) fn and_then<U>(self, next: impl FnOnce(T) -> Outcome<U>) -> Outcome<U> {
        match self {
            Outcome::Read(value) => next(value),
            Outcome::KernelThread => Outcome::KernelThread,
            Outcome::Gone => Outcome::Gone,
            Outcome::Refused => Outcome::Refused,
            Outcome::Failed => Outcome::Failed,
        }
    }
}

/// Counts and classifies read failures.
#[derive(Debug, Default)]
pub(super) struct Tally {
    pub(super) vanished: u64,
    pub(super) errors: ReadErrors,
}

impl Tally {
    /// Counts a failed read, reports it unless it is a refusal or the process is gone (ENOENT,
    /// ESRCH), and says which of the three it was.
    pub(super) fn note<T>(&mut self, err: SourceError, errors: &mut Vec<SourceError>) -> Outcome<T> {
        if err.is_not_found() {
            self.vanished += 1;
            return Outcome::Gone;
        }
        match err.kind() {
            "permission" => {
                self.errors.permission += 1;
                return Outcome::Refused;
            }
            "parse" => self.errors.parse += 1,
            "too_large" => self.errors.too_large += 1,
            _ => self.errors.io += 1,
        }
        errors.push(err);
        Outcome::Failed
    }

    /// Failures reported so far (refusals and processes gone are not failures): a record whose
    /// reads raised it is incomplete.
    pub(super) fn failures(&self) -> u64 {
        self.errors.total() - self.errors.permission
    }
}

/// Cgroup paths seen in the scan, each with its labels computed once.
#[derive(Debug, Default)]
pub(super) struct Interner {
    cgroups: HashMap<String, Arc<CgroupInfo>>,
}

impl Interner {
    pub(super) fn get(&mut self, path: &str) -> Arc<CgroupInfo> {
        if let Some(info) = self.cgroups.get(path) {
            return info.clone();
        }
        let info = Arc::new(CgroupInfo { path: path.to_owned(), labels: cgroup_path::labels(path) });
        self.cgroups.insert(path.to_owned(), info.clone());
        info
    }

    /// Forgets cgroups no process refers to any more (bounded memory under churn).
    pub(super) fn prune(&mut self) {
        self.cgroups.retain(|_, info| Arc::strong_count(info) > 1);
    }
}

/// Reads processes for the collector: the reused reader, the failure tally, the cgroup
/// interner and the filter settings, so the passes call one method per job.
pub(super) struct Scanner {
    pub(super) reader: PidReader,
    pub(super) tally: Tally,
    pub(super) interner: Interner,
    pub(super) config: ProcessConfig,
    /// NCCL libraries seen, shared by the processes that map them (bounded).
    pub(super) nccl_libraries: Vec<Arc<NcclMapping>>,
    /// What each NCCL library file says of its version, by file identity.
    pub(super) nccl_versions: nccl_version::Cache,
    /// `maps` files this pass may still read ([`MAPS_READS_PER_PASS`]).
    pub(super) maps_reads_left: usize,
    /// `smaps_rollup` files this pass may still read ([`SHARE_READS_PER_PASS`]).
    pub(super) share_reads_left: usize,
    /// The live thread [`Scanner::read_live_thread`] read for the process being read, when its
    /// leader has exited: its `cgroup` is read through that thread.
    pub(super) live_thread: Option<u32>,
}

/// At most this many `maps` reads per pass: reading a rank's 4,000-area maps costs about 5 ms of
/// CPU (benches/process_scan.rs), so a churn of new pinning processes costs at most about 1% of a
/// core, and the 8 ranks of a job starting together are labelled within 4 passes.
pub(super) const MAPS_READS_PER_PASS: usize = 2;

/// At most this many `smaps_rollup` reads per pass. The file walks the page tables of every area
/// of the mm: for one of 8,300 processes sharing an mm (`clone(CLONE_VM)`) with a 530 MB area of
/// their stacks it costs 0.75 ms of CPU (docs/benchmarks.md), so an unbounded crowd would cost
/// seconds per pass. A process not read keeps ranking by its last share, or by VmLck: never
/// lower than its own share, so a job's rank cannot suffer from the bound, only a crowd's
/// demotion waits (the turns by owner hold it meanwhile).
pub(super) const SHARE_READS_PER_PASS: usize = 32;

impl Scanner {
    /// Reads `status`, `limits` and `cgroup` of one process.
    pub(super) fn read_process(
        &mut self,
        pid: u32,
        known: Option<Record>,
        errors: &mut Vec<SourceError>,
    ) -> Outcome<Record> {
        let mut record = known.unwrap_or_else(|| Record {
            sample: ProcessSample {
                pid,
                comm: String::new(),
                cgroup: None,
                locked_bytes: None,
                pinned_bytes: None,
                limits: None,
                cap_ipc_lock: None,
                ipc_lock_exempt: None,
                nccl: None,
                rdma_libraries: Vec::new(),
                uid: None,
                locked_share_bytes: None,
            },
            share_read: None,
            comm_matches: false,
            nccl_read: false,
            tracked: false,
            incomplete: false,
            probation_until: None,
            limits_read_at: None,
            status_read_at: None,
        });
        let fresh = record.sample.comm.is_empty();
        let failures = self.tally.failures();
        self.read_status(&mut record, fresh, errors).and_then(|_| {
            if !self.read_limits_and_cgroup(&mut record, errors) {
                return Outcome::Gone;
            }
            record.incomplete = self.tally.failures() > failures;
            record.tracked = is_tracked(&record.sample, record.comm_matches);
            Outcome::Read(record)
        })
    }

    /// Re-reads the status of a tracked process, and its limits when [`LIMITS_REFRESH`] old
    /// (`due`) or when it runs another program.
    pub(super) fn refresh(
        &mut self,
        record: &mut Record,
        due: std::time::Instant,
        errors: &mut Vec<SourceError>,
    ) -> Outcome<()> {
        self.read_status(record, false, errors).and_then(|changed| {
            // A new command name under a known pid: most likely pid reuse, so the limits and the
            // cgroup of the last full scan belong to another process.
            let present = if changed {
                self.read_limits_and_cgroup(record, errors)
            } else {
                self.refresh_limits(record, due, errors)
            };
            if present {
                Outcome::Read(())
            } else {
                Outcome::Gone
            }
        })
    }

    /// Reads every file of a process whose `limits` or `cgroup` failed last time.
    pub(super) fn reread(&mut self, record: &mut Record, errors: &mut Vec<SourceError>) -> Outcome<()> {
        self.read_status(record, false, errors).and_then(|_| {
            if self.read_limits_and_cgroup(record, errors) {
                Outcome::Read(())
            } else {
                Outcome::Gone
            }
        })
    }

    /// Updates the record from `status`; `Read(changed)` says whether the command name changed
    /// (or `force` asked to treat it as new).
    pub(super) fn read_status(
        &mut self,
        record: &mut Record,
        force: bool,
        errors: &mut Vec<SourceError>,
    ) -> Outcome<bool> {
        let pid = record.sample.pid;
        self.live_thread = None;
        record.status_read_at = Some(std::time::Instant::now());
        let text = match self.reader.read(pid, "status") {
            // A task reaped after the open reads as an empty file.
            Ok("") => {
                self.tally.vanished += 1;
                return Outcome::Gone;
            }
            Ok(text) => text,
            Err(err) => return self.tally.note(err, errors),
        };
        // A malformed field costs only that field: the process is still sampled, the error counted.
        let (status, field_errors) = match pid_status::parse_fields(text) {
            Ok(parsed) => (parsed.value, parsed.field_errors),
            Err(err) => {
                let err = self.reader.parse_error(err);
                return self.tally.note(err, errors);
            }
        };

        if status.kernel_thread() == Some(true) {
            return Outcome::KernelThread;
        }
        let (has_vm, kthread) = (status.has_vm, status.kthread);
        let name = pid_status::unescape_name(status.name);
        let changed = force || record.sample.comm != *name;
        if changed {
            record.sample.comm.clear();
            record.sample.comm.push_str(&name);
            // exec or pid reuse: another program, maybe another NCCL.
            record.nccl_read = false;
            record.sample.nccl = None;
            record.sample.rdma_libraries.clear();
            record.comm_matches = self.config.comm_pattern.as_ref().is_some_and(|re| re.is_match(&name));
        }
        record.sample.locked_bytes = status.locked_bytes;
        record.sample.pinned_bytes = status.pinned_bytes;
        record.sample.cap_ipc_lock = status.ipc_lock();
        record.sample.uid = status.uid;
        let mut failed = false;
        for err in field_errors {
            let err = self.reader.parse_error(err);
            failed |= self.tally.note::<()>(err, errors) == Outcome::Failed;
        }
        if !has_vm {
            match self.read_live_thread(record, kthread.is_none(), errors) {
                Outcome::Read(()) => {}
                // No thread with an address space: a kernel thread or a zombie, unless a read failed.
                Outcome::Failed => return Outcome::Failed,
                _ if failed => return Outcome::Failed,
                _ => return Outcome::KernelThread,
            }
        }
        // The namespace matters only where the limit does: for memory held, or a process that is
        // exported whatever it holds (comm_pattern). One holding nothing is not checked (two more
        // reads per root process on every full scan, a fifth of the scan's idle cost) and counts
        // as its capability says; its first lock or pin gets it re-read, and checked, within a
        // pass (a tracked pass, or the full scan that node-wide growth brings forward).
        let holds = record.sample.locked_bytes.unwrap_or(0) > 0 || record.sample.pinned_bytes.unwrap_or(0) > 0;
        let cap = record.sample.cap_ipc_lock;
        let initial = if cap == Some(true) && (holds || record.comm_matches) {
            self.user_namespace_is_initial(pid, errors)
        } else {
            None
        };
        record.sample.ipc_lock_exempt = ipc_lock_exempts(cap, initial);
        self.read_share(record, errors);
        if self.config.nccl_version
            && !record.nccl_read
            && record.sample.pinned_bytes.unwrap_or(0) > 0
            && self.maps_reads_left > 0
        {
            self.maps_reads_left -= 1;
            record.nccl_read = true;
            (record.sample.nccl, record.sample.rdma_libraries) = self.read_maps(pid, errors);
        }
        Outcome::Read(changed)
    }

    /// For a process whose `status` has no `Vm*` block: a kernel thread (`check_stat`: the kernel
    /// prints no `Kthread:` line, so `PF_KTHREAD` in `stat` tells), a zombie, or a process whose
    /// main thread called pthread_exit() while others run on. The exited leader has no mm
    /// (`exit_mm`, kernel/exit.c), so `proc_pid_status` (fs/proc/array.c) prints no `Vm*` for it,
    /// but every live thread shares the process's mm: the first one's `task/TID/status` gives
    /// VmLck, VmPin and its own CapEff (capabilities are per thread; the leader's are no longer
    /// used by anything). `Read` when such a thread was read into the record; else `Failed` when
    /// a read failed (reported), `KernelThread` for kernel threads, zombies, processes gone
    /// meanwhile and a task directory that cannot be listed. Limits (`signal->rlim`) stay
    /// readable through the leader's pid; the cgroup does not (see [`Scanner::read_cgroup`]), so
    /// the thread read is remembered in `live_thread`.
    fn read_live_thread(
        &mut self,
        record: &mut Record,
        check_stat: bool,
        errors: &mut Vec<SourceError>,
    ) -> Outcome<()> {
        let pid = record.sample.pid;
        // A failed read of `stat` does not stop the search: a live thread still gives the memory.
        let mut failed = false;
        let none_live = |failed: bool| if failed { Outcome::Failed } else { Outcome::KernelThread };
        if check_stat {
            let kernel_thread = match self.reader.read(pid, "stat") {
                Ok(text) => pid_stat::is_kernel_thread(text).map_err(|err| self.reader.parse_error(err)),
                Err(err) => Err(err),
            };
            match kernel_thread {
                Ok(true) => return Outcome::KernelThread,
                Ok(false) => {}
                Err(err) => match self.tally.note::<()>(err, errors) {
                    Outcome::Gone => return Outcome::KernelThread,
                    noted => failed = noted == Outcome::Failed,
                },
            }
        }
        self.reader.resolve(pid, "task");
        let Ok(entries) = std::fs::read_dir(&self.reader.path) else { return none_live(failed) };
        let tids: Vec<u32> = entries
            .filter_map(|entry| parse_pid_bytes(entry.ok()?.file_name().as_encoded_bytes()))
            .filter(|&tid| tid != pid)
            .collect();
        for tid in tids {
            let text = match self.reader.read(pid, &format!("task/{tid}/status")) {
                Ok(text) => text,
                // That thread exited meanwhile: the next one may still run.
                Err(err) if err.is_not_found() => continue,
                Err(err) => {
                    let noted = self.tally.note::<()>(err, errors);
                    return none_live(failed || noted == Outcome::Failed);
                }
            };
            let Ok(parsed) = pid_status::parse_fields(text) else { continue };
            let status = parsed.value;
            if !status.has_vm {
                continue;
            }
            record.sample.locked_bytes = status.locked_bytes;
            record.sample.pinned_bytes = status.pinned_bytes;
            record.sample.cap_ipc_lock = status.ipc_lock();
            for err in parsed.field_errors {
                let err = self.reader.parse_error(err);
                self.tally.note::<()>(err, errors);
            }
            self.live_thread = Some(tid);
            return Outcome::Read(());
        }
        none_live(failed)
    }

    /// Reads the share of its locked pages (`smaps_rollup`, through the live thread when the
    /// leader has exited) for a process with `VmLck` above 0, when `VmLck` changed since the last
    /// read or that read is [`LIMITS_REFRESH`] old. The file walks every area's page tables, so
    /// a process locking nothing is never read. Not found (exited, a kernel without the file)
    /// and refused (another user's process without ptrace access: PTRACE_MODE_READ in
    /// `proc_maps_open`) leave it unknown, ranked by `VmLck`; other failures are reported.
    fn read_share(&mut self, record: &mut Record, errors: &mut Vec<SourceError>) {
        let locked = record.sample.locked_bytes.unwrap_or(0);
        if locked == 0 {
            record.sample.locked_share_bytes = None;
            record.share_read = None;
            return;
        }
        let now = std::time::Instant::now();
        let fresh = |(at_bytes, at): (u64, std::time::Instant)| {
            at_bytes == locked && now.saturating_duration_since(at) < LIMITS_REFRESH
        };
        if record.share_read.is_some_and(fresh) {
            return;
        }
        if self.share_reads_left == 0 {
            // Read on a later pass; meanwhile a share measured for another VmLck is stale.
            if record.share_read.is_some_and(|(at_bytes, _)| at_bytes != locked) {
                record.sample.locked_share_bytes = None;
            }
            return;
        }
        self.share_reads_left -= 1;
        record.share_read = Some((locked, now));
        let pid = record.sample.pid;
        let file: std::borrow::Cow<str> = match self.live_thread {
            Some(tid) => format!("task/{tid}/smaps_rollup").into(),
            None => "smaps_rollup".into(),
        };
        record.sample.locked_share_bytes = match self.reader.read(pid, &file) {
            Ok(text) => match smaps_rollup::pss_locked(text) {
                Ok(share) => share,
                Err(err) => {
                    let err = self.reader.parse_error(err);
                    self.tally.note::<()>(err, errors);
                    None
                }
            },
            Err(err) if err.is_not_found() || err.kind() == "permission" => None,
            Err(err) => {
                self.tally.note::<()>(err, errors);
                None
            }
        };
    }

    /// The first `libnccl.so*` mapping of the process and the RDMA registrant libraries it maps
    /// ([`registrants::rdma_library`]), read line by line from `maps`. A refusal (reading another
    /// user's maps needs ptrace access: PTRACE_MODE_READ in proc_maps_open) is counted, not a failure.
    fn read_maps(&mut self, pid: u32, errors: &mut Vec<SourceError>) -> (Option<Arc<NcclMapping>>, Vec<RdmaLibrary>) {
        self.reader.resolve(pid, "maps");
        let mut nccl = None;
        let mut libraries = Vec::new();
        // The whole file: a registrant maps its libraries anywhere among the rank's areas.
        let read = fsroot::find_line(&self.reader.path, nccl_version::MAX_MAPS_BYTES, |line| {
            if nccl.is_none() {
                nccl = nccl_version::mapped(line);
            }
            if let Some(found) = registrants::rdma_library(line) {
                registrants::add(&mut libraries, found);
            }
            None::<()>
        });
        match read {
            Ok(_) => {}
            // Gone meanwhile: the next pass drops it.
            Err(err) if err.is_not_found() => return (None, Vec::new()),
            Err(err) => {
                self.tally.note::<()>(err, errors);
                return (None, Vec::new());
            }
        }
        let Some(mapped) = nccl else { return (None, libraries) };
        // A name without the version: the library and its dist-info, read once per file.
        let procfs = std::path::PathBuf::from(&self.reader.procfs);
        let found = self.nccl_versions.resolve(&procfs, pid, &mapped).mapping(&mapped.name);
        // Every rank of a job maps the same library: one copy.
        if let Some(known) = self.nccl_libraries.iter().find(|k| ***k == found) {
            return (Some(known.clone()), libraries);
        }
        let found = Arc::new(found);
        if self.nccl_libraries.len() < 64 {
            self.nccl_libraries.push(found.clone());
        }
        (Some(found), libraries)
    }

    /// Whether a process holding CAP_IPC_LOCK is in the initial user namespace, where the
    /// capability lifts its memlock limit ([`UserNamespaceView::judge`], the decision `check`
    /// makes too). Read only for the processes that have the capability (the privileged
    /// daemons): `ns/user` (needs ptrace access, which a root exporter has) and `uid_map`,
    /// which anyone may read. `None` when neither tells.
    pub(super) fn user_namespace_is_initial(&mut self, pid: u32, errors: &mut Vec<SourceError>) -> Option<bool> {
        self.reader.resolve(pid, "ns/user");
        // Refused without ptrace access, or gone: the map decides.
        let link = std::fs::read_link(&self.reader.path).ok();
        self.reader.resolve(pid, "uid_map");
        let reader = &mut self.reader;
        let map = match fsroot::read_into(&reader.path, &mut reader.text) {
            Ok(()) => match reader.namespaces.judge_map(&reader.text) {
                Ok(initial) => initial,
                Err(err) => {
                    let err = self.reader.parse_error(err);
                    self.tally.note::<()>(err, errors);
                    None
                }
            },
            // Vanished since its status was read (a reaped task's uid_map fails to open with
            // EINVAL): the next pass drops it.
            Err(err) if err.is_not_found() || err.raw_os_error() == Some(libc::EINVAL) => None,
            Err(err) => {
                self.tally.note::<()>(err, errors);
                None
            }
        };
        self.reader.namespaces.judge(map, link.as_deref())
    }

    /// Re-reads the limits of a process that holds memory when they are older than `due` (a
    /// tracked pass's instant, [`LIMITS_REFRESH`] back). False when the process vanished.
    pub(super) fn refresh_limits(
        &mut self,
        record: &mut Record,
        due: std::time::Instant,
        errors: &mut Vec<SourceError>,
    ) -> bool {
        let holds = record.sample.locked_bytes.unwrap_or(0) > 0 || record.sample.pinned_bytes.unwrap_or(0) > 0;
        if !holds || record.limits_read_at.is_some_and(|at| at > due) {
            return true;
        }
        self.read_limits(record, errors)
    }

    /// Reads `limits` and `cgroup` into the record. False when the process vanished meanwhile.
    /// Other failures leave the field unknown and keep the process.
    pub(super) fn read_limits_and_cgroup(&mut self, record: &mut Record, errors: &mut Vec<SourceError>) -> bool {
        self.read_limits(record, errors) && self.read_cgroup(record, errors)
    }

    /// Reads `limits` into the record. False when the process vanished meanwhile.
    fn read_limits(&mut self, record: &mut Record, errors: &mut Vec<SourceError>) -> bool {
        let pid = record.sample.pid;
        record.limits_read_at = Some(std::time::Instant::now());
        record.sample.limits = match self.reader.read(pid, "limits") {
            // The kernel prints nothing once the task has been reaped (no sighand to lock).
            Ok("") => {
                self.tally.vanished += 1;
                return false;
            }
            Ok(text) => match pid_limits::parse(text) {
                Ok(limits) => Some(limits),
                Err(err) => {
                    let err = self.reader.parse_error(err);
                    self.tally.note::<()>(err, errors);
                    None
                }
            },
            Err(err) => {
                // Every kernel has `limits`: not found means the process has exited.
                if self.tally.note::<()>(err, errors) == Outcome::Gone {
                    return false;
                }
                None
            }
        };
        true
    }

    /// Reads `cgroup` into the record (a process that exited meanwhile is dropped by the next
    /// pass). Always true. A process whose leader has exited is read through the live thread its
    /// memory came from: the leader is PF_EXITING, and `proc_cgroup_show` (kernel/cgroup/cgroup.c)
    /// prints `/` for an exiting task on every cgroup v1 hierarchy, which put the job's process
    /// in the root cgroup, without its job's aggregate and labels.
    fn read_cgroup(&mut self, record: &mut Record, errors: &mut Vec<SourceError>) -> bool {
        let pid = record.sample.pid;
        let file: std::borrow::Cow<str> = match self.live_thread {
            Some(tid) => format!("task/{tid}/cgroup").into(),
            None => "cgroup".into(),
        };
        record.sample.cgroup = match self.reader.read(pid, &file) {
            // Exiting mid-read, as for limits; the next pass drops it.
            Ok("") => None,
            Ok(text) => match pid_cgroup::memory_path(text) {
                Ok(Some(path)) => match &record.sample.cgroup {
                    Some(same) if same.path == path => Some(same.clone()),
                    _ => Some(self.interner.get(path)),
                },
                Ok(None) => None,
                Err(err) => {
                    let err = self.reader.parse_error(err);
                    self.tally.note::<()>(err, errors);
                    None
                }
            },
            // Without CONFIG_CGROUPS there is no such file; a process that exited meanwhile is
            // dropped by the next pass.
            Err(err) if err.is_not_found() => None,
            Err(err) => {
                self.tally.note::<()>(err, errors);
                None
            }
        };
        true
    }
}
