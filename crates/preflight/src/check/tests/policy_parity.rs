//! One policy: on the same figures `check` and the alert rules give the same verdict. Each host
//! is a /proc and /sys tree in the kernel's formats that `check` reads; the figures it read are
//! then fed to promtool as the exporter's series, and promtool evaluates the shipped rules
//! (alerts/memlock-exporter.rules.yml). An alert fires exactly when `check` says its condition
//! holds.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::for_job::{
    ALERT_AVAILABLE_LOW, ALERT_CGROUP_NEAR, ALERT_COMMIT_HEADROOM, ALERT_HUGEPAGES, ALERT_OVERCOMMIT,
};
use super::*;
use crate::nccl::model::{self, Inputs};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const PID: u32 = 4100;
const LIMITS: &str = include_str!("../../../../../tests/fixtures/captures/proc_self_limits");
const MEMINFO: &str = include_str!("../../../../../tests/fixtures/proc/meminfo");

/// The figures of one host.
struct Figures {
    name: &'static str,
    total: u64,
    available: u64,
    mlocked: u64,
    /// 2 MiB pages: total, free, reserved.
    hugepages: (u64, u64, u64),
    /// The rank's memory cgroup (v1): usage, inactive file, hierarchical limit.
    cgroup: (u64, u64, u64),
    /// Soft = hard RLIMIT_MEMLOCK; `None`: unlimited.
    memlock: Option<u64>,
    pinned: u64,
    /// vm.overcommit_memory, and whether the node has an RDMA device.
    overcommit: (u64, bool),
    /// CommitLimit, Committed_AS.
    commit: (u64, u64),
}

/// The field guide's incident: a 128 GiB node, 32 GiB of hugepages reserved for another service
/// and unused, 30 GiB mlocked, MemAvailable 2 GiB, a 16 GiB pod limit nearly used.
const INCIDENT: Figures = Figures {
    name: "incident",
    total: 128 * GIB,
    available: 2 * GIB,
    mlocked: 30 * GIB,
    hugepages: (16384, 16384, 0),
    cgroup: (15 * GIB + 900 * MIB, 100 * MIB, 16 * GIB),
    memlock: None,
    pinned: GIB,
    overcommit: (0, true),
    commit: (80 * GIB, 40 * GIB),
};

/// A quiet 256 GiB node: plenty available, nothing locked, no hugepages, a 32 GiB pod using
/// 1 GiB, memlock unlimited. The hosts below differ from it only where their case needs.
const fn node(name: &'static str, overcommit: (u64, bool), commit: (u64, u64)) -> Figures {
    Figures {
        name,
        total: 256 * GIB,
        available: 200 * GIB,
        mlocked: 0,
        hugepages: (0, 0, 0),
        cgroup: (GIB, 0, 32 * GIB),
        memlock: None,
        pinned: 64 * MIB,
        overcommit,
        commit,
    }
}

const HOSTS: &[Figures] = &[
    INCIDENT,
    Figures {
        total: 512 * GIB,
        available: 400 * GIB,
        cgroup: (GIB, 0, 200 * GIB),
        pinned: 100 * MIB,
        ..node("healthy", (0, true), (300 * GIB, 20 * GIB))
    },
    // Memory is short, but the pool is in use: the squeeze stays silent, the floor does not.
    Figures {
        total: 128 * GIB,
        available: 5 * GIB,
        mlocked: GIB,
        hugepages: (16384, 100, 50),
        cgroup: (8 * GIB, 2 * GIB, 16 * GIB),
        memlock: Some(2 * GIB),
        pinned: GIB,
        ..node("pool-in-use", (2, true), (200 * GIB, 50 * GIB))
    },
    // An RDMA process under the rules' floor, though above one communicator's need.
    Figures {
        hugepages: (512, 500, 0),
        cgroup: (20 * GIB, 15 * GIB, 32 * GIB),
        memlock: Some(512 * MIB),
        ..node("below-floor", (2, false), (200 * GIB, 190 * GIB))
    },
    // Working set at the cgroup threshold exactly: the rule's `>=` fires, so does check.
    Figures {
        cgroup: (9 * GIB, 0, 10 * GIB),
        memlock: Some(8 * MIB),
        pinned: 4 * MIB,
        ..node("cgroup-at-threshold", (0, false), (100 * GIB, 95 * GIB))
    },
    // Strict overcommit with 5 of 100 GiB left: the headroom rule and check's WARN.
    node("strict-headroom-low", (2, true), (100 * GIB, 95 * GIB)),
    // Heuristic and never-refuse modes with Committed_AS at or past CommitLimit, as is usual there:
    // CommitLimit is not enforced, both stay silent.
    node("mode0-overcommitted", (0, true), (100 * GIB, 200 * GIB)),
    node("mode1", (1, true), (100 * GIB, 100 * GIB)),
];

struct Tree {
    root: PathBuf,
    // Removes the tree when the test drops it.
    _dir: tempfile::TempDir,
}

fn write(root: &Path, rel: &str, text: &str) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn meminfo(f: &Figures) -> String {
    let kb = |bytes: u64| format!("{} kB", bytes / KIB);
    let (total, free, reserved) = f.hugepages;
    MEMINFO
        .lines()
        .map(|line| {
            let key = line.split(':').next().unwrap_or("");
            let value = match key {
                "MemTotal" => kb(f.total),
                "MemAvailable" => kb(f.available),
                "MemFree" => kb(f.available / 2),
                "Mlocked" => kb(f.mlocked),
                "HugePages_Total" => total.to_string(),
                "HugePages_Free" => free.to_string(),
                "HugePages_Rsvd" => reserved.to_string(),
                "Hugetlb" => kb(total * 2 * MIB),
                "CommitLimit" => kb(f.commit.0),
                "Committed_AS" => kb(f.commit.1),
                _ => return format!("{line}\n"),
            };
            format!("{key}:{value:>width$}\n", width = 16 + (line.len() - key.len() - 1).saturating_sub(16))
        })
        .collect()
}

fn tree(f: &Figures) -> Tree {
    let tmp = tempfile::Builder::new().prefix(&format!("memlock-parity-{}-", f.name)).tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    write(&root, "proc/meminfo", &meminfo(f));
    write(&root, "proc/sys/vm/overcommit_memory", &format!("{}\n", f.overcommit.0));
    write(&root, "proc/sys/vm/max_map_count", "65530\n");
    let value = f.memlock.map_or("unlimited".to_owned(), |b| b.to_string());
    let limits = LIMITS.replace(
        "Max locked memory         8388608              8388608              bytes     ",
        &format!("Max locked memory         {value:<21}{value:<21}bytes     "),
    );
    write(&root, &format!("proc/{PID}/limits"), &limits);
    write(
        &root,
        &format!("proc/{PID}/status"),
        &format!(
            "Name:\tpython3\nPid:\t{PID}\nPPid:\t1\nUid:\t1000\t1000\t1000\t1000\nVmLck:\t       0 kB\n\
                VmPin:\t{:>8} kB\nCapEff:\t0000000000000000\n",
            f.pinned / KIB
        ),
    );
    let cgroup = "/kubepods/burstable/pod1f6f4e2a-9b7c-4d3e-8f2a-1b2c3d4e5f60/3f2b6c1d8e9a";
    write(&root, &format!("proc/{PID}/cgroup"), &format!("12:memory:{cgroup}\n"));
    write(&root, "sys/fs/cgroup/memory/memory.usage_in_bytes", &format!("{}\n", f.total / 2));
    let (usage, inactive_file, limit) = f.cgroup;
    let dir = format!("sys/fs/cgroup/memory{cgroup}");
    write(&root, &format!("{dir}/memory.usage_in_bytes"), &format!("{usage}\n"));
    write(
        &root,
        &format!("{dir}/memory.stat"),
        &format!(
            "cache {inactive_file}\nrss {usage}\ninactive_file {inactive_file}\nhierarchical_memory_limit {limit}\n\
                total_cache {inactive_file}\ntotal_rss {usage}\ntotal_inactive_file {inactive_file}\n"
        ),
    );
    write(&root, &format!("{dir}/memory.failcnt"), "0\n");
    write(&root, &format!("{dir}/memory.oom_control"), "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n");
    Tree { root, _dir: tmp }
}

/// Which of the rules' conditions check says hold, by alert name.
fn check_says(findings: &[Finding]) -> Vec<(&'static str, bool)> {
    let names = |text: &str| findings.iter().any(|f| f.measured.contains(text));
    let soft = findings.iter().find(|f| f.id == "memlock.soft").map(|f| f.status);
    vec![
        ("MemlockNodeMemoryAvailableLow", names(ALERT_AVAILABLE_LOW)),
        ("MemlockNodeHugepagesUnusedWhileMemoryLow", names(ALERT_HUGEPAGES)),
        ("MemlockCgroupNearMemoryLimit", names(ALERT_CGROUP_NEAR)),
        ("MemlockProcessLimitTooLowForRdma", soft.is_some_and(|s| s != Status::Pass)),
        ("MemlockNodeStrictOvercommitWithRdma", names(ALERT_OVERCOMMIT)),
        ("MemlockNodeCommitHeadroomLow", names(ALERT_COMMIT_HEADROOM)),
    ]
}

/// The exporter's series for what `check` read, 40 one-minute samples each.
fn series(instance: &str, m: &Machine, pinned: u64) -> String {
    let i = &m.meminfo;
    let mut out = String::new();
    let mut add = |name: &str, labels: &str, value: u64| {
        out.push_str(&format!(
            "      - series: '{name}{{instance=\"{instance}\",job=\"memlock\"{labels}}}'\n        \
                values: '{value}x40'\n"
        ));
    };
    add("memlock_node_memory_total_bytes", "", i.mem_total.unwrap());
    add("memlock_node_memory_available_bytes", "", i.mem_available.unwrap());
    add("memlock_node_hugetlb_bytes", "", i.hugetlb.unwrap());
    add("memlock_node_overcommit_mode", "", m.overcommit_mode.unwrap());
    add("memlock_node_commit_limit_bytes", "", i.commit_limit.unwrap());
    add("memlock_node_committed_bytes", "", i.committed_as.unwrap());
    for device in &m.rdma {
        let info = format!(",device=\"{}\",fw_ver=\"28.39.1002\",hca_type=\"MT4129\",node_type=\"CA\"", device.name);
        add("memlock_rdma_device_info", &info, 1);
    }
    let size = i.hugepage_size.unwrap();
    for (state, pages) in [("total", i.hugepages_total), ("free", i.hugepages_free), ("reserved", i.hugepages_reserved)]
    {
        add("memlock_node_hugepages", &format!(",size_bytes=\"{size}\",state=\"{state}\""), pages.unwrap());
    }
    let c = m.cgroup.as_ref().unwrap();
    let cgroup = format!(",cgroup=\"{}\"", c.path);
    add("memlock_cgroup_memory_working_set_bytes", &cgroup, c.working_set_bytes.unwrap());
    add("memlock_cgroup_memory_usage_bytes", &cgroup, c.usage_bytes.unwrap());
    if let Some(limit) = c.limit_bytes {
        add("memlock_cgroup_memory_limit_bytes", &cgroup, limit);
    }
    let process = format!(",pid=\"{PID}\",comm=\"python3\"");
    if let Some(pid_limits::Limit::Bytes(soft)) = m.limits.map(|l| l.soft) {
        add("memlock_process_limit_bytes", &format!("{process},kind=\"soft\",counter=\"pinned\""), soft);
    }
    add("memlock_process_pinned_bytes", &process, pinned);
    add("memlock_process_ipc_lock", &process, u64::from(m.ipc_lock == Some(true)));
    // The rank check judges is an NCCL rank, which registers its buffers: the daemon sees its
    // verbs library mapped, which is what the floor rule asks of a process.
    add("memlock_process_rdma_library_info", &format!("{process},library=\"libibverbs\",file=\"libibverbs.so.1\""), 1);
    out
}

#[test]
fn check_and_the_rules_agree_on_every_fixture_host() {
    let rules = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../alerts/memlock-exporter.rules.yml");
    let e = model::estimate(&Inputs::new(2, 8, 8));
    let mut input = String::new();
    let mut tests = String::new();
    let mut verdicts = Vec::new();
    for f in HOSTS {
        let t = tree(f);
        let roots = memlock_kernel::fsroot::Roots { procfs: t.root.join("proc"), sysfs: t.root.join("sys") };
        let mut m = read_machine(&roots, &PID.to_string(), Default::default()).unwrap();
        // The RDMA device is the one figure not in the tree: sysfs's device layout is the RDMA
        // collector's own fixture's business (tests/fixtures/sys).
        if f.overcommit.1 {
            m.rdma =
                vec![memlock_core::collect::rdma_sysfs::SysfsDevice { name: "mlx5_0".into(), ..Default::default() }];
        }
        assert!(m.cgroup.as_ref().is_some_and(|c| c.limit_bytes.is_some()), "{}: cgroup not read: {m:?}", f.name);
        let findings = evaluate(&m, &e, 2.0);
        let instance = format!("{}:9478", f.name);
        input.push_str(&series(&instance, &m, f.pinned));
        for (alert, holds) in check_says(&findings) {
            tests.push_str(&format!(
                "      - expr: count(ALERTS{{alertname=\"{alert}\",alertstate=\"firing\",\
                    instance=\"{instance}\"}}) or vector(0)\n        eval_time: 39m\n        exp_samples:\n          \
                    - labels: '{{}}'\n            value: {}\n",
                u8::from(holds)
            ));
            verdicts.push((f.name, alert, holds));
        }
        if f.name == "incident" {
            // The incident is not healthy for check any more: the squeeze and the pod's limit.
            let status = |id: &str| findings.iter().find(|x| x.id == id).map(|x| x.status);
            assert_eq!(status("memory.hugepages"), Some(Status::Warn), "{findings:#?}");
            assert_ne!(status("cgroup.memory"), Some(Status::Pass), "{findings:#?}");
            assert_ne!(status("memory.available"), Some(Status::Pass), "{findings:#?}");
        }
    }
    // Each alert is silent on some host and fires on another: both verdicts are compared.
    for alert in ["MemlockNodeMemoryAvailableLow", "MemlockNodeHugepagesUnusedWhileMemoryLow"]
        .into_iter()
        .chain(["MemlockCgroupNearMemoryLimit", "MemlockProcessLimitTooLowForRdma"])
        .chain(["MemlockNodeStrictOvercommitWithRdma", "MemlockNodeCommitHeadroomLow"])
    {
        let fired: Vec<bool> = verdicts.iter().filter(|v| v.1 == alert).map(|v| v.2).collect();
        assert!(fired.contains(&true) && fired.contains(&false), "{alert}: {verdicts:?}");
    }
    assert!(verdicts.contains(&("incident", "MemlockNodeHugepagesUnusedWhileMemoryLow", true)));
    assert!(verdicts.contains(&("healthy", "MemlockNodeHugepagesUnusedWhileMemoryLow", false)));
    // Strict overcommit: low headroom fires with or without RDMA; headroom, mode 0 and 1 do not.
    for (host, fires) in [
        ("strict-headroom-low", true),
        ("below-floor", true),
        ("pool-in-use", false),
        ("mode0-overcommitted", false),
        ("mode1", false),
    ] {
        assert!(verdicts.contains(&(host, "MemlockNodeCommitHeadroomLow", fires)), "{host}: {verdicts:?}");
    }
    let file = std::env::temp_dir().join(format!("memlock-parity-{}.yml", std::process::id()));
    let text = format!(
        "rule_files:\n  - {}\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n{input}    \
            promql_expr_test:\n{tests}",
        rules.display()
    );
    std::fs::write(&file, &text).unwrap();
    let out = Command::new("promtool")
        .args(["test", "rules"])
        .arg(&file)
        .output()
        .unwrap_or_else(|err| panic!("promtool (Prometheus' own, on PATH) is needed for this test: {err}"));
    let _ = std::fs::remove_file(&file);
    assert!(
        out.status.success(),
        "check and the rules disagree:\n{}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
