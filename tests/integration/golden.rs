//! The binary against the fixture trees: `/metrics` must equal tests/fixtures/e2e-output.txt
//! once the series that vary from run to run are removed. `UPDATE_GOLDEN=1` rewrites the file.

use crate::util::{fixtures, Exporter};

/// Families whose values change between runs (timings, this process, the build).
const VOLATILE: &[&str] = &[
    "memlock_scrape_collector_duration_seconds",
    "memlock_exporter_collector_sample_age_seconds",
    "memlock_exporter_build_info",
    "memlock_exporter_heap_allocated_bytes",
    "memlock_exporter_config_last_reload_success_timestamp_seconds",
    "process_",
];

pub fn stable(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let name = line
            .strip_prefix("# HELP ")
            .or_else(|| line.strip_prefix("# TYPE "))
            .unwrap_or(line)
            .split([' ', '{'])
            .next()
            .unwrap_or("");
        if VOLATILE.iter().any(|v| name.starts_with(v)) {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[test]
fn fixture_tree_output_matches_the_golden_file() {
    let root = fixtures();
    let procfs = root.join("proc");
    let sysfs = root.join("sys");
    // RDMA netlink asks the running kernel, not a file tree, and rdma_caps the machine's
    // libibverbs: their output would depend on the machine, so live tests cover them instead.
    let exporter = Exporter::start(&[
        "--path.procfs",
        procfs.to_str().unwrap(),
        "--path.sysfs",
        sysfs.to_str().unwrap(),
        "--no-collector.rdma_netlink",
        "--no-collector.rdma_caps",
    ]);
    let (status, body) = exporter.get("/metrics");
    assert_eq!(status, 200);
    let actual = stable(&body);
    let golden_path = root.join("e2e-output.txt");
    // Also kept whole for `promtool check metrics` in scripts/test.sh.
    let _ = std::fs::write(std::env::temp_dir().join("memlock-exporter-e2e-full.txt"), &body);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&golden_path, &actual).expect("write golden file");
        return;
    }
    let expected = std::fs::read_to_string(&golden_path).expect("golden file exists; create it with UPDATE_GOLDEN=1");
    if actual != expected {
        let diff: Vec<String> = expected
            .lines()
            .filter(|l| !actual.lines().any(|a| a == *l))
            .map(|l| format!("- {l}"))
            .chain(actual.lines().filter(|l| !expected.lines().any(|e| e == *l)).map(|l| format!("+ {l}")))
            .collect();
        panic!("/metrics differs from {} (UPDATE_GOLDEN=1 to accept):\n{}", golden_path.display(), diff.join("\n"));
    }
    // Every enabled collector succeeded on the fixture tree.
    for line in actual.lines().filter(|l| l.starts_with("memlock_scrape_collector_success{")) {
        assert!(line.ends_with(" 1"), "{line}");
    }
}

#[test]
fn fixture_values_match_the_fixture_files() {
    let root = fixtures();
    let exporter = Exporter::start(&[
        "--path.procfs",
        root.join("proc").to_str().unwrap(),
        "--path.sysfs",
        root.join("sys").to_str().unwrap(),
    ]);
    let m = exporter.metrics();
    assert_eq!(m.value("memlock_node_mlocked_bytes"), (503424u64 * 1024) as f64);
    assert_eq!(m.value("memlock_node_memory_available_bytes"), (23786376u64 * 1024) as f64);
    // (72960 - 70656) pages of 4 KiB.
    assert_eq!(m.value("memlock_node_pinned_bytes"), (2304u64 * 4096) as f64);
    assert_eq!(m.value("memlock_node_hugepages{size_bytes=\"2097152\",state=\"total\"}"), 1024.0);
    assert_eq!(m.value("memlock_node_hugepages{size_bytes=\"2097152\",state=\"free\"}"), 924.0);
    assert_eq!(m.value("memlock_node_cma_free_bytes"), (131072u64 * 1024) as f64);
    assert_eq!(m.value("memlock_numa_mlocked_bytes{numa_node=\"1\"}"), 0.0);
    assert_eq!(m.value("memlock_numa_pinned_bytes{numa_node=\"0\"}"), (1792u64 * 4096) as f64);
    assert!(
        m.get("memlock_numa_hugepages{numa_node=\"0\",size_bytes=\"2097152\",state=\"reserved\"}").is_none(),
        "per-node pools have no reserved count"
    );
}
