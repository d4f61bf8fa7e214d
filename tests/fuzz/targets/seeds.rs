//! The seed corpora: fixture files picked by name, read at run time so new fixtures join by
//! themselves, and inputs written here where no fixture has them.

use std::path::{Path, PathBuf};

/// The repository: the manifest directory of the tests, the parent of fuzz/'s (this file is
/// compiled in both).
pub(super) fn repository() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.ancestors().find(|dir| dir.join("tests/fixtures").is_dir()).unwrap_or(manifest).to_path_buf()
}

pub(super) fn fixtures() -> PathBuf {
    repository().join("tests/fixtures")
}

/// Every regular file under `dir` (symlinks not followed), with its path.
pub(super) fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
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

pub(super) fn fixture_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    walk(&fixtures(), &mut files);
    files
}

pub(super) fn dedup(mut seeds: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    seeds.sort();
    seeds.dedup();
    seeds
}

/// The contents of the fixture files whose name satisfies `pick`, deduplicated.
pub(super) fn corpus(pick: impl Fn(&str) -> bool) -> Vec<Vec<u8>> {
    dedup(
        fixture_files()
            .iter()
            .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(&pick))
            .filter_map(|p| std::fs::read(p).ok())
            .collect(),
    )
}

pub(super) fn strings(items: &[&str]) -> Vec<Vec<u8>> {
    items.iter().map(|s| s.as_bytes().to_vec()).collect()
}

/// Memory cgroup files by name, also as the captured root files (`cgv1_root_<file>`).
pub(super) fn memcg_seeds(files: &[&str]) -> Vec<Vec<u8>> {
    corpus(|n| files.iter().any(|f| n == *f || n == format!("cgv1_root_{f}")))
}

/// `memory.stat` exists in both hierarchies with different keys: v2 has an `anon` line, v1
/// only `active_anon` and the like.
pub(super) fn memory_stat_seeds(v2: bool) -> Vec<Vec<u8>> {
    let is_v2 = |seed: &Vec<u8>| String::from_utf8_lossy(seed).lines().any(|line| line.starts_with("anon "));
    memcg_seeds(&["memory.stat"]).into_iter().filter(|s| is_v2(s) == v2).collect()
}

/// Single-number sysfs, sysctl and memory cgroup files (hugepage pools, vm sysctls, counters).
pub(super) fn single_number_seeds() -> Vec<Vec<u8>> {
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

pub(super) fn rdma_counter_seeds() -> Vec<Vec<u8>> {
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
pub(super) fn cgroup_path_seeds() -> Vec<Vec<u8>> {
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
pub(super) fn netlink_samples() -> Vec<Vec<u8>> {
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
pub(super) fn config_seeds() -> Vec<Vec<u8>> {
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
pub(super) fn web_config_seeds() -> Vec<Vec<u8>> {
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
