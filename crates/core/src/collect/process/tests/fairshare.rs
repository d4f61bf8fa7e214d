//! A neighbour can only blind itself. The places of top_n, the watched set and the
//! series budget are shared by owner (uid, then cgroup), and shared locked pages count once
//! for ranking and for the cgroup sums.

use super::*;

impl Tree {
    /// Makes `pid` owned by `uid` (real, effective, saved and filesystem).
    fn owner(&self, pid: u32, uid: u32) -> &Self {
        let path = self.root.join(pid.to_string()).join("status");
        let status = std::fs::read_to_string(&path)
            .unwrap()
            .replace("Uid:\t0\t0\t0\t0", &format!("Uid:\t{uid}\t{uid}\t{uid}\t{uid}"));
        std::fs::write(path, status).unwrap();
        self
    }

    /// Writes `smaps_rollup` with the locked pages' share (`Locked:`), in the kernel's format.
    fn locked_share(&self, pid: u32, kib: u64) -> &Self {
        let text = format!(
            "00400000-7ffc5a2e7000 ---p 00000000 00:00 0                              [rollup]\n\
             Rss:               15068 kB\nPss:                3551 kB\nSwapPss:               0 kB\n\
             Locked:         {kib:>8} kB\n"
        );
        std::fs::write(self.root.join(pid.to_string()).join("smaps_rollup"), text).unwrap();
        self
    }
}

/// One user's 12 processes at their (lowered) limits, each really holding 2 MiB, rank above
/// another user's job at 93 %: the job keeps a place in top_n, the watched set and the budget.
#[test]
fn one_users_crowd_displaces_only_that_users_processes() {
    let tree = Tree::new("fair-crowd");
    for pid in 300..312 {
        tree.process(pid, "crowd", 2048, 0, "2097152", "/user.slice/user-1000.slice").owner(pid, 1000);
    }
    tree.process(400, "python3", 0, 7620, "8388608", "/slurm/uid_2000/job_7").owner(400, 2000);
    let stats = tree.collector(1 << 20, "", 4).full_scan(&mut Vec::new()).unwrap();
    let pids = pids(&stats);
    assert_eq!(pids[..2], [300, 400], "the crowd's first, then the job: {pids:?}");
    assert_eq!(stats.watched[1].pid, 400);
    // A budget of two processes: one place for each user.
    let claims = stats.claims();
    let claim = crate::budget::Claim { floor: 0, cap: 2, ..claims[0].clone() };
    let allocation = crate::budget::allocate(&[claim], 2 * claims[0].entities[0].0);
    let shown: Vec<u32> = stats.granted_processes(&allocation.grants).iter().map(|p| p.pid).collect();
    assert_eq!(shown, vec![300, 400]);
}

/// 40 processes that mlock one 8 MiB memfd under soft limits lowered to 8 MiB: VmLck 8 MiB and
/// ratio 1 each, a share of 205 KiB. They rank after a job at 75 % whoever owns them, and
/// their cgroup sums 8 MiB, not 320 MiB; the per-process VmLck and ratio stay the kernel's.
#[test]
fn shared_locked_pages_count_once_for_ranking_and_cgroup_sums() {
    let tree = Tree::new("fair-memfd");
    for pid in 500..540 {
        tree.process(pid, "crowd", 8192, 0, "8388608", "/crowd").locked_share(pid, 8192 / 40);
    }
    tree.process(600, "python3", 6144, 0, "8388608", "/slurm/uid_0/job_8").locked_share(600, 6144);
    let mut collector = tree.collector(1 << 20, "", 4);
    let first = collector.full_scan(&mut Vec::new()).unwrap();
    let read = first.watched.iter().filter(|p| p.locked_share_bytes.is_some()).count();
    assert_eq!(read, super::scan::SHARE_READS_PER_PASS, "a bounded number of walks per pass");
    // The next pass reads the others.
    let stats = collector.tracked_pass(&mut Vec::new());
    assert!(stats.watched.iter().all(|p| p.locked_share_bytes.is_some()));
    assert_eq!(pids(&stats)[0], 600, "{:?}", pids(&stats));
    let crowd = stats.cgroups.iter().find(|c| c.cgroup.path == "/crowd").unwrap();
    assert_eq!(crowd.locked_bytes, 40 * ((8192 / 40) << 10), "the 8 MiB once (in whole kB shares)");
    assert_eq!(crowd.processes, 40);
    let job = stats.cgroups.iter().find(|c| c.cgroup.path == "/slurm/uid_0/job_8").unwrap();
    assert_eq!(job.locked_bytes, 6144 << 10);
    let member = stats.watched.iter().find(|p| p.pid == 500).unwrap();
    assert_eq!(member.locked_bytes, Some(8 << 20));
    assert_eq!(member.worst_ratio(), Some((Counter::Locked, 1.0)), "the limit check is VmLck's");
    assert_eq!(member.urgency(), Some(0.0));
    // Without the file (a kernel before 4.14, a refusal) VmLck ranks, as before.
    std::fs::remove_file(tree.root.join("500/smaps_rollup")).unwrap();
    let stats = tree.collector(1 << 20, "", 4).full_scan(&mut Vec::new()).unwrap();
    assert_eq!(stats.watched.iter().find(|p| p.pid == 500).unwrap().locked_share_bytes, None);
    assert_eq!(pids(&stats)[0], 500);
}

/// The leader exited: `/proc/PID/cgroup` of a PF_EXITING task reads `/` on cgroup v1, so the
/// cgroup comes from the live thread's `task/TID/cgroup`.
#[test]
fn a_process_whose_leader_exited_keeps_its_cgroup() {
    let tree = Tree::new("fair-leader");
    tree.exited_leader(700, 701, "rank", 4096, true);
    let dir = tree.root.join("700");
    std::fs::write(dir.join("cgroup"), "9:name=systemd:/\n4:memory:/\n0::/\n").unwrap();
    std::fs::write(dir.join("task/701/cgroup"), "9:name=systemd:/\n4:memory:/slurm/uid_0/job_9/step_0\n0::/\n")
        .unwrap();
    let stats = tree.collector(1 << 20, "", 4).full_scan(&mut Vec::new()).unwrap();
    let p = stats.processes.iter().find(|p| p.pid == 700).unwrap();
    assert_eq!(p.cgroup.as_ref().map(|c| c.path.as_str()), Some("/slurm/uid_0/job_9/step_0"));
    assert_eq!(p.locked_bytes, Some(4 << 20));
}

/// A crowd of one user's holders larger than a pass can re-read: the other user's job, at the
/// front of the fair order, is re-read on every pass; the crowd in turns, a bounded number per
/// pass (a pass with no time to spare reads the minimum); a due full scan is spread over passes
/// as a sweep, and its end counts as the full scan.
#[test]
fn a_crowd_beyond_the_pass_is_read_in_turns_and_the_job_every_pass() {
    let tree = Tree::new("fair-turns");
    let crowd = FRONT + 2 * MIN_ROTATION;
    for pid in 1000..1000 + crowd as u32 {
        tree.process(pid, "crowd", 8192, 0, "8388608", "/crowd").owner(pid, 1000);
    }
    tree.process(5000, "python3", 1024, 0, "8388608", "/slurm/uid_2000/job_9").owner(5000, 2000);
    let mut collector = tree.collector(1 << 20, "", 10);
    // No time to spare in a pass: only what it must, and the minimum of each turn.
    collector.interval = Duration::ZERO;
    let mut errors = Vec::new();
    collector.full_scan(&mut errors).unwrap();
    assert!(collector.front.binary_search(&5000).is_ok(), "the job is at the front");
    let locked = |c: &ProcessCollector, pid: u32| {
        c.table.iter().find(|r| r.sample.pid == pid).and_then(|r| r.sample.locked_bytes).unwrap_or(0) >> 10
    };
    for step in 1..=3u64 {
        tree.status(5000, "python3", 1024 * (step + 1), 0);
        tree.owner(5000, 2000);
        for pid in 1000..1000 + crowd as u32 {
            tree.status(pid, "crowd", 8192 - step, 0);
            tree.owner(pid, 1000);
        }
        let stats = collector.tracked_pass(&mut errors);
        assert_eq!(locked(&collector, 5000), 1024 * (step + 1), "the job, every pass");
        let fresh = (1000..1000 + crowd as u32).filter(|&pid| locked(&collector, pid) == 8192 - step).count();
        assert!(fresh < crowd && fresh >= MIN_ROTATION, "pass {step}: {fresh} of the crowd re-read");
        let job = stats.watched.iter().position(|p| p.pid == 5000).unwrap();
        assert!(stats.watched_read_at[job].is_some());
    }
    // A sweep: the full scan due, spread over passes, re-reads every process's limits.
    for pid in 1000..1000 + crowd as u32 {
        tree.process(pid, "crowd", 8192, 0, "16777216", "/crowd").owner(pid, 1000);
    }
    collector.last_full_scan = Instant::now().checked_sub(Duration::from_secs(60));
    let first = collector.sample(&mut errors).unwrap();
    assert!(!first.full_scan, "a sweep of {crowd} does not fit in one pass without time to spare");
    let mut passes = 1;
    loop {
        let stats = collector.sample(&mut errors).unwrap();
        passes += 1;
        if stats.full_scan {
            assert_eq!(stats.full_scans_total, 2);
            break;
        }
        assert!(passes < 20, "the sweep ends");
    }
    assert!(passes >= 2);
    let soft = |pid: u32| collector.table.iter().find(|r| r.sample.pid == pid).and_then(|r| r.sample.limits);
    assert!((1000..1000 + crowd as u32).all(|pid| soft(pid).is_some_and(|l| l.soft == Limit::Bytes(16 << 20))));
    assert!(errors.is_empty(), "{errors:?}");
}

/// One user's crowd of cgroups, each with a process at the (lowered) limit it holds, ranks above
/// another user's job at 93 %: the series budget's cgroup aggregates are shared by owner too, so
/// with room for two aggregates, one is the job's.
#[test]
fn one_users_crowd_of_cgroups_leaves_another_users_cgroup_its_aggregate() {
    let tree = Tree::new("fair-cgroups");
    for pid in 300..320 {
        let cgroup = format!("/user.slice/user-1000.slice/crowd-{pid}");
        tree.process(pid, "crowd", 2048, 0, "2097152", &cgroup).owner(pid, 1000);
    }
    tree.process(400, "python3", 0, 7620, "8388608", "/slurm/uid_2000/job_7").owner(400, 2000);
    let stats = tree.collector(1 << 20, "", 4).full_scan(&mut Vec::new()).unwrap();
    let claims = stats.claims();
    let cgroups = claims.iter().find(|c| c.class == "process_cgroup").unwrap();
    let claim = crate::budget::Claim { floor: 0, cap: 2, ..cgroups.clone() };
    let allocation = crate::budget::allocate(&[claim], 2 * cgroups.entities[0].0);
    let mut out = Exposition::new();
    stats.render_granted(&mut out, &allocation.grants);
    let text = out.finish();
    let shown: Vec<&str> = text.lines().filter(|l| l.starts_with("memlock_cgroup_processes{")).collect();
    assert_eq!(shown.len(), 2, "{shown:?}");
    assert!(shown.iter().any(|l| l.contains("cgroup=\"/slurm/uid_2000/job_7\"")), "{shown:?}");
}

/// One user's fork storm fills that user's places on probation only: another user's job rank
/// starting right after it is still re-read on every pass, and its first registration is seen
/// at once.
#[test]
fn a_fork_storm_takes_only_its_own_users_places_on_probation() {
    let tree = Tree::new("fair-probation");
    tree.process(100, "sshd", 0, 0, "8388608", "/system");
    let mut collector = tree.collector(1 << 20, "", 10);
    let mut errors = Vec::new();
    collector.full_scan(&mut errors).unwrap();
    for pid in 1000..1000 + MAX_ON_PROBATION as u32 + 10 {
        tree.process(pid, "storm", 0, 0, "8388608", "/storm").owner(pid, 1000);
    }
    tree.process(5000, "python3", 0, 0, "8388608", "/slurm/uid_2000/job_9").owner(5000, 2000);
    collector.tracked_pass(&mut errors);
    tree.status(5000, "python3", 0, 4096);
    tree.owner(5000, 2000);
    let stats = collector.tracked_pass(&mut errors);
    let job = stats.processes.iter().find(|p| p.pid == 5000).expect("the job exported");
    assert_eq!(job.pinned_bytes, Some(4 << 20), "on probation: re-read");
    assert!(errors.is_empty(), "{errors:?}");
}

/// Gives `<root>/<pid>` to `uid`, as procfs shows a process's owner. False when this user may
/// not (a test run without root).
fn own_directory(tree: &Tree, pid: u32, uid: u32) -> bool {
    match std::os::unix::fs::chown(tree.root.join(pid.to_string()), Some(uid), None) {
        Ok(()) => true,
        Err(err) if err.kind() == std::io::ErrorKind::PermissionDenied => false,
        Err(err) => panic!("chown {pid}: {err}"),
    }
}

/// More new processes than a pass reads: one user's fork storm is read over several passes,
/// and another user's job rank that started after it (a higher pid) is read on the first.
#[test]
fn a_fork_storm_delays_only_its_own_users_discovery() {
    let tree = Tree::new("fair-discovery");
    tree.process(100, "sshd", 0, 0, "8388608", "/system");
    let mut collector = tree.collector(1 << 20, "", 10);
    let mut errors = Vec::new();
    collector.full_scan(&mut errors).unwrap();
    let storm = MAX_NEW_PER_PASS as u32 + 100;
    for pid in 1000..1000 + storm {
        tree.process(pid, "storm", 0, 0, "8388608", "/storm").owner(pid, 1000);
        if !own_directory(&tree, pid, 1000) {
            eprintln!("skipped: giving a fixture's directory to another uid needs root");
            return;
        }
    }
    tree.process(9000, "python3", 0, 4096, "8388608", "/slurm/uid_2000/job_9").owner(9000, 2000);
    assert!(own_directory(&tree, 9000, 2000));
    let first = collector.tracked_pass(&mut errors);
    assert!(first.watched.iter().any(|p| p.pid == 9000), "the job read on the first pass");
    assert_eq!(first.scanned, 1 + MAX_NEW_PER_PASS as u64, "the storm in part");
    let second = collector.tracked_pass(&mut errors);
    assert_eq!(second.scanned, 2 + u64::from(storm), "the rest of the storm on the next pass");
    assert!(errors.is_empty(), "{errors:?}");
}

/// Pids that are listed but gone by the time they are read (here links to nowhere, as the
/// e2e tests' procfs views hold for processes that exited) take no place among the new
/// processes a pass reads.
#[test]
fn listed_pids_that_are_gone_take_no_place_among_new_processes() {
    let tree = Tree::new("fair-gone");
    tree.process(100, "sshd", 0, 0, "8388608", "/system");
    let mut collector = tree.collector(1 << 20, "", 10);
    let mut errors = Vec::new();
    collector.full_scan(&mut errors).unwrap();
    for pid in 1000..1000 + 2 * MAX_NEW_PER_PASS as u32 {
        std::os::unix::fs::symlink("/nonexistent", tree.root.join(pid.to_string())).unwrap();
    }
    tree.process(5000, "drill", 1024, 0, "1100000", "/drill");
    let stats = collector.tracked_pass(&mut errors);
    assert!(stats.watched.iter().any(|p| p.pid == 5000), "read on the first pass");
    assert!(errors.is_empty(), "{errors:?}");
}

/// A sweep reads the processes no pass re-reads first, in turns by owner: another user's
/// process that started locking after its probation is read by the sweep's first pass, not
/// after a crowd of holders with lower pids.
#[test]
fn a_sweep_reads_the_untracked_first_in_turns_by_owner() {
    let tree = Tree::new("fair-sweep");
    for pid in 1000..1000 + 4 * MIN_SWEEP as u32 - 1 {
        tree.process(pid, "crowd", 8192, 0, "8388608", "/crowd").owner(pid, 1000);
    }
    tree.process(9000, "python3", 0, 0, "8388608", "/slurm/uid_2000/job_9").owner(9000, 2000);
    let mut collector = tree.collector(1 << 20, "", 10);
    let mut errors = Vec::new();
    collector.full_scan(&mut errors).unwrap();
    tree.status(9000, "python3", 0, 4096);
    tree.owner(9000, 2000);
    // No time beyond the minimums: the sweep reads MIN_SWEEP processes a pass.
    collector.interval = Duration::ZERO;
    collector.start_sweep(Instant::now());
    let stats = collector.tracked_pass(&mut errors);
    let job = stats.watched.iter().find(|p| p.pid == 9000).expect("the job read by the sweep");
    assert_eq!(job.pinned_bytes, Some(4 << 20));
    assert!(!stats.full_scan, "the sweep goes on");
    let passes = (1..10).take_while(|_| !collector.tracked_pass(&mut errors).full_scan).count();
    assert_eq!(passes, 2, "then the crowd, MIN_SWEEP a pass, ending on the fourth");
    assert!(errors.is_empty(), "{errors:?}");
}
