//! Per-process memlock headroom: `VmLck` and `VmPin` from `/proc/PID/status` against the soft
//! `RLIMIT_MEMLOCK` from `/proc/PID/limits`, attributed to the cgroup in `/proc/PID/cgroup`.
//!
//! Two kinds of pass keep the cost low at 1 s resolution:
//! - a **full scan** (every `full_scan_interval`, and on the first run) lists `<procfs>/` and
//!   reads `status`, `limits` and `cgroup` of every process;
//! - in between, a **tracked pass** re-reads only the `status` of the processes that matter
//!   (holding locked or pinned memory, or matching `comm_pattern`), keeping their cgroup from
//!   the last full scan, and their limits too unless they hold memory (re-read every 2 s
//!   then); then it lists procfs and reads the processes that appeared, which are re-read on
//!   every pass for their first seconds. A process seen idle that starts
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

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::ProcessConfig;
use crate::exposition::Exposition;
use crate::fsroot::{self, Roots, SourceError};
use crate::kernel::{tasks, vmstat};
use crate::trend::{Observation, Scope};

pub use sample::{
    initial_user_namespace, ipc_lock_exempts, user_namespace_of, CgroupAggregate, CgroupInfo, Counter, ProcessSample,
    UserNamespaceView,
};
use scan::{parse_pid_bytes, Interner, Outcome, PidReader, Record, Scanner, Tally};

use super::{Collector, Data};

/// Read failures by kind, counted since the exporter started. Processes that exited
/// mid-scan are not failures (see [`ProcessStats::vanished_total`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadErrors {
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
    /// more bytes first, then lower pid), at most `top_n`.
    pub processes: Vec<ProcessSample>,
    /// Every process holding locked or pinned memory or passing the filter, most urgent first,
    /// at most [`MAX_WATCHED`]: the trend scopes, which the fast path evaluates (whatever top_n
    /// and the series budget export).
    pub watched: Vec<ProcessSample>,
    /// Processes left out of `watched` by [`MAX_WATCHED`] (the least urgent).
    pub unwatched: u64,
    /// One entry per cgroup with at least one scanned process, sorted by path.
    pub cgroups: Vec<CgroupAggregate>,
    /// Whether this pass listed all of procfs (otherwise it re-read the tracked processes).
    pub full_scan: bool,
    /// User processes covered by this sample (kernel threads excluded).
    pub scanned: u64,
    /// Of those, the ones re-read on every pass.
    pub tracked: u64,
    /// Processes that passed the filter but fell beyond `top_n`.
    pub dropped_by_top_n: u64,
    pub full_scans_total: u64,
    /// Of those, the full scans started early because node-wide pinned or mlocked memory grew
    /// more than the processes the collector re-reads account for.
    pub early_full_scans_total: u64,
    /// Processes found by the listing of a tracked pass, between full scans.
    pub discovered_total: u64,
    /// Tracked passes that did not list procfs: the node's task counters had not changed.
    pub listings_skipped_total: u64,
    /// Processes that exited between being listed (or tracked) and being read.
    pub vanished_total: u64,
    pub read_errors_total: ReadErrors,
    /// The series budget's order of `processes` and `cgroups`, made once with them.
    ranking: render::Ranking,
}

/// How long a process found between full scans is re-read on every pass: a job's rank that
/// registers its memory right after starting is followed from its first registration; one that
/// registers later is found by the node-wide counters ([`ProcessCollector::untracked_growth`]).
const PROBATION: Duration = Duration::from_secs(10);
/// Processes the fast path watches at most per pass, the most urgent first: bounds the trend
/// work a crowd of processes can make (two trend scopes each, within the trend's 20,000).
pub const MAX_WATCHED: usize = 8192;

/// Processes on probation at most: a fork storm must not turn every pass into a full scan.
const MAX_ON_PROBATION: usize = 256;
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
                maps_reads_left: 0,
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
            counters_text: String::new(),
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

    /// Runs a full scan or a tracked pass, whichever is due. A full scan comes early when
    /// node-wide pinned or mlocked memory grew by more than the processes re-read explain.
    pub fn sample(&mut self, errors: &mut Vec<SourceError>) -> Option<ProcessStats> {
        let now = Instant::now();
        if self.full_scan_due(now) {
            return self.full_scan(errors);
        }
        let stats = self.tracked_pass(errors);
        // After the tracked pass, so the table holds what the re-read processes hold now.
        if self.untracked_growth(now) {
            self.early_full_scans += 1;
            return self.full_scan(errors);
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
        self.scanner.maps_reads_left = scan::MAPS_READS_PER_PASS;
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
        let mut on_probation = table.iter().filter(|r| r.probation_until.is_some_and(|t| t > now)).count();
        let mut old = table.into_iter().peekable();
        let mut kept = Vec::with_capacity(pids.len());
        let mut others = Vec::with_capacity(self.others.len());
        let mut known_others = std::mem::take(&mut self.others).into_iter().peekable();
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
            if self.retry.contains(&pid) {
                continue;
            }
            match self.scanner.read_process(pid, None, errors) {
                Outcome::Read(mut record) => {
                    self.discovered += 1;
                    if on_probation < MAX_ON_PROBATION {
                        record.probation_until = Some(now + PROBATION);
                        on_probation += 1;
                    }
                    kept.push(record);
                }
                Outcome::Failed => self.retry.push(pid),
                Outcome::KernelThread => others.push(pid),
                Outcome::Gone | Outcome::Refused => {}
            }
        }
        self.others = others;
        kept
    }

    /// Re-reads the `status` of the tracked processes only, and every file of the processes
    /// whose files failed (see [`Record::incomplete`] and `retry`); then lists procfs for the
    /// processes that appeared.
    pub fn tracked_pass(&mut self, errors: &mut Vec<SourceError>) -> ProcessStats {
        self.scanner.maps_reads_left = scan::MAPS_READS_PER_PASS;
        let mut table = std::mem::take(&mut self.table);
        let mut failed = Vec::new();
        let now = Instant::now();
        // Half an interval of slack, so timer jitter does not push a refresh a whole pass late.
        let limits_due = now.checked_sub(scan::LIMITS_REFRESH.saturating_sub(self.interval / 2)).unwrap_or(now);
        let scanner = &mut self.scanner;
        table.retain_mut(|record| {
            if record.probation_until.is_some_and(|until| until <= now) {
                record.probation_until = None;
            }
            if !record.tracked && !record.incomplete && record.probation_until.is_none() {
                return true;
            }
            let failures = scanner.tally.failures();
            let outcome = if record.incomplete {
                scanner.reread(record, errors)
            } else {
                scanner.refresh(record, limits_due, errors)
            };
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
        self.stats(false)
    }

    fn stats(&self, full_scan: bool) -> ProcessStats {
        let config = &self.scanner.config;
        let mut watched: Vec<&Record> =
            self.table.iter().filter(|r| passes_filter(r, config) || r.sample.held_bytes() > 0).collect();
        watched.sort_by(|a, b| rank(&a.sample, &b.sample));
        let mut candidates: Vec<&Record> = watched.iter().copied().filter(|r| passes_filter(r, config)).collect();
        let dropped = candidates.len().saturating_sub(config.top_n);
        candidates.truncate(config.top_n);
        let unwatched = watched.len().saturating_sub(MAX_WATCHED);
        watched.truncate(MAX_WATCHED);
        let processes: Vec<ProcessSample> = candidates.into_iter().map(|r| r.sample.clone()).collect();
        let cgroups = aggregate(&self.table);
        ProcessStats {
            ranking: render::Ranking::of(&processes, &cgroups),
            processes,
            watched: watched.into_iter().map(|r| r.sample.clone()).collect(),
            unwatched: unwatched as u64,
            cgroups,
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

fn passes_filter(record: &Record, config: &ProcessConfig) -> bool {
    record.comm_matches || record.sample.held_bytes() >= config.min_bytes
}

fn is_tracked(sample: &ProcessSample, comm_matches: bool) -> bool {
    comm_matches || sample.locked_bytes.unwrap_or(0) > 0 || sample.pinned_bytes.unwrap_or(0) > 0
}

/// Most urgent first ([`ProcessSample::rank_urgency`]: the usage ratio up to 1, processes at
/// or over a limit that hold little last among those with a limit), processes without a limit
/// after them, then more bytes in the larger counter, then lower pid.
fn rank(a: &ProcessSample, b: &ProcessSample) -> std::cmp::Ordering {
    let urgency = |s: &ProcessSample| s.rank_urgency().unwrap_or(f64::NEG_INFINITY);
    urgency(b)
        .total_cmp(&urgency(a))
        .then_with(|| b.larger_counter_bytes().cmp(&a.larger_counter_bytes()))
        .then_with(|| a.pid.cmp(&b.pid))
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
                processes: 0,
            });
            out.len() - 1
        });
        let agg = &mut out[slot];
        agg.processes += 1;
        agg.locked_bytes = agg.locked_bytes.saturating_add(record.sample.locked_bytes.unwrap_or(0));
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
                agg.urgency_max = Some(agg.urgency_max.map_or(u, |max: f64| max.max(u)));
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

    fn trend_scopes(&self) -> &'static [Scope] {
        &[Scope::Process]
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::scan::format_pid;
    use super::*;
    use crate::exposition::Exposition;
    use crate::kernel::pid_limits::Limit;
    use regex::Regex;

    const CAPTURED_STATUS: &str = include_str!("../../../tests/fixtures/captures/proc_self_status");
    const CAPTURED_LIMITS: &str = include_str!("../../../tests/fixtures/captures/proc_self_limits");

    /// A throwaway procfs tree in the real file formats.
    struct Tree {
        root: PathBuf,
    }

    impl Tree {
        fn new(name: &str) -> Tree {
            let root = std::env::temp_dir().join(format!("memlock-process-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&root);
            std::fs::create_dir_all(&root).unwrap();
            std::fs::write(root.join("meminfo"), "MemTotal: 1 kB\n").unwrap();
            std::fs::create_dir_all(root.join("self")).unwrap();
            Tree { root }
        }

        fn process(&self, pid: u32, comm: &str, locked_kib: u64, pinned_kib: u64, soft: &str, cgroup: &str) -> &Self {
            let dir = self.root.join(pid.to_string());
            std::fs::create_dir_all(&dir).unwrap();
            self.status(pid, comm, locked_kib, pinned_kib);
            let limits = CAPTURED_LIMITS.replace(
                "Max locked memory         8388608              8388608              bytes     ",
                &format!("Max locked memory         {soft:<20} {:<20} bytes     ", "unlimited"),
            );
            std::fs::write(dir.join("limits"), limits).unwrap();
            std::fs::write(dir.join("cgroup"), format!("9:name=systemd:/\n4:memory:{cgroup}\n0::/\n")).unwrap();
            self
        }

        fn status(&self, pid: impl std::fmt::Display, comm: &str, locked_kib: u64, pinned_kib: u64) {
            let status = CAPTURED_STATUS
                .replace("Name:\tcat", &format!("Name:\t{comm}"))
                .replace("VmLck:\t       0 kB", &format!("VmLck:\t{locked_kib:>8} kB"))
                .replace("VmPin:\t       0 kB", &format!("VmPin:\t{pinned_kib:>8} kB"))
                .replace("CapEff:\t000001fffeffffff", "CapEff:\t0000000000000000");
            let dir = self.root.join(pid.to_string());
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("status"), status).unwrap();
        }

        /// Gives the process CAP_IPC_LOCK (bit 14) in its effective set.
        fn ipc_lock(&self, pid: u32) {
            let path = self.root.join(pid.to_string()).join("status");
            let status = std::fs::read_to_string(&path)
                .unwrap()
                .replace("CapEff:\t0000000000000000", "CapEff:\t0000000000004000");
            std::fs::write(path, status).unwrap();
        }

        fn kernel_thread(&self, pid: u32) {
            let dir = self.root.join(pid.to_string());
            std::fs::create_dir_all(&dir).unwrap();
            let status: String = CAPTURED_STATUS
                .lines()
                .filter(|l| !(l.starts_with("Vm") || l.starts_with("Rss") || l.starts_with("Hugetlb")))
                .map(|l| if l.starts_with("Kthread") { "Kthread:\t1\n".to_owned() } else { format!("{l}\n") })
                .collect();
            std::fs::write(dir.join("status"), status).unwrap();
        }

        /// A process whose main thread called pthread_exit(): the leader's status has no `Vm*`
        /// lines (no mm), thread `tid` holds `locked_kib`. `kthread_line` false: a kernel without
        /// the `Kthread:` line, where `stat` tells (`flags` without PF_KTHREAD).
        fn exited_leader(&self, pid: u32, tid: u32, comm: &str, locked_kib: u64, kthread_line: bool) {
            self.process(pid, comm, 0, 0, "8388608", "/job");
            self.status(tid_dir(pid, tid), comm, locked_kib, 0);
            let dir = self.root.join(pid.to_string());
            let leader: String = std::fs::read_to_string(dir.join("status"))
                .unwrap()
                .lines()
                .filter(|l| !(l.starts_with("Vm") || l.starts_with("Rss") || l.starts_with("Hugetlb")))
                .filter(|l| kthread_line || !l.starts_with("Kthread"))
                .map(|l| if l.starts_with("State") { "State:\tZ (zombie)\n".to_owned() } else { format!("{l}\n") })
                .collect();
            std::fs::write(dir.join("status"), &leader).unwrap();
            std::fs::create_dir_all(dir.join(format!("task/{pid}"))).unwrap();
            std::fs::write(dir.join(format!("task/{pid}/status")), leader).unwrap();
            let stat = format!("{pid} ({comm}) Z 1 {pid} {pid} 0 -1 4227084 93 0 0 0 0 0 0 0 20 0 2 0 5312 0 0\n");
            std::fs::write(dir.join("stat"), stat).unwrap();
        }

        fn remove(&self, pid: u32) {
            std::fs::remove_dir_all(self.root.join(pid.to_string())).unwrap();
        }

        fn collector(&self, min_bytes: u64, comm: &str, top_n: usize) -> ProcessCollector {
            let config = ProcessConfig {
                full_scan_interval: Duration::from_secs(5),
                min_bytes,
                comm_pattern: (!comm.is_empty()).then(|| Regex::new(comm).unwrap()),
                top_n,
                nccl_version: true,
            };
            let roots = Roots { procfs: self.root.clone(), sysfs: PathBuf::from("/nonexistent") };
            ProcessCollector::new(&roots, config, Duration::from_secs(1))
        }
    }

    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }

    /// `PID/task/TID`, relative to the tree's root.
    fn tid_dir(pid: u32, tid: u32) -> String {
        format!("{pid}/task/{tid}")
    }

    fn pids(stats: &ProcessStats) -> Vec<u32> {
        stats.processes.iter().map(|p| p.pid).collect()
    }

    #[test]
    fn filter_rank_and_top_n() {
        let tree = Tree::new("rank");
        // 8 MiB soft limit unless said otherwise.
        tree.process(10, "small", 512, 0, "8388608", "/a") // below 1 MiB: filtered out
            .process(11, "half", 0, 4096, "8388608", "/a") // ratio 0.5
            .process(12, "full", 8192, 8192, "8388608", "/b") // ratio 1.0, never 2.0
            .process(13, "python3", 0, 0, "8388608", "/b") // comm match, ratio 0
            .process(14, "unlimited", 0, 1 << 20, "unlimited", "/b") // no ratio, 1 GiB
            .process(15, "also_half", 2048, 4096, "8388608", "/a"); // ratio 0.5 and the same max as 11: pid order
        tree.kernel_thread(2);
        let mut collector = tree.collector(1 << 20, "^python3$", 10);
        let mut errors = Vec::new();
        let stats = collector.full_scan(&mut errors).unwrap();
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(stats.scanned, 6, "kernel thread and non-pid entries are not processes");
        assert_eq!(pids(&stats), vec![12, 11, 15, 13, 14]);
        let full = &stats.processes[0];
        // Each counter against the limit on its own: 1.0 and 1.0, never 2.0 for the sum.
        assert_eq!(full.charge(Counter::Pinned).and_then(|c| c.ratio()), Some(1.0));
        assert_eq!(full.charge(Counter::Locked).and_then(|c| c.ratio()), Some(1.0));
        assert_eq!(full.worst_ratio(), Some((Counter::Pinned, 1.0)), "a tie names VmPin");
        assert_eq!(stats.processes[4].worst_ratio(), None);
        assert_eq!(stats.processes[4].limits.unwrap().soft, Limit::Unlimited);
        assert_eq!(stats.dropped_by_top_n, 0);

        let mut collector = tree.collector(1 << 20, "^python3$", 2);
        let stats = collector.full_scan(&mut errors).unwrap();
        assert_eq!(pids(&stats), vec![12, 11]);
        assert_eq!(stats.dropped_by_top_n, 3);
        // Aggregates still cover every process, exported or not.
        let a = stats.cgroups.iter().find(|c| c.cgroup.path == "/a").unwrap();
        assert_eq!(a.processes, 3);
        assert_eq!(a.locked_bytes, (512 + 2048) * 1024);
        assert_eq!(a.pinned_bytes, (4096 + 4096) * 1024);
        assert_eq!(a.usage_ratio_max, Some((Counter::Pinned, 0.5)));
        let b = stats.cgroups.iter().find(|c| c.cgroup.path == "/b").unwrap();
        assert_eq!(b.processes, 3);
        assert_eq!(b.usage_ratio_max, Some((Counter::Pinned, 1.0)));
        assert_eq!(b.cgroup.labels[0], ("cgroup", "/b".to_owned()));
    }

    /// Issue 23: the main thread called pthread_exit() while a thread holding 4 MiB locked runs
    /// on. The leader's status has no Vm lines (fs/proc/array.c prints them only with an mm) and
    /// the process was taken for a kernel thread: invisible. It is read through its live
    /// thread, with `Kthread:` (6.x) or, without that line, `stat`'s flags telling it from a
    /// kernel thread, which is still skipped either way.
    #[test]
    fn a_process_whose_main_thread_exited_is_read_through_a_live_thread() {
        for kthread_line in [true, false] {
            let tree = Tree::new(&format!("leader-exit-{kthread_line}"));
            tree.exited_leader(30, 31, "leader_exit", 4096, kthread_line);
            tree.kernel_thread(2);
            if !kthread_line {
                let status = std::fs::read_to_string(tree.root.join("2/status")).unwrap().replace("Kthread:\t1\n", "");
                std::fs::write(tree.root.join("2/status"), status).unwrap();
                let stat = "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 3 0 0 18446744073709551615 0\n";
                std::fs::write(tree.root.join("2/stat"), stat).unwrap();
            }
            let mut collector = tree.collector(1 << 20, "", 10);
            let mut errors = Vec::new();
            let stats = collector.full_scan(&mut errors).unwrap();
            assert!(errors.is_empty(), "{errors:?}");
            assert_eq!(pids(&stats), vec![30], "Kthread line: {kthread_line}");
            assert_eq!(stats.scanned, 1, "the kernel thread is still skipped");
            let p = &stats.processes[0];
            assert_eq!((p.comm.as_str(), p.locked_bytes, p.pinned_bytes), ("leader_exit", Some(4 << 20), Some(0)));
            assert_eq!(p.worst_ratio(), Some((Counter::Locked, 0.5)), "against the process's own limit");
            // Tracked passes follow the thread.
            tree.status(tid_dir(30, 31), "leader_exit", 6144, 0);
            let stats = collector.tracked_pass(&mut errors);
            assert_eq!(stats.processes[0].locked_bytes, Some(6 << 20));
            // The last thread exits too: a zombie holding nothing, dropped.
            std::fs::remove_dir_all(tree.root.join(tid_dir(30, 31))).unwrap();
            let stats = collector.tracked_pass(&mut errors);
            assert!(stats.processes.is_empty(), "{:?}", stats.processes);
            assert!(errors.is_empty(), "{errors:?}");
        }
    }

    /// Issue 3 review: opensm (CAP_IPC_LOCK, 64 MiB locked under 8 MiB) made its cgroup's
    /// worst ratio 8, which the kernel never refuses: a page that cannot be fixed.
    #[test]
    fn exempt_processes_count_in_the_sums_but_not_in_the_worst_ratio() {
        let tree = Tree::new("exempt");
        tree.process(90, "opensm", 65536, 0, "8388608", "/infra") // ratio 8, exempt
            .process(91, "helper", 0, 4096, "8388608", "/infra") // ratio 0.5
            .process(92, "ibv_rc_pingpong", 0, 16384, "8388608", "/alone"); // ratio 2, exempt
        tree.ipc_lock(90);
        tree.ipc_lock(92);
        let mut collector = tree.collector(1 << 20, "", 10);
        let mut errors = Vec::new();
        let stats = collector.full_scan(&mut errors).unwrap();
        assert!(errors.is_empty(), "{errors:?}");
        let infra = stats.cgroups.iter().find(|c| c.cgroup.path == "/infra").unwrap();
        assert_eq!(infra.usage_ratio_max, Some((Counter::Pinned, 0.5)), "the exempt process is left out");
        assert_eq!(
            (infra.locked_bytes, infra.pinned_bytes, infra.processes),
            (64 << 20, 4 << 20, 2),
            "but its memory is summed"
        );
        let alone = stats.cgroups.iter().find(|c| c.cgroup.path == "/alone").unwrap();
        assert_eq!(alone.usage_ratio_max, None, "no process the limit applies to");
        assert_eq!(alone.pinned_bytes, 16 << 20);
        // The per-process series still show the exempt process with its ratio and ipc_lock 1.
        let opensm = stats.processes.iter().find(|p| p.pid == 90).unwrap();
        assert_eq!((opensm.worst_ratio(), opensm.ipc_lock_exempt), (Some((Counter::Locked, 8.0)), Some(true)));
        // Dropping the capability brings it back into the aggregate at the next pass.
        tree.status(90, "opensm", 65536, 0);
        let stats = collector.tracked_pass(&mut errors);
        let infra = stats.cgroups.iter().find(|c| c.cgroup.path == "/infra").unwrap();
        assert_eq!(infra.usage_ratio_max, Some((Counter::Locked, 8.0)), "and names the counter");
    }

    /// A rootless or Enroot container: root inside its user namespace, so CapEff has every
    /// capability, but `capable()` checks the initial namespace and the limit still applies.
    #[test]
    fn cap_ipc_lock_inside_a_user_namespace_does_not_exempt() {
        let tree = Tree::new("userns");
        tree.process(93, "python3", 0, 16384, "8388608", "/slurm/uid_1000/job_77/step_0") // ratio 2
            .process(94, "opensm", 65536, 0, "8388608", "/infra") // ratio 8, exempt
            .process(95, "ib_write_bw", 0, 4096, "8388608", "/infra"); // ratio 0.5, no uid_map file
        for pid in [93, 94, 95] {
            tree.ipc_lock(pid);
        }
        let captures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/captures");
        let map = |pid: u32, capture: &str| {
            std::fs::copy(format!("{captures}/{capture}"), tree.root.join(pid.to_string()).join("uid_map")).unwrap()
        };
        map(93, "proc_userns_uid_map");
        map(94, "proc_self_uid_map");
        let mut collector = tree.collector(1 << 20, "", 10);
        let mut errors = Vec::new();
        let stats = collector.full_scan(&mut errors).unwrap();
        assert!(errors.is_empty(), "{errors:?}");
        let exempt = |pid: u32| stats.processes.iter().find(|p| p.pid == pid).unwrap().ipc_lock_exempt;
        assert_eq!(exempt(93), Some(false), "held only inside a user namespace");
        assert_eq!(exempt(94), Some(true), "held in the initial namespace");
        assert_eq!(exempt(95), Some(true), "no uid_map to tell: the capability is taken at its word");
        let job = stats.cgroups.iter().find(|c| c.cgroup.path == "/slurm/uid_1000/job_77/step_0").unwrap();
        assert_eq!(
            job.usage_ratio_max,
            Some((Counter::Pinned, 2.0)),
            "the namespaced process counts against its limit"
        );

        // A malformed map is a parse error naming the file, and the capability stands.
        std::fs::write(tree.root.join("93/uid_map"), "0 65534\n").unwrap();
        let stats = collector.tracked_pass(&mut errors);
        assert_eq!(stats.processes.iter().find(|p| p.pid == 93).unwrap().ipc_lock_exempt, Some(true));
        assert!(errors.iter().any(|e| e.to_string().contains("93/uid_map")), "{errors:?}");

        // Holding nothing, the namespace is not read (a broken map would be an error) and the
        // capability stands; the first pin gets it read at the next full scan.
        let tree = Tree::new("userns-idle");
        tree.process(96, "python3", 0, 0, "8388608", "/job").ipc_lock(96);
        std::fs::write(tree.root.join("96/uid_map"), "0 65534\n").unwrap();
        let mut collector = tree.collector(0, "", 10);
        let mut errors = Vec::new();
        collector.full_scan(&mut errors).unwrap();
        assert!(errors.is_empty(), "not read: {errors:?}");
        assert_eq!(collector.table[0].sample.ipc_lock_exempt, Some(true));
        std::fs::copy(format!("{captures}/proc_userns_uid_map"), tree.root.join("96/uid_map")).unwrap();
        tree.status(96, "python3", 0, 4096);
        tree.ipc_lock(96);
        let stats = collector.full_scan(&mut errors).unwrap();
        assert_eq!(stats.processes[0].ipc_lock_exempt, Some(false), "held inside a user namespace, now read");
    }

    /// Issue 14: `ns/user` against pid 1's decides where it can be read. A child namespace may
    /// carry a full identity map (`0 0 4294967295`, which only a privileged process can write),
    /// which uid_map alone takes for the initial one; different links prove otherwise. Equal
    /// links do not outweigh a map that shows a namespace (pid 1 may be a container's init).
    #[test]
    fn the_user_namespace_link_outweighs_an_identity_map() {
        let tree = Tree::new("nslinks");
        tree.process(1, "init", 0, 0, "8388608", "/");
        tree.process(97, "worker", 0, 16384, "8388608", "/job") // identity map, other namespace
            .process(98, "opensm", 65536, 0, "8388608", "/infra") // identity map, the initial one
            .process(99, "python3", 0, 16384, "8388608", "/job"); // namespaced map, same link as pid 1
        let captures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/captures");
        let link = |pid: u32, target: &str| {
            let dir = tree.root.join(pid.to_string()).join("ns");
            std::fs::create_dir_all(&dir).unwrap();
            std::os::unix::fs::symlink(target, dir.join("user")).unwrap();
        };
        link(1, "user:[4026531837]");
        link(97, "user:[4026532781]");
        link(98, "user:[4026531837]");
        link(99, "user:[4026531837]");
        for (pid, map) in [(97, "proc_self_uid_map"), (98, "proc_self_uid_map"), (99, "proc_userns_uid_map")] {
            tree.ipc_lock(pid);
            std::fs::copy(format!("{captures}/{map}"), tree.root.join(pid.to_string()).join("uid_map")).unwrap();
        }
        let mut errors = Vec::new();
        let stats = tree.collector(1 << 20, "", 10).full_scan(&mut errors).unwrap();
        assert!(errors.is_empty(), "{errors:?}");
        let exempt = |pid: u32| stats.processes.iter().find(|p| p.pid == pid).unwrap().ipc_lock_exempt;
        assert_eq!(exempt(97), Some(false), "another namespace, whatever its map says");
        assert_eq!(exempt(98), Some(true));
        assert_eq!(exempt(99), Some(false), "the map shows a namespace: pid 1 is in it too");
    }

    #[test]
    fn the_capability_rule_in_one_place() {
        assert_eq!(ipc_lock_exempts(Some(true), Some(true)), Some(true));
        assert_eq!(ipc_lock_exempts(Some(true), None), Some(true), "cannot tell: taken at its word");
        assert_eq!(ipc_lock_exempts(Some(true), Some(false)), Some(false));
        assert_eq!(ipc_lock_exempts(Some(false), Some(true)), Some(false));
        assert_eq!(ipc_lock_exempts(None, Some(true)), None);
        assert_eq!(initial_user_namespace(Some(true), Some(false)), Some(false));
        assert_eq!(initial_user_namespace(Some(false), Some(true)), Some(false));
        assert_eq!(initial_user_namespace(Some(true), Some(true)), Some(true));
        assert_eq!(initial_user_namespace(None, Some(true)), Some(true));
        assert_eq!(initial_user_namespace(None, None), None);
    }

    /// Issue 23: an exporter inside a user namespace (a container without the host's) took the
    /// capability of every process at its word, so a namespaced root, whose limit the kernel
    /// enforces, read `ipc_lock 1`. From there the kernel shows uid_map's middle column relative
    /// to the reader, but the extents still tell a namespace: only a map of every uid (the
    /// host's, as seen from a namespace) cannot be told, and is taken at its word.
    #[test]
    fn an_exporter_in_a_user_namespace_still_tells_a_namespaced_root() {
        let tree = Tree::new("reader-userns");
        tree.process(96, "python3", 0, 4096, "8388608", "/job") // namespaced root
            .process(97, "opensm", 65536, 0, "8388608", "/infra") // a host daemon, seen from inside
            .process(98, "worker", 0, 4096, "8388608", "/job"); // the exporter's own namespace
        let captures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/captures");
        std::fs::copy(format!("{captures}/proc_userns_uid_map"), tree.root.join("96/uid_map")).unwrap();
        // 6.18's /proc/1/uid_map read after `setpriv --reuid=65534 unshare --user --map-root-user`.
        std::fs::write(tree.root.join("97/uid_map"), "         0 4294967295 4294967295\n").unwrap();
        // A privileged identity map, which only the ns/user link tells from the host's.
        std::fs::write(tree.root.join("98/uid_map"), "         0          0 4294967295\n").unwrap();
        for pid in [96, 97, 98] {
            tree.ipc_lock(pid);
        }
        let own = tree.root.join("self");
        let _ = std::fs::remove_file(&own);
        std::fs::create_dir_all(own.join("ns")).unwrap();
        std::fs::copy(format!("{captures}/proc_userns_uid_map"), own.join("uid_map")).unwrap();
        std::os::unix::fs::symlink("user:[4026532177]", own.join("ns/user")).unwrap();
        std::fs::create_dir_all(tree.root.join("98/ns")).unwrap();
        std::os::unix::fs::symlink("user:[4026532177]", tree.root.join("98/ns/user")).unwrap();
        let mut errors = Vec::new();
        let stats = tree.collector(1 << 20, "", 10).full_scan(&mut errors).unwrap();
        assert!(errors.is_empty(), "{errors:?}");
        let exempt =
            |stats: &ProcessStats, pid: u32| stats.processes.iter().find(|p| p.pid == pid).unwrap().ipc_lock_exempt;
        assert_eq!(exempt(&stats, 96), Some(false), "a namespaced root: the kernel enforces its limit");
        assert_eq!(exempt(&stats, 97), Some(true), "the host's map, seen from here: taken at its word");
        assert_eq!(exempt(&stats, 98), Some(false), "the exporter's own namespace, by its link");
        let job = stats.cgroups.iter().find(|c| c.cgroup.path == "/job").unwrap();
        assert_eq!(job.usage_ratio_max, Some((Counter::Pinned, 0.5)), "counted against their limit");
        // The same tree read from the initial namespace: its middle column is then the host's.
        std::fs::copy(format!("{captures}/proc_self_uid_map"), own.join("uid_map")).unwrap();
        let stats = tree.collector(1 << 20, "", 10).full_scan(&mut errors).unwrap();
        assert_eq!(exempt(&stats, 96), Some(false));
        assert_eq!(exempt(&stats, 97), Some(false), "unmapped in the initial namespace: another namespace");
        assert_eq!(exempt(&stats, 98), Some(true), "no pid 1 link to tell it by: the identity map decides");
    }

    #[test]
    fn tracked_pass_rereads_only_tracked_status() {
        let tree = Tree::new("tracked");
        tree.process(20, "worker", 0, 1024, "8388608", "/job")
            .process(21, "idle", 0, 0, "8388608", "/job")
            .process(22, "python3", 0, 0, "8388608", "/job");
        let mut collector = tree.collector(0, "^python3$", 10);
        let mut errors = Vec::new();
        let stats = collector.full_scan(&mut errors).unwrap();
        assert_eq!(stats.tracked, 2, "the pinning worker and the comm match");
        // Everyone changes; only the tracked ones are re-read.
        tree.status(20, "worker", 0, 4096);
        tree.status(21, "idle", 2048, 0);
        tree.status(22, "python3", 1024, 0);
        let stats = collector.tracked_pass(&mut errors);
        assert!(!stats.full_scan);
        let by_pid = |pid| stats.processes.iter().find(|p| p.pid == pid).unwrap().clone();
        assert_eq!(by_pid(20).pinned_bytes, Some(4096 * 1024));
        assert_eq!(by_pid(21).locked_bytes, Some(0), "untracked: stale until the next full scan");
        assert_eq!(by_pid(22).locked_bytes, Some(1024 * 1024));
        // A tracked process that exits is dropped silently.
        tree.remove(20);
        let stats = collector.tracked_pass(&mut errors);
        assert_eq!(pids(&stats), vec![22, 21]);
        assert_eq!(stats.vanished_total, 1);
        assert_eq!(stats.full_scans_total, 1);
        // The next full scan sees the untracked change.
        let stats = collector.full_scan(&mut errors).unwrap();
        assert_eq!(stats.processes.iter().find(|p| p.pid == 21).unwrap().locked_bytes, Some(2048 * 1024));
        assert_eq!(stats.tracked, 2);
        assert!(errors.is_empty(), "{errors:?}");
    }

    /// Issue 23: `prlimit` on a running job showed up to one full scan (60 s) late. The limits
    /// of processes holding memory are re-read once they are LIMITS_REFRESH old; an idle
    /// process's wait for the full scan (the idle-cost target).
    #[test]
    fn limits_of_holders_are_reread_between_full_scans() {
        let tree = Tree::new("limits-refresh");
        tree.process(60, "worker", 0, 2048, "8388608", "/job").process(61, "python3", 0, 0, "8388608", "/job");
        let mut collector = tree.collector(0, "^python3$", 10);
        let mut errors = Vec::new();
        collector.full_scan(&mut errors).unwrap();
        tree.process(60, "worker", 0, 2048, "4194304", "/job").process(61, "python3", 0, 0, "4194304", "/job");
        let soft = |stats: &ProcessStats, pid: u32| {
            stats.processes.iter().find(|p| p.pid == pid).and_then(|p| p.limits).map(|l| l.soft)
        };
        let stats = collector.tracked_pass(&mut errors);
        assert_eq!(soft(&stats, 60), Some(Limit::Bytes(8 << 20)), "read just now: not yet");
        for record in &mut collector.table {
            record.limits_read_at = record.limits_read_at.map(|at| at - scan::LIMITS_REFRESH);
        }
        let stats = collector.tracked_pass(&mut errors);
        assert_eq!(soft(&stats, 60), Some(Limit::Bytes(4 << 20)), "the holder's new limit");
        assert_eq!(soft(&stats, 61), Some(Limit::Bytes(8 << 20)), "idle: at the next full scan");
        assert!(errors.is_empty(), "{errors:?}");
        // A holder gone between its status and its limits is dropped, not an error.
        std::fs::remove_file(tree.root.join("60/limits")).unwrap();
        for record in &mut collector.table {
            record.limits_read_at = record.limits_read_at.map(|at| at - scan::LIMITS_REFRESH);
        }
        let stats = collector.tracked_pass(&mut errors);
        assert_eq!(pids(&stats), vec![61]);
        assert!(errors.is_empty(), "{errors:?}");
    }

    /// Issue 14: a process that appears is sampled within one interval, not at the next full
    /// scan; it is re-read on every pass while on probation, and kernel threads are read once.
    #[test]
    fn new_processes_are_found_by_the_next_pass_and_watched_on_probation() {
        let tree = Tree::new("discover");
        tree.process(100, "sshd", 0, 0, "8388608", "/system");
        tree.kernel_thread(2);
        let mut collector = tree.collector(0, "", 10);
        let mut errors = Vec::new();
        let stats = collector.full_scan(&mut errors).unwrap();
        assert_eq!((stats.scanned, stats.tracked), (1, 0));
        assert_eq!(collector.others, vec![2], "the kernel thread is remembered");
        // A job's rank starts between full scans, holding nothing yet.
        tree.process(101, "worker", 0, 0, "8388608", "/job");
        let stats = collector.tracked_pass(&mut errors);
        assert_eq!(pids(&stats), vec![100, 101]);
        assert_eq!((stats.discovered_total, stats.tracked, stats.full_scans_total), (1, 1, 1));
        // On probation it is re-read: the registration it makes next is seen at once.
        tree.status(101, "worker", 0, 4096);
        tree.status(100, "sshd", 0, 4096);
        let stats = collector.tracked_pass(&mut errors);
        let pinned = |pid| stats.processes.iter().find(|p| p.pid == pid).unwrap().pinned_bytes;
        assert_eq!(pinned(101), Some(4 << 20));
        assert_eq!(pinned(100), Some(0), "not on probation, not tracked: stale until a full scan");
        assert_eq!(stats.discovered_total, 1, "found once");
        // An exited process leaves the table at the next listing, silently.
        tree.remove(101);
        let stats = collector.tracked_pass(&mut errors);
        assert_eq!(pids(&stats), vec![100]);
        assert!(errors.is_empty(), "{errors:?}");
        // Probation ends.
        tree.process(102, "worker", 0, 0, "8388608", "/job");
        collector.tracked_pass(&mut errors);
        for record in &mut collector.table {
            if let Some(until) = record.probation_until.as_mut() {
                *until = Instant::now();
            }
        }
        assert_eq!(collector.tracked_pass(&mut errors).tracked, 0);
    }

    /// The idle cost: listing procfs each second is most of it (2.3 ms for 2,000 processes).
    /// With the node's task counters unchanged nothing appeared or went, and the pass does not
    /// list; any change to either lists again. Counters are honoured only on a real procfs (a
    /// fixture tree's are not the kernel's): here the test stands in for that check.
    #[test]
    fn unchanged_task_counters_skip_the_listing_and_any_change_lists_again() {
        let tree = Tree::new("counters");
        let counters = |forks: u64, threads: u64| {
            std::fs::write(tree.root.join("stat"), format!("cpu  1 2 3 4\nprocesses {forks}\nprocs_running 1\n"))
                .unwrap();
            std::fs::write(tree.root.join("loadavg"), format!("0.00 0.01 0.05 1/{threads} 4242\n")).unwrap();
        };
        tree.process(100, "sshd", 0, 0, "8388608", "/system");
        counters(1000, 50);
        let mut collector = tree.collector(0, "", 10);
        assert!(!collector.counters_apply, "a directory standing in for procfs");
        collector.counters_apply = true;
        let mut errors = Vec::new();
        collector.full_scan(&mut errors).unwrap();
        // A process directory without the kernel's counters moving: cannot happen on procfs,
        // and shows that the pass did not list.
        tree.process(101, "worker", 0, 0, "8388608", "/job");
        let stats = collector.tracked_pass(&mut errors);
        assert_eq!((pids(&stats), stats.listings_skipped_total), (vec![100], 1));
        // A task created: listed, found.
        counters(1001, 51);
        let stats = collector.tracked_pass(&mut errors);
        assert_eq!((pids(&stats), stats.listings_skipped_total, stats.discovered_total), (vec![100, 101], 1, 1));
        let stats = collector.tracked_pass(&mut errors);
        assert_eq!(stats.listings_skipped_total, 2);
        // A task reaped, none created: listed, gone.
        tree.remove(101);
        counters(1001, 50);
        let stats = collector.tracked_pass(&mut errors);
        assert_eq!((pids(&stats), stats.listings_skipped_total), (vec![100], 2));
        // Unreadable counters: every pass lists.
        std::fs::remove_file(tree.root.join("loadavg")).unwrap();
        tree.process(102, "worker", 0, 0, "8388608", "/job");
        let stats = collector.tracked_pass(&mut errors);
        assert_eq!((pids(&stats), stats.listings_skipped_total), (vec![100, 102], 2));
        let stats = collector.tracked_pass(&mut errors);
        assert_eq!(stats.listings_skipped_total, 2);
        assert!(errors.is_empty(), "{errors:?}");
    }

    /// Issue 14: a process that was seen holding nothing and is not re-read (not tracked, off
    /// probation) starts pinning: the node's FOLL_PIN count grows beyond what the table shows,
    /// and a full scan comes early (once the last one is 5 s old) instead of after
    /// full_scan_interval.
    #[test]
    fn untracked_pinning_on_the_node_brings_the_full_scan_forward() {
        let tree = Tree::new("early");
        let page = procfs::page_size();
        let vmstat = |pinned_pages: u64, mlock_pages: u64| {
            let text = format!(
                "nr_mlock {mlock_pages}\nnr_foll_pin_acquired {}\nnr_foll_pin_released 1000\n",
                1000 + pinned_pages
            );
            std::fs::write(tree.root.join("vmstat"), text).unwrap();
        };
        vmstat(0, 0);
        tree.process(110, "loader", 0, 0, "8388608", "/job").process(111, "python3", 0, 1024, "8388608", "/job");
        let mut config_collector = tree.collector(1 << 20, "^python3$", 10);
        config_collector.scanner.config.full_scan_interval = Duration::from_secs(3600);
        let mut collector = config_collector;
        let mut errors = Vec::new();
        collector.full_scan(&mut errors).unwrap();
        let age = |c: &mut ProcessCollector, seconds| {
            c.last_full_scan = Instant::now().checked_sub(Duration::from_secs(seconds))
        };
        // The tracked python3 pins 4 MiB: the table explains the node's growth.
        tree.status(111, "python3", 0, 1024 + 4096);
        vmstat(4096 * 1024 / page, 0);
        age(&mut collector, 10);
        let stats = collector.sample(&mut errors).unwrap();
        assert!(!stats.full_scan, "explained growth");
        // The untracked loader pins 2 MiB: unexplained, but the last full scan is recent.
        tree.status(110, "loader", 0, 2048);
        vmstat((4096 + 2048) * 1024 / page, 0);
        age(&mut collector, 2);
        assert!(!collector.sample(&mut errors).unwrap().full_scan, "at most one early scan per 5 s");
        age(&mut collector, 6);
        let stats = collector.sample(&mut errors).unwrap();
        assert!(stats.full_scan && stats.early_full_scans_total == 1, "{stats:?}");
        assert_eq!(stats.processes.iter().find(|p| p.pid == 110).unwrap().pinned_bytes, Some(2 << 20));
        // mlock by an untracked process counts the same way (nr_mlock).
        tree.process(112, "helper", 0, 0, "8388608", "/job");
        collector.full_scan(&mut errors).unwrap();
        tree.status(112, "helper", 2048, 0);
        vmstat((4096 + 2048) * 1024 / page, 2048 * 1024 / page);
        age(&mut collector, 6);
        assert_eq!(collector.sample(&mut errors).unwrap().early_full_scans_total, 2);
        assert!(errors.is_empty(), "{errors:?}");
    }

    /// Issue 15: a comm with a newline or a backslash was escaped by the kernel in `status`, then
    /// again by the exposition. The sample holds the name itself.
    #[test]
    fn names_are_unescaped_once() {
        let tree = Tree::new("names");
        tree.process(120, "ev\\nil\\\\x", 0, 2048, "8388608", "/x");
        let stats = tree.collector(0, "^ev\nil", 10).full_scan(&mut Vec::new()).unwrap();
        assert_eq!(stats.processes[0].comm, "ev\nil\\x");
        assert_eq!(stats.tracked, 1, "comm_pattern sees the name itself");
    }

    #[test]
    fn pid_reuse_rereads_limits_and_cgroup() {
        let tree = Tree::new("reuse");
        tree.process(30, "first", 0, 2048, "8388608", "/old");
        let mut collector = tree.collector(0, "", 10);
        let mut errors = Vec::new();
        collector.full_scan(&mut errors).unwrap();
        tree.remove(30);
        tree.process(30, "second", 0, 2048, "unlimited", "/new");
        let stats = collector.tracked_pass(&mut errors);
        let p = &stats.processes[0];
        assert_eq!(p.comm, "second");
        assert_eq!(p.limits.unwrap().soft, Limit::Unlimited);
        assert_eq!(p.cgroup.as_ref().unwrap().path, "/new");
    }

    #[test]
    fn vanished_and_broken_processes() {
        let tree = Tree::new("broken");
        tree.process(40, "ok", 0, 2048, "8388608", "/x");
        // Listed, but its files are gone: exited mid-scan.
        std::fs::create_dir_all(tree.root.join("41")).unwrap();
        // A status field the parser refuses: an error of that field, the process still sampled
        // (issue 14: a malformed field costs only that field).
        tree.process(42, "bad", 0, 2048, "8388608", "/x");
        std::fs::write(tree.root.join("42/status"), "Name:\tbad\nVmLck:\t  many kB\nVmPin:\t    2048 kB\n").unwrap();
        // A status without its Name is no process at all: an error, skipped.
        tree.process(46, "noname", 0, 2048, "8388608", "/x");
        std::fs::write(tree.root.join("46/status"), "Umask:\t0022\nVmLck:\t  0 kB\n").unwrap();
        // Reaped between open and read: the kernel returns empty files. Gone, not broken.
        tree.process(44, "reaped", 0, 2048, "8388608", "/x");
        std::fs::write(tree.root.join("44/limits"), "").unwrap();
        tree.process(45, "reaped_early", 0, 2048, "8388608", "/x");
        std::fs::write(tree.root.join("45/status"), "").unwrap();
        // Broken limits: kept, limits unknown.
        tree.process(43, "nolimits", 0, 2048, "8388608", "/x");
        std::fs::write(tree.root.join("43/limits"), "Limit\n").unwrap();
        let mut collector = tree.collector(0, "", 10);
        let mut errors = Vec::new();
        let stats = collector.full_scan(&mut errors).unwrap();
        assert_eq!(pids(&stats), vec![40, 42, 43]);
        let bad = &stats.processes[1];
        assert_eq!((bad.locked_bytes, bad.pinned_bytes), (None, Some(2048 * 1024)), "the good field is kept");
        assert_eq!(stats.processes[2].limits, None);
        assert_eq!(stats.processes[2].worst_ratio(), None);
        assert_eq!(stats.vanished_total, 3);
        assert_eq!(stats.read_errors_total, ReadErrors { parse: 3, ..ReadErrors::default() });
        assert_eq!(errors.len(), 3);
        for file in ["42/status", "46/status", "43/limits"] {
            assert!(errors.iter().any(|e| e.path().ends_with(file)), "{file}: {errors:?}");
        }
    }

    /// Found by the fault tests (tests/integration/faults.rs): a process whose files failed
    /// made only the full scan fail; the tracked passes in between succeeded, so the collector
    /// alternated between 0 and 1 and `MemlockCollectorFailing` (`for: 10m`) could never fire.
    /// Broken files are now read again on every pass, until they can be read or the process
    /// is gone.
    #[test]
    fn broken_files_fail_every_pass_until_fixed_or_gone() {
        let tree = Tree::new("sticky");
        tree.process(80, "ok", 0, 2048, "8388608", "/x").process(81, "badstatus", 0, 2048, "8388608", "/x").process(
            82,
            "badlimits",
            0,
            0,
            "8388608",
            "/x",
        );
        std::fs::write(tree.root.join("81/status"), "Name:\tbadstatus\nVmLck:\t  many kB\n").unwrap();
        std::fs::write(tree.root.join("82/limits"), "Limit\n").unwrap();
        let mut collector = tree.collector(0, "", 10);
        let mut errors = Vec::new();
        let stats = collector.full_scan(&mut errors).unwrap();
        assert_eq!(errors.len(), 2, "{errors:?}");
        // 81 is kept without its VmLck (a malformed field costs only that field).
        assert_eq!(pids(&stats), vec![80, 81, 82]);
        for pass in 0..3 {
            errors.clear();
            let stats = collector.tracked_pass(&mut errors);
            assert_eq!(errors.len(), 2, "pass {pass}: {errors:?}");
            assert_eq!(pids(&stats), vec![80, 81, 82]);
            assert_eq!(stats.processes[1].locked_bytes, None);
            assert_eq!(stats.processes[2].limits, None);
        }
        assert_eq!(collector.scanner.tally.errors.parse, 8, "counted on every pass");
        // Fixed: the next pass reads them and succeeds.
        tree.status(81, "badstatus", 0, 4096);
        tree.process(82, "badlimits", 0, 0, "8388608", "/x");
        errors.clear();
        let stats = collector.tracked_pass(&mut errors);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(pids(&stats), vec![81, 80, 82], "by usage ratio");
        assert_eq!(stats.processes.iter().find(|p| p.pid == 81).unwrap().pinned_bytes, Some(4096 * 1024));
        assert!(stats.processes.iter().find(|p| p.pid == 82).unwrap().limits.is_some());
        // Broken again, then gone: a vanished process is not an error.
        std::fs::write(tree.root.join("81/status"), "Name:\tbadstatus\nVmPin:\t  many kB\n").unwrap();
        errors.clear();
        collector.tracked_pass(&mut errors);
        assert_eq!(errors.len(), 1, "{errors:?}");
        tree.remove(81);
        errors.clear();
        let stats = collector.tracked_pass(&mut errors);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(pids(&stats), vec![80, 82]);
        errors.clear();
        assert!(collector.tracked_pass(&mut errors).processes.len() == 2 && errors.is_empty());
    }

    /// Issue 25: what reading a pid gave is the scanner's answer, not a flag cleared beforehand
    /// and the error list's length compared afterwards.
    #[test]
    fn each_read_says_what_it_found() {
        let tree = Tree::new("outcomes");
        tree.process(40, "w", 0, 2048, "8388608", "/x").process(41, "bad", 0, 0, "8388608", "/x");
        tree.kernel_thread(2);
        std::fs::write(tree.root.join("41/status"), "Name:\tbad\nVmLck:\tmany kB\n").unwrap();
        let mut collector = tree.collector(0, "", 10);
        let mut errors = Vec::new();
        let scanner = &mut collector.scanner;
        assert!(matches!(scanner.read_process(40, None, &mut errors), Outcome::Read(r) if !r.incomplete));
        assert_eq!(scanner.read_process(2, None, &mut errors).and_then(|_| Outcome::Read(())), Outcome::KernelThread);
        assert_eq!(scanner.read_process(39, None, &mut errors).and_then(|_| Outcome::Read(())), Outcome::Gone);
        assert!(errors.is_empty(), "{errors:?}");
        // A malformed field costs that field: read, incomplete, reported.
        assert!(matches!(scanner.read_process(41, None, &mut errors), Outcome::Read(r) if r.incomplete));
        assert_eq!(errors.len(), 1, "{errors:?}");
        std::fs::write(tree.root.join("41/status"), "no colon here\n").unwrap();
        assert_eq!(scanner.read_process(41, None, &mut errors).and_then(|_| Outcome::Read(())), Outcome::Failed);
        let stats = collector.full_scan(&mut errors).unwrap();
        assert_eq!(pids(&stats), vec![40]);
        assert_eq!((collector.retry.clone(), collector.others.clone()), (vec![41], vec![2]));
    }

    #[test]
    fn permission_errors_are_counted_not_failures() {
        let tree = Tree::new("perm");
        tree.process(1, "init", 0, 0, "8388608", "/");
        let mut collector = tree.collector(0, "", 10);
        let mut errors = Vec::new();
        let denied =
            SourceError::Io { path: "/proc/1/status".into(), source: std::io::Error::from_raw_os_error(libc::EACCES) };
        assert_eq!(collector.scanner.tally.note::<()>(denied, &mut errors), Outcome::Refused);
        assert!(errors.is_empty());
        assert_eq!(collector.scanner.tally.errors.permission, 1);
        let gone =
            SourceError::Io { path: "/proc/1/status".into(), source: std::io::Error::from_raw_os_error(libc::ESRCH) };
        assert_eq!(collector.scanner.tally.note::<()>(gone, &mut errors), Outcome::Gone);
        assert!(errors.is_empty());
        let stats = collector.full_scan(&mut errors).unwrap();
        assert_eq!(stats.read_errors_total.permission, 1);
        assert_eq!(stats.vanished_total, 1);
    }

    #[test]
    fn unlistable_procfs_is_an_error_not_a_panic() {
        let roots = Roots { procfs: PathBuf::from("/nonexistent/proc"), sysfs: PathBuf::from("/nonexistent") };
        let config = ProcessConfig {
            full_scan_interval: Duration::from_secs(5),
            min_bytes: 0,
            comm_pattern: None,
            top_n: 1,
            nccl_version: true,
        };
        let mut collector = ProcessCollector::new(&roots, config, Duration::from_secs(1));
        let mut errors = Vec::new();
        assert!(collector.collect(&mut errors).is_none());
        assert_eq!(errors.len(), 1);
        // Found by the fault tests (tests/integration/faults.rs): the ticks after a failed full
        // scan were tracked passes of an empty table, which succeeded, so the collector
        // reported success 4 times out of 5. Every tick retries the listing and fails.
        for _ in 0..3 {
            errors.clear();
            assert!(collector.collect(&mut errors).is_none());
            assert_eq!(errors.len(), 1, "{errors:?}");
        }
    }

    /// Found by the fault tests: a directory that is not procfs (`--path.procfs=/etc`) gave
    /// zero processes and success.
    #[test]
    fn a_procfs_root_without_processes_is_not_procfs() {
        let tree = Tree::new("notprocfs");
        let mut collector = tree.collector(0, "", 10);
        let mut errors = Vec::new();
        assert!(collector.collect(&mut errors).is_none());
        assert_eq!(errors.len(), 1);
        assert!(errors[0].to_string().contains("not a procfs"), "{}", errors[0]);
        assert_eq!(errors[0].path(), tree.root.as_path());
        // The first process appears: the next tick scans and succeeds.
        tree.process(70, "w", 0, 2048, "8388608", "/x");
        errors.clear();
        let stats = collector.sample(&mut errors).unwrap();
        assert!(stats.full_scan && errors.is_empty(), "{errors:?}");
        assert_eq!(pids(&stats), vec![70]);
    }

    #[test]
    fn full_scans_follow_their_interval() {
        let tree = Tree::new("cadence");
        tree.process(50, "w", 0, 2048, "8388608", "/x");
        let mut collector = tree.collector(0, "", 10);
        let mut errors = Vec::new();
        assert!(collector.sample(&mut errors).unwrap().full_scan, "the first run is a full scan");
        assert!(!collector.sample(&mut errors).unwrap().full_scan);
        // Less than half an interval short of due counts as due (timer jitter).
        collector.last_full_scan = Instant::now().checked_sub(Duration::from_millis(4600));
        assert!(collector.sample(&mut errors).unwrap().full_scan);
        collector.last_full_scan = Instant::now().checked_sub(Duration::from_millis(4000));
        assert!(!collector.sample(&mut errors).unwrap().full_scan);
    }

    #[test]
    fn renders_labels_limits_and_aggregates() {
        let tree = Tree::new("render");
        tree.process(60, "pt_main_thread", 0, 9437184, "10737418240", "/kubepods/pod1").process(
            61,
            "opensm",
            65536,
            0,
            "unlimited",
            "/infra/opensm",
        );
        let mut collector = tree.collector(1 << 20, "", 10);
        let stats = collector.full_scan(&mut Vec::new()).unwrap();
        let mut out = Exposition::new();
        stats.render(&mut out);
        let text = out.finish();
        let line = |series: &str| {
            text.lines()
                .find(|l| l.rsplit_once(' ').map(|(k, _)| k) == Some(series))
                .map(|l| l.rsplit_once(' ').unwrap().1.to_owned())
        };
        let worker = r#"pid="60",comm="pt_main_thread",cgroup="/kubepods/pod1""#;
        assert_eq!(line(&format!("memlock_process_pinned_bytes{{{worker}}}")), Some("9663676416".into()));
        assert_eq!(line(&format!("memlock_process_locked_bytes{{{worker}}}")), Some("0".into()));
        assert_eq!(line(&format!("memlock_process_limit_bytes{{{worker},kind=\"soft\"}}")), Some("10737418240".into()));
        assert_eq!(line(&format!("memlock_process_limit_bytes{{{worker},kind=\"hard\"}}")), None, "unlimited hard");
        assert_eq!(line(&format!("memlock_process_limit_unlimited{{{worker},kind=\"hard\"}}")), Some("1".into()));
        assert_eq!(line(&format!("memlock_process_limit_unlimited{{{worker},kind=\"soft\"}}")), Some("0".into()));
        let ratio = |labels: &str, counter: &str| {
            line(&format!("memlock_process_limit_usage_ratio{{{labels},counter=\"{counter}\"}}"))
        };
        assert_eq!(ratio(worker, "pinned"), Some("0.9".into()));
        assert_eq!(ratio(worker, "locked"), Some("0".into()), "each counter against the limit");
        assert_eq!(line(&format!("memlock_process_ipc_lock{{{worker}}}")), Some("0".into()));
        let opensm = r#"pid="61",comm="opensm",cgroup="/infra/opensm""#;
        assert_eq!((ratio(opensm, "pinned"), ratio(opensm, "locked")), (None, None), "unlimited: no ratio");
        assert_eq!(
            line(r#"memlock_cgroup_limit_usage_ratio_max{cgroup="/kubepods/pod1",counter="pinned"}"#),
            Some("0.9".into()),
            "the worst counter, named"
        );
        assert_eq!(line(r#"memlock_cgroup_pinned_bytes{cgroup="/kubepods/pod1"}"#), Some("9663676416".into()));
        assert_eq!(line(r#"memlock_cgroup_processes{cgroup="/infra/opensm"}"#), Some("1".into()));
        assert_eq!(line(r#"memlock_cgroup_limit_usage_ratio_max{cgroup="/infra/opensm"}"#), None);
        assert_eq!(line("memlock_process_exported_processes"), Some("2".into()));
        assert_eq!(line(r#"memlock_process_read_errors_total{kind="permission"}"#), Some("0".into()));
        // Families are contiguous: each HELP appears once.
        let helps: Vec<&str> = text.lines().filter(|l| l.starts_with("# HELP")).collect();
        let mut unique = helps.clone();
        unique.dedup();
        assert_eq!(helps.len(), unique.len());
    }

    /// The NCCL a process maps, from `/proc/PID/maps`: read once, when the process first holds
    /// pinned memory; read again only after an exec or pid reuse (a new comm).
    #[test]
    fn nccl_is_read_from_maps_once_per_process() {
        let tree = Tree::new("nccl");
        tree.process(70, "pt_main_thread", 0, 4096, "8388608", "/job").process(71, "python3", 0, 0, "8388608", "/job");
        let maps = |pid: u32, library: &str| {
            let text = format!(
                "55a0c0000000-55a0c0021000 r--p 00000000 fd:01 1234                       /usr/bin/python3.11\n\
                 7f3a1c000000-7f3a1e4f1000 r-xp 00006000 fd:01 5377114                    {library}\n\
                 7ffd4e1a0000-7ffd4e1c1000 rw-p 00000000 00:00 0                          [stack]\n"
            );
            std::fs::write(tree.root.join(pid.to_string()).join("maps"), text).unwrap();
        };
        maps(70, "/opt/venv/lib/nccl/libnccl.so.2.21.5");
        maps(71, "/opt/venv/lib/nccl/libnccl.so.2.21.5");
        let mut collector = tree.collector(0, "^python3$", 10);
        let mut errors = Vec::new();
        let stats = collector.full_scan(&mut errors).unwrap();
        assert!(errors.is_empty(), "{errors:?}");
        let nccl = |stats: &ProcessStats, pid: u32| {
            stats.processes.iter().find(|p| p.pid == pid).unwrap().nccl.as_deref().cloned()
        };
        let found = nccl(&stats, 70).expect("mapped by the pinning process");
        assert_eq!((found.version.as_deref(), found.library.as_str()), (Some("2.21.5"), "libnccl.so.2.21.5"));
        assert_eq!(nccl(&stats, 71), None, "holds no pinned memory: maps not read");
        let mut out = Exposition::new();
        stats.render(&mut out);
        let text = out.finish();
        assert!(
            text.contains(
                "memlock_process_nccl_info{pid=\"70\",comm=\"pt_main_thread\",cgroup=\"/job\",version=\"2.21.5\",\
                    library=\"libnccl.so.2.21.5\"} 1"
            ),
            "{text}"
        );
        // Not read again: a changed file is not seen by later passes...
        maps(70, "/opt/venv/lib/nccl/libnccl.so.2.23.4");
        assert_eq!(nccl(&collector.tracked_pass(&mut errors), 70).and_then(|n| n.version), Some("2.21.5".into()));
        assert_eq!(nccl(&collector.full_scan(&mut errors).unwrap(), 70).and_then(|n| n.version), Some("2.21.5".into()));
        // ...until the pid runs another program; and once 71 pins, its maps are read.
        tree.status(70, "torchrun", 0, 4096);
        tree.status(71, "python3", 0, 2048);
        let stats = collector.tracked_pass(&mut errors);
        assert_eq!(nccl(&stats, 70).and_then(|n| n.version), Some("2.23.4".into()));
        assert_eq!(nccl(&stats, 71).map(|n| n.library), Some("libnccl.so.2.21.5".into()));
        // A wheel's libnccl.so.2 names no full version; no NCCL mapped, or the lookup off: no series.
        tree.process(72, "w", 0, 4096, "8388608", "/job").process(73, "x", 0, 4096, "8388608", "/job");
        maps(72, "/venv/site-packages/nvidia/nccl/lib/libnccl.so.2");
        maps(73, "/usr/lib/x86_64-linux-gnu/libc.so.6");
        let stats = collector.full_scan(&mut errors).unwrap();
        assert_eq!(nccl(&stats, 72).map(|n| (n.version, n.library)), Some((None, "libnccl.so.2".into())));
        assert_eq!(nccl(&stats, 73), None);
        // Two maps per pass at most: a third new pinning process waits for the next pass.
        for pid in [74, 75, 76] {
            tree.process(pid, "rank", 0, 4096, "8388608", "/job");
            maps(pid, "/usr/lib/libnccl.so.2.21.5");
        }
        let stats = collector.full_scan(&mut errors).unwrap();
        assert_eq!([74, 75, 76].map(|pid| nccl(&stats, pid).is_some()), [true, true, false]);
        assert!(nccl(&collector.tracked_pass(&mut errors), 76).is_some());
        assert!(errors.is_empty(), "{errors:?}");
        let config = ProcessConfig { nccl_version: false, ..collector.scanner.config.clone() };
        let roots = Roots { procfs: tree.root.clone(), sysfs: PathBuf::from("/nonexistent") };
        let stats = ProcessCollector::new(&roots, config, Duration::from_secs(1)).full_scan(&mut errors).unwrap();
        assert!(stats.processes.iter().all(|p| p.nccl.is_none()));
    }

    /// Under a series budget the processes nearest an enforced limit are exported (an exempt one
    /// far over its limit is not urgent), with their trend ids; the aggregates by worst ratio.
    #[test]
    fn the_budget_keeps_the_processes_nearest_their_limits() {
        let tree = Tree::new("budget");
        tree.process(80, "opensm", 65536, 0, "8388608", "/infra") // ratio 8, exempt
            .process(81, "low", 0, 2048, "8388608", "/a") // 0.25
            .process(82, "near", 0, 7680, "8388608", "/b") // 0.94
            .process(83, "half", 0, 4096, "8388608", "/c"); // 0.5
        tree.ipc_lock(80);
        let stats = tree.collector(1 << 20, "", 10).full_scan(&mut Vec::new()).unwrap();
        assert_eq!(pids(&stats), vec![80, 82, 83, 81], "top_n ranks by ratio, exempt or not");
        let claims = stats.claims();
        let process = &claims[0];
        assert_eq!((process.class, process.tier, process.floor), ("process", crate::budget::Tier::Page, 8));
        let scores: Vec<f64> = process.entities.iter().map(|(_, s)| *s).collect();
        assert_eq!(scores, vec![0.9375, 0.5, 0.25, -1.0], "by enforced ratio: the exempt one last");
        // Each costs its 8 series (no NCCL here: locked, pinned, ipc_lock, the soft limit, two
        // unlimited flags, two ratios) and 4 trend series.
        assert!(process.entities.iter().all(|(cost, _)| *cost == 12), "{:?}", process.entities);
        let claims = [
            crate::budget::Claim { floor: 0, ..process.clone() },
            crate::budget::Claim { floor: 0, ..claims[1].clone() },
        ];
        let allocation = crate::budget::allocate(&claims, 2 * 12 + 4);
        let grants = &allocation.grants;
        let shown: Vec<u32> = stats.granted_processes(grants).iter().map(|p| p.pid).collect();
        assert_eq!(shown, vec![82, 83]);
        let mut ids: Vec<String> = stats.exported_trend_ids(grants).into_iter().collect();
        ids.sort();
        assert_eq!(ids, vec!["82/near/locked", "82/near/pinned", "83/half/locked", "83/half/pinned"]);
        let mut out = Exposition::new();
        stats.render_granted(&mut out, grants);
        let text = out.finish();
        assert!(text.contains("memlock_process_exported_processes 2\n"), "{text}");
        assert!(text.contains("memlock_process_dropped_processes 2\n"), "{text}");
        assert!(!text.contains("pid=\"80\"") && !text.contains("pid=\"81\""), "{text}");
        // And the aggregate of /b (4 series), as urgent as its process.
        assert!(
            text.contains("memlock_cgroup_limit_usage_ratio_max{cgroup=\"/b\",counter=\"pinned\"} 0.9375"),
            "{text}"
        );
        assert_eq!(text.matches("memlock_cgroup_processes{").count(), 1, "{text}");
    }

    /// Issue 24 item 1: processes that lowered their own soft limit under the 64 KiB they hold
    /// (ratio 16) do not outrank a job growing toward a real limit, for top_n, the budget or the
    /// cgroup aggregates; and the fast path watches every process, beyond top_n.
    #[test]
    fn a_crowd_over_limits_it_lowered_does_not_outrank_the_job() {
        let tree = Tree::new("crowd");
        for pid in 100..130 {
            tree.process(pid, "python3", 64, 0, "4096", &format!("/crowd/{pid}"));
        }
        tree.process(200, "python3", 0, 6144, "8388608", "/slurm/uid_1000/job_9"); // 0.75, growing
        tree.process(201, "python3", 2048, 0, "1048576", "/slurm/uid_1000/job_9"); // 2.0 and 2 MiB: not small
        let mut collector = tree.collector(1 << 20, "^python3$", 4);
        let stats = collector.full_scan(&mut Vec::new()).unwrap();
        assert_eq!(pids(&stats)[..2], [201, 200], "the crowd comes after both");
        assert_eq!(stats.dropped_by_top_n, 28);
        assert_eq!(stats.watched.len(), 32, "the fast path watches every process");
        assert_eq!(stats.watched[1].pid, 200);
        let observed: std::collections::HashSet<String> = stats.observations(0.0).into_iter().map(|o| o.id).collect();
        assert!(observed.contains("200/python3/pinned") && observed.contains("129/python3/locked"));
        let scores: Vec<f64> = stats.claims()[0].entities.iter().map(|(_, s)| *s).collect();
        assert_eq!(scores, vec![1.0, 0.75, 0.0, 0.0]);
        let cgroups = stats.claims()[1].entities.iter().map(|(_, s)| *s).collect::<Vec<f64>>();
        assert_eq!(cgroups[0], 2.0_f64.min(1.0), "the job's cgroup first: {cgroups:?}");
        assert!(cgroups[1..].iter().all(|&s| s < 0.5), "{cgroups:?}");
        // Per counter: 0.75 pinned beside 2.0 locked, both exported (issue 23 item 2).
        let job = stats.cgroups.iter().find(|c| c.cgroup.path == "/slurm/uid_1000/job_9").unwrap();
        assert_eq!(job.counter_ratio_max, [Some(0.75), Some(2.0)]);
        let mut out = Exposition::new();
        stats.render_granted(&mut out, &crate::budget::Grants::all());
        let text = out.finish();
        for counter in ["pinned\"} 0.75", "locked\"} 2"] {
            let labels = "cgroup=\"/slurm/uid_1000/job_9\",slurm_job=\"9\"";
            let line = format!("memlock_cgroup_limit_usage_ratio_max{{{labels},counter=\"{counter}\n");
            assert!(text.contains(&line), "{line} in {text}");
        }
    }

    #[test]
    fn pid_names_and_digits() {
        assert_eq!(parse_pid_bytes(b"1"), Some(1));
        assert_eq!(parse_pid_bytes(b"4194304"), Some(4194304));
        assert_eq!(parse_pid_bytes(b"4294967295"), Some(u32::MAX));
        assert_eq!(parse_pid_bytes(b"4294967296"), None);
        for bad in ["", "0", "01", "007", "self", "+1", "-1", "1a", "99999999999"] {
            assert_eq!(parse_pid_bytes(bad.as_bytes()), None, "{bad}");
        }
        let mut digits = [0u8; 10];
        assert_eq!(format_pid(0, &mut digits), "0");
        assert_eq!(format_pid(u32::MAX, &mut digits), "4294967295");
        assert_eq!(format_pid(4101, &mut digits), "4101");
    }
}
