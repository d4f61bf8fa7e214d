//! Full scans, tracked passes, discovery and read failures.

use super::*;

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

/// `prlimit` on a running job must show before the next full scan. The limits of processes
/// holding memory are re-read once they are LIMITS_REFRESH old; an idle process's wait for
/// the full scan (the idle-cost target).
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

/// A process that appears is sampled within one interval, not at the next full
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
        std::fs::write(tree.root.join("stat"), format!("cpu  1 2 3 4\nprocesses {forks}\nprocs_running 1\n")).unwrap();
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

/// A process that was seen holding nothing and is not re-read (not tracked, off
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
    let age =
        |c: &mut ProcessCollector, seconds| c.last_full_scan = Instant::now().checked_sub(Duration::from_secs(seconds));
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

/// A comm with a newline or a backslash is escaped by the kernel in `status`, and escaped
/// again by the exposition: the sample holds the name itself.
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
    // (a malformed field costs only that field).
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

/// What reading a pid gave is the scanner's answer, not a flag cleared beforehand
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

/// A process without an address space and without a live thread is a zombie, not
/// retried, unless reading its threads failed: then it is reported and retried, as the
/// scanner's answer says (not the failure counter compared before and after).
#[test]
fn a_leader_without_a_live_thread_is_a_zombie_unless_a_read_failed() {
    let tree = Tree::new("no-live-thread");
    tree.exited_leader(50, 51, "zombie", 0, false);
    std::fs::remove_dir_all(tree.root.join(tid_dir(50, 51))).unwrap();
    let mut collector = tree.collector(0, "", 10);
    let mut errors = Vec::new();
    let read = |scanner: &mut Scanner, errors: &mut Vec<SourceError>| {
        scanner.read_process(50, None, errors).and_then(|_| Outcome::Read(()))
    };
    assert_eq!(read(&mut collector.scanner, &mut errors), Outcome::KernelThread);
    assert!(errors.is_empty(), "{errors:?}");
    // Its `stat` unreadable: the search for a live thread goes on, finds none, and fails.
    let stat = std::fs::read(tree.root.join("50/stat")).unwrap();
    std::fs::write(tree.root.join("50/stat"), "50 (zombie\n").unwrap();
    assert_eq!(read(&mut collector.scanner, &mut errors), Outcome::Failed);
    assert_eq!(errors.len(), 1, "{errors:?}");
    // A thread whose status cannot be read: reported, and no zombie either.
    std::fs::write(tree.root.join("50/stat"), stat).unwrap();
    std::fs::create_dir_all(tree.root.join(tid_dir(50, 52)).join("status")).unwrap();
    errors.clear();
    assert_eq!(read(&mut collector.scanner, &mut errors), Outcome::Failed);
    assert_eq!(errors.len(), 1, "{errors:?}");
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

/// New pids are read after the listing is walked, so the kernel threads found among them are
/// put back in pid order: the next listing is merged with that list, and a known kernel thread
/// out of order would be read again as new on every pass.
#[test]
fn a_new_kernel_thread_keeps_the_known_ones_in_pid_order() {
    let tree = Tree::new("kthreads-order");
    tree.process(100, "sshd", 0, 0, "8388608", "/system");
    tree.kernel_thread(2);
    tree.kernel_thread(50);
    let mut collector = tree.collector(1 << 20, "", 10);
    let mut errors = Vec::new();
    collector.full_scan(&mut errors).unwrap();
    assert_eq!(collector.others, [2, 50]);
    tree.kernel_thread(10);
    collector.tracked_pass(&mut errors);
    assert_eq!(collector.others, [2, 10, 50]);
    assert!(errors.is_empty(), "{errors:?}");
}
