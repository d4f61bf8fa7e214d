//! The exported families, the NCCL lookup, the series budget and pid names.

use super::*;

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
            "memlock_process_nccl_info{pid=\"70\",comm=\"pt_main_thread\",cgroup=\"/job\",source=\"file_name\",\
                version=\"2.21.5\",library=\"libnccl.so.2.21.5\"} 1"
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
    assert_eq!(nccl(&stats, 72).map(|n| (n.version, n.library, n.source)), Some((None, "libnccl.so.2".into(), "")));
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

/// The registrant libraries come from the same maps read as NCCL, one series per family; an
/// io_uring user that pins memory with none of them has none.
#[test]
fn rdma_libraries_are_read_with_nccl() {
    let tree = Tree::new("registrants");
    tree.process(90, "ucx_perftest", 0, 4096, "8388608", "/job").process(91, "uring", 0, 4096, "8388608", "/io");
    let area = |path: &str| format!("7f3a1c000000-7f3a1e4f1000 r-xp 00006000 fd:01 5377114          {path}\n");
    let ucx =
        ["/opt/hpcx/ucx/lib/libucs.so.0.0.0", "/opt/hpcx/ucx/lib/libucp.so.0.0.0", "/opt/hpcx/ucx/lib/libuct.so.0"]
            .map(area)
            .concat();
    let verbs = area("/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.50.0")
        + &area("/usr/lib/x86_64-linux-gnu/libibverbs/libmlx5-rdmav34.so");
    std::fs::write(tree.root.join("90/maps"), ucx + &verbs).unwrap();
    std::fs::write(tree.root.join("91/maps"), area("/usr/lib/x86_64-linux-gnu/liburing.so.2.3")).unwrap();
    let mut errors = Vec::new();
    let stats = tree.collector(0, "", 10).full_scan(&mut errors).unwrap();
    assert!(errors.is_empty(), "{errors:?}");
    let families = |pid: u32| -> Vec<(&str, String)> {
        let process = stats.processes.iter().find(|p| p.pid == pid).unwrap();
        process.rdma_libraries.iter().map(|l| (l.library, l.file.clone())).collect()
    };
    assert_eq!(
        families(90),
        [
            ("libibverbs", "libibverbs.so.1.14.50.0".to_owned()),
            ("libmlx5", "libmlx5-rdmav34.so".to_owned()),
            ("ucx", "libucp.so.0.0.0".to_owned())
        ]
    );
    assert!(families(91).is_empty(), "liburing registers nothing with an RDMA device");
    let mut out = Exposition::new();
    stats.render(&mut out);
    let text = out.finish();
    let series: Vec<&str> = text.lines().filter(|l| l.starts_with("memlock_process_rdma_library_info{")).collect();
    assert_eq!(series.len(), 3, "{text}");
    assert!(
        series.contains(
            &"memlock_process_rdma_library_info{pid=\"90\",comm=\"ucx_perftest\",cgroup=\"/job\",\
        library=\"ucx\",file=\"libucp.so.0.0.0\"} 1"
        ),
        "{text}"
    );
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
    let claims =
        [crate::budget::Claim { floor: 0, ..process.clone() }, crate::budget::Claim { floor: 0, ..claims[1].clone() }];
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
    assert!(text.contains("memlock_cgroup_limit_usage_ratio_max{cgroup=\"/b\",counter=\"pinned\"} 0.9375"), "{text}");
    assert_eq!(text.matches("memlock_cgroup_processes{").count(), 1, "{text}");
}

/// Processes that lowered their own soft limit under the 64 KiB they hold
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
    // Per counter: 0.75 pinned beside 2.0 locked, both exported.
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

/// Under the limit too: a ratio of 0.94 is as free to buy as 16 (60 KiB locked under a 64 KiB
/// soft limit the crowd set itself), and must not outrank a job a quarter of the way up.
#[test]
fn a_crowd_near_limits_it_lowered_does_not_outrank_the_job() {
    let tree = Tree::new("crowd-under");
    for pid in 100..130 {
        tree.process(pid, "python3", 60, 0, "65536", &format!("/crowd/{pid}"));
    }
    tree.process(200, "python3", 0, 2048, "8388608", "/slurm/uid_1000/job_9"); // 0.25, 2 MiB
    let mut collector = tree.collector(1 << 20, "^python3$", 4);
    let stats = collector.full_scan(&mut Vec::new()).unwrap();
    assert_eq!(pids(&stats)[0], 200, "the job before the crowd");
    assert_eq!(stats.watched[0].pid, 200);
    assert_eq!(stats.watched.len(), 31, "the fast path watches every process");
    let scores: Vec<f64> = stats.claims()[0].entities.iter().map(|(_, s)| *s).collect();
    assert_eq!(scores, vec![0.25, 0.0, 0.0, 0.0]);
    let cgroups = stats.claims()[1].entities.iter().map(|(_, s)| *s).collect::<Vec<f64>>();
    assert_eq!(cgroups[0], 0.25, "the job's cgroup first: {cgroups:?}");
    assert!(cgroups[1..].iter().all(|&s| s < 1e-9), "nothing but a tie-break by bytes: {cgroups:?}");
    // Exported as they are: the crowd's ratio is still 0.94 where its series are shown.
    let crowd = stats.processes.iter().find(|p| p.pid != 200).unwrap();
    let ratio = crowd.charge(Counter::Locked).and_then(|c| c.ratio()).unwrap();
    assert!((ratio - 60.0 / 64.0).abs() < 1e-9, "{ratio}");
}

/// The fast path follows at most MAX_WATCHED processes a pass (the bound on the work a crowd
/// can make): the job first, the crowd's least held left out, and the number left out exported.
#[test]
fn a_crowd_past_the_watched_bound_is_counted_and_leaves_the_job_watched() {
    let tree = Tree::new("crowd-bound");
    let crowd = MAX_WATCHED as u32 + 2;
    for pid in 1000..1000 + crowd {
        tree.process(pid, "sleep", 4, 0, "65536", "/crowd");
    }
    tree.process(200, "python3", 0, 2048, "8388608", "/slurm/uid_1000/job_9");
    let mut collector = tree.collector(1 << 20, "^python3$", 4);
    let stats = collector.full_scan(&mut Vec::new()).unwrap();
    assert_eq!(stats.watched.len(), MAX_WATCHED);
    assert_eq!(stats.watched[0].pid, 200);
    assert_eq!(stats.unwatched, 3);
    let mut out = Exposition::new();
    stats.render_granted(&mut out, &crate::budget::Grants::all());
    assert!(out.finish().contains("\nmemlock_process_unwatched_processes 3\n"));
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
