//! The process collector against throwaway procfs trees in the real file formats: filtering,
//! ranking and the capability rule here; the passes in [`passes`]; the exported families and
//! the series budget in [`render`].

mod fairshare;
mod passes;
mod render;

use super::sample::initial_user_namespace;
use super::scan::format_pid;
use super::*;
use crate::exposition::Exposition;
use memlock_kernel::pid_limits::Limit;
use regex::Regex;

const CAPTURED_STATUS: &str = include_str!("../../../../../../tests/fixtures/captures/proc_self_status");
const CAPTURED_LIMITS: &str = include_str!("../../../../../../tests/fixtures/captures/proc_self_limits");

/// A throwaway procfs tree in the real file formats.
struct Tree {
    root: PathBuf,
    // Removes the tree when the test drops it.
    _dir: tempfile::TempDir,
}

impl Tree {
    fn new(name: &str) -> Tree {
        let tmp = tempfile::Builder::new().prefix(&format!("memlock-process-{name}-")).tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        std::fs::write(root.join("meminfo"), "MemTotal: 1 kB\n").unwrap();
        std::fs::create_dir_all(root.join("self")).unwrap();
        Tree { root, _dir: tmp }
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
        let status =
            std::fs::read_to_string(&path).unwrap().replace("CapEff:\t0000000000000000", "CapEff:\t0000000000004000");
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

/// The main thread called pthread_exit() while a thread holding 4 MiB locked runs on. The
/// leader's status has no Vm lines (fs/proc/array.c prints them only with an mm), and taken for
/// a kernel thread the process would be invisible. It is read through its live
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

/// A process with CAP_IPC_LOCK (opensm, 64 MiB locked under 8 MiB) must not make its cgroup's
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
    let captures = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/captures");
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
    assert_eq!(job.usage_ratio_max, Some((Counter::Pinned, 2.0)), "the namespaced process counts against its limit");

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

/// `ns/user` against pid 1's decides where it can be read. A child namespace may
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
    let captures = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/captures");
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

/// An exporter inside a user namespace (a container without the host's) must not take the
/// capability of every process at its word: a namespaced root, whose limit the kernel
/// enforces, would read `ipc_lock 1`. From there the kernel shows uid_map's middle column relative
/// to the reader, but the extents still tell a namespace: only a map of every uid (the
/// host's, as seen from a namespace) cannot be told, and is taken at its word.
#[test]
fn an_exporter_in_a_user_namespace_still_tells_a_namespaced_root() {
    let tree = Tree::new("reader-userns");
    tree.process(96, "python3", 0, 4096, "8388608", "/job") // namespaced root
        .process(97, "opensm", 65536, 0, "8388608", "/infra") // a host daemon, seen from inside
        .process(98, "worker", 0, 4096, "8388608", "/job"); // the exporter's own namespace
    let captures = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/captures");
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
