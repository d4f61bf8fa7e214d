//! Live churn: real short-lived processes in real v1 memory cgroups, created and removed while
//! the exporter runs on this machine.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::{is_root, live_lock, Exporter};

use super::{
    assert_bounded, assert_fresh, assert_memory_flat, env_or, heap_medians, label_values, mib, status_kib, Scratch,
};

const MEMORY: &str = "/sys/fs/cgroup/memory";

/// Real cgroups and processes of the live churn, removed even when the test fails: processes
/// are killed first (a cgroup with members cannot be removed), then the cgroups, deepest first.
struct LiveChurn {
    base: PathBuf,
    children: Vec<(Child, PathBuf)>,
    cgroups: std::collections::VecDeque<PathBuf>,
}

impl LiveChurn {
    fn remove_cgroup(dir: &Path) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while dir.exists() && std::fs::remove_dir(dir).is_err() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for LiveChurn {
    fn drop(&mut self) {
        for (child, _) in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        for dir in self.cgroups.drain(..) {
            Self::remove_cgroup(&dir);
        }
        Self::remove_cgroup(&self.base);
    }
}

#[test]
fn live_churn_of_real_processes_and_cgroups() {
    crate::require!(crate::util::scale_tests_enabled(), "a scale test: MEMLOCK_SCALE_TESTS=1 runs it");
    crate::require!(is_root(), "the live churn needs root (it creates memory cgroups)");
    crate::require!(
        Path::new(MEMORY).join("memory.usage_in_bytes").exists(),
        "the live churn needs a v1 memory hierarchy at {MEMORY}"
    );
    let _guard = live_lock();
    let seconds: u64 = env_or("SCALE_LIVE_SECONDS", 20);
    let scratch = Scratch::new("live");
    // A copy of sleep named python3: the default comm pattern exports it, so every one is a
    // process series and a trend scope for the time it lives.
    let python3 = scratch.0.join("python3");
    std::fs::copy("/bin/sleep", &python3).unwrap();
    let name = format!("memlock-scale-{}", std::process::id());
    let base = Path::new(MEMORY).join(&name);
    std::fs::create_dir(&base).unwrap();
    let mut live = LiveChurn { base: base.clone(), children: Vec::new(), cgroups: Default::default() };

    let env = [
        ("MEMLOCK_EXPORTER_COLLECTOR__PROCESS__INTERVAL", "100ms"),
        ("MEMLOCK_EXPORTER_COLLECTOR__PROCESS__FULL_SCAN_INTERVAL", "100ms"),
        ("MEMLOCK_EXPORTER_COLLECTOR__CGROUP__INTERVAL", "100ms"),
        ("MEMLOCK_EXPORTER_COLLECTOR__CGROUP__FULL_SCAN_INTERVAL", "100ms"),
        // Their default 5 s to 60 s intervals would let a healthy sample reach the 5 s stall bound below.
        ("MEMLOCK_EXPORTER_COLLECTOR__RDMA_SYSFS__INTERVAL", "1s"),
        ("MEMLOCK_EXPORTER_COLLECTOR__SOFTWARE__INTERVAL", "1s"),
        ("MEMLOCK_EXPORTER_COLLECTOR__RDMA_CAPS__INTERVAL", "1s"),
        ("MEMLOCK_EXPORTER_COLLECTOR__LAUNCHERS__INTERVAL", "1s"),
    ];
    let exporter = Exporter::start_with_env(&["--no-collector.rdma_netlink"], &env);
    let pid = exporter.child.id();
    let started = Instant::now();
    let (mut spawned, mut created, mut scrapes) = (0u64, 0u64, 0u64);
    let mut rss_max = 0u64;
    // The heap in use at every scrape from the warm-up on.
    let mut heap_samples: Vec<f64> = Vec::new();
    let mut seen_ours = BTreeSet::new();
    let mut next_scrape = Instant::now();
    // At least `seconds` of churn, and then until it is enough churn to judge: on a loaded
    // machine the spawns come slower, and a fixed window would judge the machine, not the
    // exporter. Four times the window is a hang.
    let enough_churn = |spawned: u64, created: u64| spawned > 10 * seconds && created > seconds;
    while started.elapsed() < Duration::from_secs(seconds)
        || (!enough_churn(spawned, created) && started.elapsed() < Duration::from_secs(4 * seconds))
    {
        // About 30 cgroups alive, each with a limit (a trend scope) and a few processes that
        // live 0.2 to 0.7 s; the oldest cgroup goes once its processes are gone.
        if live.cgroups.len() < 30 {
            let dir = base.join(format!("c{created}"));
            std::fs::create_dir(&dir).unwrap();
            std::fs::write(dir.join("memory.limit_in_bytes"), (64u64 << 20).to_string()).unwrap();
            live.cgroups.push_back(dir);
            created += 1;
        }
        while live.children.len() < 40 {
            let dir = live.cgroups[(spawned as usize * 7) % live.cgroups.len()].clone();
            let child =
                Command::new(&python3).arg(format!("0.{}", 2 + spawned % 6)).stdout(Stdio::null()).spawn().unwrap();
            // The child may already be gone (a short sleep on a busy machine).
            let _ = std::fs::write(dir.join("cgroup.procs"), child.id().to_string());
            live.children.push((child, dir));
            spawned += 1;
        }
        live.children.retain_mut(|(child, _)| child.try_wait().ok().flatten().is_none());
        if live.cgroups.len() >= 30 {
            let oldest = live.cgroups[0].clone();
            if !live.children.iter().any(|(_, dir)| *dir == oldest) && std::fs::remove_dir(&oldest).is_ok() {
                live.cgroups.pop_front();
            }
        }
        if Instant::now() >= next_scrape {
            let m = exporter.metrics();
            let context = format!("after {:.1} s", started.elapsed().as_secs_f64());
            for collector in ["process", "cgroup"] {
                assert_eq!(
                    m.value(&format!("memlock_scrape_collector_success{{collector=\"{collector}\"}}")),
                    1.0,
                    "{context}: {collector}\n{}",
                    exporter.log_text()
                );
            }
            assert_fresh(&m, 5.0, &context);
            let cgroups = m.value("memlock_cgroup_scan_cgroups_walked") as usize;
            assert_bounded(&m, 200, cgroups, &context);
            seen_ours.extend(label_values(&m, "memlock_process_", "cgroup").into_iter().filter(|c| c.contains(&name)));
            rss_max = rss_max.max(status_kib(pid, "VmRSS"));
            if started.elapsed() >= Duration::from_secs(seconds / 5) {
                heap_samples.push(m.value("memlock_exporter_heap_allocated_bytes"));
            }
            scrapes += 1;
            next_scrape = Instant::now() + Duration::from_millis(500);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let m = exporter.metrics();
    heap_samples.push(m.value("memlock_exporter_heap_allocated_bytes"));
    let (warm_heap, end_heap) = heap_medians(&heap_samples);
    let errors: Vec<_> =
        m.family("memlock_exporter_collector_errors_total").into_iter().filter(|(_, v)| *v > 0.0).collect();
    assert!(errors.is_empty(), "{errors:?}\n{}", exporter.log_text());
    eprintln!(
        "live churn: {seconds} s, {spawned} processes in {created} cgroups, {scrapes} scrapes, {} full scans, {} \
            vanished mid-scan; heap in use after warm-up {:.2} MiB, at the end {:.2} MiB (medians of 8 scrapes); \
            VmRSS max {rss_max} KiB",
        m.value("memlock_process_full_scans_total"),
        m.value("memlock_process_vanished_total"),
        mib(warm_heap),
        mib(end_heap),
    );
    assert!(enough_churn(spawned, created), "too little churn: {spawned} processes, {created} cgroups");
    assert!(seen_ours.len() > 3, "the churned processes were exported with their cgroups: {seen_ours:?}");
    assert_memory_flat((warm_heap, end_heap), rss_max);

    // Clean up, then every series of ours disappears: pids, cgroups, trend scopes.
    drop(live);
    assert!(!base.exists(), "the test cgroups are removed");
    let m =
        exporter.wait_metrics(Duration::from_secs(10), "no series of the removed cgroups", |m| !m.text.contains(&name));
    assert!(!m.text.contains("comm=\"python3\",cgroup=\"/memlock-scale"), "{}", m.text);
}
