//! The fuzz targets: every parser of kernel, network and user input, each with its seed corpus
//! and its oracle (the properties its output must have beyond not panicking).
//!
//! One registry, two engines: `tests/fuzz/main.rs` mutates the seeds for a bounded time under
//! `cargo test --test fuzz` (stable, deterministic, replayable), and `fuzz/` runs the same
//! targets under libFuzzer with coverage guidance (`scripts/fuzz.sh`, see docs/reliability.md).
//! This file is a module of that test and the library of the crate in `fuzz/`; the exporter
//! itself ships none of it. An oracle is a thin call into a parser's public API.

use std::path::{Path, PathBuf};
use std::time::Duration;

use memlock_exporter::config::{self, ConfigError, Sources};
use memlock_exporter::exposition::{Exposition, Kind};
use memlock_exporter::kernel::nldev::{self, cmd, nldev_type, ReplyReader};
use memlock_exporter::kernel::{
    self, cgroup_path, memcg, meminfo, pid_cgroup, pid_limits, pid_status, proc_cgroups, rdma_cgroup, rdma_sysfs,
    sysvm, uid_map, vmstat,
};

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

fn check_nvidia_version(bytes: &[u8]) -> Result<Verdict, String> {
    use memlock_exporter::kernel::versions;
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

fn check_maps_nccl(bytes: &[u8]) -> Result<Verdict, String> {
    use memlock_exporter::kernel::versions;
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

// ---------------------------------------------------------------------------------------------
// Seeds: fixture files picked by name, read at run time so new fixtures join by themselves.

/// The repository: the manifest directory of the tests, the parent of fuzz/'s (this file is
/// compiled in both).
fn repository() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.ancestors().find(|dir| dir.join("tests/fixtures").is_dir()).unwrap_or(manifest).to_path_buf()
}

fn fixtures() -> PathBuf {
    repository().join("tests/fixtures")
}

/// Every regular file under `dir` (symlinks not followed), with its path.
fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<_> = entries.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let Ok(kind) = entry.file_type() else { continue };
        if kind.is_dir() {
            walk(&entry.path(), out);
        } else if kind.is_file() {
            out.push(entry.path());
        }
    }
}

fn fixture_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    walk(&fixtures(), &mut files);
    files
}

fn dedup(mut seeds: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    seeds.sort();
    seeds.dedup();
    seeds
}

/// The contents of the fixture files whose name satisfies `pick`, deduplicated.
fn corpus(pick: impl Fn(&str) -> bool) -> Vec<Vec<u8>> {
    dedup(
        fixture_files()
            .iter()
            .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(&pick))
            .filter_map(|p| std::fs::read(p).ok())
            .collect(),
    )
}

fn strings(items: &[&str]) -> Vec<Vec<u8>> {
    items.iter().map(|s| s.as_bytes().to_vec()).collect()
}

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

/// Configuration files: the shipped example, and one file per section and shape.
fn config_seeds() -> Vec<Vec<u8>> {
    let root = repository();
    let mut seeds: Vec<Vec<u8>> = std::fs::read(root.join("docs/config.example.toml")).into_iter().collect();
    seeds.extend(strings(&[
        "[web]\nlisten_address = \"127.0.0.1:9478\"\ntelemetry_path = \"/metrics\"\nmax_requests = 40\n",
        "[collector.process]\ninterval = \"1s\"\nfull_scan_interval = \"5s\"\nmin_bytes = 1048576\ncomm_pattern \
            = \"^python\"\ntop_n = 200\n",
        "[collector.cgroup]\nenabled = true\ninclude = [\"^/kubepods\"]\nexclude = [\"^/system.slice\"]\nmax_depth = \
            12\n",
        "[collector.rdma_netlink]\nenabled = false\n[collector.rdma_sysfs]\ninterval = \"5s\"\ninclude = \
            [\"^mlx5_\"]\n",
        "[trend]\nwindow = \"30s\"\nmin_rise_bytes_per_second = 4096\n",
        "[alerting]\nalertmanager_urls = [\"http://127.0.0.1:9093\"]\ninstance = \"node-1\"\nresend_interval \
            = \"30s\"\nusage_ratio_warning = 0.9\n",
        "[log]\nlevel = \"debug\"\nformat = \"json\"\n[path]\nprocfs = \"/host/proc\"\nsysfs = \"/host/sys\"\n",
        "",
    ]));
    seeds
}

/// Web configurations. The shipped example names certificates that do not exist here, so
/// files with `cert_file` are left out.
fn web_config_seeds() -> Vec<Vec<u8>> {
    let root = repository();
    let mut seeds = strings(&[
        "http_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n    Strict-Transport-Security: \
            max-age=31536000\n",
        "basic_auth_users:\n  prometheus: $2y$10$X0h1bKHBCrqPjRsAUyRHLOHRyv0GHdNjUJ8o4gYFaVqVbIRMGNY9O\n",
        "# nothing\n",
    ]);
    seeds.push(std::fs::read(root.join("packaging/web-config.example.yml")).unwrap_or_default());
    seeds.retain(|s| !s.is_empty() && !s.windows(9).any(|w| w == b"cert_file"));
    seeds
}

// ---------------------------------------------------------------------------------------------
// Oracles.

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
    let exported = memlock_exporter::exposition::label_value(&label);
    if exported.len() > memlock_exporter::exposition::MAX_LABEL_VALUE_BYTES || exported.chars().any(char::is_control) {
        return Err(format!("label {label:?} is exported as {exported:?}: too long or with control characters"));
    }
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

/// Through a real file, as the daemon reads it; an error must name the file or the key.
fn check_config_file(bytes: &[u8]) -> Result<Verdict, String> {
    let path = scratch_file("config_file");
    std::fs::write(&path, bytes).map_err(|e| e.to_string())?;
    let shown = path.display().to_string();
    let sources = Sources { file: Some(path), env: Some(Default::default()), flags: Vec::new() };
    match config::load(&sources) {
        Ok(cfg) => {
            let bad_interval = cfg
                .collectors
                .iter()
                .find(|c| c.interval < Duration::from_millis(100) || c.interval > Duration::from_secs(3600));
            if let Some(c) = bad_interval {
                return Err(format!("collector {} accepted with interval {:?}", c.name, c.interval));
            }
            let no_top_n = cfg.settings::<config::ProcessConfig>("process").is_none_or(|p| p.top_n == 0);
            if !cfg.telemetry_path.starts_with('/') || no_top_n {
                return Err(format!("accepted an invalid configuration: {cfg:?}"));
            }
            Ok(Verdict::Accepted)
        }
        Err(err) => {
            let message = err.to_string();
            let clear = match &err {
                ConfigError::File { .. } | ConfigError::Other(_) => message.contains(&shown),
                ConfigError::UnknownKey { key, .. } | ConfigError::Invalid { key, .. } => {
                    !key.is_empty() && message.contains(key.as_str())
                }
            };
            if !clear {
                return Err(format!("the error does not name the file or the key: {message}"));
            }
            Ok(Verdict::Rejected)
        }
    }
}

fn check_web_config_file(bytes: &[u8]) -> Result<Verdict, String> {
    let path = scratch_file("web_config_file");
    std::fs::write(&path, bytes).map_err(|e| e.to_string())?;
    match memlock_exporter::web::load(Some(&path)) {
        Ok(_) => Ok(Verdict::Accepted),
        Err(err) if err.to_string().contains(&path.display().to_string()) => Ok(Verdict::Rejected),
        Err(err) => Err(format!("the error does not name the file: {err}")),
    }
}

fn check_nccl_environment(bytes: &[u8]) -> Result<Verdict, String> {
    use memlock_exporter::preflight::nccl::env::{self, Environment};
    use memlock_exporter::preflight::nccl::param::{strtoll, Parse, Strtoll};
    let env = Environment::from_pairs(env::conf_lines(bytes));
    let problems = env::problems(&env);
    for p in &problems {
        // Every problem is about an NCCL variable of the input, and says what it is.
        if !p.name.starts_with("NCCL_") || env.effective().all(|e| e.name_lossy() != p.name) || p.fix.is_empty() {
            return Err(format!("{p:?}"));
        }
    }
    // What NCCL accepts is never reported: a whole number for an NCCL_PARAM variable outside the
    // few whose values are range-checked.
    for e in env.effective() {
        let Some(var) = std::str::from_utf8(&e.name).ok().and_then(env::variable) else { continue };
        let checked = ["NCCL_IB_QPS_PER_CONNECTION", "NCCL_BUFFSIZE", "NCCL_LL_BUFFSIZE", "NCCL_LL128_BUFFSIZE"];
        if var.parse == Parse::Strtoll
            && !checked.contains(&var.name)
            && matches!(strtoll(&e.value, 0), Strtoll::Whole(_))
            && problems.iter().any(|p| p.name == var.name)
        {
            return Err(format!("{} flagged for a value NCCL accepts: {:?}", var.name, e.value_shown()));
        }
    }
    Ok(if problems.is_empty() { Verdict::Accepted } else { Verdict::Rejected })
}

fn check_duration(bytes: &[u8]) -> Result<Verdict, String> {
    let parsed = config::parse_duration(&text(bytes));
    if let Ok(d) = parsed {
        if d.as_secs_f64().is_nan() {
            return Err(format!("{d:?}"));
        }
    }
    Ok(verdict(&parsed))
}

fn check_listen_address(bytes: &[u8]) -> Result<Verdict, String> {
    Ok(verdict(&config::split_listen_address(&text(bytes))))
}

fn check_alertmanager_url(bytes: &[u8]) -> Result<Verdict, String> {
    let parsed = config::Endpoint::parse(&text(bytes));
    if let Ok(endpoint) = &parsed {
        let authority = endpoint.base.strip_prefix("http://").and_then(|rest| rest.split('/').next()).unwrap_or("");
        if authority.is_empty() || authority.contains('@') || !endpoint.alerts_url().ends_with("/api/v2/alerts") {
            return Err(format!("accepted {endpoint:?}"));
        }
    }
    Ok(verdict(&parsed))
}

fn check_basic_authorization(bytes: &[u8]) -> Result<Verdict, String> {
    let parsed = memlock_exporter::web::parse_basic_authorization(bytes);
    if let Some((user, _)) = &parsed {
        if user.contains(':') {
            return Err(format!("user {user:?} contains the separator"));
        }
    }
    Ok(if parsed.is_some() { Verdict::Accepted } else { Verdict::Rejected })
}

/// Label values come from the host: command names, cgroup directory names, sysfs strings.
/// Whatever they hold, the sample stays on one line and its values round-trip as
/// [`memlock_exporter::exposition::label_value`] bounds them: at most its bound, without control characters.
fn check_exposition_labels(bytes: &[u8]) -> Result<Verdict, String> {
    let value = text(bytes).into_owned();
    let mut out = Exposition::new();
    out.family("memlock_fuzz_bytes", "A\nhelp \\ text.", Kind::Gauge)
        .sample(&[("comm", value.as_str()), ("cgroup", "/")], 1u64);
    let rendered = out.finish();
    let lines: Vec<&str> = rendered.lines().collect();
    if lines.len() != 3
        || !lines[0].starts_with("# HELP memlock_fuzz_bytes ")
        || lines[1] != "# TYPE memlock_fuzz_bytes gauge"
    {
        return Err(format!("not three lines: {rendered:?}"));
    }
    let values = parse_sample(lines[2])?;
    let bounded = memlock_exporter::exposition::label_value(&value);
    if values != [bounded.as_ref(), "/"] {
        return Err(format!("label values do not round-trip: {values:?} from {value:?}"));
    }
    if bounded.len() > memlock_exporter::exposition::MAX_LABEL_VALUE_BYTES || bounded.chars().any(char::is_control) {
        return Err(format!("{value:?} is exported as {bounded:?}: too long or with control characters"));
    }
    Ok(Verdict::Accepted)
}

/// One sample line of the text format: `name{k="v",...} value`, with every label value closed
/// and escaped. Returns the label values unescaped.
fn parse_sample(line: &str) -> Result<Vec<String>, String> {
    let Some(open) = line.find('{') else { return Err(format!("no labels in {line:?}")) };
    let mut values = Vec::new();
    let mut rest = &line[open + 1..];
    loop {
        let eq = rest.find("=\"").ok_or_else(|| format!("no =\" in {line:?}"))?;
        rest = &rest[eq + 2..];
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c @ ('\\' | '"'))) => value.push(c),
                    other => return Err(format!("bad escape {other:?} in {line:?}")),
                },
                Some((i, '"')) => break i,
                Some((_, '\n')) => return Err(format!("raw newline in {line:?}")),
                Some((_, c)) => value.push(c),
                None => return Err(format!("unterminated label value in {line:?}")),
            }
        };
        values.push(value);
        rest = &rest[end + 1..];
        if let Some(after) = rest.strip_prefix(',') {
            rest = after;
        } else if let Some(after) = rest.strip_prefix("} ") {
            after.parse::<f64>().map_err(|e| format!("value {after:?}: {e}"))?;
            return Ok(values);
        } else {
            return Err(format!("junk after a label value in {line:?}"));
        }
    }
}
