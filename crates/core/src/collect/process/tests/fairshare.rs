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
