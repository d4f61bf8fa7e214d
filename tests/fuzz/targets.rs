//! The fuzz targets: every parser of kernel, network and user input, each with its seed corpus
//! and its oracle (the properties its output must have beyond not panicking).
//!
//! One registry, two engines: `tests/fuzz/main.rs` mutates the seeds for a bounded time under
//! `cargo test --test fuzz` (stable, deterministic, replayable), and `fuzz/` runs the same
//! targets under libFuzzer with coverage guidance (`scripts/fuzz.sh`, see docs/reliability.md).
//! This file is a module of that test and the library of the crate in `fuzz/`; the exporter
//! itself ships none of it. An oracle is a thin call into a parser's public API.

use std::path::{Path, PathBuf};

// Paths from this file's directory, the same whether it is the fuzz crate's root or a module of
// the fuzz test (where a plain `mod` would look in tests/fuzz/ for one and tests/fuzz/targets/
// for the other).
#[path = "targets/oracles.rs"]
mod oracles;
#[path = "targets/seeds.rs"]
mod seeds;

use oracles::*;
use seeds::*;

/// What a parser made of one input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Accepted,
    Rejected,
}

/// What a bounded run of a target must show besides surviving every case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Some mutated inputs are accepted and some rejected: the mutations reach both paths.
    BothPaths,
    /// The parser is total (it accepts anything); only accepted inputs are required.
    AlwaysAccepts,
}

pub struct Target {
    /// Also the name of the libFuzzer binary in `fuzz/`.
    pub name: &'static str,
    pub expect: Expect,
    /// Valid inputs: every seed must be accepted.
    pub seeds: fn() -> Vec<Vec<u8>>,
    /// `Err` when an oracle breaks; a panic is a finding too.
    pub check: fn(&[u8]) -> Result<Verdict, String>,
}

/// Every target, in the order of docs/reliability.md's table.
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
    Target { name: "config_file", expect: Expect::BothPaths, seeds: config_seeds, check: check_config_file },
    Target {
        name: "web_config_file",
        expect: Expect::BothPaths,
        seeds: web_config_seeds,
        check: check_web_config_file,
    },
    Target {
        name: "duration",
        expect: Expect::BothPaths,
        seeds: || strings(&["1s", "500ms", "1.5s", "2m", "1h", "30s"]),
        check: check_duration,
    },
    Target {
        name: "listen_address",
        expect: Expect::BothPaths,
        seeds: || strings(&[":9478", "127.0.0.1:9478", "[::1]:9478", "0.0.0.0:0"]),
        check: check_listen_address,
    },
    Target {
        name: "alertmanager_url",
        expect: Expect::BothPaths,
        seeds: || strings(&["http://127.0.0.1:9093", "http://am.example:9093/prefix/"]),
        check: check_alertmanager_url,
    },
    // "prometheus:secret" and "a:" in base64: headers arrive from any client.
    Target {
        name: "basic_authorization",
        expect: Expect::BothPaths,
        seeds: || strings(&["Basic cHJvbWV0aGV1czpzZWNyZXQ=", "basic YTo=", "Basic  cHJvbWV0aGV1czpzZWNyZXQ= "]),
        check: check_basic_authorization,
    },
    Target {
        name: "exposition_labels",
        expect: Expect::AlwaysAccepts,
        seeds: || strings(&["python3", "/kubepods.slice/x\"y\\z", "a\nb", "mlx5_0", "é\u{1F600}"]),
        check: check_exposition_labels,
    },
    // An NCCL configuration file as NCCL parses it (one NAME=value a line), each variable judged
    // as NCCL reads it: `check` runs on whatever the job's environment and /etc/nccl.conf hold.
    Target {
        name: "nccl_environment",
        expect: Expect::BothPaths,
        seeds: || {
            strings(&[
                "NCCL_DEBUG=INFO\nNCCL_IB_GID_INDEX=-1\n",
                "# comment\nNCCL_BUFFSIZE=0x400000\r\nNCCL_IB_HCA=^mlx5_2\n",
                "NCCL_MIN_NRINGS=4\nNCCL_P2P_LEVEL=NVL\nHOME=/root\n",
            ])
        },
        check: check_nccl_environment,
    },
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
    // A job's NCCL_DEBUG=INFO log as `estimate --nccl-log` and `check --nccl-log` read it: the
    // written and public logs of tests/fixtures/nccl-logs, and hostile prefixes, cut lines and
    // interleaved writers.
    Target {
        name: "nccl_log",
        expect: Expect::BothPaths,
        seeds: || {
            let mut seeds = corpus(|n| n.ends_with(".log"));
            seeds.extend(strings(&[
                "[1,3]<stdout>:h:1:2 [3] NCCL INFO Channel 03/1 : 11[3] -> 2[3] [send] via \
                 NET/IB/3(1)/GDRDMA(PCI)/Shared\n",
                "3: h:1:2 [0] NCCL INFO Channel 00 : 0[1000] -> 1[2000] [receive] via NET/AWS Libfabric/0\r\n",
                "[rank3]:h:1:2 [0] x.cc:1 (f) NCCL WARN Call to ibv_reg_mr_iova2 failed with error Cannot \
                 allocate memory\n",
                "h: h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [seh:3:4 [1] NCCL INFO NCCL version \
                 2.30.7+cuda12.9",
            ]));
            seeds
        },
        check: check_nccl_log,
    },
];

pub fn find(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}

/// Writes each target's seeds to `dir/<target>/seed-<n>`, the layout libFuzzer reads a corpus
/// from. Returns how many files were written.
pub fn write_corpus(dir: &Path) -> std::io::Result<usize> {
    let mut written = 0;
    for target in TARGETS {
        let out = dir.join(target.name);
        std::fs::create_dir_all(&out)?;
        for (index, seed) in (target.seeds)().iter().enumerate() {
            std::fs::write(out.join(format!("seed-{index}")), seed)?;
            written += 1;
        }
    }
    Ok(written)
}

/// The file a target that loads real files writes its input to: one per process and target.
pub fn scratch_file(target: &str) -> PathBuf {
    std::env::temp_dir().join(format!("memlock-fuzz-{}-{target}", std::process::id()))
}

/// Text as the collectors see it: `fsroot::read_into` replaces invalid UTF-8.
fn text(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(bytes)
}

fn verdict<T, E>(result: &Result<T, E>) -> Verdict {
    if result.is_ok() {
        Verdict::Accepted
    } else {
        Verdict::Rejected
    }
}

/// Same result after appending a line the parser must skip.
fn unchanged_by<T: PartialEq + std::fmt::Debug>(
    parse: impl Fn(&str) -> T,
    text: &str,
    extra: &str,
) -> Result<(), String> {
    let before = parse(text);
    let after = parse(&format!("{text}\n{extra}\n"));
    if before != after {
        return Err(format!("appending {extra:?} changed the result from {before:?} to {after:?}"));
    }
    Ok(())
}
