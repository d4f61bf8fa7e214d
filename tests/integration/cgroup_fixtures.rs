//! The cgroup collector against fixture trees of every layout: pure v2
//! (tests/fixtures/cgroup-v2), pure v1 with 64 KiB pages (tests/fixtures/cgroup-v1) and the
//! hybrid main tree (tests/fixtures/sys). Each layout's rendered output is diffed with a golden
//! file beside its tree; `UPDATE_GOLDEN=1` rewrites them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use memlock_core::collect::cgroup::{CgroupCollector, CgroupStats, Layout};
use memlock_core::config::CgroupConfig;
use memlock_core::exposition::Exposition;
use memlock_kernel::fsroot::{Roots, SourceError};
use memlock_kernel::memcg::Limit;
use regex::Regex;

use crate::util::{fixtures, Metrics};

const HEX: &str = "3f2b6c1d8e9a0b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c";
const POD: &str =
    "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod6b0e3b1a_2a43_4a3b_9c1e_2f1d0c7a9e11.slice";
const GIB: u64 = 1 << 30;

fn config() -> CgroupConfig {
    CgroupConfig { full_scan_interval: Duration::from_secs(5), include: vec![], exclude: vec![], max_depth: 12 }
}

fn collect(tree: &Path, config: CgroupConfig) -> (CgroupStats, Vec<SourceError>) {
    let roots = Roots { procfs: tree.join("proc"), sysfs: tree.join("sys") };
    let mut collector = CgroupCollector::new(roots, config);
    let mut errors = Vec::new();
    let stats = collector.read(&mut errors);
    (stats, errors)
}

fn render(stats: &CgroupStats) -> String {
    let mut out = Exposition::new();
    stats.render(&mut out);
    out.finish()
}

fn check_golden(text: &str, golden: &Path) {
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(golden, text).expect("write golden file");
        return;
    }
    let expected = std::fs::read_to_string(golden).expect("golden file exists; create it with UPDATE_GOLDEN=1");
    if text != expected {
        let diff: Vec<String> = expected
            .lines()
            .filter(|l| !text.lines().any(|a| a == *l))
            .map(|l| format!("- {l}"))
            .chain(text.lines().filter(|l| !expected.lines().any(|e| e == *l)).map(|l| format!("+ {l}")))
            .collect();
        panic!("cgroup output differs from {} (UPDATE_GOLDEN=1 to accept):\n{}", golden.display(), diff.join("\n"));
    }
}

fn tree(name: &str) -> PathBuf {
    fixtures().join(name)
}

#[test]
fn v2_tree_matches_its_golden_output() {
    let (stats, errors) = collect(&tree("cgroup-v2"), config());
    assert!(errors.is_empty(), "{errors:?}");
    check_golden(&render(&stats), &tree("cgroup-v2").join("expected.txt"));
}

#[test]
fn v1_tree_matches_its_golden_output() {
    let (stats, errors) = collect(&tree("cgroup-v1"), config());
    assert!(errors.is_empty(), "{errors:?}");
    check_golden(&render(&stats), &tree("cgroup-v1").join("expected.txt"));
}

#[test]
fn hybrid_main_tree_matches_its_golden_output() {
    let (stats, errors) = collect(&fixtures(), config());
    assert!(errors.is_empty(), "{errors:?}");
    check_golden(&render(&stats), &fixtures().join("cgroup-hybrid-expected.txt"));
}

#[test]
fn v2_effective_limits_events_and_absences() {
    let (stats, _) = collect(&tree("cgroup-v2"), config());
    assert_eq!(stats.layout, Layout::V2);
    let m = Metrics::parse(&render(&stats));
    let container = format!("{POD}/cri-containerd-{HEX}.scope");
    let labels = format!(
        "cgroup=\"{container}\",pod_uid=\"6b0e3b1a-2a43-4a3b-9c1e-2f1d0c7a9e11\",container_id=\"{HEX}\",\
         qos_class=\"burstable\""
    );
    assert_eq!(m.value(&format!("memlock_cgroup_memory_limit_bytes{{{labels}}}")), (32 * GIB) as f64);
    assert_eq!(m.value(&format!("memlock_cgroup_memory_limit_unlimited{{{labels}}}")), 0.0);
    assert_eq!(m.value(&format!("memlock_cgroup_memory_events_total{{{labels},event=\"max\"}}")), 12.0);
    assert_eq!(m.value(&format!("memlock_cgroup_memory_events_total{{{labels},event=\"oom_kill\"}}")), 1.0);
    assert_eq!(m.value(&format!("memlock_cgroup_memory_unevictable_bytes{{{labels}}}")), GIB as f64);
    // swap.max 0 is a limit of zero, not "unlimited".
    assert_eq!(m.value(&format!("memlock_cgroup_memory_swap_limit_bytes{{{labels}}}")), 0.0);
    let current: f64 =
        std::fs::read_to_string(tree("cgroup-v2").join(format!("sys/fs/cgroup{container}/memory.current")))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
    assert_eq!(m.value(&format!("memlock_cgroup_memory_usage_bytes{{{labels}}}")), current);
    // The working set is memory.current minus inactive_file of the same cgroup's memory.stat.
    assert_eq!(m.value(&format!("memlock_cgroup_memory_working_set_bytes{{{labels}}}")), current - 138936320.0);
    // A unit staging a dataset through page cache: 95% of its 4 GiB limit in use, thousands of
    // `max` events (reclaim at the limit) and no OOM, because most of it is inactive cache.
    // The working set says so; the usage would page.
    let stage = "cgroup=\"/system.slice/dataset-stage.service\",systemd_unit=\"dataset-stage.service\"";
    assert_eq!(m.value(&format!("memlock_cgroup_memory_usage_bytes{{{stage}}}")), 4081057792.0);
    assert_eq!(m.value(&format!("memlock_cgroup_memory_limit_bytes{{{stage}}}")), (4 * GIB) as f64);
    assert_eq!(
        m.value(&format!("memlock_cgroup_memory_working_set_bytes{{{stage}}}")),
        (4081057792u64 - 3355443200) as f64
    );
    assert_eq!(m.value(&format!("memlock_cgroup_memory_events_total{{{stage},event=\"max\"}}")), 4121.0);
    assert_eq!(m.value(&format!("memlock_cgroup_memory_events_total{{{stage},event=\"oom_kill\"}}")), 0.0);
    let trend = stats.observations(0.0);
    let watched = trend.iter().find(|o| o.id == "/system.slice/dataset-stage.service").unwrap();
    assert_eq!((watched.charge.used_bytes, watched.charge.headroom_bytes()), (725614592, Some(4 * GIB - 725614592)));

    // The sidecar has no limit and neither has its pod: the node allocatable of kubepods.slice applies.
    let sidecar = stats.memory.iter().find(|c| c.path().contains("cri-containerd-a1b2")).unwrap();
    assert_eq!(sidecar.limit, Some(Limit::Bytes(1920 * GIB)));
    // Slurm: the job's limit applies to the task two levels down.
    let task = stats.memory.iter().find(|c| c.path().ends_with("/task_0")).unwrap();
    assert_eq!(task.limit, Some(Limit::Bytes(64 * GIB)));
    // memory.high only where set.
    let dcgm = stats.memory.iter().find(|c| c.path() == "/system.slice/nvidia-dcgm.service").unwrap();
    assert_eq!((dcgm.high, dcgm.limit), (Some(Limit::Bytes(GIB)), Some(Limit::Bytes(2 * GIB))));
    assert_eq!(task.high, Some(Limit::Unlimited));

    // The root has memory.stat but no memory.current, memory.max or memory.events.
    assert!(m.get("memlock_cgroup_memory_usage_bytes{cgroup=\"/\"}").is_none());
    assert!(m.get("memlock_cgroup_memory_working_set_bytes{cgroup=\"/\"}").is_none(), "no usage, no working set");
    assert_eq!(m.value("memlock_cgroup_memory_limit_unlimited{cgroup=\"/\"}"), 1.0);
    assert!(m.get("memlock_cgroup_memory_unevictable_bytes{cgroup=\"/\"}").is_some());
    assert!(m.family("memlock_cgroup_memory_events_total").iter().all(|(k, _)| !k.contains("cgroup=\"/\",")));
    // A cgroup without the memory controller is walked, not exported, and not an error.
    assert!(!m.text.contains("session-3.scope"));
    // 10 under kubepods.slice and the root, 10 under system.slice, 3 under user.slice.
    assert_eq!(stats.scan.walked, 23);
    assert_eq!((stats.scan.read_errors, stats.scan.permission_denied), (0, 0));

    // rdma: current and max per device; "max" is not a number; absent at the root and where
    // the controller is not enabled.
    let rdma = |device: &str, resource: &str, kind: &str| {
        m.get(&format!("memlock_cgroup_rdma{{{labels},device=\"{device}\",resource=\"{resource}\",kind=\"{kind}\"}}"))
    };
    assert_eq!(rdma("mlx5_0", "hca_object", "current"), Some(213.0));
    assert_eq!(rdma("mlx5_0", "hca_handle", "max"), Some(2.0));
    assert_eq!(rdma("mlx5_0", "hca_handle", "current"), Some(1.0));
    // mlx5_1 is neither used nor limited in this cgroup: no pool, no series.
    assert_eq!(rdma("mlx5_1", "hca_handle", "max"), None);
    assert_eq!(rdma("mlx5_1", "hca_handle", "current"), None);
    let rdma_series = m.family("memlock_cgroup_rdma");
    assert_eq!(rdma_series.len(), 4 * 2 + 2, "4 cgroups use mlx5_0; the container also limits it");
    assert!(rdma_series
        .iter()
        .all(|(k, _)| k.contains("device=\"mlx5_0\"") && !k.contains("cgroup=\"/\",") && !k.contains("docker-")));
}

#[test]
fn v1_sentinels_for_64k_pages_and_cgroupfs_driver_paths() {
    let (stats, _) = collect(&tree("cgroup-v1"), config());
    assert_eq!(stats.layout, Layout::V1);
    let m = Metrics::parse(&render(&stats));
    let uid = "6b0e3b1a-2a43-4a3b-9c1e-2f1d0c7a9e11";
    let container = format!(
        "cgroup=\"/kubepods/burstable/pod{uid}/{HEX}\",pod_uid=\"{uid}\",container_id=\"{HEX}\",\
         qos_class=\"burstable\""
    );
    assert_eq!(m.value(&format!("memlock_cgroup_memory_limit_bytes{{{container}}}")), (32 * GIB) as f64);
    assert_eq!(m.value(&format!("memlock_cgroup_memory_events_total{{{container},event=\"max\"}}")), 1542.0);
    assert_eq!(m.value(&format!("memlock_cgroup_memory_events_total{{{container},event=\"oom_kill\"}}")), 2.0);
    assert!(
        m.get(&format!("memlock_cgroup_memory_events_total{{{container},event=\"oom\"}}")).is_none(),
        "v1 has no oom count"
    );
    assert_eq!(m.value(&format!("memlock_cgroup_memory_unevictable_bytes{{{container}}}")), (8 * GIB) as f64);
    // usage_in_bytes minus total_inactive_file, the subtree's like the usage.
    assert_eq!(
        m.value(&format!("memlock_cgroup_memory_working_set_bytes{{{container}}}")),
        (31776047104u64 - 268435456) as f64
    );
    // 9223372036854710272, the 64 KiB-page sentinel, is unlimited.
    assert_eq!(m.value("memlock_cgroup_memory_limit_unlimited{cgroup=\"/\"}"), 1.0);
    assert!(m.get("memlock_cgroup_memory_limit_bytes{cgroup=\"/\"}").is_none());
    // No swap accounting: no swap limit anywhere.
    assert!(m.family("memlock_cgroup_memory_swap_limit_bytes").is_empty());
    // The pause container has no limit of its own; the pod's applies (hierarchical_memory_limit).
    let pause = stats
        .memory
        .iter()
        .find(|c| c.path().ends_with("/77aa0e3c5b1d9f2e4a6c8b0d2f4e6a8c0b2d4f6e8a0c2b4d6f8e0a2c4b6d8f0e"))
        .unwrap();
    assert_eq!(pause.limit, Some(Limit::Bytes(32 * GIB)));
    assert!(
        m.text.contains("container_id=\"d41d8cd98f00b204e9800998ecf8427ed41d8cd98f00b204e9800998ecf8427e\""),
        "docker cgroupfs path"
    );
    assert!(m.text.contains("qos_class=\"guaranteed\""));
    assert!(m.text.contains("slurm_job=\"99\",slurm_step=\"batch\""));
    // An rdma hierarchy without devices: the controller is there, there is nothing to export.
    assert_eq!(stats.rdma_version.map(|_| ()), Some(()));
    assert!(stats.rdma.is_empty());
}

#[test]
fn hybrid_main_tree_uses_v1_memory_and_the_v1_rdma_hierarchy() {
    let (stats, _) = collect(&fixtures(), config());
    assert_eq!(stats.layout, Layout::Hybrid);
    let m = Metrics::parse(&render(&stats));
    assert_eq!(m.value("memlock_cgroup_hierarchy_info{layout=\"hybrid\",memory=\"v1\",rdma=\"v1\"}"), 1.0);
    // The root is the captured VM's, byte for byte.
    assert_eq!(m.value("memlock_cgroup_memory_usage_bytes{cgroup=\"/\"}"), 895455232.0);
    assert_eq!(m.value("memlock_cgroup_memory_unevictable_bytes{cgroup=\"/\"}"), 516452352.0);
    assert_eq!(m.value("memlock_cgroup_memory_working_set_bytes{cgroup=\"/\"}"), (895455232u64 - 164372480) as f64);
    // opensm locks 64 MiB (VmLck in tests/fixtures/proc/1187/status): unevictable, and all of
    // it in the working set.
    let opensm = "cgroup=\"/system.slice/opensm.service\",systemd_unit=\"opensm.service\"";
    assert_eq!(m.value(&format!("memlock_cgroup_memory_unevictable_bytes{{{opensm}}}")), (64u64 << 20) as f64);
    assert_eq!(
        m.value(&format!("memlock_cgroup_memory_working_set_bytes{{{opensm}}}")),
        (96468992u64 - 1572864) as f64
    );
    // The Slurm job's memory and memory+swap limits reach the step.
    let step = "cgroup=\"/slurm/uid_1000/job_1870/step_0\",slurm_job=\"1870\",slurm_step=\"0\"";
    assert_eq!(m.value(&format!("memlock_cgroup_memory_limit_bytes{{{step}}}")), (2 * GIB) as f64);
    assert_eq!(m.value(&format!("memlock_cgroup_memory_swap_limit_bytes{{{step}}}")), (2 * GIB) as f64);
    // Memory (14 cgroups) and rdma (6) hierarchies are both walked.
    assert_eq!(stats.scan.walked, 20);
    // The besteffort slice lists both devices with zero use and no limit: nothing to export.
    assert_eq!(stats.rdma.len(), 4);
}

#[test]
fn include_and_exclude_select_exported_cgroups_but_limits_still_apply() {
    let v2 = tree("cgroup-v2");
    // Export only the containers: the pod slices and kubepods.slice are filtered, yet their
    // memory.max still bounds the containers.
    let only_containers =
        CgroupConfig { include: vec![Regex::new(r"cri-containerd-[0-9a-f]{64}\.scope$").unwrap()], ..config() };
    let (stats, errors) = collect(&v2, only_containers);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(stats.memory.len(), 3);
    assert_eq!(stats.scan.filtered, stats.scan.walked - 3);
    let sidecar = stats.memory.iter().find(|c| c.path().contains("cri-containerd-a1b2")).unwrap();
    assert_eq!(sidecar.limit, Some(Limit::Bytes(1920 * GIB)));
    let guaranteed = stats.memory.iter().find(|c| c.path().contains("kubepods-podc0ffee00")).unwrap();
    assert_eq!(guaranteed.limit, Some(Limit::Bytes(16 * GIB)));

    let no_system = CgroupConfig {
        exclude: vec![Regex::new("^/system.slice").unwrap(), Regex::new("^/user.slice").unwrap()],
        ..config()
    };
    let (stats, _) = collect(&v2, no_system);
    assert!(stats
        .memory
        .iter()
        .all(|c| !c.path().starts_with("/system.slice") && !c.path().starts_with("/user.slice")));
    assert!(stats.memory.iter().any(|c| c.path().starts_with("/kubepods.slice")));
    assert_eq!(stats.scan.filtered, 10 + 3);
}

#[test]
fn max_depth_bounds_the_walk_and_counts_what_it_left_out() {
    let shallow = CgroupConfig { max_depth: 1, ..config() };
    let (stats, errors) = collect(&tree("cgroup-v2"), shallow);
    assert!(errors.is_empty(), "{errors:?}");
    // The root and its four children; their subdirectories (3 in kubepods.slice, 4 in
    // system.slice, 1 in user.slice) are not walked.
    assert_eq!(stats.scan.walked, 5);
    assert_eq!(stats.scan.too_deep, 8);
    assert!(stats.memory.iter().all(|c| c.path().matches('/').count() <= 1));
    let root_only = CgroupConfig { max_depth: 0, ..config() };
    let (stats, _) = collect(&tree("cgroup-v2"), root_only);
    assert_eq!((stats.scan.walked, stats.scan.too_deep), (1, 4));
}

#[test]
fn a_missing_cgroup_filesystem_is_an_empty_layout_not_an_error() {
    let tmp = tempfile::Builder::new().prefix("memlock-cgroup-none-").tempdir().unwrap();
    let empty = tmp.path().to_path_buf();
    std::fs::create_dir_all(empty.join("sys")).unwrap();
    let (stats, errors) = collect(&empty, config());
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(stats.layout, Layout::None);
    assert!(render(&stats).contains("memlock_cgroup_hierarchy_info{layout=\"none\",memory=\"none\",rdma=\"none\"} 1"));
}
