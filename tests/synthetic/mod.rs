//! Synthetic hosts in the real kernel formats, for the scale benchmarks and tests: procfs trees
//! of any number of processes (`status`, `limits` and `cgroup` from the captures) and cgroup v1
//! memory hierarchies of Kubernetes pods (the files and values a 6.x kernel shows), written to a
//! directory. Shared by `benches/process_scan.rs`, `benches/cgroup_scan.rs` and the scale tests
//! (`tests/integration/scale/`), which include it by path.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

pub const STATUS: &str = include_str!("../fixtures/captures/proc_self_status");
pub const LIMITS: &str = include_str!("../fixtures/captures/proc_self_limits");
pub const CGROUP: &str = include_str!("../fixtures/captures/proc_self_cgroup_hybrid_v1");
pub const UID_MAP: &str = include_str!("../fixtures/captures/proc_self_uid_map");

/// What v1 prints for "no limit" with 4 KiB pages.
pub const V1_UNLIMITED: u64 = 9223372036854771712;

/// One process directory: the captured `status` with this name, pid and `VmPin`, and no
/// capabilities (the capture is root's; training workers run as users), the captured `limits`
/// (8 MiB memlock), the captured hybrid `cgroup` with its memory line pointing at
/// `memory_cgroup`, and the initial namespace's `uid_map`.
pub fn write_process(procfs: &Path, pid: u32, name: &str, pinned_kib: u64, memory_cgroup: &str) -> std::io::Result<()> {
    let dir = procfs.join(pid.to_string());
    std::fs::create_dir_all(&dir)?;
    let status = STATUS
        .replace("Name:\tcat", &format!("Name:\t{name}"))
        .replace("Pid:\t15717", &format!("Pid:\t{pid}"))
        .replace("VmPin:\t       0 kB", &format!("VmPin:\t{pinned_kib:>8} kB"))
        .replace("CapEff:\t000001fffeffffff", "CapEff:\t0000000000000000");
    std::fs::write(dir.join("status"), status)?;
    std::fs::write(dir.join("limits"), LIMITS)?;
    std::fs::write(dir.join("uid_map"), UID_MAP)?;
    std::fs::write(dir.join("cgroup"), CGROUP.replace("/process_api/dd1899f89d55a02163c5f19a2de9845b", memory_cgroup))
}

/// The mix of a GPU node: 1 process in 100 pins 9 GiB (an RDMA worker, `pt_main_thread`), 1 in
/// 100 is named `python3` (caught by the default comm pattern), the rest are `worker`s.
pub fn process_mix(index: u32) -> (&'static str, u64) {
    match index % 100 {
        0 => ("pt_main_thread", 9437184),
        1 => ("python3", 0),
        _ => ("worker", 0),
    }
}

/// A procfs of `processes` processes with pids from `first_pid`, in the [`process_mix`], each
/// in the memory cgroup `cgroup_of(index)`; plus the non-pid entries every procfs has.
pub fn write_procfs(
    root: &Path,
    first_pid: u32,
    processes: u32,
    cgroup_of: impl Fn(u32) -> String,
) -> std::io::Result<()> {
    std::fs::create_dir_all(root)?;
    for name in ["meminfo", "self"] {
        if !root.join(name).exists() {
            std::fs::write(root.join(name), "")?;
        }
    }
    for i in 0..processes {
        let (name, pinned_kib) = process_mix(i);
        write_process(root, first_pid + i, name, pinned_kib, &cgroup_of(i))?;
    }
    Ok(())
}

/// The files of one v1 memory cgroup, as a 6.x kernel lists them (the ones the collector does
/// not read are there too: they make readdir cost what it costs on a real host).
pub fn write_memory_cgroup(dir: &Path, usage: u64, limit: u64) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let stat = format!(
        "cache 1048576\nrss {usage}\nrss_huge 0\nshmem 0\nmapped_file 524288\ndirty 4096\nwriteback \
            0\nworkingset_refault_anon 0\n\
         workingset_refault_file 12\nswap 0\nswapcached 0\npgpgin 2345\npgpgout 1234\npgfault 34567\npgmajfault \
         3\ninactive_anon {usage}\n\
         active_anon 0\ninactive_file 524288\nactive_file 524288\nunevictable 0\nhierarchical_memory_limit {limit}\n\
         hierarchical_memsw_limit 9223372036854771712\ntotal_cache 1048576\ntotal_rss {usage}\ntotal_rss_huge \
         0\ntotal_shmem 0\n\
         total_mapped_file 524288\ntotal_dirty 4096\ntotal_writeback 0\ntotal_workingset_refault_anon \
         0\ntotal_workingset_refault_file 12\n\
         total_swap 0\ntotal_swapcached 0\ntotal_pgpgin 2345\ntotal_pgpgout 1234\ntotal_pgfault \
         34567\ntotal_pgmajfault 3\n\
         total_inactive_anon {usage}\ntotal_active_anon 0\ntotal_inactive_file 524288\ntotal_active_file \
         524288\ntotal_unevictable 0\n"
    );
    let files: [(&str, String); 16] = [
        ("cgroup.clone_children", "0\n".into()),
        ("cgroup.procs", String::new()),
        ("memory.failcnt", "0\n".into()),
        ("memory.limit_in_bytes", format!("{limit}\n")),
        ("memory.max_usage_in_bytes", format!("{}\n", usage + 1048576)),
        ("memory.memsw.limit_in_bytes", "9223372036854771712\n".into()),
        ("memory.move_charge_at_immigrate", "0\n".into()),
        ("memory.numa_stat", "total=256 N0=256\nfile=0 N0=0\nanon=256 N0=256\nunevictable=0 N0=0\n".into()),
        ("memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n".into()),
        ("memory.soft_limit_in_bytes", "9223372036854771712\n".into()),
        ("memory.stat", stat),
        ("memory.swappiness", "60\n".into()),
        ("memory.usage_in_bytes", format!("{usage}\n")),
        ("memory.use_hierarchy", "1\n".into()),
        ("notify_on_release", "0\n".into()),
        ("tasks", String::new()),
    ];
    for (name, text) in files {
        std::fs::write(dir.join(name), text)?;
    }
    Ok(())
}

/// The cgroup path (below the memory hierarchy's root) of pod `pod` (systemd driver, burstable).
pub fn pod_path(pod: usize) -> String {
    format!(
        "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{pod:08x}_2a43_4a3b_9c1e_2f1d0c7a9e11.slice"
    )
}

/// The cgroup path of container `container` of pod `pod`: a containerd scope with a 64-hex id.
pub fn container_path(pod: usize, container: usize) -> String {
    format!("{}/cri-containerd-{:016x}{:048x}.scope", pod_path(pod), pod, container)
}

/// A v1 memory hierarchy at `memory` (its root included): `kubepods.slice` with its QoS slices
/// and `pods` burstable pods of `containers_per_pod` containers, each pod limited to 1 GiB.
/// Returns every cgroup directory, parents first: `4 + pods * (1 + containers_per_pod)`.
pub fn write_kubepods(memory: &Path, pods: usize, containers_per_pod: usize) -> std::io::Result<Vec<PathBuf>> {
    let mut dirs = Vec::new();
    let mut add = |dir: PathBuf, usage: u64, limit: u64| -> std::io::Result<()> {
        write_memory_cgroup(&dir, usage, limit)?;
        dirs.push(dir);
        Ok(())
    };
    add(memory.to_owned(), 8 << 30, V1_UNLIMITED)?;
    let kubepods = memory.join("kubepods.slice");
    add(kubepods.clone(), 6 << 30, 200 << 30)?;
    add(kubepods.join("kubepods-besteffort.slice"), 0, 200 << 30)?;
    add(kubepods.join("kubepods-burstable.slice"), 6 << 30, 200 << 30)?;
    for pod in 0..pods {
        add(memory.join(&pod_path(pod)[1..]), 3 << 20, 1 << 30)?;
        for container in 0..containers_per_pod {
            add(memory.join(&container_path(pod, container)[1..]), 1 << 20, 1 << 30)?;
        }
    }
    Ok(dirs)
}

/// Copies a directory tree, recreating symlinks as symlinks (the sysfs fixtures link devices).
pub fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type()?;
        if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&source)?, &target)?;
        } else if kind.is_dir() {
            copy_tree(&source, &target)?;
        } else {
            std::fs::copy(&source, &target)?;
        }
    }
    Ok(())
}

/// A `kB` field of a `/proc/<pid>/status` file (`VmRSS`, `VmHWM`), in KiB: what the benchmarks
/// and the scale tests report as memory.
pub fn status_kib(status_file: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(status_file).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// A `maps` file of `areas` lines in the kernel's format (fs/proc/task_mmu.c `show_map_vma`: the
/// header, then the path padded to column 73), like a PyTorch rank's: shared objects of the
/// virtual environment and anonymous areas, with `nccl` (a `libnccl.so*` path) mapped four fifths
/// of the way down, where a library loaded after start-up lands.
pub fn write_maps(dir: &Path, areas: usize, nccl: Option<&str>) -> std::io::Result<()> {
    use std::fmt::Write as _;
    let libraries = [
        "/usr/bin/python3.11",
        "/usr/lib/x86_64-linux-gnu/libc.so.6",
        "/opt/venv/lib/python3.11/site-packages/torch/lib/libtorch_cuda.so",
        "/opt/venv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so",
        "/opt/venv/lib/python3.11/site-packages/nvidia/cublas/lib/libcublasLt.so.12",
        "/usr/lib/x86_64-linux-gnu/libcuda.so.570.86.15",
        "/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.50.0",
        "/usr/lib/x86_64-linux-gnu/libibverbs/libmlx5-rdmav34.so",
    ];
    let mut text = String::with_capacity(areas * 110);
    let mut start = 0x7f00_0000_0000u64;
    for i in 0..areas {
        let end = start + 0x21000;
        let (perms, offset, dev, inode, path) = if nccl.is_some() && i == areas * 4 / 5 {
            ("r-xp", 0x6000u64, "fd:01", 5377114u64, nccl.unwrap_or_default())
        } else if i % 3 == 0 {
            ("rw-p", 0, "00:00", 0, "")
        } else {
            ("r--p", (i as u64 % 7) << 12, "fd:01", 1_000_000 + i as u64 % 8, libraries[i % libraries.len()])
        };
        let header = format!("{start:08x}-{end:08x} {perms} {offset:08x} {dev} {inode} ");
        if path.is_empty() {
            let _ = writeln!(text, "{header}");
        } else {
            let _ = writeln!(text, "{header:<73}{path}");
        }
        start = end + 0x1000;
    }
    std::fs::write(dir.join("maps"), text)
}
