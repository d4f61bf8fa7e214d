//! Per-process memlock headroom: `VmLck` and `VmPin` from `/proc/PID/status` against the soft
//! `RLIMIT_MEMLOCK` from `/proc/PID/limits`, attributed to the cgroup in `/proc/PID/cgroup`.
//!
//! Two kinds of pass keep the cost low at 1 s resolution:
//! - a **full scan** (on the first run; every `full_scan_interval` a **sweep**, the same reads
//!   spread over passes when they do not fit in one) lists `<procfs>/` and reads `status`,
//!   `limits` and `cgroup` of every process;
//! - in between, a **tracked pass** re-reads only the `status` of the processes that matter
//!   (holding locked or pinned memory, or matching `comm_pattern`), keeping their cgroup from
//!   the last full scan, and their limits too unless they hold memory (re-read every 2 s
//!   then); then it lists procfs and reads the processes that appeared, which are re-read on
//!   every pass for their first seconds. A pass's reads beyond what must be current (the
//!   front of the fair order, probation, failures) are bounded in time, so a crowd of holders
//!   is re-read in turns and never slows the sampling of another owner's job
//!   ([`ProcessCollector::tracked_pass`]). A process seen idle that starts
//!   pinning or locking later raises the node-wide counters in `/proc/vmstat` beyond what the
//!   table explains, which brings the next full scan forward.
//!
//! Kernel threads are skipped. A process that exits between the listing and the reads is
//! skipped silently (and counted in `vanished`); unreadable files are counted by kind, and only
//! those that are not a plain permission refusal fail the collector.
//!
//! The cgroup aggregates cover every process of the scan, not only the exported ones, so alerts
//! can see a cgroup whose many small processes add up.

mod render;
mod sample;
mod scan;
mod settings;

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::exposition::Exposition;
use crate::trend::{Observation, Scope};
use memlock_kernel::fsroot::{self, Roots, SourceError};
use memlock_kernel::{tasks, vmstat};

pub use sample::{ipc_lock_exempts, user_namespace_of, UserNamespaceView};
pub(crate) use sample::{CgroupAggregate, CgroupInfo, Counter, ProcessSample};
use scan::{parse_pid_bytes, Interner, Outcome, PidReader, Record, Scanner, Tally};
pub use settings::ProcessConfig;

use super::{Collector, Data};

/// Read failures by kind, counted since the exporter started. Processes that exited
/// mid-scan are not failures (see [`ProcessStats::vanished_total`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ReadErrors {
    /// EACCES/EPERM (`hidepid=`, a foreign user namespace): counted, does not fail the collector.
    pub permission: u64,
    pub io: u64,
    pub parse: u64,
    pub too_large: u64,
}

impl ReadErrors {
    pub fn kinds(&self) -> [(&'static str, u64); 4] {
        [("permission", self.permission), ("io", self.io), ("parse", self.parse), ("too_large", self.too_large)]
    }

    pub fn total(&self) -> u64 {
        self.kinds().iter().map(|(_, n)| n).sum()
    }
}

/// The result of one pass.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcessStats {
    /// The exported processes: those passing the filter, the highest usage ratio first (ties:
    /// more bytes first, then lower pid), in turns by owner ([`crate::fair`]), at most `top_n`.
    pub processes: Vec<ProcessSample>,
    /// Every process holding locked or pinned memory or passing the filter, most urgent first in
    /// turns by owner, at most [`MAX_WATCHED`]: the trend scopes, which the fast path evaluates (whatever top_n
    /// and the series budget export).
    pub watched: Vec<ProcessSample>,
    /// Per entry of `watched`, when its `status` was read: a pass re-reads only part of a
    /// crowd, and a process not re-read is observed at the time of its reading, not as a new
    /// sample of the same value.
    pub(crate) watched_read_at: Vec<Option<Instant>>,
    /// Processes left out of `watched` by [`MAX_WATCHED`] (the least urgent).
    pub(crate) unwatched: u64,
    /// One entry per cgroup with at least one scanned process, sorted by path.
    pub cgroups: Vec<CgroupAggregate>,
    /// Whether this pass ended a full scan (read every process at once on the first run, or
    /// ended a sweep spread over passes); otherwise it re-read the tracked processes.
    pub full_scan: bool,
    /// User processes covered by this sample (kernel threads excluded).
    pub scanned: u64,
    /// Of those, the ones re-read on every pass.
    pub tracked: u64,
    /// Processes that passed the filter but fell beyond `top_n`.
    pub(crate) dropped_by_top_n: u64,
    pub(crate) full_scans_total: u64,
    /// Of those, the full scans started early because node-wide pinned or mlocked memory grew
    /// more than the processes the collector re-reads account for.
    pub(crate) early_full_scans_total: u64,
    /// Processes found by the listing of a tracked pass, between full scans.
    pub(crate) discovered_total: u64,
    /// Tracked passes that did not list procfs: the node's task counters had not changed.
    pub(crate) listings_skipped_total: u64,
    /// Processes that exited between being listed (or tracked) and being read.
    pub(crate) vanished_total: u64,
    pub(crate) read_errors_total: ReadErrors,
    /// The series budget's order of `processes` and `cgroups`, made once, by the first render
    /// (a pass nobody scrapes ranks nothing: the idle cost).
    ranking: crate::budget::Ranked<render::Ranking>,
}

/// How long a process found between full scans is re-read on every pass: a job's rank that
/// registers its memory right after starting is followed from its first registration; one that
/// registers later is found by the node-wide counters ([`ProcessCollector::untracked_growth`]).
const PROBATION: Duration = Duration::from_secs(10);
/// Processes the fast path watches at most per pass, the most urgent first: bounds the trend
/// work a crowd of processes can make (two trend scopes each, within the trend's 20,000).
pub(crate) const MAX_WATCHED: usize = 8192;

/// Processes of one uid on probation at most: a fork storm must not turn every pass into a full
/// scan, nor take the places of another user's new processes.
const MAX_ON_PROBATION: usize = 256;
/// Places at the front of the fair order whose tracked processes every pass re-reads, whatever
/// else it has time for: each owner's most urgent first (uids take turns, then a uid's cgroups),
/// so that one user's crowd of holders cannot slow the sampling of another user's job.
pub(crate) const FRONT: usize = 256;
/// Places of one uid at the front at most: a crowd's share of the work every pass must do is
/// that of one owner's job (a 64-rank node), not the whole front.
pub(crate) const FRONT_PER_OWNER: usize = 64;
/// Other tracked processes re-read per pass at least, and processes of the full sweep, whatever
/// the pass's time budget: both always progress.
const MIN_ROTATION: usize = 64;
const MIN_SWEEP: usize = 64;
/// New processes a pass reads at most: a fork storm is read over several passes (the listing
/// is repeated until every new process has been read), not in one long pass.
const MAX_NEW_PER_PASS: usize = 512;

/// A full scan spread over passes: every process's files re-read, in turns by owner, the
/// processes no pass re-reads first (one of them starting to pin or lock is why a sweep comes
/// early), so a crowd read in pid order cannot hold back another user's process.
#[derive(Debug, Clone)]
struct Sweep {
    /// The pids still to read, the next last.
    queue: Vec<u32>,
    started: Instant,
}
/// Early full scans are at least this far apart, whatever the node counters say (short-term
/// pins of O_DIRECT I/O move `nr_foll_pin_*` all the time on storage-heavy nodes).
const EARLY_FULL_SCAN_GAP: Duration = Duration::from_secs(5);

/// Node-wide pinned and mlocked bytes (`/proc/vmstat`), and what the table's processes held,
/// at the last full scan: growth in the first that the second does not explain comes from a
/// process the tracked passes do not re-read.
#[derive(Debug, Clone, Copy)]
struct Baseline {
    node_pinned: u64,
    node_mlocked: u64,
    table_pinned: u64,
    table_locked: u64,
}

pub struct ProcessCollector {
    scanner: Scanner,
    interval: Duration,
    procfs: PathBuf,
    /// Every user process of the last full scan still alive, sorted by pid.
    table: Vec<Record>,
    /// Processes whose `status` could not be read or parsed (a real error): retried on every
    /// pass, so that the collector reports the failure on every run and not only on full scans
    /// (where it would alternate with successful tracked passes, and an alert with a `for`
    /// would never fire).
    retry: Vec<u32>,
    last_full_scan: Option<Instant>,
    full_scans: u64,
    early_full_scans: u64,
    discovered: u64,
    /// Listed pids that are not user processes (kernel threads), sorted: discovery does not read
    /// them again. Rebuilt by every full scan.
    others: Vec<u32>,
    baseline: Option<Baseline>,
    page_size: u64,
    /// The node's task counters read before the last listing (see [`TaskCounters`]).
    listed_at: Option<TaskCounters>,
    /// Whether procfs is the kernel's (statfs), so that its task counters mean something; a
    /// fixture tree is listed on every pass.
    counters_apply: bool,
    listings_skipped: u64,
    /// Reused for `<procfs>/stat`, which is long on hosts with many interrupts.
    counters_text: String,
    /// Whether the last pass left processes out of `watched`: the log says so when that starts
    /// and when it ends, not on every pass.
    unwatched_logged: bool,
    /// The pids of the first [`FRONT`] places of the last fair order, at most
    /// [`FRONT_PER_OWNER`] of one uid, sorted.
    front: Vec<u32>,
    /// The pid the next pass's turns among the other tracked processes start at.
    rotation: u32,
    /// The full scan in progress between passes, if any.
    sweep: Option<Sweep>,
    /// How long the last tracked pass took (wall time).
    last_pass: Option<Duration>,
}

/// Tasks created since boot and tasks that exist (`kernel::tasks`): unchanged between two
/// reads, no process appeared or went in between, so the listing would be the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TaskCounters {
    forks: u64,
    threads: u64,
}

impl ProcessCollector {
    /// `interval` is the collector's own interval: a full scan is due when less than half of it
    /// remains until `full_scan_interval`, so timer jitter does not push it a whole tick late.
    pub fn new(roots: &Roots, config: ProcessConfig, interval: Duration) -> Self {
        Self {
            scanner: Scanner {
                reader: PidReader::new(&roots.procfs),
                tally: Tally::default(),
                interner: Interner::default(),
                config,
                nccl_libraries: Vec::new(),
                nccl_versions: Default::default(),
                maps_reads_left: 0,
                share_reads_left: 0,
                live_thread: None,
            },
            interval,
            procfs: roots.procfs.clone(),
            table: Vec::new(),
            retry: Vec::new(),
            last_full_scan: None,
            full_scans: 0,
            early_full_scans: 0,
            discovered: 0,
            others: Vec::new(),
            baseline: None,
            page_size: procfs::page_size(),
            listed_at: None,
            counters_apply: fsroot::is_procfs(&roots.procfs).unwrap_or(false),
            listings_skipped: 0,
            unwatched_logged: false,
            counters_text: String::new(),
            front: Vec::new(),
            rotation: 0,
            sweep: None,
            last_pass: None,
        }
    }

    /// The node's task counters now; `None` when procfs is not the kernel's or they cannot be
    /// read (then every pass lists: the counters only save work, they never decide alone).
    fn task_counters(&mut self) -> Option<TaskCounters> {
        if !self.counters_apply {
            return None;
        }
        fsroot::read_into(&self.procfs.join("stat"), &mut self.counters_text).ok()?;
        let forks = tasks::forks(&self.counters_text)?;
        fsroot::read_into(&self.procfs.join("loadavg"), &mut self.counters_text).ok()?;
        let threads = tasks::threads(&self.counters_text)?;
        Some(TaskCounters { forks, threads })
    }

    fn full_scan_due(&self, now: Instant) -> bool {
        match self.last_full_scan {
            None => true,
            Some(last) => {
                now.saturating_duration_since(last) + self.interval / 2 >= self.scanner.config.full_scan_interval
            }
        }
    }

    /// Runs a full scan on the first run, a tracked pass afterwards; a full sweep starts when
    /// due, and comes early when node-wide pinned or mlocked memory grew by more than the
    /// processes re-read explain. A sweep is spread over passes ([`ProcessCollector::tracked_pass`]):
    /// one pass reading every process of a crowd would delay the next sample of every other.
    pub fn sample(&mut self, errors: &mut Vec<SourceError>) -> Option<ProcessStats> {
        let now = Instant::now();
        if self.last_full_scan.is_none() {
            return self.full_scan(errors);
        }
        if self.sweep.is_none() && self.full_scan_due(now) {
            self.start_sweep(now);
        }
        let stats = self.tracked_pass(errors);
        // After the tracked pass, so the table holds what the re-read processes hold now.
        if self.sweep.is_none() && self.untracked_growth(now) {
            self.early_full_scans += 1;
            self.start_sweep(now);
            return Some(self.tracked_pass(errors));
        }
        Some(stats)
    }

    /// The user-process pids of procfs, sorted. `None` (with the error) when it cannot be listed
    /// or holds no process at all.
    /// `counters` are the task counters read just before (a task created or reaped after that
    /// read changes them, so the next pass lists again).
    fn list_pids(&mut self, counters: Option<TaskCounters>, errors: &mut Vec<SourceError>) -> Option<Vec<u32>> {
        self.listed_at = None;
        // Names are read as bytes, without a String per entry.
        let io_err = |source| SourceError::Io { path: self.procfs.clone(), source };
        let mut pids = Vec::with_capacity(self.table.len() + self.others.len() + 64);
        let entries = match std::fs::read_dir(&self.procfs) {
            Ok(entries) => entries,
            Err(err) => {
                errors.push(io_err(err));
                return None;
            }
        };
        for entry in entries {
            match entry {
                Ok(entry) => pids.extend(parse_pid_bytes(entry.file_name().as_encoded_bytes())),
                Err(err) => {
                    errors.push(io_err(err));
                    return None;
                }
            }
        }
        if pids.is_empty() {
            // Every procfs lists at least its init process: this directory is something else.
            errors.push(SourceError::Io {
                path: self.procfs.clone(),
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "no process directories: not a procfs mount (see --path.procfs)",
                ),
            });
            return None;
        }
        // procfs lists pids in increasing order (proc_pid_readdir walks next_tgid), so this is
        // cheap; other roots (fixture trees) are sorted here.
        pids.sort_unstable();
        self.listed_at = counters;
        Some(pids)
    }

    /// Lists procfs and reads every process. `None` when procfs cannot be listed.
    pub fn full_scan(&mut self, errors: &mut Vec<SourceError>) -> Option<ProcessStats> {
        let started = Instant::now();
        // On failure the next tick scans again (no tracked pass in between), so the collector
        // keeps reporting the failure instead of alternating with tracked passes that succeed.
        let counters = self.task_counters();
        let pids = self.list_pids(counters, errors)?;
        self.sweep = None;
        self.scanner.maps_reads_left = scan::MAPS_READS_PER_PASS;
        self.scanner.share_reads_left = scan::SHARE_READS_PER_PASS;
        self.last_full_scan = Some(started);
        self.full_scans += 1;

        let previous = std::mem::take(&mut self.table);
        let mut previous = previous.into_iter().peekable();
        let mut table = Vec::with_capacity(pids.len());
        self.retry.clear();
        self.others.clear();
        for pid in pids {
            while previous.next_if(|r| r.sample.pid < pid).is_some() {}
            let known = previous.next_if(|r| r.sample.pid == pid);
            match self.scanner.read_process(pid, known, errors) {
                Outcome::Read(record) => table.push(record),
                Outcome::Failed => self.retry.push(pid),
                Outcome::KernelThread => self.others.push(pid),
                Outcome::Gone | Outcome::Refused => {}
            }
        }
        self.table = table;
        self.scanner.interner.prune();
        self.baseline = self.node_held().map(|(node_pinned, node_mlocked)| {
            let (table_pinned, table_locked) = self.table_held();
            Baseline { node_pinned, node_mlocked, table_pinned, table_locked }
        });
        Some(self.stats(true))
    }

    /// Node-wide pinned (FOLL_PIN references held) and mlocked bytes from `<procfs>/vmstat`;
    /// `None` when it cannot be read (the node collector reports that).
    fn node_held(&self) -> Option<(u64, u64)> {
        let stat = fsroot::read_parsed(&self.procfs.join("vmstat"), vmstat::parse_fields).ok()?.value;
        let bytes = |pages: u64| pages.saturating_mul(self.page_size);
        Some((bytes(stat.pinned_pages()?), bytes(stat.nr_mlock?)))
    }

    /// VmPin and VmLck summed over the table: current for the processes re-read, as of the last
    /// full scan for the others (constant, so their growth is what the node shows beyond it).
    fn table_held(&self) -> (u64, u64) {
        self.table.iter().fold((0, 0), |(pinned, locked), r| {
            (
                pinned.saturating_add(r.sample.pinned_bytes.unwrap_or(0)),
                locked.saturating_add(r.sample.locked_bytes.unwrap_or(0)),
            )
        })
    }

    /// Whether pinned or mlocked memory grew on the node, since the last full scan, by at least
    /// `min_bytes` more than the table accounts for (a process that is not re-read started
    /// pinning or locking), and the last full scan is at least [`EARLY_FULL_SCAN_GAP`] ago.
    fn untracked_growth(&self, now: Instant) -> bool {
        let (Some(base), Some(last)) = (self.baseline, self.last_full_scan) else { return false };
        if now.saturating_duration_since(last) < EARLY_FULL_SCAN_GAP {
            return false;
        }
        let Some((node_pinned, node_mlocked)) = self.node_held() else { return false };
        let (table_pinned, table_locked) = self.table_held();
        let unexplained = |node_now: u64, node_then: u64, table_now: u64, table_then: u64| {
            let node = i128::from(node_now) - i128::from(node_then);
            let table = i128::from(table_now) - i128::from(table_then);
            node - table
        };
        let threshold = i128::from(self.scanner.config.min_bytes.max(256 << 10));
        unexplained(node_pinned, base.node_pinned, table_pinned, base.table_pinned) >= threshold
            || unexplained(node_mlocked, base.node_mlocked, table_locked, base.table_locked) >= threshold
    }

    /// Between full scans, lists procfs and reads the processes that appeared since (at most one
    /// interval ago), so a new process is sampled from its first interval; records of processes
    /// no longer listed are dropped. New processes are re-read on every pass for
    /// [`PROBATION`].
    fn discover(&mut self, table: Vec<Record>, errors: &mut Vec<SourceError>) -> Vec<Record> {
        let counters = self.task_counters();
        if counters.is_some() && counters == self.listed_at {
            // No task created or reaped since the last listing: it would list the same pids.
            self.listings_skipped += 1;
            return table;
        }
        let Some(pids) = self.list_pids(counters, errors) else { return table };
        let now = Instant::now();
        // Per owner: one user's fork storm takes only that user's places on probation.
        let mut on_probation: HashMap<Option<u32>, usize> = HashMap::new();
        for record in table.iter().filter(|r| r.probation_until.is_some_and(|t| t > now)) {
            *on_probation.entry(record.sample.uid).or_insert(0) += 1;
        }
        let mut old = table.into_iter().peekable();
        let mut kept = Vec::with_capacity(pids.len());
        let mut others = Vec::with_capacity(self.others.len());
        let mut known_others = std::mem::take(&mut self.others).into_iter().peekable();
        let mut new = Vec::new();
        for pid in pids {
            while old.next_if(|r| r.sample.pid < pid).is_some() {}
            if let Some(record) = old.next_if(|r| r.sample.pid == pid) {
                kept.push(record);
                continue;
            }
            while known_others.next_if(|&other| other < pid).is_some() {}
            if known_others.next_if(|&other| other == pid).is_some() {
                others.push(pid);
                continue;
            }
            if !self.retry.contains(&pid) {
                new.push(pid);
            }
        }
        if new.len() > MAX_NEW_PER_PASS {
            new = self.new_in_turns(new);
            // The rest are read by the next passes, which list again for them.
            self.listed_at = None;
        }
        let (kept_before, others_before) = (kept.len(), others.len());
        for pid in new {
            match self.scanner.read_process(pid, None, errors) {
                Outcome::Read(mut record) => {
                    self.discovered += 1;
                    let owners = on_probation.entry(record.sample.uid).or_insert(0);
                    if *owners < MAX_ON_PROBATION {
                        record.probation_until = Some(now + PROBATION);
                        *owners += 1;
                    }
                    kept.push(record);
                }
                Outcome::Failed => self.retry.push(pid),
                Outcome::KernelThread => others.push(pid),
                Outcome::Gone | Outcome::Refused => {}
            }
        }
        // Both are merged with the next listing in pid order.
        if kept.len() > kept_before {
            kept.sort_unstable_by_key(|r| r.sample.pid);
        }
        if others.len() > others_before {
            others.sort_unstable();
        }
        self.others = others;
        kept
    }

    /// The [`MAX_NEW_PER_PASS`] new processes a pass reads when more appeared: in turns by owner
    /// (the uid owning `<procfs>/<pid>`, one `stat` each), so one user's fork storm delays only
    /// that user's processes, not another user's job rank starting beside it. Pids that are gone
    /// by then are left out.
    fn new_in_turns(&self, new: Vec<u32>) -> Vec<u32> {
        let mut path = self.procfs.clone();
        let owned: Vec<(u32, u32)> = new
            .into_iter()
            .filter_map(|pid| {
                path.push(pid.to_string());
                let uid = std::fs::metadata(&path).ok().map(|meta| meta.uid());
                path.pop();
                Some((pid, uid?))
            })
            .collect();
        let order = crate::fair::order(owned.len(), |_| (), |i| owned[i].1, |_| ());
        order.into_iter().take(MAX_NEW_PER_PASS).map(|i| owned[i].0).collect()
    }

    /// Re-reads what must be current on every pass, then as much more as the pass has time for,
    /// so that the pass's cost does not grow with a crowd and the fast path keeps its cadence:
    /// 1. every pass: the tracked processes at the front of the last fair order ([`FRONT`]: each
    ///    owner's most urgent first), those on probation, and every file of the processes whose
    ///    files failed (see [`Record::incomplete`] and `retry`);
    /// 2. the other tracked processes in turns, from where the last pass stopped, for half of
    ///    the pass's time budget ([`ProcessCollector::budget`]; at least [`MIN_ROTATION`]);
    /// 3. the full sweep in progress, if any (every file of every process, in turns by owner), for
    ///    the rest of it (at least [`MIN_SWEEP`]); its end counts as a full scan;
    /// 4. then lists procfs for the processes that appeared.
    pub fn tracked_pass(&mut self, errors: &mut Vec<SourceError>) -> ProcessStats {
        let started = Instant::now();
        self.scanner.maps_reads_left = scan::MAPS_READS_PER_PASS;
        self.scanner.share_reads_left = scan::SHARE_READS_PER_PASS;
        let budget = self.budget();
        let mut table = std::mem::take(&mut self.table);
        let mut failed = Vec::new();
        // Half an interval of slack, so timer jitter does not push a refresh a whole pass late.
        let limits_due = started.checked_sub(scan::LIMITS_REFRESH.saturating_sub(self.interval / 2)).unwrap_or(started);
        let n = table.len();
        let mut read = vec![false; n];
        let mut gone = vec![false; n];
        for (i, record) in table.iter_mut().enumerate() {
            if record.probation_until.is_some_and(|until| until <= started) {
                record.probation_until = None;
            }
            let front = record.tracked && self.front.binary_search(&record.sample.pid).is_ok();
            if front || record.incomplete || record.probation_until.is_some() {
                read[i] = true;
                gone[i] = !refresh_one(&mut self.scanner, record, limits_due, &mut failed, errors);
            }
        }
        let first = table.partition_point(|r| r.sample.pid < self.rotation);
        let mut rotated = 0;
        self.rotation = 0;
        for k in 0..n {
            let i = (first + k) % n;
            if read[i] || !table[i].tracked {
                continue;
            }
            if rotated >= MIN_ROTATION && started.elapsed() >= budget / 2 {
                self.rotation = table[i].sample.pid;
                break;
            }
            rotated += 1;
            read[i] = true;
            gone[i] = !refresh_one(&mut self.scanner, &mut table[i], limits_due, &mut failed, errors);
        }
        let mut swept = false;
        if let Some(sweep) = &mut self.sweep {
            let mut done = 0;
            while done < MIN_SWEEP || started.elapsed() < budget {
                let Some(pid) = sweep.queue.pop() else { break };
                // Gone since the sweep started, or already left the table in this pass.
                let Ok(i) = table.binary_search_by_key(&pid, |r| r.sample.pid) else { continue };
                if !gone[i] {
                    done += 1;
                    gone[i] = !reread_one(&mut self.scanner, &mut table[i], &mut failed, errors);
                }
            }
            swept = sweep.queue.is_empty();
        }
        let mut at = 0;
        table.retain(|_| {
            at += 1;
            !gone[at - 1]
        });
        // Those that failed just now are retried on the next pass, not twice in this one.
        let retry = std::mem::replace(&mut self.retry, failed);
        for pid in retry {
            match self.scanner.read_process(pid, None, errors) {
                Outcome::Read(record) => {
                    let at = table.partition_point(|r| r.sample.pid < pid);
                    table.insert(at, record);
                }
                Outcome::Failed => self.retry.push(pid),
                // Gone, refused or a kernel thread: nothing to retry.
                Outcome::KernelThread | Outcome::Gone | Outcome::Refused => {}
            }
        }
        self.table = self.discover(table, errors);
        if swept {
            self.end_sweep();
        }
        self.last_pass = Some(started.elapsed());
        self.stats(swept)
    }

    /// How long a pass may read beyond what it must ([`ProcessCollector::tracked_pass`]): a
    /// quarter of the interval, so a crowd's processes are re-read less often instead of the
    /// collector sampling everyone (the job it crowds out included) less often.
    fn budget(&self) -> Duration {
        // A pass that overran half the interval (other work on the node leaving the exporter a
        // fraction of a core) leaves the next one only what it must, and the minimums.
        if self.last_pass.is_some_and(|last| last > self.interval / 2) {
            return Duration::ZERO;
        }
        self.interval / 4
    }

    /// Starts a full sweep: every process's files re-read over the next passes, and procfs
    /// listed on the next pass whatever the task counters say.
    fn start_sweep(&mut self, now: Instant) {
        let table = &self.table;
        let cgroup = |i: usize| table[i].sample.cgroup.as_deref().map(|c| c.path.as_str());
        let order = crate::fair::order(table.len(), |i| table[i].tracked, |i| table[i].sample.uid, cgroup);
        let queue = order.into_iter().rev().map(|i| table[i].sample.pid).collect();
        self.sweep = Some(Sweep { queue, started: now });
        self.listed_at = None;
    }

    /// A sweep went through the whole table: it counts as a full scan, from when it started.
    fn end_sweep(&mut self) {
        let Some(sweep) = self.sweep.take() else { return };
        self.last_full_scan = Some(sweep.started);
        self.full_scans += 1;
        self.scanner.interner.prune();
        self.baseline = self.node_held().map(|(node_pinned, node_mlocked)| {
            let (table_pinned, table_locked) = self.table_held();
            Baseline { node_pinned, node_mlocked, table_pinned, table_locked }
        });
    }

    fn stats(&mut self, full_scan: bool) -> ProcessStats {
        let config = &self.scanner.config;
        let watched: Vec<&Record> =
            self.table.iter().filter(|r| passes_filter(r, config) || r.sample.held_bytes() > 0).collect();
        // Each key once, not on every comparison.
        let mut keyed: Vec<(RankKey, &Record)> = watched.into_iter().map(|r| (rank_key(&r.sample), r)).collect();
        keyed.sort_by(|(a, _), (b, _)| compare_rank(a, b));
        let watched: Vec<&Record> = keyed.into_iter().map(|(_, r)| r).collect();
        let mut candidates = fair_order(watched.iter().copied().filter(|r| passes_filter(r, config)).collect());
        let mut watched = fair_order(watched);
        let dropped = candidates.len().saturating_sub(config.top_n);
        candidates.truncate(config.top_n);
        self.front.clear();
        let mut per_owner: HashMap<Option<u32>, usize> = HashMap::new();
        for record in &watched {
            if self.front.len() == FRONT {
                break;
            }
            let places = per_owner.entry(record.sample.uid).or_insert(0);
            if *places < FRONT_PER_OWNER {
                *places += 1;
                self.front.push(record.sample.pid);
            }
        }
        self.front.sort_unstable();
        let unwatched = watched.len().saturating_sub(MAX_WATCHED);
        watched.truncate(MAX_WATCHED);
        if (unwatched > 0) != self.unwatched_logged {
            self.unwatched_logged = unwatched > 0;
            if unwatched > 0 {
                tracing::warn!(
                    unwatched,
                    watched = MAX_WATCHED,
                    "more processes hold memory than the fast path follows: the least urgent are left out \
                        (memlock_process_unwatched_processes)"
                );
            } else {
                tracing::info!("the fast path follows every process holding memory again");
            }
        }
        ProcessStats {
            ranking: Default::default(),
            processes: candidates.into_iter().map(|r| r.sample.clone()).collect(),
            watched_read_at: watched.iter().map(|r| r.status_read_at).collect(),
            watched: watched.into_iter().map(|r| r.sample.clone()).collect(),
            unwatched: unwatched as u64,
            cgroups: aggregate(&self.table),
            full_scan,
            scanned: self.table.len() as u64,
            tracked: self.table.iter().filter(|r| r.tracked || r.probation_until.is_some()).count() as u64,
            dropped_by_top_n: dropped as u64,
            full_scans_total: self.full_scans,
            early_full_scans_total: self.early_full_scans,
            discovered_total: self.discovered,
            listings_skipped_total: self.listings_skipped,
            vanished_total: self.scanner.tally.vanished,
            read_errors_total: self.scanner.tally.errors,
        }
    }
}

impl Collector for ProcessCollector {
    fn name(&self) -> &'static str {
        "process"
    }

    fn collect(&mut self, errors: &mut Vec<SourceError>) -> Option<Data> {
        self.sample(errors).map(|stats| Arc::new(stats) as Data)
    }
}

/// `ranked` (most urgent first) in the order that shares places fairly by owner: uid, then
/// cgroup ([`crate::fair`]), for `top_n` and the watched set.
fn fair_order(ranked: Vec<&Record>) -> Vec<&Record> {
    let idle = |i: usize| ranked[i].sample.rank_urgency().is_none_or(|u| u <= 0.0);
    let cgroup = |i: usize| ranked[i].sample.cgroup.as_deref().map(|c| c.path.as_str());
    let order = crate::fair::order(ranked.len(), idle, |i| ranked[i].sample.uid, cgroup);
    order.into_iter().map(|i| ranked[i]).collect()
}

/// Re-reads a record on a tracked pass (`status`, and the rest as [`Scanner::refresh`] and
/// [`Scanner::reread`] decide). False when it leaves the table: gone, or failed (then its pid is
/// in `failed`, to be retried).
fn refresh_one(
    scanner: &mut Scanner,
    record: &mut Record,
    limits_due: Instant,
    failed: &mut Vec<u32>,
    errors: &mut Vec<SourceError>,
) -> bool {
    let failures = scanner.tally.failures();
    let outcome =
        if record.incomplete { scanner.reread(record, errors) } else { scanner.refresh(record, limits_due, errors) };
    settle(scanner, record, outcome, failures, failed)
}

/// Re-reads every file of a record (the full sweep). False as for [`refresh_one`].
fn reread_one(
    scanner: &mut Scanner,
    record: &mut Record,
    failed: &mut Vec<u32>,
    errors: &mut Vec<SourceError>,
) -> bool {
    let failures = scanner.tally.failures();
    let outcome = scanner.reread(record, errors);
    settle(scanner, record, outcome, failures, failed)
}

fn settle(scanner: &Scanner, record: &mut Record, outcome: Outcome<()>, failures: u64, failed: &mut Vec<u32>) -> bool {
    match outcome {
        Outcome::Read(()) => {
            record.incomplete = scanner.tally.failures() > failures;
            record.tracked = is_tracked(&record.sample, record.comm_matches);
            true
        }
        Outcome::Failed => {
            failed.push(record.sample.pid);
            false
        }
        Outcome::KernelThread | Outcome::Gone | Outcome::Refused => false,
    }
}

fn passes_filter(record: &Record, config: &ProcessConfig) -> bool {
    record.comm_matches || record.sample.held_bytes() >= config.min_bytes
}

fn is_tracked(sample: &ProcessSample, comm_matches: bool) -> bool {
    comm_matches || sample.locked_bytes.unwrap_or(0) > 0 || sample.pinned_bytes.unwrap_or(0) > 0
}

/// Most urgent first ([`ProcessSample::rank_urgency`]: the usage ratio up to 1, processes at
/// or over a limit that hold little last among those with a limit), processes without a limit
/// after them, then more bytes in the larger counter, then lower pid.
fn compare_rank(a: &RankKey, b: &RankKey) -> std::cmp::Ordering {
    b.0.total_cmp(&a.0).then_with(|| b.1.cmp(&a.1)).then_with(|| a.2.cmp(&b.2))
}

/// What the order compares: urgency, bytes of the larger counter, pid.
type RankKey = (f64, u64, u32);

fn rank_key(s: &ProcessSample) -> RankKey {
    (s.rank_urgency().unwrap_or(f64::NEG_INFINITY), s.larger_counter_bytes(), s.pid)
}

fn aggregate(table: &[Record]) -> Vec<CgroupAggregate> {
    let mut index: HashMap<*const CgroupInfo, usize> = HashMap::new();
    let mut out: Vec<CgroupAggregate> = Vec::new();
    for record in table {
        let Some(cgroup) = &record.sample.cgroup else { continue };
        let slot = *index.entry(Arc::as_ptr(cgroup)).or_insert_with(|| {
            out.push(CgroupAggregate {
                cgroup: cgroup.clone(),
                locked_bytes: 0,
                pinned_bytes: 0,
                usage_ratio_max: None,
                counter_ratio_max: [None; 2],
                urgency_max: None,
                uid: record.sample.uid,
                processes: 0,
            });
            out.len() - 1
        });
        let agg = &mut out[slot];
        agg.processes += 1;
        agg.locked_bytes = agg.locked_bytes.saturating_add(record.sample.locked_own_bytes());
        agg.pinned_bytes = agg.pinned_bytes.saturating_add(record.sample.pinned_bytes.unwrap_or(0));
        // The worst ratio is there to alert on processes the per-process series do not cover;
        // an exempt process (opensm with CAP_IPC_LOCK, far over its 8 MiB limit) is never
        // refused, and would keep its cgroup alerting forever.
        for (slot, counter) in Counter::ALL.into_iter().enumerate() {
            let Some(charge) = record.sample.charge(counter) else { continue };
            let Some(ratio) = charge.enforced_ratio() else { continue };
            if agg.usage_ratio_max.is_none_or(|(_, max)| ratio > max) {
                agg.usage_ratio_max = Some((counter, ratio));
            }
            // A counter none of the processes holds says nothing, and costs a series per cgroup.
            if ratio > 0.0 && agg.counter_ratio_max[slot].is_none_or(|max| ratio > max) {
                agg.counter_ratio_max[slot] = Some(ratio);
            }
            if let Some(u) = charge.urgency() {
                if agg.urgency_max.is_none_or(|max| u > max) {
                    agg.urgency_max = Some(u);
                    agg.uid = record.sample.uid;
                }
            }
        }
    }
    out.sort_by(|a, b| a.cgroup.path.cmp(&b.cgroup.path));
    out
}

impl super::Stats for ProcessStats {
    fn render(&self, out: &mut Exposition, grants: &crate::budget::Grants) {
        self.render_granted(out, grants)
    }

    fn claims(&self) -> Vec<crate::budget::Claim> {
        ProcessStats::claims(self)
    }

    fn exported_trends(&self, grants: &crate::budget::Grants) -> Option<std::collections::HashSet<String>> {
        Some(self.exported_trend_ids(grants))
    }

    fn observations(&self, at: f64) -> Vec<Observation> {
        ProcessStats::observations(self, at)
    }

    fn observations_read(&self, at: f64, epoch: Instant) -> Vec<Observation> {
        let read_at = |i: usize| self.watched_read_at.get(i).copied().flatten();
        self.observations_with(|i| read_at(i).map_or(at, |read| read.saturating_duration_since(epoch).as_secs_f64()))
    }

    fn trend_scopes(&self) -> &'static [Scope] {
        &[Scope::Process]
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// This collector's entry in the registry ([`crate::collect::REGISTRY`]): its name, flags,
/// default interval and settings.
pub(crate) const REGISTRATION: super::Registration = super::Registration {
    name: "process",
    reads: "VmLck, VmPin, memlock limits per process",
    default_interval: "1s",
    default_enabled: true,
    settings: super::settings::of::<ProcessCollector>(),
};

#[cfg(test)]
mod tests;
