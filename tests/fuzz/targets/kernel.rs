//! The kernel crate's fuzz targets: every parser of a kernel file, the netlink decoders and the
//! NVIDIA, NCCL and trace pipe readers. They use memlock-kernel alone, the one dependency of the
//! cargo-fuzz crate in fuzz/kernel.

use memlock_kernel as kernel;
use memlock_kernel::nldev::{self, cmd, nldev_type, ReplyReader};
use memlock_kernel::{
    cgroup_path, memcg, meminfo, pid_cgroup, pid_limits, pid_status, proc_cgroups, rdma_cgroup, rdma_sysfs, sysvm,
    uid_map, vmstat,
};

use super::common::{
    corpus, dedup, fixture_files, fixtures, strings, text, unchanged_by, verdict, walk, Expect, Target, Verdict,
};

/// In the order of docs/reliability.md's table.
pub const TARGETS: &[Target] = &[
    Target {
        name: "meminfo",
        expect: Expect::BothPaths,
        seeds: || corpus(|n| n == "meminfo" || n == "proc_meminfo" || n == "node0_meminfo"),
        check: check_meminfo,
    },
    Target {
        name: "vmstat",
        expect: Expect::BothPaths,
        seeds: || corpus(|n| n == "vmstat" || n == "proc_vmstat"),
        check: check_vmstat,
    },
    Target {
        name: "single_numbers",
        expect: Expect::BothPaths,
        seeds: single_number_seeds,
        check: check_single_numbers,
    },
    Target {
        name: "pid_status",
        expect: Expect::BothPaths,
        seeds: || corpus(|n| n == "status" || n == "proc_self_status"),
        check: check_pid_status,
    },
    Target {
        name: "pid_limits",
        expect: Expect::BothPaths,
        seeds: || corpus(|n| n == "limits" || n == "proc_self_limits"),
        check: check_pid_limits,
    },
    Target {
        name: "uid_map",
        expect: Expect::BothPaths,
        seeds: || corpus(|n| n == "uid_map" || n.ends_with("_uid_map")),
        check: check_uid_map,
    },
    Target {
        name: "pid_cgroup",
        expect: Expect::BothPaths,
        seeds: || corpus(|n| n == "cgroup" || n == "proc_self_cgroup_hybrid_v1"),
        check: check_pid_cgroup,
    },
    Target {
        name: "proc_cgroups",
        expect: Expect::BothPaths,
        seeds: || corpus(|n| n == "proc_cgroups" || n == "cgroups"),
        check: check_proc_cgroups,
    },
    Target {
        name: "rdma_cgroup",
        expect: Expect::BothPaths,
        seeds: || corpus(|n| n == "rdma.current" || n == "rdma.max"),
        check: check_rdma_cgroup,
    },
    Target {
        name: "memcg_v1_limit",
        expect: Expect::BothPaths,
        seeds: || memcg_seeds(&["memory.limit_in_bytes", "memory.memsw.limit_in_bytes"]),
        check: check_memcg_v1_limit,
    },
    Target {
        name: "memcg_v2_limit",
        expect: Expect::BothPaths,
        seeds: || memcg_seeds(&["memory.max", "memory.high", "memory.swap.max"]),
        check: check_memcg_v2_limit,
    },
    Target {
        name: "memcg_v1_stat",
        expect: Expect::BothPaths,
        seeds: || memory_stat_seeds(false),
        check: check_memcg_v1_stat,
    },
    Target {
        name: "memcg_v2_stat",
        expect: Expect::BothPaths,
        seeds: || memory_stat_seeds(true),
        check: check_memcg_v2_stat,
    },
    Target {
        name: "memcg_oom_control",
        expect: Expect::BothPaths,
        seeds: || memcg_seeds(&["memory.oom_control"]),
        check: check_memcg_oom_control,
    },
    Target {
        name: "memcg_events",
        expect: Expect::BothPaths,
        seeds: || memcg_seeds(&["memory.events"]),
        check: check_memcg_events,
    },
    Target {
        name: "rdma_sysfs_numbered",
        expect: Expect::BothPaths,
        seeds: || corpus(|n| n == "state" || n == "phys_state" || n == "node_type"),
        check: check_rdma_sysfs_numbered,
    },
    Target {
        name: "rdma_sysfs_rate",
        expect: Expect::BothPaths,
        seeds: || corpus(|n| n == "rate"),
        check: check_rdma_sysfs_rate,
    },
    Target {
        name: "rdma_sysfs_counter",
        expect: Expect::BothPaths,
        seeds: rdma_counter_seeds,
        check: check_rdma_sysfs_counter,
    },
    Target {
        name: "rdma_sysfs_label",
        expect: Expect::AlwaysAccepts,
        seeds: || corpus(|n| ["fw_ver", "hca_type", "board_id", "node_guid", "link_layer", "node_desc"].contains(&n)),
        check: check_rdma_sysfs_label,
    },
    Target {
        name: "thp_choice",
        expect: Expect::BothPaths,
        seeds: || corpus(|n| n.starts_with("thp_") || n == "enabled" || n == "defrag" || n == "shmem_enabled"),
        check: check_thp_choice,
    },
    Target {
        name: "hugepage_dir_name",
        expect: Expect::BothPaths,
        seeds: || strings(&["hugepages-2048kB", "hugepages-1048576kB", "hugepages-64kB"]),
        check: check_hugepage_dir_name,
    },
    Target { name: "cgroup_path", expect: Expect::AlwaysAccepts, seeds: cgroup_path_seeds, check: check_cgroup_path },
    Target { name: "nldev", expect: Expect::BothPaths, seeds: netlink_samples, check: check_nldev },
    // The NVIDIA driver's /proc/driver/nvidia/version (open and proprietary modules), and the
    // same text as a module's version file.
    Target {
        name: "nvidia_version",
        expect: Expect::BothPaths,
        seeds: || {
            let mut seeds = corpus(|n| n == "version")
                .into_iter()
                .filter(|s| String::from_utf8_lossy(s).contains("NVRM version:"))
                .collect::<Vec<_>>();
            seeds.extend(strings(&[
                "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12 19:39:15 UTC 2024\nGCC \
                    version:  gcc version 11.4.0 (Ubuntu 11.4.0-1ubuntu1~22.04) \n",
            ]));
            seeds
        },
        check: check_nvidia_version,
    },
    // /proc/PID/maps, line by line, for the NCCL library a process maps.
    Target {
        name: "maps_nccl",
        expect: Expect::BothPaths,
        seeds: || {
            strings(&[
                "55a0c0000000-55a0c0021000 r--p 00000000 fd:01 1234                       /usr/bin/python3.11\n\
                 7f3a1c000000-7f3a1e4f1000 r-xp 00006000 fd:01 5377114                    \
                 /usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5\n7ffd4e1a0000-7ffd4e1c1000 rw-p 00000000 00:00 0 \
                                         [stack]\n",
                "7f3a1c000000-7f3a1e4f1000 r--p 00000000 fd:01 77 /venv/nvidia/nccl/lib/libnccl.so.2 (deleted)\n",
            ])
        },
        check: check_maps_nccl,
    },
    // /proc/PID/maps, line by line, for the RDMA registrant libraries a process maps.
    Target {
        name: "maps_registrants",
        expect: Expect::BothPaths,
        seeds: || {
            strings(&[
                "7f3a1c000000-7f3a1e4f1000 r-xp 00000000 103:02 4721980 \
                 /usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.50.0\n",
                "7f3a1c000000-7f3a1e4f1000 r-xp 00000000 103:02 5 /opt/hpcx/ucx/lib/libucp.so.0.0.0 (deleted)\n",
                "7f3a1c000000-7f3a1e4f1000 r-xp 00000000 103:02 5 /opt/mvapich2/lib64/libmpi.so.12.1.1\n",
                // A form feed splits a field: what follows is no absolute path, and names no library;
                // the next line's does.
                "0 1 2 3 4/libf-\u{c}libmpi.so.12.1\n7f3a1c000000-7f3a1e4f1000 r-xp 00000000 103:02 5 \
                 /usr/lib/x86_64-linux-gnu/libibverbs.so.1\n",
            ])
        },
        check: check_maps_registrants,
    },
    // A libnccl.so whose name has no version: its ELF section headers and `.rodata` string.
    Target {
        name: "nccl_library",
        expect: Expect::BothPaths,
        seeds: || {
            use memlock_kernel::nccl_library::elf;
            vec![
                elf(&[(".text", b"\x90\xc3"), (".rodata", b"\0NCCL version %s\0NCCL version 2.23.4+cuda12.6\0")]),
                elf(&[(".rodata", b"NCCL version 2.32.3+cuda12.9\0NCCL version 2.32.3 compiled with CUDA 12.9\0")]),
                elf(&[(".nv_fatbin", b"\0\0"), (".rodata", b"xNCCL version 2.19.0a0+cuda12.2\0")]),
            ]
        },
        check: check_nccl_library,
    },
    // A tracefs trace_pipe line of the failures collector's kprobe and synthetic events (hostile
    // comms).
    Target {
        name: "trace_pipe",
        expect: Expect::BothPaths,
        seeds: || {
            strings(&[
                "       ib_reg_mr-612     [001] ..... 12345.678901: ib_umem_get_entry: \
                 (ib_umem_get+0x0/0x520 [ib_core]) size=1048576\n",
                "       ib_reg_mr-612     [001] ..... 12345.679012: ib_umem_get_return: \
                 (ib_uverbs_reg_mr+0x12a/0x2d0 [ib_uverbs] <- ib_umem_get) ret=-12 comm=\"ib_reg_mr\"\n",
                " q\"u-1 [0] x: y:-4242    (   4240) [007] d..1. 99.000001: do_mlock_return: \
                 (__x64_sys_mlock+0x1c/0x30 <- do_mlock) ret=-12 comm=\" q\"u-1 [0] x: y:\"\n",
                "           <...>-144     [001] ...2.    17.052414: memlock_exporter_9_0_do_mlock_fail: \
                 size=1048576 ret=-12\n",
                "CPU:3 [LOST 1024 EVENTS]\n",
                "CPU:0 [LOST EVENTS]\n",
            ])
        },
        check: check_trace_pipe,
    },
];

/// Memory cgroup files by name, also as the captured root files (`cgv1_root_<file>`).
fn memcg_seeds(files: &[&str]) -> Vec<Vec<u8>> {
    corpus(|n| files.iter().any(|f| n == *f || n == format!("cgv1_root_{f}")))
}

/// `memory.stat` exists in both hierarchies with different keys: v2 has an `anon` line, v1
/// only `active_anon` and the like.
fn memory_stat_seeds(v2: bool) -> Vec<Vec<u8>> {
    let is_v2 = |seed: &Vec<u8>| String::from_utf8_lossy(seed).lines().any(|line| line.starts_with("anon "));
    memcg_seeds(&["memory.stat"]).into_iter().filter(|s| is_v2(s) == v2).collect()
}

/// Single-number sysfs, sysctl and memory cgroup files (hugepage pools, vm sysctls, counters).
fn single_number_seeds() -> Vec<Vec<u8>> {
    let mut seeds = corpus(|n| {
        [
            "nr_hugepages",
            "free_hugepages",
            "resv_hugepages",
            "surplus_hugepages",
            "nr_overcommit_hugepages",
            "max_map_count",
            "overcommit_memory",
        ]
        .iter()
        .any(|k| n == *k || n.ends_with(&format!("_{k}")))
    });
    seeds.extend(memcg_seeds(&["memory.usage_in_bytes", "memory.failcnt", "memory.current"]));
    dedup(seeds)
}

fn rdma_counter_seeds() -> Vec<Vec<u8>> {
    dedup(
        fixture_files()
            .iter()
            .filter(|p| p.components().any(|c| c.as_os_str() == "counters" || c.as_os_str() == "hw_counters"))
            .filter_map(|p| std::fs::read(p).ok())
            .collect(),
    )
}

/// Every cgroup directory of the fixture trees, as the path the collector labels it with,
/// plus the memory paths of the fixture processes.
fn cgroup_path_seeds() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for hierarchy in ["sys/fs/cgroup/memory", "sys/fs/cgroup/unified", "cgroup-v1", "cgroup-v2"] {
        let root = fixtures().join(hierarchy);
        let mut files = Vec::new();
        walk(&root, &mut files);
        for file in files {
            if let Some(dir) = file.parent().and_then(|d| d.strip_prefix(&root).ok()) {
                out.push(format!("/{}", dir.display()).into_bytes());
            }
        }
    }
    for cgroup in corpus(|n| n == "cgroup") {
        for line in String::from_utf8_lossy(&cgroup).lines() {
            if let Some(path) = line.splitn(3, ':').nth(2) {
                out.push(path.as_bytes().to_vec());
            }
        }
    }
    dedup(out)
}

/// The byte samples of the captures file: `0010  08 00 ...` lines, a sample per `## N.`, and
/// their concatenation (a dump arrives as several messages in one datagram).
fn netlink_samples() -> Vec<Vec<u8>> {
    let text = std::fs::read_to_string(fixtures().join("captures/rdma-netlink-samples.txt")).unwrap_or_default();
    let mut out: Vec<Vec<u8>> = Vec::new();
    for line in text.lines() {
        if line
            .strip_prefix("## ")
            .is_some_and(|rest| rest.split_once(". ").is_some_and(|(n, _)| n.parse::<u32>().is_ok()))
        {
            out.push(Vec::new());
            continue;
        }
        let Some((offset, hex)) = line.split_once("  ") else { continue };
        if offset.len() != 4 || !offset.bytes().all(|b| b.is_ascii_hexdigit()) {
            continue;
        }
        if let Some(sample) = out.last_mut() {
            sample.extend(hex.split_whitespace().filter_map(|b| u8::from_str_radix(b, 16).ok()));
        }
    }
    let joined = out.concat();
    out.push(joined);
    out
}

fn check_meminfo(bytes: &[u8]) -> Result<Verdict, String> {
    let text = text(bytes);
    let parsed = meminfo::parse(&text);
    if parsed.is_ok() {
        unchanged_by(meminfo::parse, &text, "Zzz_NotAKey:    7 kB")?;
    }
    Ok(verdict(&parsed))
}

fn check_vmstat(bytes: &[u8]) -> Result<Verdict, String> {
    let text = text(bytes);
    let parsed = vmstat::parse(&text);
    if let Ok(stat) = &parsed {
        if let (Some(pinned), Some(acquired)) = (stat.pinned_pages(), stat.nr_foll_pin_acquired) {
            if pinned > acquired {
                return Err(format!("{pinned} pinned pages out of {acquired} acquired"));
            }
        }
        unchanged_by(vmstat::parse, &text, "zzz_not_a_counter 7")?;
    }
    Ok(verdict(&parsed))
}

fn check_single_numbers(bytes: &[u8]) -> Result<Verdict, String> {
    let text = text(bytes);
    let unsigned = kernel::parse_u64(&text);
    let signed = kernel::parse_i64(&text);
    if let (Ok(u), Ok(i)) = (&unsigned, &signed) {
        if u64::try_from(*i).ok() != Some(*u) {
            return Err(format!("u64 {u} and i64 {i} of the same text differ"));
        }
    }
    Ok(verdict(&unsigned))
}

fn check_pid_status(bytes: &[u8]) -> Result<Verdict, String> {
    let text = text(bytes);
    let parsed = pid_status::parse(&text);
    if let Ok(status) = &parsed {
        if status.locked_bytes.is_some_and(|b| b % 1024 != 0) || status.pinned_bytes.is_some_and(|b| b % 1024 != 0) {
            return Err(format!("kB values must come out as whole KiB: {status:?}"));
        }
        if status.name.contains('\n') {
            return Err(format!("the command name spans lines: {:?}", status.name));
        }
        unchanged_by(|t| pid_status::parse(t).map(|s| format!("{s:?}")), &text, "Zzz:\tnot a key")?;
    }
    Ok(verdict(&parsed))
}

fn check_pid_limits(bytes: &[u8]) -> Result<Verdict, String> {
    let text = text(bytes);
    let parsed = pid_limits::parse(&text);
    if parsed.is_ok() {
        unchanged_by(
            pid_limits::parse,
            &text,
            "Max zzz                   1                    1                    zzz       ",
        )?;
    }
    Ok(verdict(&parsed))
}

fn check_uid_map(bytes: &[u8]) -> Result<Verdict, String> {
    let text = text(bytes);
    let parsed = uid_map::is_initial(&text);
    // Only one extent of every uid onto itself is the initial namespace.
    let numbers: Vec<Option<u64>> = text.split_ascii_whitespace().map(|n| n.parse().ok()).collect();
    if parsed == Ok(true) && numbers != [Some(0), Some(0), Some(u64::from(u32::MAX))] {
        return Err(format!("called the initial namespace: {text:?}"));
    }
    // A second extent makes any map a user namespace's.
    if parsed.is_ok() && !text.trim().is_empty() {
        let extended = format!("{}\n1 1 1\n", text.trim_end_matches('\n'));
        if uid_map::is_initial(&extended) != Ok(false) {
            return Err(format!("{extended:?} is not a user namespace's map: {:?}", uid_map::is_initial(&extended)));
        }
    }
    Ok(verdict(&parsed))
}

fn check_pid_cgroup(bytes: &[u8]) -> Result<Verdict, String> {
    let text = text(bytes);
    let parsed = pid_cgroup::memory_path(&text);
    if let Ok(path) = &parsed {
        if path.is_some_and(|p| !p.starts_with('/') || p.contains('\n')) {
            return Err(format!("the path {path:?} is not one absolute path"));
        }
        unchanged_by(|t| pid_cgroup::memory_path(t).map(|p| p.map(str::to_owned)), &text, "12:zzz:/elsewhere")?;
    }
    Ok(verdict(&parsed))
}

fn check_proc_cgroups(bytes: &[u8]) -> Result<Verdict, String> {
    let text = text(bytes);
    let parsed = proc_cgroups::parse(&text);
    if let Ok(controllers) = &parsed {
        if controllers.is_empty()
            || controllers.iter().any(|c| c.name.is_empty() || c.name.bytes().any(|b| b.is_ascii_whitespace()))
        {
            return Err(format!("controllers must be non-empty names: {controllers:?}"));
        }
        unchanged_by(proc_cgroups::parse, &text, "#subsys_name\thierarchy\tnum_cgroups\tenabled")?;
    }
    Ok(verdict(&parsed))
}

fn check_rdma_cgroup(bytes: &[u8]) -> Result<Verdict, String> {
    let text = text(bytes);
    let parsed = rdma_cgroup::parse(&text);
    if let Ok(devices) = &parsed {
        if devices.iter().any(|d| d.device.is_empty() || d.device.bytes().any(|b| b.is_ascii_whitespace() || b == b'='))
        {
            return Err(format!("device names must be single words: {devices:?}"));
        }
        unchanged_by(rdma_cgroup::parse, &text, "")?;
    }
    Ok(verdict(&parsed))
}

fn check_memcg_v1_limit(bytes: &[u8]) -> Result<Verdict, String> {
    let parsed = memcg::parse_v1_limit(&text(bytes));
    if let Ok(memcg::Limit::Bytes(bytes)) = parsed {
        if bytes >= memcg::V1_UNLIMITED_FROM {
            return Err(format!("{bytes} is the unlimited sentinel, not a limit"));
        }
    }
    Ok(verdict(&parsed))
}

fn check_memcg_v2_limit(bytes: &[u8]) -> Result<Verdict, String> {
    Ok(verdict(&memcg::parse_v2_limit(&text(bytes))))
}

fn check_memcg_v1_stat(bytes: &[u8]) -> Result<Verdict, String> {
    let text = text(bytes);
    let parsed = memcg::parse_v1_stat(&text);
    if let Ok(stat) = &parsed {
        for limit in [stat.hierarchical_memory_limit, stat.hierarchical_memsw_limit].into_iter().flatten() {
            if limit.bytes().is_some_and(|b| b >= memcg::V1_UNLIMITED_FROM) {
                return Err(format!("{limit:?} is the unlimited sentinel, not a limit"));
            }
        }
        unchanged_by(memcg::parse_v1_stat, &text, "zzz_not_a_key 7")?;
    }
    Ok(verdict(&parsed))
}

fn check_memcg_v2_stat(bytes: &[u8]) -> Result<Verdict, String> {
    let text = text(bytes);
    let parsed = memcg::parse_v2_stat(&text);
    if parsed.is_ok() {
        unchanged_by(memcg::parse_v2_stat, &text, "zzz_not_a_key 7")?;
    }
    Ok(verdict(&parsed))
}

fn check_memcg_oom_control(bytes: &[u8]) -> Result<Verdict, String> {
    let text = text(bytes);
    let parsed = memcg::parse_oom_control(&text);
    if parsed.is_ok() {
        unchanged_by(memcg::parse_oom_control, &text, "zzz_not_a_key 7")?;
    }
    Ok(verdict(&parsed))
}

fn check_memcg_events(bytes: &[u8]) -> Result<Verdict, String> {
    let text = text(bytes);
    let parsed = memcg::parse_v2_events(&text);
    if parsed.is_ok() {
        unchanged_by(memcg::parse_v2_events, &text, "zzz_not_a_key 7")?;
    }
    Ok(verdict(&parsed))
}

fn check_rdma_sysfs_numbered(bytes: &[u8]) -> Result<Verdict, String> {
    let parsed = rdma_sysfs::parse_numbered(&text(bytes));
    if let Ok(n) = &parsed {
        if n.name.contains('\n') || n.name != n.name.trim() {
            return Err(format!("label {:?} is not one trimmed line", n.name));
        }
    }
    Ok(verdict(&parsed))
}

fn check_rdma_sysfs_rate(bytes: &[u8]) -> Result<Verdict, String> {
    Ok(verdict(&rdma_sysfs::parse_rate(&text(bytes))))
}

fn check_rdma_sysfs_counter(bytes: &[u8]) -> Result<Verdict, String> {
    Ok(verdict(&rdma_sysfs::parse_counter(&text(bytes))))
}

fn check_rdma_sysfs_label(bytes: &[u8]) -> Result<Verdict, String> {
    let label = rdma_sysfs::label_value(&text(bytes));
    if label.contains('\n') || label != label.trim() {
        return Err(format!("label {label:?} is not one trimmed line"));
    }
    // How the label is exported (bounded, no control characters) is the core crate's
    // `exposition_labels` target, seeded with these files too.
    let counter = rdma_sysfs::port_counter(&label);
    if counter.scale != 1 && counter.scale != 4 {
        return Err(format!("scale {}", counter.scale));
    }
    Ok(Verdict::Accepted)
}

fn check_thp_choice(bytes: &[u8]) -> Result<Verdict, String> {
    let parsed = sysvm::parse_choice(&text(bytes));
    if let Ok(choice) = &parsed {
        if !choice.options.contains(&choice.active) {
            return Err(format!("the active choice is not an option: {choice:?}"));
        }
    }
    Ok(verdict(&parsed))
}

fn check_hugepage_dir_name(bytes: &[u8]) -> Result<Verdict, String> {
    let size = sysvm::parse_hugepage_dir_name(&text(bytes));
    if size.is_some_and(|s| s % 1024 != 0) {
        return Err(format!("{size:?} is not whole KiB"));
    }
    Ok(if size.is_some() { Verdict::Accepted } else { Verdict::Rejected })
}

fn check_cgroup_path(bytes: &[u8]) -> Result<Verdict, String> {
    let path = text(bytes);
    let labels = cgroup_path::labels(&path);
    if labels.first() != Some(&("cgroup", path.to_string())) {
        return Err(format!("the first label is not the path: {labels:?}"));
    }
    let mut keys: Vec<&str> = labels.iter().map(|(k, _)| *k).collect();
    keys.sort_unstable();
    keys.dedup();
    if keys.len() != labels.len() {
        return Err(format!("a label name repeats: {labels:?}"));
    }
    for (key, value) in &labels[1..] {
        let ok = match *key {
            "container_id" => {
                value.len() == 64 && value.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            }
            "pod_uid" => {
                value.len() == 36
                    && value.bytes().all(|b| b == b'-' || b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            }
            "qos_class" => ["guaranteed", "burstable", "besteffort"].contains(&value.as_str()),
            "slurm_job" => !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()),
            "slurm_step" | "systemd_unit" => !value.is_empty() && path.contains(value.as_str()),
            _ => false,
        };
        if !ok {
            return Err(format!("label {key}={value:?} is not well formed"));
        }
    }
    Ok(Verdict::Accepted)
}

fn check_nldev(bytes: &[u8]) -> Result<Verdict, String> {
    let mut items = 0usize;
    let mut any_ok = false;
    let mut longest_string = 0usize;
    for kind in [cmd::RES_GET, cmd::RES_MR_GET, cmd::GET, cmd::RES_MR_GET_RAW] {
        let seq = nldev::Header::parse(bytes).map(|h| h.seq).unwrap_or(0);
        let mut reader = ReplyReader::new(nldev_type(kind), seq, 64);
        let fed = reader.feed(bytes, |_, body| {
            items += nldev::decode_mr_part(body).map(|p| p.entries.len()).unwrap_or(0);
            items += nldev::decode_res_summary(body).map(|s| s.entries.len()).unwrap_or(0);
            items += nldev::decode_device(body).map(|_| 1).unwrap_or(0);
            for a in nldev::attrs(body).flatten() {
                longest_string = longest_string.max(a.string().len());
                let _ = (a.u8(), a.u32(), a.u64());
                items += a.nested().flatten().count();
            }
            Ok(())
        });
        // A kernel error reply (EPERM, a failed dump) is a valid message too.
        any_ok |= !matches!(fed, Err(nldev::ReplyError::Decode(_)));
    }
    if longest_string > nldev::MAX_STRING_BYTES {
        return Err(format!("a string attribute of {longest_string} bytes (bound {})", nldev::MAX_STRING_BYTES));
    }
    // Every decoded item needs its own 4-byte attribute header: four request kinds, four views
    // of each body.
    if items > 16 * (bytes.len() / 4 + 1) {
        return Err(format!("{items} items out of {} bytes", bytes.len()));
    }
    Ok(if any_ok { Verdict::Accepted } else { Verdict::Rejected })
}

fn check_nvidia_version(bytes: &[u8]) -> Result<Verdict, String> {
    use memlock_kernel::versions;
    let text = text(bytes);
    let module = versions::module_version(&text);
    if module.len() > versions::MAX_VERSION_BYTES || module.contains('\n') || module != module.trim() {
        return Err(format!("module version {module:?} is not one bounded, trimmed line"));
    }
    let Some(driver) = versions::nvidia_driver(&text) else { return Ok(Verdict::Rejected) };
    let v = &driver.version;
    let numbers = v.split('.').all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    if !(numbers && v.contains('.') && text.contains(v.as_str())) {
        return Err(format!("driver version {v:?} is not a dotted number of the input"));
    }
    Ok(Verdict::Accepted)
}

fn check_maps_nccl(bytes: &[u8]) -> Result<Verdict, String> {
    use memlock_kernel::versions;
    let text = text(bytes);
    let Some(found) = text.lines().find_map(versions::nccl_mapping) else { return Ok(Verdict::Rejected) };
    if !found.library.starts_with("libnccl.so") || found.library.len() > versions::MAX_VERSION_BYTES {
        return Err(format!("library {:?}", found.library));
    }
    if let Some(v) = &found.version {
        let numbers = v.split('.').all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
        if !(numbers && v.split('.').count() >= 3 && found.library.ends_with(v.as_str())) {
            return Err(format!("version {v:?} of {:?}", found.library));
        }
    }
    Ok(Verdict::Accepted)
}

fn check_maps_registrants(bytes: &[u8]) -> Result<Verdict, String> {
    use memlock_kernel::{registrants, versions};
    let text = text(bytes);
    let mut found = Vec::new();
    for line in text.lines() {
        let Some(library) = registrants::rdma_library(line) else { continue };
        if !registrants::FAMILIES.contains(&library.library) {
            return Err(format!("family {:?}", library.library));
        }
        // The file label is the start of the line's last path component, bounded.
        let name = line.rsplit('/').next().unwrap_or("").trim_start();
        if library.file.is_empty()
            || library.file.len() > versions::MAX_VERSION_BYTES
            || !name.starts_with(&library.file)
        {
            return Err(format!("file {:?} of {line:?}", library.file));
        }
        registrants::add(&mut found, library);
    }
    let families: Vec<&str> = found.iter().map(|l| l.library).collect();
    let mut sorted = families.clone();
    sorted.sort_by_key(|f| registrants::FAMILIES.iter().position(|k| k == f));
    sorted.dedup();
    if sorted != families {
        return Err(format!("families {families:?} not one each in order"));
    }
    Ok(if found.is_empty() { Verdict::Rejected } else { Verdict::Accepted })
}

fn check_nccl_library(bytes: &[u8]) -> Result<Verdict, String> {
    use memlock_kernel::nccl_library::{self as lib, library_version, release};
    let size = bytes.len() as u64;
    let (mut total, mut beyond) = (0u64, None);
    let largest = (lib::CHUNK as u64).max(lib::MAX_SECTION_NAMES).max(u64::from(lib::MAX_SECTIONS) * 64);
    let found = library_version(size, |offset, len| {
        total += len;
        if len > largest || offset.checked_add(len).is_none_or(|end| end > size) {
            beyond = Some((offset, len));
        }
        bytes.get(offset as usize..(offset + len) as usize).map(<[u8]>::to_vec).ok_or_else(|| "beyond".into())
    });
    if let Some((offset, len)) = beyond {
        return Err(format!("read {len} bytes at {offset} of a {size}-byte file"));
    }
    let bound = 64 + u64::from(lib::MAX_SECTIONS) * 64 + lib::MAX_SECTION_NAMES + lib::MAX_RODATA_SCAN;
    if total > bound {
        return Err(format!("read {total} bytes, more than {bound}"));
    }
    match found {
        Ok(text) => {
            if text.len() > lib::MAX_VERSION_TEXT || !text.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
                return Err(format!("version text {text:?}"));
            }
            if !text.starts_with(|c: char| c.is_ascii_digit()) || release(&text).is_some_and(|r| !text.starts_with(r)) {
                return Err(format!("release of {text:?}"));
            }
            Ok(Verdict::Accepted)
        }
        Err(why) if why.is_empty() => Err("an empty reason".into()),
        Err(_) => Ok(Verdict::Rejected),
    }
}

fn check_trace_pipe(bytes: &[u8]) -> Result<Verdict, String> {
    use kernel::trace_pipe::{parse_line, Line, Value};
    let parsed = parse_line(bytes);
    let identifier = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    match &parsed {
        Ok(_) if bytes.last() != Some(&b'\n') => return Err("a line without its newline accepted".into()),
        Ok(Line::Event(e)) => {
            if e.comm.len() > 16 || e.comm.first() == Some(&b' ') || !identifier(e.name) {
                return Err(format!("header {e:?}"));
            }
            for (index, (name, value)) in e.args.iter().enumerate() {
                let last = index + 1 == e.args.len();
                if !identifier(name) || (matches!(value, Value::Str(_)) && !last) {
                    return Err(format!("argument {name:?} of {e:?}"));
                }
                if let Value::Str(s) = value {
                    if s.contains(&b'\n') {
                        return Err(format!("a newline inside a string of {e:?}"));
                    }
                }
            }
        }
        Ok(Line::Lost { .. }) => {
            if !bytes.starts_with(b"CPU:") {
                return Err("a lost-events marker from another line".into());
            }
        }
        Err(_) => {}
    }
    Ok(verdict(&parsed))
}
