//! The process collector against tests/fixtures/proc: a kernel thread, a root daemon with
//! CAP_IPC_LOCK, a Kubernetes pod (pure v2 cgroup file) with a worker pinning 9 GiB of its
//! 10 GiB limit, a Slurm task (v1 memory line) with memlock unlimited, processes below the
//! filter, and a pid directory whose files are gone (a process that exited mid-scan).

use crate::util::{fixtures, Exporter, Metrics};

const KUBE: &str = concat!(
    "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod6b0e3b1a_2a43_4a3b_9c1e_2f1d0c7a9e11.slice/",
    "cri-containerd-3f2b6c1d8e9a0b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c.scope"
);
const SLURM: &str = "/slurm/uid_1000/job_1870/step_0";
const OPENSM: &str = "/system.slice/opensm.service";
const RSYSLOG: &str = "/system.slice/rsyslog.service";
const GIB: f64 = (1u64 << 30) as f64;

/// The series of `family` whose labels contain every `needle`; there must be exactly one.
fn one(m: &Metrics, family: &str, needles: &[&str]) -> Option<f64> {
    let found: Vec<(&str, f64)> =
        m.family(family).into_iter().filter(|(key, _)| needles.iter().all(|n| key.contains(n))).collect();
    assert!(found.len() <= 1, "{family} {needles:?} matches several series: {found:?}");
    found.first().map(|(_, v)| *v)
}

const PINNED: &str = "counter=\"pinned\"";
const LOCKED: &str = "counter=\"locked\"";

fn pid(pid: u32) -> String {
    format!("pid=\"{pid}\",")
}

fn cgroup(path: &str) -> String {
    format!("cgroup=\"{path}\"")
}

fn start() -> Exporter {
    let root = fixtures();
    Exporter::start(&[
        "--path.procfs",
        root.join("proc").to_str().unwrap(),
        "--path.sysfs",
        root.join("sys").to_str().unwrap(),
    ])
}

#[test]
fn exported_processes_have_exact_values() {
    let exporter = start();
    let m = exporter.metrics();
    assert_eq!(
        m.value("memlock_scrape_collector_success{collector=\"process\"}"),
        1.0,
        "a vanished pid is not a failure"
    );

    // opensm: root, CAP_IPC_LOCK, 64 MiB locked against an 8 MiB limit it is exempt from.
    let opensm = pid(1187);
    assert_eq!(
        one(&m, "memlock_process_locked_bytes", &[&opensm, "comm=\"opensm\"", &cgroup(OPENSM)]),
        Some(67108864.0)
    );
    assert_eq!(one(&m, "memlock_process_pinned_bytes", &[&opensm]), Some(2097152.0));
    assert_eq!(one(&m, "memlock_process_ipc_lock", &[&opensm]), Some(1.0));
    assert_eq!(one(&m, "memlock_process_limit_bytes", &[&opensm, "kind=\"soft\""]), Some(8388608.0));
    assert_eq!(one(&m, "memlock_process_limit_bytes", &[&opensm, "kind=\"hard\""]), Some(8388608.0));
    // Each counter against the limit on its own, never their sum: 64 MiB locked, 2 MiB pinned.
    assert_eq!(one(&m, "memlock_process_limit_usage_ratio", &[&opensm, LOCKED]), Some(8.0));
    assert_eq!(one(&m, "memlock_process_limit_usage_ratio", &[&opensm, PINNED]), Some(0.25));

    // The GPU worker: 9 GiB pinned, 10 GiB soft limit, unprivileged.
    let worker = pid(4101);
    assert_eq!(
        one(&m, "memlock_process_pinned_bytes", &[&worker, "comm=\"pt_main_thread\"", &cgroup(KUBE)]),
        Some(9.0 * GIB)
    );
    assert_eq!(one(&m, "memlock_process_locked_bytes", &[&worker]), Some(0.0));
    assert_eq!(one(&m, "memlock_process_ipc_lock", &[&worker]), Some(0.0));
    assert_eq!(one(&m, "memlock_process_limit_bytes", &[&worker, "kind=\"soft\""]), Some(10.0 * GIB));
    assert_eq!(one(&m, "memlock_process_limit_unlimited", &[&worker, "kind=\"soft\""]), Some(0.0));
    assert_eq!(one(&m, "memlock_process_limit_usage_ratio", &[&worker, PINNED]), Some(0.9));
    assert_eq!(one(&m, "memlock_process_limit_usage_ratio", &[&worker, LOCKED]), Some(0.0));

    // torchrun holds nothing but matches comm_pattern.
    for counter in [PINNED, LOCKED] {
        assert_eq!(
            one(&m, "memlock_process_limit_usage_ratio", &[&pid(4100), "comm=\"torchrun\"", counter]),
            Some(0.0)
        );
    }

    // Slurm task: memlock unlimited, so no limit value and no ratio.
    let task = pid(5210);
    assert_eq!(
        one(&m, "memlock_process_pinned_bytes", &[&task, "comm=\"python3.11\"", &cgroup(SLURM)]),
        Some(4.0 * GIB)
    );
    assert_eq!(one(&m, "memlock_process_limit_unlimited", &[&task, "kind=\"soft\""]), Some(1.0));
    assert_eq!(one(&m, "memlock_process_limit_unlimited", &[&task, "kind=\"hard\""]), Some(1.0));
    assert_eq!(one(&m, "memlock_process_limit_bytes", &[&task]), None);
    assert_eq!(one(&m, "memlock_process_limit_usage_ratio", &[&task]), None);

    // Below the filter (under 1 MiB, comm not matching), the kernel thread and the vanished
    // pid are not exported.
    for hidden in [1342, 4102, 2, 4999] {
        assert_eq!(one(&m, "memlock_process_locked_bytes", &[&pid(hidden)]), None, "pid {hidden}");
    }
    // The fixture launchers (slurmd 812, containerd 905, a user's "slurmd" 4300) are scanned too.
    assert_eq!(m.value("memlock_process_scanned_processes"), 9.0, "kernel thread and vanished pid excluded");
    assert_eq!(m.value("memlock_process_exported_processes"), 4.0);
    assert_eq!(m.value("memlock_process_tracked_processes"), 5.0, "all but rsyslogd hold memory or match comm");
    assert_eq!(m.value("memlock_process_dropped_processes"), 0.0);
    assert!(m.value("memlock_process_vanished_total") >= 1.0);
    for kind in ["permission", "io", "parse", "too_large"] {
        assert_eq!(m.value(&format!("memlock_process_read_errors_total{{kind=\"{kind}\"}}")), 0.0, "{kind}");
    }
    // Ranked by usage ratio: opensm (8), worker (0.9), torchrun (0), then the unlimited task.
    let order: Vec<&str> = m
        .text
        .lines()
        .filter(|l| l.starts_with("memlock_process_locked_bytes{"))
        .filter_map(|l| l.split("pid=\"").nth(1)?.split('"').next())
        .collect();
    assert_eq!(order, vec!["1187", "4101", "4100", "5210"]);
}

#[test]
fn cgroup_aggregates_cover_processes_below_the_filter() {
    let exporter = start();
    let m = exporter.metrics();
    let kube = cgroup(KUBE);
    // torchrun + worker + its 256 KiB data loader (not exported).
    assert_eq!(one(&m, "memlock_cgroup_processes", &[&kube]), Some(3.0));
    assert_eq!(one(&m, "memlock_cgroup_pinned_bytes", &[&kube]), Some(9.0 * GIB + 262144.0));
    assert_eq!(one(&m, "memlock_cgroup_locked_bytes", &[&kube]), Some(0.0));
    assert_eq!(one(&m, "memlock_cgroup_limit_usage_ratio_max", &[&kube, PINNED]), Some(0.9), "the worst, named");

    let slurm = cgroup(SLURM);
    assert_eq!(one(&m, "memlock_cgroup_pinned_bytes", &[&slurm]), Some(4.0 * GIB));
    assert_eq!(one(&m, "memlock_cgroup_limit_usage_ratio_max", &[&slurm]), None, "unlimited: no ratio");

    // opensm holds CAP_IPC_LOCK: its 64 MiB count in the sums, but its ratio of 8 is no risk
    // (the kernel never refuses it) and is left out of the worst ratio, which alerts.
    assert_eq!(one(&m, "memlock_cgroup_locked_bytes", &[&cgroup(OPENSM)]), Some(67108864.0));
    assert_eq!(one(&m, "memlock_process_limit_usage_ratio", &[&pid(1187), LOCKED]), Some(8.0));
    assert_eq!(one(&m, "memlock_cgroup_limit_usage_ratio_max", &[&cgroup(OPENSM)]), None);
    // rsyslogd is below the filter: only the aggregates show it. It runs as root with every
    // capability, so it has no ratio that counts either.
    assert_eq!(one(&m, "memlock_cgroup_processes", &[&cgroup(RSYSLOG)]), Some(1.0));
    assert_eq!(one(&m, "memlock_cgroup_pinned_bytes", &[&cgroup(RSYSLOG)]), Some(0.0));
    assert_eq!(one(&m, "memlock_cgroup_limit_usage_ratio_max", &[&cgroup(RSYSLOG)]), None);
    // kthreadd's root cgroup has no scanned process.
    assert_eq!(one(&m, "memlock_cgroup_processes", &["cgroup=\"/\""]), None);

    // Process and cgroup series carry the same cgroup label set, so they join.
    let labels_of = |family: &str, needle: &str| -> String {
        let (key, _) = m.family(family).into_iter().find(|(k, _)| k.contains(needle)).unwrap();
        key.split_once("cgroup=").unwrap().1.trim_end_matches('}').to_owned()
    };
    assert_eq!(
        labels_of("memlock_process_pinned_bytes", "pid=\"4101\""),
        labels_of("memlock_cgroup_pinned_bytes", &kube)
    );
}
